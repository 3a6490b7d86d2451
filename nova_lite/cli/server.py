"""``nova-lite server create|delete|list|show``: instances, built through the scheduler.

``server create`` schedules (``[filter_scheduler]`` settings), claims on the
chosen node through that host's resource tracker (retrying on an alternate
if another build took the room first) and spawns through the configured
driver (``compute_driver``); a failed spawn gives the claim back.  Servers
created without ``--project`` belong to project :data:`DEFAULT_PROJECT`.
"""

import argparse
import logging
from typing import Any

import attrs

from nova_lite import objects
from nova_lite.cli import flavors, typed
from nova_lite.cli.context import BadArguments, CliContext, CommandError
from nova_lite.cli.lookup import find_instance
from nova_lite.cli.node import CONFIRM_FLAG
from nova_lite.cli.output import OptionalColumn, TextColumn
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.compute import api
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.scheduler import NoValidHost, RequestSpec

LOG = logging.getLogger(__name__)

#: Every column of ``server list`` and ``server create`` (-f json/yaml/csv/value, --long).
LIST_HEADERS = ("ID", "Status", "Host", "Node", "Project", "Flavor")
#: The columns of their table without --long.
DEFAULT_HEADERS = ("ID", "Status", "Host", "Flavor")
#: The project of a server created without ``--project``.
DEFAULT_PROJECT = "default"
#: The fields of ``server show``.
SHOW_FIELDS = ("id", "status", "host", "node", "project_id", "flavor", "vcpus", "memory_mb",
               "disk_gb", "allocations")

#: One server of ``server list`` and ``server create``, in LIST_HEADERS' order.
Row = tuple[str, str, OptionalColumn, OptionalColumn, TextColumn, TextColumn]


def _row(inst: objects.Instance) -> Row:
    return (inst.uuid, inst.vm_state, OptionalColumn(inst.host),
            OptionalColumn(inst.node), TextColumn(inst.project_id), TextColumn(inst.flavor.name))


class _Trackers:
    """A ResourceTracker per host, each with its own driver loaded for that host."""

    def __init__(self, ctx: CliContext, store: Store) -> None:
        self.ctx, self.store = ctx, store
        self.made: dict[str, ResourceTracker] = {}

    def __call__(self, host: str) -> ResourceTracker:
        if host not in self.made:
            driver = self.ctx.load_driver(self.ctx.settings.compute_driver, host)
            self.made[host] = ResourceTracker(host, driver, store=self.store,
                                              settings=self.ctx.settings)
        return self.made[host]


class CreateServer(Lister):
    """Build COUNT servers of a flavor: schedule, claim on the chosen nodes, spawn.

    With --count > 1 on one node, all its claims are made together or
    none.  Prints the servers as 'server list' does.  Without --project
    they belong to project "default".
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        flavors.add_arguments(parser)
        parser.add_argument("--count", type=int, default=1, metavar="N",
                            help="Number of servers (default 1).")
        parser.add_argument("--project", default=DEFAULT_PROJECT, metavar="ID",
                            help=f"Owner project id (default: {DEFAULT_PROJECT!r}).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        if parsed_args.count < 1:
            raise BadArguments(f"--count must be at least 1, got {parsed_args.count}; "
                               "nothing was changed")
        if not parsed_args.project.strip():
            raise BadArguments("--project must not be empty (omit it for project "
                               f"{DEFAULT_PROJECT!r}); nothing was changed")
        flavor = flavors.flavor_from_args(parsed_args)
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        spec = RequestSpec(flavor, project_id=parsed_args.project)
        try:
            result = api.build(store, spec, parsed_args.count, trackers=_Trackers(ctx, store),
                               settings=ctx.settings)
        except NoValidHost as exc:
            raise CommandError(str(exc)) from None
        return LIST_HEADERS, [_row(i) for i in result.instances]


class ListServers(Lister):
    """List the servers: id, status, host and flavor (--long adds the node and project).

    Live servers only; --all adds deleted and shelved-offloaded ones.
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only servers on this host.")
        parser.add_argument("--all", action="store_true",
                            help="Include deleted and shelved-offloaded servers.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        return LIST_HEADERS, [_row(i) for i in store.list_instances(
            host=parsed_args.host, live_only=not parsed_args.all)]


class ShowServer(ShowOne):
    """Show one server: placement, state, flavor and what it holds per node.

    allocations maps each node uuid to what the server holds there
    (resource class: amount).
    """

    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        inst = find_instance(store, parsed_args.server)
        held = {a.node_uuid: dict(sorted(a.resources.items()))
                for a in store.list_allocations(instance_uuid=inst.uuid)}
        f = inst.flavor
        fields: dict[str, Any] = {"id": inst.uuid, "status": inst.vm_state,
                  "host": OptionalColumn(inst.host), "node": OptionalColumn(inst.node),
                  "project_id": TextColumn(inst.project_id), "flavor": TextColumn(f.name),
                  "vcpus": f.vcpus, "memory_mb": f.memory_mb,
                  "disk_gb": f.root_gb + f.ephemeral_gb,
                  "allocations": dict(sorted(held.items()))}
        return SHOW_FIELDS, tuple(fields[name] for name in SHOW_FIELDS)


class DeleteServer(typed.Command):
    """Delete a server: destroy its guest through the driver and free its resources.

    Refuses unless --yes-i-really-mean-it is given (exit status 2, nothing
    changed).  An unknown or already deleted server is an error (exit
    status 1, nothing changed).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        inst = find_instance(store, parsed_args.server, live=True)
        if not parsed_args.confirmed:
            raise BadArguments(f"Refusing to delete server {inst.uuid} on {inst.host}/"
                               f"{inst.node} without {CONFIRM_FLAG}; nothing was changed")
        gone = attrs.evolve(inst, vm_state=objects.DELETED)
        if inst.host:
            tracker = _Trackers(ctx, store)(inst.host)
            tracker.driver.destroy(inst)
            tracker.update_usage(gone)
        else:
            store.record_instance_state(gone)
        self.app.stdout.write(f"Deleted server {inst.uuid}\n")
        return 0
