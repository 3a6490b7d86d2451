"""``nova-lite driver list`` and ``nova-lite driver show NAME``."""

import logging

from cliff import lister, show

from nova_lite.cli.context import CommandError
from nova_lite.cli.output import CapabilitiesColumn, OptionalColumn
from nova_lite.virt import loader

LOG = logging.getLogger(__name__)


def _summary(name):
    """First line of the driver class's docstring, or "" if it does not load."""
    try:
        plugin, _ = loader.load_driver_class(name)
    except loader.DriverLoadError:
        return ""
    doc = (plugin.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


class ListDrivers(lister.Lister):
    """List the installed virt drivers, loadable or not.

    A driver that fails to load (import error, not a ComputeDriver, an API
    version this core does not speak, a duplicated name) is listed with the
    reason in "Load error"; the others are unaffected.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--long", action="store_true",
                            help="Also show each driver's entry point.")
        return parser

    def take_action(self, parsed_args):
        infos = loader.list_drivers()
        headers = ["Name", "Distribution", "Version", "API version", "Capabilities",
                   "Load error"]
        if parsed_args.long:
            headers.insert(1, "Entry point")
        rows = []
        for info in infos:
            row = [info.name, info.distribution, info.version, info.api_version,
                   CapabilitiesColumn(info.capabilities), OptionalColumn(info.error)]
            if parsed_args.long:
                row.insert(1, info.entry_point)
            rows.append(row)
        return headers, rows


class ShowDriver(show.ShowOne):
    """Show one installed virt driver: where it comes from, what it declares, why it fails."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME",
                            help="Entry point name of the driver (see 'driver list').")
        return parser

    def take_action(self, parsed_args):
        infos = [i for i in loader.list_drivers() if i.name == parsed_args.name]
        if not infos:
            installed = ", ".join(loader.installed_driver_names()) or "none"
            raise CommandError(f"No virt driver named {parsed_args.name!r} is installed. "
                               f"Installed drivers: {installed}")

        def joined(attr):
            values = [getattr(i, attr) for i in infos]
            return values[0] if len(values) == 1 else "\n".join(str(v) for v in values)

        fields = {
            "name": parsed_args.name,
            "entry_point": joined("entry_point"),
            "distribution": joined("distribution"),
            "version": joined("version"),
            "api_version": infos[0].api_version,
            "capabilities": CapabilitiesColumn(infos[0].capabilities),
            "description": _summary(parsed_args.name) if infos[0].error is None else "",
            "load_error": OptionalColumn(infos[0].error),
        }
        return tuple(fields), tuple(fields.values())
