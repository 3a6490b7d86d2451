"""``nova-lite service list|enable|disable|delete``: the compute services and their heartbeats."""

import argparse
import logging
import time
from typing import TYPE_CHECKING, ClassVar

from nova_lite import reports
from nova_lite import validators as v
from nova_lite.cli import typed
from nova_lite.cli.context import BadArguments, CommandError
from nova_lite.cli.node import CONFIRM_FLAG
from nova_lite.cli.output import OptionalColumn, TextColumn
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.conf import Settings
from nova_lite.db import ServiceRecord
from nova_lite.exception import HostNotFound, ServiceInUse

if TYPE_CHECKING:
    from nova_lite.cli.main import NovaLiteApp

LOG = logging.getLogger(__name__)

#: Every column (-f json/yaml/csv/value, or --long).
HEADERS = ("Binary", "Host", "Zone", "Status", "State", "Updated At", "Disabled Reason")
#: The columns of ``service list``'s table without --long.
DEFAULT_HEADERS = HEADERS[1:]


#: One service as the commands show it, in HEADERS' order.
Row = tuple[str, TextColumn, TextColumn, str, str, str, OptionalColumn]


def _row(service: ServiceRecord, settings: Settings, now: float,
         zones: dict[str, str]) -> Row:
    state, status = reports.service_state(service, settings.service_down_time, now)
    updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(service.updated_at))
    zone = zones.get(service.host, settings.default_availability_zone)
    return (service.binary, TextColumn(service.host), TextColumn(zone), status, state,
            updated, OptionalColumn(service.disabled_reason))


class ListServices(Lister):
    """List the compute services: enabled or disabled, up or down, last heartbeat, why disabled.

    Zone is the host's availability zone (that of its aggregates, else
    default_availability_zone).  A service is up when its last heartbeat (Updated At, UTC) is within
    service_down_time seconds.  --long (or -c) adds the binary.
    """

    app: "NovaLiteApp"
    columns = HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only this host's service.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        now = time.time()
        zones = store.aggregates.host_zones(ctx.settings.default_availability_zone)
        return HEADERS, [_row(s, ctx.settings, now, zones)
                         for s in store.list_services(parsed_args.host)]


class _SetService(ShowOne):
    app: "NovaLiteApp"
    #: What the command sets the service's ``disabled`` flag to.
    disabled: ClassVar[bool | None] = None
    columns = HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="Host of the compute service.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[tuple[str, ...], Row]:
        reason = getattr(parsed_args, "reason", None)
        if reason is not None and not reason.strip():
            raise BadArguments("--reason must not be empty; nothing was changed")
        problem = None if reason is None else v.text_problem(reason, "--reason")
        if problem is not None:
            raise BadArguments(problem)
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        service = store.set_service_disabled(parsed_args.host, bool(self.disabled), reason)
        if service is None:
            known = ", ".join(s.host for s in store.list_services()) or "none"
            raise CommandError(f"No compute service on host {parsed_args.host!r}; "
                               f"known hosts: {known}. Nothing was changed")
        LOG.info("Compute service on %s %s", parsed_args.host,
                 "disabled" if self.disabled else "enabled")
        zones = store.aggregates.host_zones(ctx.settings.default_availability_zone)
        return HEADERS, _row(service, ctx.settings, time.time(), zones)


class EnableService(_SetService):
    """Enable the compute service of HOST: the scheduler may choose its nodes again.

    Prints the service as 'service list' shows it.
    """

    disabled = False


class DisableService(_SetService):
    """Disable the compute service of HOST: the scheduler no longer chooses its nodes.

    Instances on them keep running and keep their resources.  Prints the
    service as 'service list' shows it.
    """

    disabled = True

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--reason", metavar="TEXT",
                            help="Why (shown by service list; at most 255 characters).")
        return parser


class DeleteService(typed.Command):
    """Delete the compute service of HOST, as Nova's service delete does.

    The host leaves every host aggregate (and so its availability zone),
    its compute node records go with their inventories, and its waiting
    tasks are cancelled.  Refused while the host has instances or moves in
    progress (exit status 1, nothing changed: migrate or delete them
    first), and unless --yes-i-really-mean-it is given (exit status 2).
    Stop the host's compute service first: a running one records itself
    again at its next heartbeat.
    """

    app: "NovaLiteApp"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="Host of the compute service.")
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        store = self.app.context().open_store(must_exist=True)
        host = parsed_args.host
        if not parsed_args.confirmed:
            raise BadArguments(f"Refusing to delete the compute service of host {host!r} "
                               f"without {CONFIRM_FLAG}; nothing was changed")
        try:
            done = store.delete_compute_service(host)
        except (HostNotFound, ServiceInUse) as exc:
            raise CommandError(f"{exc}; nothing was changed") from None
        left = f"; removed from aggregate(s) {', '.join(done.aggregates)}" \
            if done.aggregates else ""
        text = (f"Deleted the compute service of host {host} ({len(done.nodes)} compute node "
                f"record(s){left}; {done.tasks} waiting task(s) cancelled)")
        LOG.warning("%s", text)
        self.app.stdout.write(text + "\n")
        return 0


#: The service commands, as setup.cfg declares them.
ENTRY_POINTS = {
    "service_list": "nova_lite.cli.service:ListServices",
    "service_enable": "nova_lite.cli.service:EnableService",
    "service_disable": "nova_lite.cli.service:DisableService",
    "service_delete": "nova_lite.cli.service:DeleteService",
}
