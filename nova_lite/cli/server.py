"""``nova-lite server create|delete|list|show``: instances, built through the scheduler.

``server create`` schedules (``[filter_scheduler]`` settings), claims on the
chosen node through that host's resource tracker (retrying on an alternate
if another build took the room first) and spawns through the configured
driver (``compute_driver``); a failed spawn gives the claim back.
"""

import logging

import attrs
from cliff import command, lister, show

from nova_lite import objects
from nova_lite.cli import flavors
from nova_lite.cli.context import BadArguments, CommandError
from nova_lite.cli.node import CONFIRM_FLAG
from nova_lite.cli.output import ListColumn, OptionalColumn, TextColumn
from nova_lite.compute import api
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.exception import InstanceNotFound
from nova_lite.scheduler import NoValidHost, RequestSpec

LOG = logging.getLogger(__name__)

LIST_HEADERS = ("ID", "Status", "Host", "Node", "Project", "Flavor")


def _row(inst):
    return (inst.uuid, inst.vm_state, OptionalColumn(inst.host),
            OptionalColumn(inst.node), TextColumn(inst.project_id), TextColumn(inst.flavor.name))


class _Trackers:
    """A ResourceTracker per host, each with its own driver loaded for that host."""

    def __init__(self, ctx, store):
        self.ctx, self.store, self.made = ctx, store, {}

    def __call__(self, host):
        if host not in self.made:
            driver = self.ctx.load_driver(self.ctx.settings.compute_driver, host)
            self.made[host] = ResourceTracker(host, driver, store=self.store,
                                              settings=self.ctx.settings)
        return self.made[host]


def find_instance(store, ident):
    """The instance with uuid ``ident``; BadArguments if there is none."""
    try:
        return store.get_instance(ident)
    except InstanceNotFound:
        raise BadArguments(f"No server {ident!r}; nothing was changed") from None


class CreateServer(lister.Lister):
    """Build COUNT servers of a flavor: schedule, claim, spawn.  With --count > 1
    on one node, all its claims are made together or none."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        flavors.add_arguments(parser)
        parser.add_argument("--count", type=int, default=1, metavar="N",
                            help="Number of servers (default 1).")
        parser.add_argument("--project", default="", metavar="ID", help="Owner project id.")
        return parser

    def take_action(self, parsed_args):
        if parsed_args.count < 1:
            raise BadArguments(f"--count must be at least 1, got {parsed_args.count}")
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


class ListServers(lister.Lister):
    """List the servers (live ones; --all adds deleted and offloaded)."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only servers on this host.")
        parser.add_argument("--all", action="store_true",
                            help="Include deleted and shelved-offloaded servers.")
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        return LIST_HEADERS, [_row(i) for i in store.list_instances(
            host=parsed_args.host, live_only=not parsed_args.all)]


class ShowServer(show.ShowOne):
    """Show one server: placement, state, flavor and what it holds per node."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        inst = find_instance(store, parsed_args.server)
        held = {a.node_uuid: dict(a.resources)
                for a in store.list_allocations(instance_uuid=inst.uuid)}
        f = inst.flavor
        fields = {"id": inst.uuid, "status": inst.vm_state,
                  "host": OptionalColumn(inst.host), "node": OptionalColumn(inst.node),
                  "project_id": TextColumn(inst.project_id), "flavor": TextColumn(f.name),
                  "vcpus": f.vcpus, "memory_mb": f.memory_mb,
                  "disk_gb": f.root_gb + f.ephemeral_gb,
                  "allocations": ListColumn([f"{n}: {r}" for n, r in sorted(held.items())])}
        return tuple(fields), tuple(fields.values())


class DeleteServer(command.Command):
    """Delete a server: destroy its guest through the driver and free its resources.

    Refuses unless --yes-i-really-mean-it is given (exit status 2, nothing changed).
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        return parser

    def take_action(self, parsed_args):
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        inst = find_instance(store, parsed_args.server)
        if not inst.holds_resources:
            raise BadArguments(f"Server {inst.uuid} is already {inst.vm_state}; "
                               "nothing was changed")
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
