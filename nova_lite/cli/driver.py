"""``nova-lite driver list``, ``driver show NAME`` and ``driver scaffold NAME``."""

import argparse
import logging
from typing import Any

from nova_lite import scaffold
from nova_lite.cli.context import BadArguments, CommandError
from nova_lite.cli.output import CapabilitiesColumn, ListColumn, OptionalColumn
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.exception import InvalidInput
from nova_lite.virt import loader

LOG = logging.getLogger(__name__)


def _summary(name: str) -> str:
    """First line of the driver class's docstring, or "" if it does not load."""
    try:
        plugin, _ = loader.load_driver_class(name)
    except loader.DriverLoadError:
        return ""
    doc = (plugin.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


#: Every column of ``driver list`` (-f json/yaml/csv/value, or --long).
LIST_HEADERS = ("Name", "Entry point", "Distribution", "Version", "API version",
                "Capabilities", "Load error")
#: The columns of its table without --long.
DEFAULT_HEADERS = ("Name", "Distribution", "Version", "API version", "Load error")
#: The fields of ``driver show``.
SHOW_FIELDS = ("name", "entry_point", "distribution", "version", "api_version",
               "capabilities", "description", "load_error")
#: The fields of ``driver scaffold``.
SCAFFOLD_FIELDS = ("driver", "distribution", "package", "class", "directory", "files",
                   "next_steps")

#: One driver of ``driver list``, in LIST_HEADERS' order.
ListRow = tuple[str, str, str, str, str | None, CapabilitiesColumn, OptionalColumn]


class ListDrivers(Lister):
    """List the installed virt drivers, loadable or not, with their load errors.

    A driver that fails to load (import error, not a ComputeDriver, an API
    version this core does not speak, a duplicated name) is listed with the
    reason in "Load error" (null when it loads); the others are
    unaffected.  --long (or -c) adds the entry point and capabilities.
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[ListRow]]:
        return LIST_HEADERS, [
            (info.name, info.entry_point, info.distribution, info.version, info.api_version,
             CapabilitiesColumn(info.capabilities), OptionalColumn(info.error))
            for info in loader.list_drivers()]


class ShowDriver(ShowOne):
    """Show one installed virt driver: where it comes from, what it declares, why it fails.

    load_error is null when the driver loads.
    """

    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME",
                            help="Entry point name of the driver (see 'driver list').")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        infos = [i for i in loader.list_drivers() if i.name == parsed_args.name]
        if not infos:
            installed = ", ".join(loader.installed_driver_names()) or "none"
            raise CommandError(f"No virt driver named {parsed_args.name!r} is installed. "
                               f"Installed drivers: {installed}")

        def joined(attr: str) -> str:
            values = [getattr(i, attr) for i in infos]
            return values[0] if len(values) == 1 else "\n".join(str(v) for v in values)

        fields: dict[str, Any] = {
            "name": parsed_args.name,
            "entry_point": joined("entry_point"),
            "distribution": joined("distribution"),
            "version": joined("version"),
            "api_version": infos[0].api_version,
            "capabilities": CapabilitiesColumn(infos[0].capabilities),
            "description": _summary(parsed_args.name) if infos[0].error is None else "",
            "load_error": OptionalColumn(infos[0].error),
        }
        return SHOW_FIELDS, tuple(fields[name] for name in SHOW_FIELDS)


class ScaffoldDriver(ShowOne):
    """Create a new virt driver distribution, ready to install and test.

    Writes nova-lite-NAME (package nova_lite_NAME, entry point NAME):
    pyproject.toml and setup.cfg, a working two-node example driver, tests
    that subclass nova_lite.testing.DriverConformanceTests, tox.ini,
    .stestr.conf and a README saying how to install the core and run the
    tests.  NAME: a lower-case letter, then letters, digits and single '-'
    or '_' (e.g. acme, acme-kvm), not the name of an installed driver.  The
    target directory must be new or empty; nothing is written otherwise
    (exit status 2).
    """

    columns = SCAFFOLD_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME",
                            help="Driver (entry point) name, e.g. 'acme'.")
        parser.add_argument("--dir", metavar="PATH", dest="directory",
                            help="Where to write it (new or empty). "
                                 "Default: ./nova-lite-NAME")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        try:
            done = scaffold.scaffold(parsed_args.name, parsed_args.directory,
                                     installed=loader.installed_driver_names())
        except InvalidInput as exc:
            raise BadArguments(f"Cannot scaffold driver {parsed_args.name!r}: {exc}") from None
        names = done.names
        core = done.core_source or "/path/to/nova-lite"
        fields: dict[str, Any] = {
            "driver": names.driver,
            "distribution": names.distribution,
            "package": names.package,
            "class": f"{names.package}.driver:{names.class_name}",
            "directory": done.directory,
            "files": ListColumn(list(done.files)),
            "next_steps": (f"cd {done.directory} && python3 -m venv .venv && "
                           f".venv/bin/pip install -e {core} && "
                           f".venv/bin/pip install -e '.[test]' && .venv/bin/stestr run"),
        }
        return SCAFFOLD_FIELDS, tuple(fields[name] for name in SCAFFOLD_FIELDS)
