"""``nova-lite server resize|migrate`` and ``server resize confirm|revert``: moves
done by the hosts.

Each command checks the server's state (Nova's rules: active to resize or
migrate, resized to confirm or revert, one move at a time), schedules a
destination where one is needed and records the move's first task for its
host (:mod:`nova_lite.compute.moves`); the compute services of the two
hosts do the rest.  ``--wait`` waits until the move is over and says how it
ended (exit status 1 if it failed or the deadline passed, with the reasons
on standard error).
"""

import argparse
import logging
from typing import Any

from nova_lite import work
from nova_lite.cli import flavors, typed
from nova_lite.cli.context import BadArguments, CliContext, CommandError
from nova_lite.cli.lookup import find_instance
from nova_lite.cli.server import add_wait_arguments
from nova_lite.compute import api, moves
from nova_lite.db import Store
from nova_lite.exception import HostNotFound, InvalidInput
from nova_lite.objects import Instance
from nova_lite.scheduler import NoValidHost
from nova_lite.work import Task

LOG = logging.getLogger(__name__)


def _server_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("server", metavar="SERVER", help="Server uuid.")


def _warn_if_down(store: Store, ctx: CliContext, task: Task) -> None:
    if not api.service_is_up(store, task.host, ctx.settings):
        LOG.warning("The compute service of host %s is down: the %s waits for it (start "
                    "'nova-lite compute --host %s')", task.host, task.kind.replace("_", " "),
                    task.host)


class _MoveCommand(typed.Command):
    """Common part: find the server, ask for the move, report or wait."""

    #: What --wait waits for, in the help ("resized the server").
    waits_for = ""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        _server_argument(parser)
        self.add_arguments(parser)
        add_wait_arguments(parser, self.waits_for)
        return parser

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's own arguments."""

    def ask(self, store: Store, inst: Instance, parsed_args: argparse.Namespace) -> Task:
        """Record the move's first task; returns it."""
        raise NotImplementedError

    def recorded(self, inst: Instance, task: Task) -> str:
        """The line printed when the move is recorded (without --wait)."""
        raise NotImplementedError

    def finished(self, outcome: moves.MoveOutcome) -> str:
        """The line printed when the move went well (--wait)."""
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        self.check_arguments(parsed_args)
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        inst = find_instance(store, parsed_args.server, live=True)
        try:
            task = self.ask(store, inst, parsed_args)
        except InvalidInput as exc:
            raise BadArguments(str(exc)) from None
        except (moves.MoveNotAllowed, HostNotFound, NoValidHost) as exc:
            raise CommandError(str(exc)) from None
        out = self.app.stdout
        if not parsed_args.wait:
            _warn_if_down(store, ctx, task)
            out.write(self.recorded(inst, task) + "\n")
            return 0
        return self._wait(store, task, parsed_args.timeout)

    def check_arguments(self, parsed_args: argparse.Namespace) -> None:
        """Refuse bad arguments before anything is read or written."""

    def _wait(self, store: Store, task: Task, timeout: float) -> int:
        try:
            outcome = moves.wait(store, task, timeout)
        except api.WorkTimeout as exc:
            self.app.stderr.write(f"{exc}\n")
            return 1
        if outcome.ok:
            self.app.stdout.write(self.finished(outcome) + "\n")
            return 0
        reasons = moves.describe_failures(outcome.tasks) or [
            f"the move ended after {outcome.tasks[-1].kind} ({outcome.tasks[-1].state})"]
        for line in reasons:
            self.app.stderr.write(f"Server {task.instance_uuid}: {line}\n")
        return 1


def _where(outcome: moves.MoveOutcome) -> tuple[Any, Any, Any]:
    inst = outcome.instance
    if inst is None:
        return None, None, None
    return inst.host, inst.node, inst.flavor.name


def _destination(outcome: moves.MoveOutcome) -> str:
    last = [t for t in outcome.tasks if t.kind == work.FINISH_RESIZE]
    return last[-1].host if last else "?"


class ResizeServer(_MoveCommand):
    """Resize a server to another flavor: its hosts move it, then it waits to be confirmed.

    The flavor is given as for 'server create'; the server's own flavor is
    refused (exit status 2).  The server must be active with no other task
    or move under way (else exit status 1).  A destination is scheduled on
    another host ([DEFAULT] allow_resize_to_same_host lets it stay on its
    own) and the resize is recorded for that host's compute service, which
    claims the new flavor there; the source hands the guest over and the
    destination starts it.  The server is then "resized": 'server resize
    confirm' keeps the new flavor and frees the source, 'server resize
    revert' goes back.  No room on the destination: the resize fails with
    the reason ('server show' fault) and the server stays active where it
    was.
    """

    waits_for = "resized the server"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        flavors.add_arguments(parser)

    def check_arguments(self, parsed_args: argparse.Namespace) -> None:
        parsed_args.new_flavor = flavors.flavor_from_args(parsed_args)

    def ask(self, store: Store, inst: Instance, parsed_args: argparse.Namespace) -> Task:
        return moves.resize(store, inst, parsed_args.new_flavor,
                            settings=self.app.context().settings)

    def recorded(self, inst: Instance, task: Task) -> str:
        flavor = moves.flavor_from_param(task.params["flavor"])
        return (f"Resize of server {inst.uuid} to {flavor.name} recorded for host "
                f"{task.host} (task {task.id})")

    def finished(self, outcome: moves.MoveOutcome) -> str:
        host, node, flavor = _where(outcome)
        uuid = outcome.tasks[0].instance_uuid
        return (f"Resized server {uuid} to {flavor_name(outcome)} on {_destination(outcome)}: "
                f"it waits for 'server resize confirm' or 'server resize revert' (it still "
                f"holds {flavor} on {host}/{node})")


def flavor_name(outcome: moves.MoveOutcome) -> str:
    """The flavor a resize or migration asked for."""
    return moves.flavor_from_param(outcome.tasks[0].params["flavor"]).name


class MigrateServer(_MoveCommand):
    """Cold-migrate a server to another host: its hosts move it, then it waits to be confirmed.

    The server must be active with no other task or move under way (else
    exit status 1).  Without --host the scheduler picks a host other than
    the server's own; --host HOST asks for that host (it must pass the
    scheduler's filters; an unknown host is exit status 1, the server's own
    host exit status 2).  As for 'server resize', the server is then
    "resized" until 'server resize confirm' or 'server resize revert'.
    """

    waits_for = "migrated the server"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--host", metavar="HOST",
                            help="Destination host (default: the scheduler's choice).")

    def check_arguments(self, parsed_args: argparse.Namespace) -> None:
        if parsed_args.host is not None and not parsed_args.host.strip():
            raise BadArguments("--host must not be empty (omit it to let the scheduler "
                               "choose); nothing was changed")

    def ask(self, store: Store, inst: Instance, parsed_args: argparse.Namespace) -> Task:
        return moves.migrate(store, inst, parsed_args.host, settings=self.app.context().settings)

    def recorded(self, inst: Instance, task: Task) -> str:
        return (f"Migration of server {inst.uuid} from {inst.host} recorded for host "
                f"{task.host} (task {task.id})")

    def finished(self, outcome: moves.MoveOutcome) -> str:
        host, _, _ = _where(outcome)
        uuid = outcome.tasks[0].instance_uuid
        return (f"Migrated server {uuid} to {_destination(outcome)}: it waits for 'server "
                f"resize confirm' or 'server resize revert' (it still holds its flavor on "
                f"{host})")


class ConfirmServerResize(_MoveCommand):
    """Confirm a resized server: the source destroys its old guest and frees what it held.

    The server must be resized (a resize or migration that finished) with
    no task under way, else exit status 1.  The confirm is recorded for the
    source host's compute service; then the server is active on its new
    host with its new flavor.
    """

    waits_for = "confirmed the resize"

    def ask(self, store: Store, inst: Instance, parsed_args: argparse.Namespace) -> Task:
        return moves.confirm(store, inst)

    def recorded(self, inst: Instance, task: Task) -> str:
        return f"Confirm of server {inst.uuid} recorded for host {task.host} (task {task.id})"

    def finished(self, outcome: moves.MoveOutcome) -> str:
        host, node, flavor = _where(outcome)
        uuid = outcome.tasks[0].instance_uuid
        return f"Confirmed server {uuid}: active on {host}/{node} with {flavor}"


class RevertServerResize(_MoveCommand):
    """Revert a resized server: it goes back to its old host and flavor.

    The server must be resized (a resize or migration that finished) with
    no task under way, else exit status 1.  The destination's compute
    service destroys the new guest and frees what it held, then the
    source's starts the guest again if it is gone; the server is active
    where it was, with its old flavor.
    """

    waits_for = "reverted the resize"

    def ask(self, store: Store, inst: Instance, parsed_args: argparse.Namespace) -> Task:
        return moves.revert(store, inst)

    def recorded(self, inst: Instance, task: Task) -> str:
        return f"Revert of server {inst.uuid} recorded for host {task.host} (task {task.id})"

    def finished(self, outcome: moves.MoveOutcome) -> str:
        host, node, flavor = _where(outcome)
        uuid = outcome.tasks[0].instance_uuid
        return f"Reverted server {uuid}: active on {host}/{node} with {flavor}"
