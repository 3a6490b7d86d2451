"""The compute service's worker: takes the work recorded for its host and does it.

:class:`Worker` takes its host's tasks from the records
(:class:`~nova_lite.db.tasks.TaskQueue`), carries each out on the host's own
driver through the kind's handler (:mod:`nova_lite.compute.work_handlers`)
and records the outcome.  :meth:`Worker.serve` runs in a thread of the
compute service: woken by LISTEN/NOTIFY on PostgreSQL, else polling every
``[compute] work_poll_interval`` seconds.

A task is held under a lease of ``service_down_time`` seconds, renewed by
the service's heartbeat while the task runs.  A worker that dies leaves its
tasks running: a service started again on the same machine takes them
back at once (the taker's process is gone), any other when the lease runs
out.  Every handler finishes what an earlier attempt began rather than
doing it twice (a guest already spawned is not spawned again).

Each task is taken with its instance as recorded (one transaction for a
batch of tasks).  The outcomes of builds whose spawns were quick are
recorded together, in one transaction, within
:data:`OUTCOME_BATCH_WAIT` of the first; each is still recorded only
while its task is this worker's.

The worker also keeps its host's builds honest (:meth:`Worker.check_builds`):
a build that never reached the host, or whose outcome was lost, or that
is older than ``instance_build_timeout``, goes to error and gives its claim
back.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable

import attrs

from nova_lite.compute import work_handlers
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.compute.worker_identity import WorkerIdentity, is_gone
from nova_lite.conf import Settings
from nova_lite.db.listen import WorkListener
from nova_lite.db.store import Store
from nova_lite.db.tasks import FINISHED, Building, Outcome
from nova_lite.exception import NovaLiteError, StoreError
from nova_lite.objects import Instance
from nova_lite.work import Task

LOG = logging.getLogger(__name__)

#: The outcome of a task whose end could not be recorded (the records were
#: unreachable): it is taken again when its lease runs out.
NOT_RECORDED = "not_recorded"
#: The most tasks taken in one go.
TAKE_BATCH = 64
#: Builds of one take that each spawned in less than this (s) have their
#: outcomes recorded in one transaction, the first of them waiting at most
#: this long (plus the handler that runs when it is due); a build whose
#: spawn took longer is recorded at once, with those queued before it.
OUTCOME_BATCH_WAIT = 0.02
#: A build with no open task is left alone this long (s) after its record last
#: changed: the asker records the task just after the claim commits.
HANDOVER_GRACE = 60.0


class _Queued:
    """Outcomes queued by one round's handlers (:meth:`Job.finish_soon
    <nova_lite.compute.work_handlers.Job.finish_soon>`), to be recorded
    together: ``(job, outcome, if_not_finished)``, and since when (monotonic
    s) the first one waits."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[work_handlers.Job, Outcome, Callable[[], None]]] = []
        self.since = 0.0

    def __call__(self, job: work_handlers.Job, outcome: Outcome,
                 if_not_finished: Callable[[], None]) -> None:
        if not self.outcomes:
            self.since = time.monotonic()
        self.outcomes.append((job, outcome, if_not_finished))


@attrs.frozen
class TaskOutcome:
    """What became of one task in this worker: its ``task`` as taken and the
    ``outcome`` recorded (:data:`~nova_lite.db.tasks.FINISHED`, ...)."""

    task: Task
    outcome: str


class Worker:
    """Does the work of ``tracker.host``: one per compute service.

    :param tracker: the service's resource tracker (its host, store, driver
        and settings are the worker's).
    """

    def __init__(self, tracker: ResourceTracker) -> None:
        self.tracker = tracker
        self.host: str = tracker.host
        self.store: Store = tracker.store
        self.settings: Settings = tracker.settings
        self.identity = WorkerIdentity.of_this_process(self.host)
        self.name = str(self.identity)
        self._running: set[int] = set()
        self._running_lock = threading.Lock()
        self.listener = WorkListener(self.store.url, self.host, pooler=self.store.pooler)
        #: The wall clock (epoch s) tasks are timed with.
        self.clock: Callable[[], float] = time.time
        #: :data:`OUTCOME_BATCH_WAIT` of this worker (s; 0: each outcome alone).
        self.outcome_batch_wait = OUTCOME_BATCH_WAIT

    @property
    def lease(self) -> float:
        """Seconds a taken task stays this worker's without renewal."""
        return self.settings.service_down_time

    # -- one round ------------------------------------------------------------
    def run_pending(self, max_rounds: int | None = None) -> list[TaskOutcome]:
        """Take and do the host's tasks until none is left (or ``max_rounds``
        batches); returns what became of each, in order."""
        done: list[TaskOutcome] = []
        rounds = 0
        while max_rounds is None or rounds < max_rounds:
            rounds += 1
            taken = self.store.tasks.take_with_instances(
                self.host, self.name, limit=TAKE_BATCH, lease=self.lease, now=self.clock())
            if not taken:
                break
            with self._running_lock:
                self._running.update(task.id for task, _ in taken)
            queued = _Queued()
            for task, inst in taken:
                started = time.monotonic()
                done.append(self._do(task, inst, queued))
                now = time.monotonic()
                if queued.outcomes and (now - started >= self.outcome_batch_wait
                                        or now - queued.since >= self.outcome_batch_wait):
                    self._record(queued, done)
            self._record(queued, done)
        return done

    def _record(self, queued: "_Queued", done: list[TaskOutcome]) -> None:
        """Record the ``queued`` outcomes in one transaction; each one's entry
        in ``done`` says what became of it."""
        items, queued.outcomes = queued.outcomes, []
        if not items:
            return
        try:
            found = self.store.tasks.finish_many(self.name, [o for _, o, _ in items],
                                                 now=self.clock())
        except StoreError as exc:
            LOG.warning("Host %s: the records could not be reached, so the outcomes of %d "
                        "task(s) are not recorded; each is taken again once its lease "
                        "(%g s) runs out: %s", self.host, len(items), self.lease, exc)
            found = [NOT_RECORDED] * len(items)
        finally:
            with self._running_lock:
                self._running.difference_update(job.task.id for job, _, _ in items)
        recorded = {}
        for (job, outcome, if_not_finished), what in zip(items, found):
            recorded[job.task.id] = what
            if what == NOT_RECORDED:
                continue
            job.log_outcome(outcome.state, outcome.detail, what)
            if what != FINISHED:
                try:
                    if_not_finished()
                except NovaLiteError as exc:
                    LOG.warning("Host %s: task %d: cleaning up after its outcome (%s) "
                                "failed: %s", self.host, job.task.id, what, exc)
        done[:] = [attrs.evolve(d, outcome=recorded[d.task.id])
                   if d.outcome == work_handlers.QUEUED and d.task.id in recorded else d
                   for d in done]

    def _do(self, task: Task, inst: Instance | None = None,
            queued: "_Queued | None" = None) -> TaskOutcome:
        """Carry ``task`` out; ``inst``: its instance as read when it was taken;
        ``queued``: where a handler may queue its outcome (None: recorded at
        once)."""
        with self._running_lock:
            self._running.add(task.id)
        outcome = NOT_RECORDED
        try:
            outcome = work_handlers.carry_out(work_handlers.Job(
                task=task, worker=self.name, tracker=self.tracker, taken_instance=inst,
                queue_outcome=queued))
        except StoreError as exc:
            LOG.warning("Task %d (%s of %s) on host %s: the records could not be reached, "
                        "so its outcome is not recorded; it is taken again once its lease "
                        "(%g s) runs out: %s", task.id, task.kind,
                        task.instance_uuid or task.host, self.host, self.lease, exc)
            outcome = NOT_RECORDED
        except Exception as exc:   # noqa: BLE001 - a task must never stop the worker
            LOG.warning("Task %d (%s of %s) on host %s failed unexpectedly: %s", task.id,
                        task.kind, task.instance_uuid or task.host, self.host, exc)
            LOG.debug("The failure of task %d", task.id, exc_info=True)
            outcome = work_handlers.fail_quietly(self.store, task, self.name,
                                                 f"unexpected error: {exc}")
        finally:
            if outcome != work_handlers.QUEUED:   # else held until it is recorded
                with self._running_lock:
                    self._running.discard(task.id)
        return TaskOutcome(task=task, outcome=outcome)

    def renew_leases(self) -> int:
        """Extend the lease of the tasks running here (the heartbeat calls it);
        returns how many are still held."""
        with self._running_lock:
            running = set(self._running)
        if not running:
            return 0
        return self.store.tasks.renew(self.name, running, self.lease, now=self.clock())

    # -- recovery --------------------------------------------------------------
    def recover(self) -> list[Task]:
        """Take back the tasks a worker of this host left running when its
        process died (Nova's ``_init_instance``): they wait again and the next
        round finishes each.  Returns them."""
        back = self.store.tasks.release_dead(self.host, is_gone, now=self.clock())
        for task in back:
            LOG.warning("Host %s: task %d (%s of %s) was left running by %s, which is gone: "
                        "taking it again", self.host, task.id, task.kind,
                        task.instance_uuid or task.host, task.taken_by)
        return back

    def check_builds(self, builds: Iterable[Building] | None = None) -> list[str]:
        """Record in error (claim given back) the builds of this host that will
        not finish: past ``instance_build_timeout`` (when set), or with no open
        task for longer than :data:`HANDOVER_GRACE` seconds.  ``builds``: the
        host's builds as a pass read them (None: read them here).  Returns
        their uuids."""
        now = self.clock()
        timeout = self.settings.instance_build_timeout
        failed: list[str] = []
        if builds is None:
            builds = self.store.tasks.building_on(self.host)
        for build in builds:
            age = now - build.created_at
            if timeout and age > timeout:
                reason = (f"build timed out: still building after {age:.0f} s "
                          f"(instance_build_timeout {timeout:g} s)")
            elif build.open_task is None and now - build.updated_at > HANDOVER_GRACE:
                reason = "build never finished: no work for it is recorded for this host"
            else:
                continue
            if work_handlers.give_up_build(self.tracker, build.instance_uuid, reason,
                                           build.open_task, now=now):
                failed.append(build.instance_uuid)
        return failed

    # -- the loop -------------------------------------------------------------
    def serve(self, stop: threading.Event) -> None:
        """Do the host's work as it is recorded, until ``stop`` is set."""
        try:
            self.recover()
        except NovaLiteError as exc:
            LOG.warning("Host %s: looking for work left running failed: %s", self.host, exc)
        next_poll = 0.0
        while not stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_poll:
                    next_poll = now + self._poll_interval()
                    if self.store.tasks.has_work(self.host, now=self.clock()):
                        self.run_pending()
                        continue
                woken = self.listener.wait(min(1.0, max(0.0, next_poll - time.monotonic())))
                if woken and not stop.is_set():
                    self.run_pending()
            except NovaLiteError as exc:
                LOG.warning("Host %s: taking work failed (trying again in %g s): %s",
                            self.host, self.settings.work_poll_interval, exc)
                stop.wait(self.settings.work_poll_interval)
        self.listener.close()

    def _poll_interval(self) -> float:
        """Seconds to the next look: the fallback's report_interval while
        listening, else work_poll_interval."""
        if self.listener.listening:
            return max(self.settings.work_poll_interval, self.settings.report_interval)
        return self.settings.work_poll_interval

    def stop(self) -> None:
        """End a :meth:`serve` wait at once."""
        self.listener.wake()
