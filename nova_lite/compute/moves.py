"""Asking the hosts to move a server: resize, cold migration, confirm, revert.

As Nova does, but through the records alone.  :func:`resize` and
:func:`migrate` schedule a destination (the server's own host is never
chosen for a migration, nor for a resize unless
``[DEFAULT] allow_resize_to_same_host``) and record a ``prep_resize`` task
for the destination's host; the instance's task_state becomes
``resize_prep``.  Then each host does its part and records the next
(:mod:`nova_lite.compute.move_handlers`):

1. destination, ``prep_resize``: claim the flavor with its own tracker
   (and its driver's overhead); a move claim records the migration.
2. source, ``resize_instance``: hand the guest over (the source keeps it,
   and its claim, until confirm); migration ``post-migrating``.
3. destination, ``finish_resize``: start the guest with the new flavor;
   migration ``finished``, instance ``resized``.  The instance's record
   stays on the source, holding the old flavor there, until confirm; the
   destination's claim is the migration's.

:func:`confirm` records ``confirm_resize`` for the source (old guest
destroyed, the source's claim dropped, the destination's becomes the
instance's: it is then active on the destination with the new flavor);
:func:`revert` records ``revert_resize`` for the destination (new guest
destroyed, its claim dropped) followed by ``finish_revert_resize`` on the
source (the guest started again there if it is gone; active with the old
flavor).

Each returns the first task recorded; :func:`wait` waits for the whole
chain.  A move that fails leaves the migration ``error``, the destination
freed and the instance active on the source, with the reason as the failed
task's detail (``server show``'s fault)::

    from nova_lite.compute import moves

    task = moves.resize(store, instance, new_flavor)
    outcome = moves.wait(store, task, timeout=60)
    outcome.ok, outcome.instance.vm_state      # True, "resized"
    moves.wait(store, moves.confirm(store, outcome.instance), timeout=60)
"""

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import holds, pci_alias, work
from nova_lite.compute.api import WorkTimeout
from nova_lite.db import serialize
from nova_lite.exception import (
    HostNotFound, InstanceNotFound, InvalidInput, NovaLiteError)
from nova_lite.objects import Flavor, Instance, Migration, PciRequest
from nova_lite.scheduler import HostManager, RequestSpec, Selection
from nova_lite.work import Task, WorkRequest

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

#: The ``migration_type`` of a resize and of a cold migration (Nova's).
RESIZE = "resize"
MIGRATION = "migration"

#: The task kind that ends each move's chain when it went well.
LAST_STEP = {work.PREP_RESIZE: work.FINISH_RESIZE, work.CONFIRM_RESIZE: work.CONFIRM_RESIZE,
             work.REVERT_RESIZE: work.FINISH_REVERT_RESIZE}


class MoveNotAllowed(NovaLiteError):
    """The server is not in a state that allows this move (not active, not
    resized, or another move or task under way); nothing was changed."""


def flavor_param(flavor: Flavor) -> dict[str, Any]:
    """``flavor`` as a task parameter (a JSON object)."""
    return dict(json.loads(serialize.flavor_to_json(flavor)))


def flavor_from_param(value: Any) -> Flavor:
    """The Flavor of a :func:`flavor_param` value; InvalidInput if malformed."""
    try:
        return serialize.flavor_from_json(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"task parameter flavor is malformed: {exc}") from None


def pci_requests_param(requests: Sequence[PciRequest]) -> list[dict[str, Any]]:
    """PCI requests as a task parameter (a JSON list)."""
    return [attrs.asdict(r) for r in requests]


def pci_requests_from_param(value: Any) -> tuple[PciRequest, ...]:
    """The PciRequest records of a :func:`pci_requests_param` value; InvalidInput
    if malformed."""
    if not isinstance(value, list):
        raise InvalidInput(f"task parameter pci_requests must be a list, got {value!r:.60}")
    try:
        return tuple(PciRequest(**r) for r in value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"task parameter pci_requests is malformed: {exc}") from None


def resize_pci_requests(inst: Instance, flavor: Flavor, settings: "Settings"
                        ) -> tuple[PciRequest, ...]:
    """The PCI requests of ``inst`` resized to ``flavor``, as Nova works them
    out: the new flavor's ``pci_passthrough:alias`` requests (``[pci] alias``
    of ``settings``), plus the instance's requests that came from no alias
    (given by the caller, as Nova keeps a port's).

    :raises InvalidInput: the new flavor's spec is malformed or names no alias.
    """
    own = tuple(r for r in inst.pci_requests if r.alias_name is None)
    return pci_alias.flavor_pci_requests(flavor.extra_specs, settings.pci_aliases,
                                         f"flavor {flavor.name}") + own


def _current(store: "Store", instance: Instance | str) -> Instance:
    """The instance as recorded now (a caller's copy may be stale)."""
    uuid = instance if isinstance(instance, str) else instance.uuid
    return store.get_instance(uuid)


def _check_idle(store: "Store", inst: Instance, what: str) -> None:
    """Refuse when a task or a move of ``inst`` is under way."""
    if inst.task_state is not None:
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: it is busy (task_state "
                             f"{inst.task_state}); nothing was changed")
    pending = store.tasks.find(instance_uuid=inst.uuid, states=work.OPEN_STATES, limit=1)
    if pending:
        t = pending[0]
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: its {t.kind} task {t.id} "
                             f"on host {t.host} is {t.state}; nothing was changed")


def _check_can_move(store: "Store", inst: Instance, what: str) -> None:
    """Nova's rules for a new move: active, placed, idle, no move in progress."""
    if inst.vm_state != holds.ACTIVE:
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: it is {inst.vm_state}, "
                             "not active; nothing was changed")
    if inst.host is None or inst.node is None:
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: it is on no host; "
                             "nothing was changed")
    _check_idle(store, inst, what)
    moving = store.list_migrations(inst.uuid, in_progress_only=True)
    if moving:
        m = moving[-1]
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: its {m.migration_type} "
                             f"{m.uuid} is {m.status} (one move at a time); nothing was "
                             "changed")


def server_zone(store: "Store", inst: Instance, settings: "Settings") -> str | None:
    """The zone a move keeps ``inst`` in: the one it recorded at build, else
    (a record written before instances kept it) its host's zone now."""
    if inst.availability_zone is not None or inst.host is None:
        return inst.availability_zone
    return store.aggregates.host_zones(settings.default_availability_zone).get(
        inst.host, settings.default_availability_zone)


def _selection_param(sel: Selection) -> dict[str, Any]:
    return {"host": sel.host, "node": sel.nodename, "limits": dict(sel.limits)}


def _record_prep(store: "Store", inst: Instance, spec: RequestSpec, migration_type: str,
                 host_manager: HostManager | None, settings: "Settings | None") -> Task:
    manager = host_manager or HostManager(store, settings)
    (sel,) = manager.select_destinations(spec, 1)
    params = {"node": sel.nodename, "flavor": flavor_param(spec.flavor),
              "migration_type": migration_type, "limits": dict(sel.limits),
              "alternates": [_selection_param(a) for a in sel.alternates]}
    if migration_type == RESIZE:
        params["pci_requests"] = pci_requests_param(spec.pci_requests)
    (task,) = store.tasks.record(
        [WorkRequest(host=sel.host, kind=work.PREP_RESIZE, instance_uuid=inst.uuid,
                     params=params)],
        instance_task_states={inst.uuid: "resize_prep"})
    LOG.info("%s of instance %s from %s/%s to %s/%s recorded for host %s (task %d)",
             migration_type.capitalize(), inst.uuid, inst.host, inst.node, sel.host,
             sel.nodename, sel.host, task.id)
    return task


def resize(store: "Store", instance: Instance | str, flavor: Flavor, *,
           settings: "Settings | None" = None,
           host_manager: HostManager | None = None) -> Task:
    """Resize ``instance`` to ``flavor``: schedule a destination and record its
    ``prep_resize`` task; returns it (see :func:`wait`).

    :param store: the records.
    :param instance: the instance (or its uuid); its record is read again.
    :param flavor: the new flavor; the one it has is refused.  The server
        stays in its availability zone.  Its PCI requests become the new
        flavor's (:func:`resize_pci_requests`), claimed on the destination;
        confirm makes them the instance's, revert keeps the old ones.
    :param settings: the scheduler's settings (and ``allow_resize_to_same_host``).
    :param host_manager: a HostManager to reuse; else one is made.
    :returns: the ``prep_resize`` task recorded for the destination's host.
    :raises InstanceNotFound: no such instance.
    :raises InvalidInput: ``flavor`` is not a Flavor, or is the instance's
        own, or its ``pci_passthrough:alias`` names no configured alias.
    :raises MoveNotAllowed: not active, or another move or task is under way.
    :raises nova_lite.scheduler.NoValidHost: no host can take it.
    """
    from nova_lite.conf import Settings
    if not isinstance(flavor, Flavor):
        raise InvalidInput(f"flavor must be a Flavor, got {flavor!r:.60}")
    inst = _current(store, instance)
    if flavor == inst.flavor:
        raise InvalidInput(f"Server {inst.uuid} already has flavor {flavor.name!r}: a resize "
                           "to the same flavor is refused; nothing was changed")
    _check_can_move(store, inst, "resize")
    conf = settings or Settings()
    same_host = conf.allow_resize_to_same_host
    spec = RequestSpec(flavor, project_id=inst.project_id,
                       pci_requests=resize_pci_requests(inst, flavor, conf),
                       ignore_hosts=() if same_host else (str(inst.host),),
                       availability_zone=server_zone(store, inst, conf))
    return _record_prep(store, inst, spec, RESIZE, host_manager, settings)


def migrate(store: "Store", instance: Instance | str, host: str | None = None, *,
            settings: "Settings | None" = None,
            host_manager: HostManager | None = None) -> Task:
    """Cold-migrate ``instance`` to another host (``host``: that one, forced
    past the scheduler's choice but not its filters); returns the
    ``prep_resize`` task recorded for the destination's host.  The server
    stays in its availability zone: a ``host`` in another zone is refused
    (NoValidHost), as Nova's scheduler refuses it.

    :raises InstanceNotFound: no such instance.
    :raises HostNotFound: ``host`` has no compute node record.
    :raises InvalidInput: ``host`` is the instance's own host or not a name.
    :raises MoveNotAllowed: not active, or another move or task is under way.
    :raises nova_lite.scheduler.NoValidHost: no host can take it.
    """
    from nova_lite.conf import Settings
    inst = _current(store, instance)
    if host is not None:
        if not isinstance(host, str) or not host.strip():
            raise InvalidInput(f"host must be a host name, got {host!r:.60}")
        known = {n.host for n in store.get_compute_nodes()}
        if host not in known:
            raise HostNotFound(host, known)
        if host == inst.host:
            raise InvalidInput(f"Server {inst.uuid} is on host {host!r} already: a cold "
                               "migration goes to another host; nothing was changed")
    _check_can_move(store, inst, "migrate")
    spec = RequestSpec(inst.flavor, project_id=inst.project_id, pci_requests=inst.pci_requests,
                       ignore_hosts=(str(inst.host),),
                       force_hosts=(host,) if host is not None else (),
                       availability_zone=server_zone(store, inst, settings or Settings()))
    return _record_prep(store, inst, spec, MIGRATION, host_manager, settings)


def _waiting_move(store: "Store", inst: Instance, what: str) -> Migration:
    """The finished move of a resized ``inst``, or MoveNotAllowed."""
    if inst.vm_state != holds.RESIZED:
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: it is {inst.vm_state}, not "
                             "resized; nothing was changed")
    _check_idle(store, inst, what)
    moving = [m for m in store.list_migrations(inst.uuid, in_progress_only=True)
              if m.status == "finished"]
    if not moving:
        raise MoveNotAllowed(f"Cannot {what} server {inst.uuid}: it has no finished move "
                             "waiting; nothing was changed")
    return moving[-1]


def confirm(store: "Store", instance: Instance | str) -> Task:
    """Confirm the resize (or migration) of a resized ``instance``: records
    ``confirm_resize`` for the source host; returns it.

    :raises MoveNotAllowed: not resized, or a task is under way.
    """
    inst = _current(store, instance)
    mig = _waiting_move(store, inst, "confirm the resize of")
    (task,) = store.tasks.record(
        [WorkRequest(host=mig.source_compute, kind=work.CONFIRM_RESIZE,
                     instance_uuid=inst.uuid, migration_uuid=mig.uuid)],
        instance_task_states={inst.uuid: "resize_confirming"})
    return task


def revert(store: "Store", instance: Instance | str) -> Task:
    """Revert the resize (or migration) of a resized ``instance``: records
    ``revert_resize`` for the destination host (then the source finishes
    it); returns it.

    :raises MoveNotAllowed: not resized, or a task is under way.
    """
    inst = _current(store, instance)
    mig = _waiting_move(store, inst, "revert the resize of")
    (task,) = store.tasks.record(
        [WorkRequest(host=mig.dest_compute, kind=work.REVERT_RESIZE,
                     instance_uuid=inst.uuid, migration_uuid=mig.uuid)],
        instance_task_states={inst.uuid: "resize_reverting"})
    return task


@attrs.frozen
class MoveOutcome:
    """What became of a move: ``tasks``, every task of its chain as recorded
    (the first one asked for and the ones the hosts recorded after it, in
    order); ``instance`` as recorded after them (None: no record)."""

    tasks: tuple[Task, ...]
    instance: Instance | None

    @property
    def ok(self) -> bool:
        """True when every task is done and the chain reached its last step."""
        if not self.tasks or any(t.state != work.DONE for t in self.tasks):
            return False
        return self.tasks[-1].kind == LAST_STEP.get(self.tasks[0].kind)

    @property
    def failures(self) -> tuple[Task, ...]:
        """The tasks that failed or were cancelled."""
        return tuple(t for t in self.tasks if t.state in (work.FAILED, work.CANCELLED))


def chain(store: "Store", first: Task) -> list[Task]:
    """``first`` and every task of its instance recorded after it, in order."""
    if first.instance_uuid is None:
        return [t for t in store.tasks.find(ids=[first.id])]
    return [t for t in store.tasks.find(instance_uuid=first.instance_uuid)
            if t.id >= first.id]


def wait(store: "Store", first: Task, timeout: float, interval: float = 0.05) -> MoveOutcome:
    """Wait until the move that ``first`` began is over (no task of its chain
    waits or runs), at most ``timeout`` seconds; returns its
    :class:`MoveOutcome`.  Raises :class:`~nova_lite.compute.api.WorkTimeout`
    listing the tasks still open at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = chain(store, first)
        still = [t for t in tasks if t.is_open]
        if not still:
            return MoveOutcome(tasks=tuple(tasks), instance=_instance_or_none(
                store, first.instance_uuid))
        if time.monotonic() >= deadline:
            raise WorkTimeout(still, timeout)
        time.sleep(interval)


def outcome(store: "Store", first: Task) -> MoveOutcome:
    """The :class:`MoveOutcome` of ``first``'s chain as recorded now (it may
    still be under way)."""
    return MoveOutcome(tasks=tuple(chain(store, first)),
                       instance=_instance_or_none(store, first.instance_uuid))


def _instance_or_none(store: "Store", uuid: str | None) -> Instance | None:
    if uuid is None:
        return None
    try:
        return store.get_instance(uuid)
    except InstanceNotFound:
        return None


def describe_failures(tasks: Sequence[Task]) -> list[str]:
    """One line per failed or cancelled task: what, where and why."""
    return [f"{t.kind} {t.state} on host {t.host}: {t.detail or 'no reason recorded'}"
            for t in tasks if t.state in (work.FAILED, work.CANCELLED)]


__all__ = ["resize", "migrate", "confirm", "revert", "wait", "outcome", "chain",
           "MoveOutcome", "MoveNotAllowed", "RESIZE", "MIGRATION", "flavor_param",
           "flavor_from_param", "describe_failures", "resize_pci_requests", "server_zone",
           "pci_requests_param", "pci_requests_from_param"]
