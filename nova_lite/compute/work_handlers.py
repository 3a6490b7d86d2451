"""What a compute service does for each kind of task, on its own driver.

:func:`carry_out` runs the handler of a task's kind (:data:`HANDLERS`).
A handler does the driver's part, then records the outcome through
:meth:`Job.finish`, which writes only while the task is still the
worker's.  Each is written to be taken again after a crash: it looks at
what the records and the driver already show and finishes from there.

- build: spawn the instance's guest on its node (a guest already there
  from an earlier attempt is kept); the instance becomes active in the
  transaction that records the task done.  A spawn that fails records the
  task failed with the reason (``server show`` shows it), gives the claim
  back and records the instance in error.  When the host's driver adds an
  overhead the asker could not know, the claim is made again with it first.
- delete: destroy the guest (a missing one is fine), then record the
  instance deleted, which frees what it held.
- audit: :mod:`nova_lite.compute.audit_work` (its ``HANDLERS`` are merged in).
"""

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nova_lite import objects, work
from nova_lite.compute import audit_work
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import tasks as queue
from nova_lite.db.store import Store
from nova_lite.model.plans import ClaimAsk
from nova_lite.exception import (
    InstanceNotFound, InstanceStateConflict, NovaLiteError, StoreError)
from nova_lite.objects import Instance
from nova_lite.work import Task, WorkRequest

LOG = logging.getLogger(__name__)

#: A handler's outcome queued to be recorded with others (:meth:`Job.finish_soon`).
QUEUED = "queued"


@attrs.frozen
class Job:
    """A task being carried out by ``worker`` with the host's ``tracker``;
    ``taken_instance``: the task's instance as read in the transaction that
    took it (None: not read then, or no record)."""

    task: Task
    worker: str
    tracker: ResourceTracker
    taken_instance: Instance | None = None
    #: Where :meth:`finish_soon` queues the outcome (None: recorded at once).
    queue_outcome: "Callable[[Job, queue.Outcome, Callable[[], None]], None] | None" = None

    @property
    def store(self) -> Store:
        """The records."""
        return self.tracker.store

    def finish(self, state: str, detail: str | None = None, *,
               result: Mapping[str, Any] | None = None,
               instance_change: queue.InstanceChange | None = None,
               follow_up: Sequence[WorkRequest] = ()) -> str:
        """Record the task's outcome (:meth:`TaskQueue.finish
        <nova_lite.db.tasks.TaskQueue.finish>`); logs it and returns what
        was recorded."""
        outcome = self.store.tasks.finish(self.task, self.worker, state, detail=detail,
                                          result=result, instance_change=instance_change,
                                          follow_up=follow_up)
        self.log_outcome(state, detail, outcome)
        return outcome

    def finish_soon(self, state: str, detail: str | None, *,
                    instance_change: queue.InstanceChange | None,
                    if_not_finished: Callable[[], None]) -> str:
        """:meth:`finish`, or, when the worker records the outcomes of tasks
        done together in one transaction (``queue_outcome``), queued for it
        (returns :data:`QUEUED`; the worker logs the outcome when it is
        recorded).  ``if_not_finished`` runs when the outcome is not
        :data:`~nova_lite.db.tasks.FINISHED`."""
        if self.queue_outcome is None:
            outcome = self.finish(state, detail, instance_change=instance_change)
            if outcome != queue.FINISHED:
                if_not_finished()
            return outcome
        self.queue_outcome(self, queue.Outcome(self.task, state, detail=detail,
                                               instance_change=instance_change),
                           if_not_finished)
        return QUEUED

    def log_outcome(self, state: str, detail: str | None, outcome: str) -> None:
        """Log what became of the task's outcome ``state`` (``outcome``)."""
        t = self.task
        if outcome == queue.NOT_TAKEN:
            LOG.warning("Host %s: task %d (%s of %s) is no longer this worker's: its outcome "
                        "(%s) was not recorded", t.host, t.id, t.kind, t.instance_uuid, state)
        elif outcome == queue.INSTANCE_MOVED_ON:
            LOG.info("Host %s: task %d (%s of %s) cancelled: the instance moved on meanwhile",
                     t.host, t.id, t.kind, t.instance_uuid)
        else:
            log = LOG.warning if state == work.FAILED else LOG.info
            log("Host %s: task %d (%s of %s) %s%s", t.host, t.id, t.kind,
                t.instance_uuid or t.host, state, f": {detail}" if detail else "")

    def first_instance(self) -> Instance | None:
        """The task's instance as read when the task was taken, else as recorded
        now (None: no record): a handler's first look at it."""
        if self.taken_instance is not None:
            return self.taken_instance
        return self.instance()

    def instance(self) -> Instance | None:
        """The task's instance as recorded now, or None (no record)."""
        if self.task.instance_uuid is None:
            return None
        try:
            return self.store.get_instance(self.task.instance_uuid)
        except InstanceNotFound:
            return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _guests(job: Job) -> set[str] | None:
    """The driver's guests, or None if it cannot list them."""
    try:
        return set(job.tracker.driver.list_instances())
    except Exception as exc:   # noqa: BLE001 - decide without them
        LOG.warning("Host %s: the driver cannot list its guests: %s", job.tracker.host, exc)
        return None


def _overhead_known(job: Job, inst: Instance) -> None:
    """Claim ``inst`` again with this host's driver overhead when the asker's
    claim (which could not know it) lacks it."""
    tracker = job.tracker
    assert inst.node is not None
    overhead = tracker.driver.estimate_instance_overhead(inst)
    if not (overhead.vcpus or overhead.memory_mb or overhead.disk_gb):
        return
    wanted = ClaimAsk.build(inst, inst.flavor, overhead).requested
    held = [a for a in job.store.list_allocations(instance_uuid=inst.uuid)]
    if len(held) == 1 and dict(held[0].resources) == dict(wanted):
        return
    tracker.abort_instance_claim(inst, inst.node)
    tracker.instance_claim(attrs.evolve(inst, host=None, node=None), inst.node)


def build(job: Job) -> str:
    """Spawn the instance's guest; see the module's description."""
    inst = job.first_instance()
    host = job.tracker.host
    node = job.task.params.get("node")
    if inst is not None and inst.vm_state == objects.BUILDING and inst.host is None \
            and isinstance(node, str):
        # An earlier attempt gave the claim back to make it again with this
        # host's overhead, and died before it could.
        try:
            job.tracker.instance_claim(inst, node)
        except ComputeResourcesUnavailable as exc:
            return fail_build(job, inst, f"no room on node {node} any more: {exc}")
        inst = job.instance()
    if inst is None or inst.vm_state != objects.BUILDING or inst.host != host:
        where = "no record" if inst is None else f"{inst.vm_state} on {inst.host or 'no host'}"
        return job.finish(work.CANCELLED, f"nothing to build: the instance is {where}")
    timeout = job.tracker.settings.instance_build_timeout
    age = time.time() - job.task.created_at
    if timeout and age > timeout:
        # Its host was down (or busy) for longer than the build may take.
        return fail_build(job, inst, f"build timed out: still building after {age:.0f} s "
                                     f"(instance_build_timeout {timeout:g} s)")
    guests = _guests(job) if job.task.attempts > 1 else set()
    if guests is None or inst.uuid not in guests:
        try:
            _overhead_known(job, inst)
            job.tracker.driver.spawn(inst)
        except ComputeResourcesUnavailable as exc:
            return fail_build(job, inst, f"no room for the host's overhead: {exc}")
        except Exception as exc:   # noqa: BLE001 - any driver failure fails the build
            LOG.debug("Spawn of instance %s on %s/%s failed", inst.uuid, host, inst.node,
                      exc_info=True)
            return fail_build(job, inst, f"spawn failed: {_reason(exc)}")
    def not_finished() -> None:
        now = job.instance()
        if now is None or now.host != host or now.vm_state != objects.BUILDING:
            # Deleted or given up meanwhile: its claim is gone, so is the guest.
            _destroy_quietly(job, inst)
    return job.finish_soon(work.DONE, f"spawned on node {inst.node}",
                           instance_change=queue.InstanceChange(
                               inst.uuid, host, (objects.BUILDING,), objects.ACTIVE, None),
                           if_not_finished=not_finished)


def fail_build(job: Job, inst: Instance, reason: str) -> str:
    """Record ``inst``'s build failed with ``reason``: the claim given back,
    the instance in error, then the task failed (so whoever sees the task
    over sees the instance in error too)."""
    now = job.instance()
    if now is not None and now.vm_state == objects.BUILDING and now.host in (
            job.tracker.host, None):
        _to_error(job.tracker, now)
    return job.finish(work.FAILED, reason)


def _to_error(tracker: ResourceTracker, inst: Instance) -> None:
    try:
        if inst.node is not None:
            tracker.abort_instance_claim(inst, inst.node)
        tracker.update_usage(attrs.evolve(inst, host=None, node=None, pci_devices=(),
                                          vm_state=objects.ERROR, task_state=None))
    except (InstanceNotFound, InstanceStateConflict) as exc:
        LOG.info("Instance %s not recorded in error: %s", inst.uuid, exc)


def give_up_build(tracker: ResourceTracker, instance_uuid: str, reason: str,
                  open_task: int | None, now: float | None = None) -> bool:
    """Record a build that will not finish in error: its open task failed
    with ``reason``, its claim given back.  Returns False if it finished
    meanwhile."""
    store = tracker.store
    if not store.tasks.fail_build(instance_uuid, tracker.host, reason, now=now):
        return False
    LOG.warning("Host %s: build of instance %s given up: %s", tracker.host, instance_uuid,
                reason)
    try:
        inst = store.get_instance(instance_uuid)
    except InstanceNotFound:
        return True
    _to_error(tracker, inst)
    return True


def _destroy_quietly(job: Job, inst: Instance) -> None:
    try:
        job.tracker.driver.destroy(inst)
    except Exception as exc:   # noqa: BLE001 - the running-deleted check reaps it later
        LOG.warning("Host %s: guest of instance %s not destroyed: %s", job.tracker.host,
                    inst.uuid, exc)


def delete(job: Job) -> str:
    """Destroy the guest, then record the instance deleted (freeing its claim)."""
    inst = job.first_instance()
    if inst is None or inst.vm_state == objects.DELETED:
        if inst is not None:
            _destroy_quietly(job, inst)
        return job.finish(work.DONE, "already deleted")
    try:
        job.tracker.driver.destroy(inst)
    except Exception as exc:   # noqa: BLE001 - the instance goes to error, claim kept
        LOG.debug("Destroy of instance %s on host %s failed", inst.uuid, job.tracker.host,
                  exc_info=True)
        job.tracker.update_usage(attrs.evolve(inst, vm_state=objects.ERROR, task_state=None))
        return job.finish(work.FAILED, f"destroy failed: {_reason(exc)}")
    try:
        job.tracker.update_usage(attrs.evolve(inst, vm_state=objects.DELETED, task_state=None))
    except InstanceStateConflict:
        pass   # deleted meanwhile (a local delete): nothing left to free
    return job.finish(work.DONE, "guest destroyed, resources freed")


Handler = Callable[[Job], str]

#: The handler of each task kind.
HANDLERS: dict[str, Handler] = {work.BUILD: build, work.DELETE: delete, **audit_work.HANDLERS}


def handlers() -> dict[str, Handler]:
    """:data:`HANDLERS`, with the steps of moves
    (:mod:`nova_lite.compute.move_handlers`, which imports this module)
    added on first use."""
    if work.PREP_RESIZE not in HANDLERS:
        from nova_lite.compute import move_handlers
        HANDLERS.update(move_handlers.HANDLERS)
    return HANDLERS


def carry_out(job: Job) -> str:
    """Run the handler of ``job``'s kind; returns the outcome recorded."""
    handler = handlers().get(job.task.kind)
    if handler is None:
        return job.finish(work.FAILED, f"this compute service does not know task kind "
                                       f"{job.task.kind!r}")
    try:
        return handler(job)
    except StoreError:
        # The records could not be reached: the outcome is not known to be
        # recorded.  The task stays running under its lease and is taken
        # again, when the handler finishes from what is already done.
        raise
    except NovaLiteError as exc:
        return job.finish(work.FAILED, _reason(exc))


def fail_quietly(store: Store, task: Task, worker: str, reason: str) -> str:
    """Record ``task`` failed with ``reason``, ignoring a failure to do so."""
    try:
        return store.tasks.finish(task, worker, work.FAILED, detail=reason)
    except NovaLiteError as exc:
        LOG.warning("Task %d: its failure was not recorded: %s", task.id, exc)
        return queue.NOT_TAKEN
