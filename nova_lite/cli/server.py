"""``nova-lite server create|delete|list|show``: instances, built and deleted by their hosts.

``server create`` schedules (``[filter_scheduler]`` settings), claims on the
chosen nodes (retrying on an alternate if another build took the room
first) and records a build for each server's host; that host's compute
service (``nova-lite compute``) spawns it on its own driver and records it
active, or error with the reason and its claim given back.  ``--wait``
waits for that.  ``server delete`` records the delete for the server's
host the same way; ``--force`` deletes at once when the host's service is
down (its claim is freed; the host destroys the guest when it returns).
Servers created without ``--project`` belong to project
:data:`DEFAULT_PROJECT`.
"""

import argparse
import logging
import time
from collections.abc import Sequence
from typing import Any


from nova_lite import objects, work
from nova_lite.cli import flavors, paging, typed
from nova_lite.cli.context import BadArguments, CliContext, CommandError
from nova_lite.cli.lookup import find_instance
from nova_lite.cli.node import CONFIRM_FLAG
from nova_lite.cli.output import OptionalColumn, TextColumn
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.compute import api
from nova_lite.db import Store
from nova_lite.exception import BuildFailed, InstanceStateConflict, InvalidInput
from nova_lite.scheduler import NoValidHost, RequestSpec
from nova_lite.work import Task

LOG = logging.getLogger(__name__)

#: Every column of ``server list`` and ``server create`` (-f json/yaml/csv/value, --long).
LIST_HEADERS = ("ID", "Status", "Task", "Task Age", "Host", "Node", "Availability Zone",
                "Project", "Flavor")
#: The columns of their table without --long.
DEFAULT_HEADERS = ("ID", "Status", "Task", "Host")
#: The project of a server created without ``--project``.
DEFAULT_PROJECT = "default"
#: The fields of ``server show``.
SHOW_FIELDS = ("id", "status", "task_state", "task", "task_age", "fault", "host", "node",
               "availability_zone", "project_id", "flavor", "vcpus", "memory_mb", "disk_gb",
               "allocations")
#: Default of ``--timeout`` (seconds) for ``--wait``.
DEFAULT_WAIT_TIMEOUT = 300.0

#: One server of ``server list`` and ``server create``, in LIST_HEADERS' order.
Row = tuple[str, str, OptionalColumn, OptionalColumn, OptionalColumn, OptionalColumn,
            OptionalColumn, TextColumn, TextColumn]


def server_zone(inst: objects.Instance, host_zones: dict[str, str],
                default_zone: str) -> str | None:
    """The availability zone of ``inst``: the one its record keeps, else (a
    record written before instances kept it) its host's; None for a server
    on no host that recorded none."""
    if inst.availability_zone is not None:
        return inst.availability_zone
    if inst.host is None:
        return None
    return host_zones.get(inst.host, default_zone)


def _row(inst: objects.Instance, task: Task | None, now: float, zone: str | None) -> Row:
    return (inst.uuid, inst.vm_state,
            OptionalColumn(None if task is None else task.describe()),
            OptionalColumn(None if task is None else round(task.age(now))),
            OptionalColumn(inst.host), OptionalColumn(inst.node), OptionalColumn(zone),
            TextColumn(inst.project_id), TextColumn(inst.flavor.name))


def _rows(store: Store, instances: Sequence[objects.Instance],
          default_zone: str) -> list[Row]:
    open_work = store.tasks.open_by_instance([i.uuid for i in instances]) if instances else {}
    zones = store.aggregates.host_zones(default_zone) \
        if any(i.availability_zone is None for i in instances) else {}
    now = time.time()
    return [_row(i, open_work.get(i.uuid), now, server_zone(i, zones, default_zone))
            for i in instances]


def timeout_seconds(value: str) -> float:
    """argparse type of a deadline: seconds, above 0 and at most a day."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not 0 < seconds <= 86400:
        raise argparse.ArgumentTypeError(f"must be between 0 and 86400 seconds, got {value}")
    return seconds


def add_wait_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--wait`` and ``--timeout`` for a command that records work."""
    parser.add_argument("--wait", action="store_true",
                        help=f"Wait until the host has {what} (or failed), then show the "
                             "outcome; exit status 1 if it failed or the deadline passed.")
    parser.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_WAIT_TIMEOUT,
                        metavar="SECONDS",
                        help=f"Deadline of --wait (default {DEFAULT_WAIT_TIMEOUT:g} s).")


class CreateServer(Lister):
    """Build COUNT servers of a flavor: scheduled, claimed, spawned by their hosts.

    Each server is claimed on its chosen node and its build recorded for
    that host's compute service, which spawns it.  With --count > 1 on
    one node, all its claims are made together or none.  Prints the
    servers as 'server list' does: building, until their host's compute
    service (nova-lite compute) has spawned them; with --wait, once each
    is active or in error (exit status 1 if any failed, with the reasons
    on standard error).  Without --project they belong to project
    "default".
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
        parser.add_argument("--availability-zone", metavar="ZONE",
                            help="Build only on hosts of this availability zone "
                                 "(nova-lite aggregate list shows them).")
        add_wait_arguments(parser, "spawned each server")
        return parser

    def run(self, parsed_args: argparse.Namespace) -> int:
        self._status = 0
        code = super().run(parsed_args)
        return code or self._status

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
        zone = parsed_args.availability_zone
        if zone is not None:
            _check_zone(store, zone, ctx.settings.default_availability_zone)
        spec = RequestSpec(flavor, project_id=parsed_args.project, availability_zone=zone)
        try:
            spec = api.with_alias_requests(spec, ctx.settings)
        except InvalidInput as exc:
            raise BadArguments(f"{exc}; nothing was changed") from None
        try:
            result = api.build(store, spec, parsed_args.count, settings=ctx.settings)
        except (NoValidHost, BuildFailed) as exc:
            hint = ""
            if not any(api.service_is_up(store, s.host, ctx.settings)
                       for s in store.list_services()):
                hint = ("; no compute service is up: start one on each host with "
                        "'nova-lite compute --host HOST' (see 'A cluster' in the "
                        "operator guide)")
            raise CommandError(f"{exc}{hint}") from None
        if not parsed_args.wait:
            _warn_down_hosts(store, ctx, {t.host for t in result.tasks}, "build")
            return LIST_HEADERS, _rows(store, result.instances,
                                       ctx.settings.default_availability_zone)
        self._status = _wait_and_report(store, result.tasks, parsed_args.timeout,
                                        self.app.stderr)
        done = [store.get_instance(i.uuid) for i in result.instances]
        return LIST_HEADERS, _rows(store, done, ctx.settings.default_availability_zone)


def _check_zone(store: Store, zone: str, default_zone: str) -> None:
    """Refuse a zone no host can be in, as Nova's API refuses an unknown zone."""
    known = {default_zone} | {a.availability_zone for a in store.aggregates.list()
                              if a.availability_zone}
    if zone not in known:
        raise BadArguments(f"--availability-zone {zone!r} is not an availability zone "
                           f"(known: {', '.join(sorted(known))}); nothing was changed")


def _warn_down_hosts(store: Store, ctx: CliContext, hosts: set[str], what: str) -> None:
    for host in sorted(hosts):
        if not api.service_is_up(store, host, ctx.settings):
            LOG.warning("The compute service of host %s is down: the %s waits for it "
                        "(start 'nova-lite compute --host %s'); its claim stays held",
                        host, what, host)


def _wait_and_report(store: Store, tasks: Sequence[Task], timeout: float, stderr: Any) -> int:
    """Wait for ``tasks``; write each failure to ``stderr``; 1 if any failed or
    the deadline passed, else 0."""
    try:
        finished = api.wait(store, tasks, timeout)
    except api.WorkTimeout as exc:
        stderr.write(f"{exc}\n")
        return 1
    failed = [t for t in finished if t.state == work.FAILED]
    for t in failed:
        stderr.write(f"Server {t.instance_uuid}: {t.kind} failed on host {t.host}: "
                     f"{t.detail}\n")
    return 1 if failed else 0


class ListServers(Lister):
    """List the servers: id, status, the task their host has yet to do, and host.

    --long adds the task's age in seconds, the node, the availability zone,
    the project and the flavor.  Task is the work recorded for the server's
    host and not finished yet (e.g. "build waiting": its host's compute service has not taken it).
    Live servers only; --all adds deleted and shelved-offloaded ones.
    --limit and --marker list one page (sorted by ID; the marker is a
    server's ID).
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only servers on this host.")
        parser.add_argument("--all", action="store_true",
                            help="Include deleted and shelved-offloaded servers.")
        paging.add_arguments(parser, "ID", "the server with this ID")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        ctx = self.app.context()
        limit, marker = paging.page(parsed_args, ctx.settings)
        store = ctx.open_store(must_exist=True, readonly=True)
        return LIST_HEADERS, _rows(store, store.list_instances(
            host=parsed_args.host, live_only=not parsed_args.all,
            limit=limit, marker=marker), ctx.settings.default_availability_zone)


class ShowServer(ShowOne):
    """Show one server: placement, zone, state, flavor and what it holds per node.

    availability_zone is the zone it was built in (kept by its moves).

    task is the unfinished work recorded for its host (task_age: seconds
    since it was recorded); fault is the reason its last failed task gave
    (a spawn that failed, a build that timed out).  allocations maps each
    node uuid to what the server holds there (resource class: amount).
    """

    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        inst = find_instance(store, parsed_args.server)
        default_zone = ctx.settings.default_availability_zone
        zone = server_zone(inst, store.aggregates.host_zones(default_zone)
                           if inst.availability_zone is None else {}, default_zone)
        held = {a.node_uuid: dict(sorted(a.resources.items()))
                for a in store.list_allocations(instance_uuid=inst.uuid)}
        f = inst.flavor
        task = store.tasks.open_by_instance([inst.uuid]).get(inst.uuid)
        fault = store.tasks.last_failure(inst.uuid)
        fields: dict[str, Any] = {"id": inst.uuid, "status": inst.vm_state,
                  "task_state": OptionalColumn(inst.task_state),
                  "task": OptionalColumn(None if task is None else task.describe()),
                  "task_age": OptionalColumn(None if task is None
                                             else round(task.age(time.time()))),
                  "fault": OptionalColumn(None if fault is None else fault.detail),
                  "host": OptionalColumn(inst.host), "node": OptionalColumn(inst.node),
                  "availability_zone": OptionalColumn(zone),
                  "project_id": TextColumn(inst.project_id), "flavor": TextColumn(f.name),
                  "vcpus": f.vcpus, "memory_mb": f.memory_mb,
                  "disk_gb": f.root_gb + f.ephemeral_gb,
                  "allocations": dict(sorted(held.items()))}
        return SHOW_FIELDS, tuple(fields[name] for name in SHOW_FIELDS)


class DeleteServer(typed.Command):
    """Delete a server: its host's compute service destroys the guest and frees it.

    The delete is recorded for the server's host; until its compute service
    takes it, the server shows task "delete waiting" and keeps its
    resources.  --wait waits until it is done.  --force, when the host's
    compute service is down, deletes at once here: the record is deleted and
    its resources freed, and the host destroys the guest when it comes back
    ([DEFAULT] running_deleted_instance_action); with the service up,
    --force changes nothing and the host deletes as usual.  A server with no
    host (a build that failed) is deleted at once.  Refuses unless
    --yes-i-really-mean-it is given (exit status 2, nothing changed).  An
    unknown or already deleted server is an error (exit status 1, nothing
    changed).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("server", metavar="SERVER", help="Server uuid.")
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        parser.add_argument("--force", action="store_true",
                            help="If the host's compute service is down, delete here at "
                                 "once (Nova's local delete).")
        add_wait_arguments(parser, "deleted the server")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        inst = find_instance(store, parsed_args.server, live=True)
        if not parsed_args.confirmed:
            raise BadArguments(f"Refusing to delete server {inst.uuid} on {inst.host}/"
                               f"{inst.node} without {CONFIRM_FLAG}; nothing was changed")
        try:
            result = api.delete(store, inst, force=parsed_args.force, settings=ctx.settings)
        except InstanceStateConflict as exc:
            raise CommandError(str(exc)) from None
        out = self.app.stdout
        if result.local:
            where = f" (the compute service of host {inst.host} is down: it destroys the " \
                    "guest when it comes back)" if inst.host else ""
            out.write(f"Deleted server {inst.uuid}{where}\n")
            return 0
        assert result.task is not None
        if parsed_args.wait:
            code = _wait_and_report(store, [result.task], parsed_args.timeout, self.app.stderr)
            if code == 0:
                out.write(f"Deleted server {inst.uuid}\n")
            return code
        up = api.service_is_up(store, result.task.host, ctx.settings)
        out.write(f"Delete of server {inst.uuid} recorded for host {result.task.host} "
                  f"(task {result.task.id})")
        if up:
            out.write("\n")
        else:
            out.write(f": the compute service of host {result.task.host} is down, so the "
                      "delete waits and the server keeps its resources; --force deletes it "
                      "here at once\n")
        return 0
