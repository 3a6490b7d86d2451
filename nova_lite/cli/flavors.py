"""Flavors for the commands: from a flavors file (INI or YAML) or from sizes.

A flavors file names each flavor once, with ``vcpus``, ``memory_mb`` (or
``ram``), ``root_gb`` (or ``disk``), ``ephemeral_gb`` (or ``ephemeral``),
``swap`` (MB) and extra specs::

    # flavors.ini                      # flavors.yaml
    [m1.small]                         m1.small:
    vcpus = 1                            vcpus: 1
    memory_mb = 2048                     memory_mb: 2048
    root_gb = 20                         root_gb: 20
    hw:cpu_policy = dedicated            extra_specs: {"hw:cpu_policy": dedicated}
    resources:VCPU = 0                   "resources:VCPU": 0

In INI, ``=`` separates a key from its value and a key with a colon
(``hw:...``, ``resources:...``, ``trait:...``) is an extra spec; in YAML
extra specs go under ``extra_specs`` or at the top of the flavor, quoted.
Sizes are integers (``1.9``, ``true`` and ``.inf`` are refused); extra
spec values are strings, numbers or booleans (``true`` is ``"true"``).
Without a file the built-in m1.tiny .. m1.xlarge sizes are known.

Errors name the file, the flavor and the key, exit with status 2 (bad
arguments) and change nothing; an unknown flavor name exits with status 1.
"""

import argparse
import configparser
import os
import re
from typing import Any

import yaml

from nova_lite.cli.context import BadArguments, CommandError
from nova_lite.compute import accounting
from nova_lite.exception import InvalidInput
from nova_lite.objects import ZERO_OVERHEAD, Flavor
from nova_lite.traits import flavor_traits

#: name -> (vcpus, memory_mb, root_gb): Nova's classic sizes.
BUILTIN = {"m1.tiny": (1, 512, 1), "m1.small": (1, 2048, 20), "m1.medium": (2, 4096, 40),
           "m1.large": (4, 8192, 80), "m1.xlarge": (8, 16384, 160)}
_ALIASES = {"ram": "memory_mb", "disk": "root_gb", "ephemeral": "ephemeral_gb"}
_FIELDS = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap")
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """--flavor NAME, --flavors-file PATH, or --vcpus/--ram/--disk sizes."""
    parser.add_argument("--flavor", metavar="NAME",
                        help="Flavor name, from --flavors-file or built in (m1.tiny, "
                             "m1.small, m1.medium, m1.large, m1.xlarge).")
    parser.add_argument("--flavors-file", metavar="PATH",
                        help="INI or YAML (.yaml, .yml) file of flavors, with extra specs "
                             "(see the operator guide).")
    parser.add_argument("--vcpus", type=int, metavar="N", help="Size: vCPUs.")
    parser.add_argument("--ram", type=int, metavar="MB", help="Size: memory in MB.")
    parser.add_argument("--disk", type=int, default=0, metavar="GB",
                        help="Size: root disk in GB (default 0).")


def _size(raw: object, what: str) -> int:
    """``raw`` as an int: an int (not a bool) or the text of one."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and _INTEGER.fullmatch(raw):
        return int(raw)
    raise BadArguments(f"{what} = {raw!r} is not an integer; nothing was changed")


def _spec_value(raw: object, what: str) -> str:
    """An extra spec value as Nova keeps it: a string."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (str, int, float)):
        return str(raw)
    raise BadArguments(f"{what} = {raw!r} must be a string, number or boolean; nothing "
                       "was changed")


def _extra_specs(raw: object, what: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadArguments(f"{what} must be a mapping of extra spec name to value, got "
                           f"{raw!r}; nothing was changed")
    specs: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key.strip():
            raise BadArguments(f"{what} has a key {key!r} that is not a name; nothing was "
                               "changed")
        specs[key] = _spec_value(value, f"{what} {key!r}")
    return specs


def _flavor(name: str, values: dict[Any, Any], where: str) -> Flavor:
    """A Flavor from one flavor's ``values``; ``where`` names the file and flavor."""
    what = f"{where}: flavor {name!r}"
    spec: dict[str, Any] = {}   # Flavor keyword -> size (int)
    extra = _extra_specs(values.pop("extra_specs", None), f"{what} extra_specs")
    for key, raw in values.items():
        if not isinstance(key, str):
            raise BadArguments(f"{what} has a key {key!r} that is not a name; nothing was "
                               "changed")
        if ":" in key:
            extra[key] = _spec_value(raw, f"{what} {key}")
            continue
        field = _ALIASES.get(key, key)
        if field not in _FIELDS:
            raise BadArguments(f"{what} has unknown key {key!r} (known: {', '.join(_FIELDS)}, "
                               "ram, disk, ephemeral, extra_specs, or an extra spec "
                               "PREFIX:NAME such as hw:cpu_policy); nothing was changed")
        if field in spec:
            raise BadArguments(f"{what} gives {field} twice ({key!r}); nothing was changed")
        spec[field] = _size(raw, f"{what} {key}")
    try:
        return Flavor(name=name, extra_specs=extra, **spec)
    except (InvalidInput, TypeError, ValueError) as exc:
        raise BadArguments(f"{what}: {exc}; nothing was changed") from None


def _read(path: str) -> str:
    """The text of flavors file ``path``; BadArguments saying why it cannot be read."""
    where = f"--flavors-file {path}"
    if os.path.isdir(path):
        raise BadArguments(f"{where} is a directory, not a flavors file")
    if not os.path.exists(path):
        raise BadArguments(f"{where}: no such file")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except PermissionError:
        raise BadArguments(f"{where} cannot be read: permission denied") from None
    except UnicodeDecodeError as exc:
        raise BadArguments(f"{where} is not UTF-8 text: {exc.reason} at byte "
                           f"{exc.start}") from None
    except OSError as exc:
        raise BadArguments(f"{where} cannot be read: {exc.strerror or exc}") from None


def _load_yaml(path: str, text: str) -> dict[str, Flavor]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadArguments(f"{path} is not valid YAML: {exc}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise BadArguments(f"{path}: expected a mapping of flavor name to its sizes, got "
                           f"{type(data).__name__}")
    flavors: dict[str, Flavor] = {}
    for name, values in data.items():
        name = str(name)
        if not isinstance(values, dict):
            raise BadArguments(f"{path}: flavor {name!r} must be a mapping of its sizes "
                               f"(vcpus, memory_mb, ...), got {values!r}")
        flavors[name] = _flavor(name, dict(values), path)
    return flavors


def _load_ini(path: str, text: str) -> dict[str, Flavor]:
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str   # type: ignore[assignment,method-assign]  # keep keys' case
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        raise BadArguments(f"{path} is not valid INI (one [flavor] section per flavor, "
                           f"KEY = VALUE lines): {exc}") from None
    return {n: _flavor(n, dict(parser.items(n)), f"{path} [{n}]") for n in parser.sections()}


def load_flavors(path: str) -> dict[str, Flavor]:
    """``{name: Flavor}`` from an INI or YAML (``.yaml``/``.yml``) file.

    Raises :class:`BadArguments` naming the file, the flavor and the key.
    """
    text = _read(path)
    if path.endswith((".yaml", ".yml")):
        return _load_yaml(path, text)
    return _load_ini(path, text)


def check_extra_specs(flavor: Flavor, where: str) -> None:
    """Raise :class:`BadArguments` naming ``where`` if a claim or the scheduler
    could not read ``flavor``'s extra specs (``hw:cpu_policy=bogus``,
    ``resources:VCPU=lots``, ``trait:HW_CPU_X86_AVX2=maybe``)."""
    try:
        accounting.requested_resources(flavor, ZERO_OVERHEAD,
                                       accounting.flavor_numa_request(flavor))
        flavor_traits(flavor.extra_specs, f"flavor {flavor.name}")
    except InvalidInput as exc:
        raise BadArguments(f"{where}: {exc}; nothing was changed") from None


def flavor_from_args(args: argparse.Namespace) -> Flavor:
    """The Flavor the arguments name, its extra specs checked as a claim reads them.

    :class:`BadArguments` if none or both ways are given or a size, extra
    spec or file is malformed; :class:`CommandError` if the flavor name is
    unknown.
    """
    flavor = _named_flavor(args)
    check_extra_specs(flavor, args.flavors_file or "--flavor")
    return flavor


def _named_flavor(args: argparse.Namespace) -> Flavor:
    sized = args.vcpus is not None or args.ram is not None
    if args.flavor and sized:
        raise BadArguments("give --flavor NAME or --vcpus/--ram sizes, not both")
    if sized:
        if args.vcpus is None or args.ram is None:
            raise BadArguments("command-line sizes need both --vcpus and --ram")
        values = {"vcpus": args.vcpus, "memory_mb": args.ram, "root_gb": args.disk}
        return _flavor(f"custom-{args.vcpus}-{args.ram}-{args.disk}", values,
                       "command-line sizes")
    if not args.flavor:
        raise BadArguments("a flavor is required: --flavor NAME or --vcpus N --ram MB")
    known = load_flavors(args.flavors_file) if args.flavors_file else {
        n: Flavor(name=n, vcpus=c, memory_mb=m, root_gb=d) for n, (c, m, d) in BUILTIN.items()}
    if args.flavor not in known:
        where = f" in {args.flavors_file}" if args.flavors_file else ""
        raise CommandError(f"unknown flavor {args.flavor!r}{where}; known: "
                           f"{', '.join(sorted(known)) or 'none'}")
    return known[args.flavor]
