"""What a compute service does for each step of a move, on its own driver.

The steps of a resize or cold migration (:mod:`nova_lite.compute.moves`
records the first), each a task for one host that records the next in the
transaction that records it done:

- ``prep_resize`` (destination): claim the new flavor on the node with
  this host's tracker (its driver's overhead counted); the move claim
  records the migration.  No room (or the node is gone): the next
  alternate the scheduler gave is asked instead, and with none left the
  task fails with the reason and the instance is active again on the
  source, with nothing held on the destination.
- ``resize_instance`` (source): hand the guest over.  The driver contract
  has spawn and destroy only, so the source keeps its guest and its claim
  until the move is confirmed; the migration becomes ``post-migrating``.
- ``finish_resize`` (destination): spawn the guest with the new flavor;
  the migration becomes ``finished`` and the instance ``resized``.  Its
  record stays on the source (where its own allocation is) until confirm;
  the destination's claim is the migration's.
- ``confirm_resize`` (source): destroy the old guest, then drop the
  source's claim (:meth:`ResourceTracker.drop_move_claim
  <nova_lite.compute.resource_tracker.ResourceTracker.drop_move_claim>`):
  the destination's claim becomes the instance's, which is recorded active
  on the destination with the new flavor, and the migration ``confirmed``,
  in one transaction.
- ``revert_resize`` (destination): destroy the new guest and drop the
  destination's claim (the migration ``reverted``), then
  ``finish_revert_resize`` (source): start the guest again if it is gone;
  the instance is active on the source with its old flavor.

On one host (``allow_resize_to_same_host``) there is one guest: finish
spawns it again with the new flavor, confirm keeps it, revert destroys it
and the source step spawns it again with the old one.

Each step looks at the records and the driver's guests first and finishes
what an earlier attempt began (a worker that died is replaced): a claim
already made by this task is adopted, a guest already spawned is kept, an
accounting step already committed is not repeated.  A step that fails
records its task failed with the reason; before that, a failed
``prep_resize``, ``resize_instance`` or ``finish_resize`` frees the
destination (the migration becomes ``error``: Nova's failed move) and
records the instance active on the source again; a failed confirm or
revert leaves the move waiting (``resized``) to be confirmed or reverted
again; a failed ``finish_revert_resize`` records the instance in error.
"""

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from nova_lite import holds, work
from nova_lite.compute import work_handlers as wh
from nova_lite.compute.api import RecordsTrackers
from nova_lite.compute.claims import ComputeResourcesUnavailable, MoveClaim
from nova_lite.compute.moves import (
    MIGRATION, RESIZE, flavor_from_param, pci_requests_from_param)
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import tasks as queue
from nova_lite.exception import (
    InstanceNotFound, InstanceStateConflict, InvalidInput, NodeNotFound, NovaLiteError)
from nova_lite.objects import Flavor, Instance, Migration, PciRequest
from nova_lite.work import WorkRequest

LOG = logging.getLogger(__name__)

Job = wh.Job

#: Statuses of a move whose guest was started on the destination.
_STARTED = ("finished", "confirming", "reverting")


# -- the records of a step ------------------------------------------------------
def _migration(job: Job) -> Migration | None:
    """The task's migration as recorded, or None."""
    uuid, instance_uuid = job.task.migration_uuid, job.task.instance_uuid
    if uuid is None or instance_uuid is None:
        return None
    return next((m for m in job.store.list_migrations(instance_uuid) if m.uuid == uuid), None)


def _same_host(mig: Migration) -> bool:
    return mig.source_compute == mig.dest_compute


def _at_dest(inst: Instance, mig: Migration) -> Instance:
    """``inst`` as its guest on the destination runs: new flavor, destination node."""
    moved = attrs.evolve(inst, flavor=mig.new_flavor, host=mig.dest_compute,
                         node=mig.dest_node, pci_devices=())
    if mig.new_pci_requests is not None:
        moved = attrs.evolve(moved, pci_requests=mig.new_pci_requests)
    return moved


def _change(inst: Instance, host: str, expect: Sequence[str], vm_state: str,
            task_state: str | None) -> queue.InstanceChange:
    return queue.InstanceChange(inst.uuid, host, tuple(expect), vm_state, task_state)


def _back_to_active(inst: Instance, host: str | None = None) -> queue.InstanceChange:
    """The instance active again, no task, on the source (its record's host)."""
    return _change(inst, host or str(inst.host), (holds.ACTIVE,), holds.ACTIVE, None)


def _still_resized(inst: Instance) -> queue.InstanceChange:
    """The move waits again for a confirm or a revert."""
    return _change(inst, str(inst.host), (holds.RESIZED,), holds.RESIZED, None)


def _destroy_quietly(job: Job, inst: Instance) -> None:
    try:
        job.tracker.driver.destroy(inst)
    except Exception as exc:   # noqa: BLE001 - the leak finder names the guest
        LOG.warning("Host %s: guest of instance %s not destroyed: %s", job.tracker.host,
                    inst.uuid, exc)


def _dest_tracker(job: Job, mig: Migration) -> ResourceTracker:
    """A tracker of the destination's host: this one, or one that gives back
    through the records alone."""
    if mig.dest_compute == job.tracker.host:
        return job.tracker
    return RecordsTrackers(job.store, job.tracker.settings)(mig.dest_compute)


def _abort(job: Job, mig: Migration) -> None:
    """Free the destination's claim and record the migration ``error``
    (nothing to do when the move is over already)."""
    try:
        _dest_tracker(job, mig).abort_move_claim(mig)
        LOG.info("Host %s: move %s of instance %s aborted: destination %s/%s freed",
                 job.tracker.host, mig.uuid, mig.instance_uuid, mig.dest_compute,
                 mig.dest_node)
    except InvalidInput:
        pass   # over already (the instance was deleted, or an earlier attempt)
    except NodeNotFound as exc:
        LOG.warning("Move %s: its destination was not freed: %s", mig.uuid, exc)


def fail_move(job: Job, inst: Instance | None, mig: Migration | None, reason: str) -> str:
    """A step of a move failed: free the destination (migration ``error``),
    then record the task failed with ``reason`` and the instance active on
    the source.  Returns the outcome recorded."""
    if mig is not None:
        if inst is not None and job.tracker.host == mig.dest_compute and not _same_host(mig):
            _destroy_quietly(job, _at_dest(inst, mig))
        _abort(job, mig)
    change = None
    if inst is not None and inst.host is not None:
        change = _back_to_active(inst, mig.source_compute if mig is not None else None)
    outcome = job.finish(work.FAILED, reason, instance_change=change)
    if outcome == queue.INSTANCE_MOVED_ON:
        LOG.warning("Host %s: %s of instance %s failed (%s) after the instance moved on",
                    job.tracker.host, job.task.kind, job.task.instance_uuid, reason)
    return outcome


def _gone(job: Job, inst: Instance | None, mig: Migration | None) -> str | None:
    """The outcome recorded when there is nothing left to do for this step
    (no migration, the instance deleted, the move over), else None."""
    if mig is None:
        return job.finish(work.FAILED, f"no migration {job.task.migration_uuid} in the "
                                       "records: nothing to do")
    if inst is None or inst.vm_state == holds.DELETED:
        return job.finish(work.CANCELLED, "nothing to do: the instance is deleted")
    if mig.status == "error":
        # An earlier attempt freed the destination and died before recording why.
        return job.finish(work.FAILED, f"the move failed: migration {mig.uuid} is error",
                          instance_change=_back_to_active(inst, mig.source_compute))
    if not mig.in_progress:
        # Finished otherwise (audit --heal): the instance is whole on one side.
        change = None
        if inst.vm_state in (holds.ACTIVE, holds.RESIZED) and inst.host is not None:
            change = _change(inst, inst.host, (inst.vm_state,), holds.ACTIVE, None)
        return job.finish(work.CANCELLED, f"nothing to do: migration {mig.uuid} is "
                                          f"{mig.status}", instance_change=change)
    return None


# -- prep_resize (destination) -------------------------------------------------
@attrs.frozen
class _Prep:
    """The parameters of a prep_resize task."""

    node: str
    flavor: Flavor
    migration_type: str
    limits: dict[str, float] | None
    alternates: tuple[dict[str, Any], ...]
    #: The PCI requests to claim (a resize's); None: the instance's own.
    pci_requests: tuple[PciRequest, ...] | None = None

    @classmethod
    def of(cls, params: dict[str, Any]) -> "_Prep":
        kind = params.get("migration_type", RESIZE)
        if kind not in (RESIZE, MIGRATION):
            raise InvalidInput(f"migration_type must be {RESIZE} or {MIGRATION}, got {kind!r}")
        alternates = tuple(params.get("alternates") or ())
        for alt in alternates:
            if not isinstance(alt, dict) or not {"host", "node"} <= set(alt):
                raise InvalidInput(f"an alternate must name host and node, got {alt!r:.80}")
        pci = params.get("pci_requests")
        return cls(node=str(params["node"]), flavor=flavor_from_param(params["flavor"]),
                   migration_type=kind, limits=dict(params.get("limits") or {}) or None,
                   alternates=alternates,
                   pci_requests=None if pci is None else pci_requests_from_param(pci))


def _earlier_claim(job: Job, inst: Instance, moving: Sequence[Migration],
                   prep: _Prep) -> Migration | None:
    """The move claim an earlier attempt of this task made (it died before
    recording its outcome), or None.

    Only one task of an instance runs at a time and a prep_resize records
    its follow-up with its outcome, so an in-progress migration into this
    node that no task names yet is this task's own.
    """
    if job.task.attempts <= 1 or len(moving) != 1:
        return None
    mig = moving[0]
    if (mig.dest_compute, mig.dest_node) != (job.tracker.host, prep.node) \
            or mig.status != "pre-migrating" or mig.new_flavor != prep.flavor:
        return None
    named = {t.migration_uuid for t in job.store.tasks.find(instance_uuid=inst.uuid)}
    return None if mig.uuid in named else mig


def _claim(job: Job, inst: Instance, prep: _Prep) -> MoveClaim:
    # A resize claims the new flavor's PCI requests; the move records them
    # (Migration.new_pci_requests) and confirm makes them the instance's.
    asking = inst if prep.pci_requests is None else attrs.evolve(
        inst, pci_requests=prep.pci_requests)
    return job.tracker.resize_claim(asking, prep.flavor, prep.node, limits=prep.limits,
                                    migration_type=prep.migration_type)


def _elsewhere(job: Job, inst: Instance, prep: _Prep, reason: str) -> str:
    """No claim here: ask the next alternate, or fail with ``reason``."""
    if not prep.alternates:
        return job.finish(work.FAILED, reason, instance_change=_back_to_active(inst))
    nxt, rest = prep.alternates[0], list(prep.alternates[1:])
    params = dict(job.task.params, node=nxt["node"], limits=dict(nxt.get("limits") or {}),
                  alternates=rest)
    follow = WorkRequest(host=str(nxt["host"]), kind=work.PREP_RESIZE,
                         instance_uuid=inst.uuid, params=params)
    return job.finish(work.DONE, f"{reason}; asked {nxt['host']}/{nxt['node']} instead",
                      follow_up=[follow])


def prep_resize(job: Job) -> str:
    """Claim the new flavor on this host's node; see the module's description."""
    inst = job.instance()
    host = job.tracker.host
    if inst is None or inst.vm_state != holds.ACTIVE or inst.host is None:
        where = "no record" if inst is None else f"{inst.vm_state} on {inst.host or 'no host'}"
        return job.finish(work.CANCELLED, f"nothing to move: the instance is {where}")
    try:
        prep = _Prep.of(job.task.params)
    except (KeyError, TypeError, ValueError) as exc:
        return job.finish(work.FAILED, f"malformed prep_resize task: {wh._reason(exc)}",
                          instance_change=_back_to_active(inst))
    moving = job.store.list_migrations(inst.uuid, in_progress_only=True)
    mig = _earlier_claim(job, inst, moving, prep)
    if mig is None and moving:
        other = moving[-1]
        # That move owns the instance's state: leave it as it is.
        return job.finish(work.FAILED, f"another move of the instance is in progress "
                                       f"({other.migration_type} {other.uuid}, {other.status})")
    if mig is None:
        try:
            mig = _claim(job, inst, prep).migration
        except (ComputeResourcesUnavailable, NodeNotFound) as exc:
            return _elsewhere(job, inst, prep, f"cannot claim on {host}/{prep.node}: {exc}")
        except InvalidInput as exc:   # the records changed since the task was taken
            return job.finish(work.FAILED, f"cannot move: {exc}",
                              instance_change=None if job.store.list_migrations(
                                  inst.uuid, in_progress_only=True) else _back_to_active(inst))
    try:
        outcome = job.finish(
            work.DONE, f"claimed {prep.flavor.name} on {host}/{prep.node} "
                       f"({prep.migration_type} {mig.uuid})",
            instance_change=_change(inst, mig.source_compute, (holds.ACTIVE,), holds.ACTIVE,
                                    "resize_migrating"),
            follow_up=[WorkRequest(host=mig.source_compute, kind=work.RESIZE_INSTANCE,
                                   instance_uuid=inst.uuid, migration_uuid=mig.uuid)])
    except NovaLiteError:
        _abort(job, mig)   # nothing will carry this claim on
        raise
    if outcome == queue.INSTANCE_MOVED_ON:
        _abort(job, mig)
    return outcome


# -- resize_instance (source) --------------------------------------------------
def resize_instance(job: Job) -> str:
    """Hand the guest over to the destination; see the module's description."""
    inst, mig = job.instance(), _migration(job)
    over = _gone(job, inst, mig)
    if over is not None:
        return over
    assert inst is not None and mig is not None
    tracker = job.tracker
    if mig.status == "pre-migrating":
        mig = tracker.update_migration_status(mig, "migrating")
    # A driver with a power-off and a disk copy would do them here; the
    # source keeps its guest (and its claim) until the move is confirmed.
    if mig.status == "migrating":
        mig = tracker.update_migration_status(mig, "post-migrating")
    outcome = job.finish(
        work.DONE, f"handed over to {mig.dest_compute}/{mig.dest_node}; the guest stays "
                   "here until the move is confirmed",
        instance_change=_change(inst, mig.source_compute, (holds.ACTIVE,), holds.ACTIVE,
                                "resize_migrated"),
        follow_up=[WorkRequest(host=mig.dest_compute, kind=work.FINISH_RESIZE,
                               instance_uuid=inst.uuid, migration_uuid=mig.uuid)])
    if outcome == queue.INSTANCE_MOVED_ON:
        _abort(job, mig)
    return outcome


# -- finish_resize (destination) -----------------------------------------------
def _start_here(job: Job, inst: Instance, mig: Migration) -> None:
    """Spawn the guest with the new flavor on the destination node (kept if an
    earlier attempt spawned it; on one host the one guest is spawned again)."""
    driver = job.tracker.driver
    if _same_host(mig):
        driver.destroy(inst)
        driver.spawn(_at_dest(inst, mig))
        return
    guests = wh._guests(job) if job.task.attempts > 1 else set()
    if guests is None or inst.uuid not in guests:
        driver.spawn(_at_dest(inst, mig))


def finish_resize(job: Job) -> str:
    """Start the guest on the destination; see the module's description."""
    inst, mig = job.instance(), _migration(job)
    over = _gone(job, inst, mig)
    if over is not None:
        if inst is not None and mig is not None and not _same_host(mig) \
                and (inst.vm_state == holds.DELETED or not mig.in_progress):
            _destroy_quietly(job, _at_dest(inst, mig))
        return over
    assert inst is not None and mig is not None
    if mig.status not in _STARTED:
        try:
            _start_here(job, inst, mig)
        except Exception as exc:   # noqa: BLE001 - any driver failure fails the move
            LOG.exception("Spawn of instance %s on %s/%s failed", inst.uuid,
                          mig.dest_compute, mig.dest_node)
            if _same_host(mig):
                _respawn_quietly(job, inst)   # its old guest again
            return fail_move(job, inst, mig, f"spawn on {mig.dest_compute}/{mig.dest_node} "
                                             f"failed: {wh._reason(exc)}")
        mig = job.tracker.update_migration_status(mig, "finished")
    outcome = job.finish(
        work.DONE, f"started on {mig.dest_compute}/{mig.dest_node} with "
                   f"{mig.new_flavor.name}; waiting for confirm or revert",
        instance_change=_change(inst, mig.source_compute, (holds.ACTIVE,), holds.RESIZED,
                                None))
    if outcome == queue.INSTANCE_MOVED_ON:
        now = job.instance()
        if now is None or now.vm_state == holds.DELETED or not _same_host(mig):
            _destroy_quietly(job, _at_dest(inst, mig))
        _abort(job, mig)
    return outcome


def _respawn_quietly(job: Job, inst: Instance) -> None:
    try:
        job.tracker.driver.spawn(inst)
    except Exception as exc:   # noqa: BLE001 - the audit names the missing guest
        LOG.warning("Host %s: guest of instance %s not started again: %s", job.tracker.host,
                    inst.uuid, exc)


# -- confirm_resize (source) ---------------------------------------------------
def _not_waiting(job: Job, inst: Instance, mig: Migration, what: str) -> str | None:
    """The outcome recorded when the move in progress is not waiting to be
    confirmed or reverted (else None)."""
    if inst.vm_state != holds.RESIZED or mig.status not in _STARTED:
        return job.finish(work.FAILED, f"nothing to {what}: the instance is "
                                       f"{inst.vm_state}, migration {mig.uuid} {mig.status}")
    return None


def _wait_again(job: Job, inst: Instance, mig: Migration, reason: str) -> str:
    """A confirm or revert failed: the move waits for one again."""
    try:
        job.tracker.store.set_migration_status(mig.uuid, "finished")
    except NovaLiteError as exc:
        LOG.warning("Move %s not set back to finished: %s", mig.uuid, exc)
    return job.finish(work.FAILED, reason, instance_change=_still_resized(inst))


def confirm_resize(job: Job) -> str:
    """Destroy the old guest and drop the source's claim; see the module's
    description."""
    inst, mig = job.instance(), _migration(job)
    if mig is not None and inst is not None and mig.status == "confirmed":
        # An earlier attempt committed the confirm and died before recording it.
        if not _same_host(mig):
            _destroy_quietly(job, attrs.evolve(inst, host=mig.source_compute,
                                               node=mig.source_node))
        return job.finish(work.DONE, "confirmed already")
    over = _gone(job, inst, mig)
    if over is not None:
        return over
    assert inst is not None and mig is not None
    waiting = _not_waiting(job, inst, mig, "confirm")
    if waiting is not None:
        return waiting
    if mig.status == "finished":
        mig = job.tracker.update_migration_status(mig, "confirming")
    if not _same_host(mig):
        try:
            job.tracker.driver.destroy(inst)
        except Exception as exc:   # noqa: BLE001 - the move waits for another confirm
            LOG.exception("Destroy of the old guest of instance %s failed", inst.uuid)
            return _wait_again(job, inst, mig, f"destroying the old guest on "
                                               f"{mig.source_compute} failed: "
                                               f"{wh._reason(exc)}")
    try:
        job.tracker.drop_move_claim(attrs.evolve(inst, vm_state=holds.ACTIVE, task_state=None),
                                    mig.source_node, mig.old_flavor)
    except InstanceStateConflict as exc:
        return job.finish(work.CANCELLED, f"the instance moved on: {exc}")
    except (InstanceNotFound, InvalidInput) as exc:
        return _wait_again(job, inst, mig, f"dropping the source's claim failed: {exc}")
    return job.finish(work.DONE, f"old guest destroyed, {mig.old_flavor.name} freed on "
                                 f"{mig.source_compute}/{mig.source_node}; active on "
                                 f"{mig.dest_compute}/{mig.dest_node} with "
                                 f"{mig.new_flavor.name}")


# -- revert_resize (destination) and finish_revert_resize (source) -------------
def _finish_revert(inst: Instance, mig: Migration) -> WorkRequest:
    return WorkRequest(host=mig.source_compute, kind=work.FINISH_REVERT_RESIZE,
                       instance_uuid=inst.uuid, migration_uuid=mig.uuid)


def revert_resize(job: Job) -> str:
    """Destroy the new guest and drop the destination's claim; see the
    module's description."""
    inst, mig = job.instance(), _migration(job)
    if mig is not None and inst is not None and mig.status == "reverted" \
            and inst.vm_state == holds.RESIZED:
        # An earlier attempt dropped the claim and died before recording it.
        _destroy_quietly(job, _at_dest(inst, mig))
        return job.finish(work.DONE, "reverted already", follow_up=[_finish_revert(inst, mig)])
    over = _gone(job, inst, mig)
    if over is not None:
        return over
    assert inst is not None and mig is not None
    waiting = _not_waiting(job, inst, mig, "revert")
    if waiting is not None:
        return waiting
    if mig.status == "finished":
        mig = job.tracker.update_migration_status(mig, "reverting")
    try:
        job.tracker.driver.destroy(_at_dest(inst, mig))
    except Exception as exc:   # noqa: BLE001 - the move waits for another revert
        LOG.exception("Destroy of the new guest of instance %s failed", inst.uuid)
        return _wait_again(job, inst, mig, f"destroying the new guest on {mig.dest_compute} "
                                           f"failed: {wh._reason(exc)}")
    try:
        job.tracker.drop_move_claim(inst, mig.dest_node, mig.new_flavor)
    except InstanceStateConflict as exc:
        return job.finish(work.CANCELLED, f"the instance moved on: {exc}")
    except (InstanceNotFound, InvalidInput) as exc:
        return _wait_again(job, inst, mig, f"dropping the destination's claim failed: {exc}")
    return job.finish(work.DONE, f"new guest destroyed, {mig.new_flavor.name} freed on "
                                 f"{mig.dest_compute}/{mig.dest_node}",
                      follow_up=[_finish_revert(inst, mig)])


def finish_revert_resize(job: Job) -> str:
    """Start the guest again on the source if it is gone; the instance is
    active there with its old flavor."""
    inst = job.instance()
    if inst is None or inst.vm_state == holds.DELETED:
        return job.finish(work.CANCELLED, "nothing to do: the instance is deleted")
    if inst.vm_state != holds.RESIZED or inst.host != job.tracker.host:
        return job.finish(work.FAILED, f"nothing to finish: the instance is {inst.vm_state} "
                                       f"on {inst.host or 'no host'}")
    guests = wh._guests(job)
    if guests is None or inst.uuid not in guests:
        try:
            job.tracker.driver.spawn(inst)
        except Exception as exc:   # noqa: BLE001 - Nova's failed revert: error
            LOG.exception("Spawn of instance %s again on %s/%s failed", inst.uuid, inst.host,
                          inst.node)
            return job.finish(work.FAILED, f"starting the guest again on {inst.host}/"
                                           f"{inst.node} failed: {wh._reason(exc)}",
                              instance_change=_change(inst, str(inst.host), (holds.RESIZED,),
                                                      holds.ERROR, None))
    return job.finish(work.DONE, f"reverted: active on {inst.host}/{inst.node} with "
                                 f"{inst.flavor.name}",
                      instance_change=_change(inst, str(inst.host), (holds.RESIZED,),
                                              holds.ACTIVE, None))


# -- registration --------------------------------------------------------------
def _failing_moves(step: wh.Handler) -> wh.Handler:
    """``step``, whose unexpected error fails the whole move (destination
    freed, instance active on the source)."""
    def run(job: Job) -> str:
        try:
            return step(job)
        except NovaLiteError as exc:
            LOG.warning("Host %s: %s of instance %s failed: %s", job.tracker.host,
                        job.task.kind, job.task.instance_uuid, exc)
            return fail_move(job, job.instance(), _migration(job), wh._reason(exc))
    run.__doc__ = step.__doc__
    return run


def _waiting_again(step: wh.Handler) -> wh.Handler:
    """``step`` (a confirm or revert), whose unexpected error leaves the move
    waiting to be confirmed or reverted again."""
    def run(job: Job) -> str:
        try:
            return step(job)
        except NovaLiteError as exc:
            inst, mig = job.instance(), _migration(job)
            if inst is None or mig is None or not mig.in_progress:
                raise
            return _wait_again(job, inst, mig, wh._reason(exc))
    run.__doc__ = step.__doc__
    return run


#: The handler of each kind of move step.
HANDLERS: dict[str, Callable[[Job], str]] = {
    work.PREP_RESIZE: _failing_moves(prep_resize),
    work.RESIZE_INSTANCE: _failing_moves(resize_instance),
    work.FINISH_RESIZE: _failing_moves(finish_resize),
    work.CONFIRM_RESIZE: _waiting_again(confirm_resize),
    work.REVERT_RESIZE: _waiting_again(revert_resize),
    work.FINISH_REVERT_RESIZE: finish_revert_resize,
}

__all__ = ["HANDLERS", "prep_resize", "resize_instance", "finish_resize", "confirm_resize",
           "revert_resize", "finish_revert_resize", "fail_move"]
