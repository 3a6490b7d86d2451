"""A new driver distribution, ready to install: ``nova-lite driver scaffold NAME``.

:func:`scaffold` writes a distribution ``nova-lite-NAME`` (package
``nova_lite_NAME``, entry point ``NAME`` in ``nova_lite.virt.drivers``) from
the templates beside this module: pyproject.toml and setup.cfg, a working
two-node example driver, tests that subclass
:class:`nova_lite.testing.DriverConformanceTests`, tox.ini, .stestr.conf
and a README.  Everything is rendered before anything is written; a bad
name or a non-empty target directory changes nothing.
"""

import keyword
import logging
import os
import re
from collections.abc import Iterable, Mapping

import attrs

from nova_lite import __version__
from nova_lite.exception import InvalidInput

LOG = logging.getLogger(__name__)

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
#: Longest NAME accepted (characters).
MAX_NAME = 40
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
_PREFIXES = ("nova-lite-", "nova_lite_")
#: Template file name -> path in the distribution ("{package}" is replaced).
_LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "setup.cfg.tmpl": "setup.cfg",
    "README.md.tmpl": "README.md",
    "tox.ini.tmpl": "tox.ini",
    "stestr.conf.tmpl": ".stestr.conf",
    "gitignore.tmpl": ".gitignore",
    "package/__init__.py.tmpl": "{package}/__init__.py",
    "package/driver.py.tmpl": "{package}/driver.py",
    "package/tests/__init__.py.tmpl": "{package}/tests/__init__.py",
    "package/tests/test_conformance.py.tmpl": "{package}/tests/test_conformance.py",
    "package/tests/test_driver.py.tmpl": "{package}/tests/test_driver.py",
}


@attrs.frozen
class DriverNames:
    """The names one driver distribution goes by.

    ``driver``: entry point name (``acme-kvm``); ``distribution``:
    ``nova-lite-acme-kvm``; ``package``: ``nova_lite_acme_kvm``;
    ``class_name``: ``AcmeKvmDriver``.
    """

    driver: str
    distribution: str
    package: str
    class_name: str


@attrs.frozen
class Scaffold:
    """What :func:`scaffold` wrote: ``directory`` (absolute) and ``files``
    (paths relative to it, sorted), for the driver ``names``."""

    names: DriverNames
    directory: str
    files: tuple[str, ...]
    core_source: str | None = None


def driver_names(name: object) -> DriverNames:
    """:class:`DriverNames` for NAME; raises InvalidInput saying what is wrong.

    NAME is the driver's short name: a lower-case letter, then letters,
    digits and single ``-`` or ``_`` between them (``acme``, ``acme-kvm``),
    at most :data:`MAX_NAME` characters.  A leading ``nova-lite-`` is
    dropped, so the distribution name is accepted too.
    """
    if not isinstance(name, str):
        raise InvalidInput(f"driver name must be a string, got {type(name).__name__}")
    short = name.strip()
    for prefix in _PREFIXES:
        if short.lower().startswith(prefix):
            short = short[len(prefix):]
    if not short:
        raise InvalidInput(f"invalid driver name {name!r}: it is empty once 'nova-lite-' "
                           "is dropped")
    if len(short) > MAX_NAME:
        raise InvalidInput(f"invalid driver name {name!r}: longer than {MAX_NAME} characters")
    if not _NAME_RE.match(short.lower()):
        raise InvalidInput(
            f"invalid driver name {name!r}: start with a letter and use only lower-case "
            "letters, digits and single '-' or '_' between them (e.g. 'acme' or 'acme-kvm')")
    if short != short.lower():
        raise InvalidInput(f"invalid driver name {name!r}: use lower case "
                           f"({short.lower()!r})")
    words = re.split(r"[-_]", short)
    package = "nova_lite_" + "_".join(words)
    if keyword.iskeyword(package) or not package.isidentifier():
        raise InvalidInput(f"invalid driver name {name!r}: {package!r} is not a Python "
                           "package name")
    return DriverNames(driver=short, distribution="nova-lite-" + "-".join(words),
                       package=package,
                       class_name="".join(w.capitalize() for w in words) + "Driver")


def core_checkout() -> str | None:
    """The source checkout this nova-lite runs from, or None (installed from a wheel)."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(top, "setup.cfg")) and \
            os.path.isdir(os.path.join(top, "nova_lite")):
        return top
    return None


def _context(names: DriverNames, core_source: str | None) -> dict[str, str]:
    core = core_source or "/path/to/nova-lite"
    return {
        "driver": names.driver,
        "distribution": names.distribution,
        "package": names.package,
        "class_name": names.class_name,
        "core_version": __version__,
        "core_source": core,
        "tox_core": f"-e{{env:NOVA_LITE_SOURCE:{core}}}",
    }


def render(text: str, context: Mapping[str, str]) -> str:
    """Replace every ``{{key}}`` of ``text``; raises KeyError naming an unknown key."""
    def sub(match: re.Match[str]) -> str:
        return context[match.group(1)]
    return re.sub(r"\{\{([a-z_]+)\}\}", sub, text)


def _rendered(names: DriverNames, core_source: str | None) -> dict[str, str]:
    context = _context(names, core_source)
    files: dict[str, str] = {}
    for template, target in _LAYOUT.items():
        with open(os.path.join(TEMPLATES, template), encoding="utf-8") as handle:
            files[target.format(package=names.package)] = render(handle.read(), context)
    return files


def scaffold(name: str, directory: str | None = None, installed: Iterable[str] = (),
             core_source: str | None = None) -> Scaffold:
    """Write the distribution for driver NAME; returns a :class:`Scaffold`.

    ``directory`` defaults to ``./nova-lite-NAME``; it may exist only if
    empty.  ``installed``: driver names already installed, which NAME may
    not take.  ``core_source``: the nova-lite checkout the README and
    tox.ini install the core from (default: this one, if it runs from a
    checkout).  Raises :class:`~nova_lite.exception.InvalidInput` (nothing
    written) for a bad name, a taken name or a non-empty directory.
    """
    names = driver_names(name)
    if names.driver in set(installed):
        raise InvalidInput(f"a virt driver named {names.driver!r} is already installed; "
                           "pick another name")
    directory = os.path.abspath(directory or names.distribution)
    if os.path.exists(directory):
        if not os.path.isdir(directory):
            raise InvalidInput(f"{directory} exists and is not a directory")
        if os.listdir(directory):
            raise InvalidInput(f"{directory} is not empty: refusing to overwrite it "
                               "(give an empty or new directory with --dir)")
    core_source = core_source or core_checkout()
    files = _rendered(names, core_source)
    os.makedirs(directory, exist_ok=True)
    for relative, text in sorted(files.items()):
        path = os.path.join(directory, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    LOG.info("Wrote driver distribution %s (%d files) in %s", names.distribution,
             len(files), directory)
    return Scaffold(names=names, directory=directory, files=tuple(sorted(files)),
                    core_source=core_source)
