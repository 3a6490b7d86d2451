"""Flavors for the commands: from a flavors file (INI or YAML) or from sizes.

A flavors file names each flavor once, with ``vcpus``, ``memory_mb`` (or
``ram``), ``root_gb`` (or ``disk``), ``ephemeral_gb``, ``swap`` (MB) and
extra specs::

    # flavors.ini                      # flavors.yaml
    [m1.small]                         m1.small:
    vcpus = 1                            vcpus: 1
    memory_mb = 2048                     memory_mb: 2048
    root_gb = 20                         root_gb: 20
    hw:cpu_policy = dedicated            extra_specs: {"hw:cpu_policy": dedicated}

In INI, an option with a colon is an extra spec.  Without a file the
built-in m1.tiny .. m1.xlarge sizes are known.
"""

import configparser
import os

import yaml

from nova_lite.cli.context import BadArguments
from nova_lite.exception import InvalidInput
from nova_lite.objects import Flavor

#: name -> (vcpus, memory_mb, root_gb): Nova's classic sizes.
BUILTIN = {"m1.tiny": (1, 512, 1), "m1.small": (1, 2048, 20), "m1.medium": (2, 4096, 40),
           "m1.large": (4, 8192, 80), "m1.xlarge": (8, 16384, 160)}
_ALIASES = {"ram": "memory_mb", "disk": "root_gb", "ephemeral": "ephemeral_gb"}
_FIELDS = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap")


def add_arguments(parser):
    """--flavor NAME, --flavors-file PATH, or --vcpus/--ram/--disk sizes."""
    parser.add_argument("--flavor", metavar="NAME",
                        help="Flavor name, from --flavors-file or built in (m1.tiny, "
                             "m1.small, m1.medium, m1.large, m1.xlarge).")
    parser.add_argument("--flavors-file", metavar="PATH",
                        help="INI or YAML file of flavors (see the operator guide).")
    parser.add_argument("--vcpus", type=int, metavar="N", help="Size: vCPUs.")
    parser.add_argument("--ram", type=int, metavar="MB", help="Size: memory in MB.")
    parser.add_argument("--disk", type=int, default=0, metavar="GB",
                        help="Size: root disk in GB (default 0).")


def _flavor(name, values, where):
    spec = {}
    extra = dict(values.pop("extra_specs", None) or {})
    for key, raw in values.items():
        key = _ALIASES.get(key, key)
        if ":" in key:
            extra[key] = str(raw)
            continue
        if key not in _FIELDS:
            raise BadArguments(f"{where}: flavor {name!r} has unknown key {key!r} "
                               f"(known: {', '.join(_FIELDS)}, extra_specs, or KEY:NAME)")
        try:
            spec[key] = int(raw)
        except (TypeError, ValueError):
            raise BadArguments(f"{where}: flavor {name!r} {key} = {raw!r} is not an "
                               "integer") from None
    try:
        return Flavor(name=name, extra_specs=extra, **spec)
    except (InvalidInput, TypeError, ValueError) as exc:
        raise BadArguments(f"{where}: flavor {name!r}: {exc}") from None


def load_flavors(path):
    """``{name: Flavor}`` from an INI or YAML file; BadArguments naming the file."""
    if not os.path.isfile(path):
        raise BadArguments(f"--flavors-file {path}: no such file")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith((".yaml", ".yml")):
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise BadArguments(f"{path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise BadArguments(f"{path}: expected a mapping of flavor name to its sizes")
        return {str(n): _flavor(str(n), dict(v), path) for n, v in data.items()}
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    try:
        parser.read_string(text, source=path)
    except configparser.Error as exc:
        raise BadArguments(f"{path} is not valid INI: {exc}") from None
    return {n: _flavor(n, dict(parser.items(n)), f"{path} [{n}]") for n in parser.sections()}


def flavor_from_args(args):
    """The Flavor the arguments name; BadArguments if none or both ways are given."""
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
        raise BadArguments(f"unknown flavor {args.flavor!r}; known: "
                           f"{', '.join(sorted(known)) or 'none'}")
    return known[args.flavor]
