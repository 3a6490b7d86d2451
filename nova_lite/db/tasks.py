"""The ``tasks`` table as a queue: record work for a host, take it once, record the outcome.

:class:`TaskQueue` is reached as ``store.tasks``.  Taking is one writing
transaction: on PostgreSQL the candidate rows are locked with ``FOR UPDATE
SKIP LOCKED`` (two services taking at once get different tasks, neither
waits), on SQLite the transaction holds the database's write lock
(``BEGIN IMMEDIATE``).  A task is taken when it waits, or when it runs
under a lease that ran out (its taker died or lost the database), and only
if no earlier task of the same instance is still open: an instance's
tasks are done in order, one at a time.

Finishing is conditional: the worker that took a task records its outcome
only while the task is still running under its name; otherwise (another
worker took it over after the lease ran out, or it was cancelled) nothing
is written and the worker learns so.

On PostgreSQL each recording also sends ``NOTIFY`` on the host's own
channel (:func:`notify_channel`: the schema and the host) with
``<schema>/<host>`` as payload, delivered at commit, so a listening
service wakes at once (:mod:`nova_lite.db.listen`) and no other service
wakes for it.

The hot statements (take, finish, record) are built once and run on the
transaction's DBAPI cursor (:mod:`nova_lite.db.task_writes`).
"""

import hashlib
import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa

from nova_lite import work
from nova_lite.db import models, rows as instance_rows, task_writes
from nova_lite.db.direct import DirectConnection
from nova_lite.objects import Instance
from nova_lite.work import Task, WorkRequest

T_TASK = models.tasks
T_INST = models.instances

#: The prefix of the PostgreSQL notification channels (:func:`notify_channel`).
NOTIFY_CHANNEL = "nova_lite_work"


def notify_payload(schema: str, host: str) -> str:
    """The payload of a notification of work for ``host`` recorded in ``schema``."""
    return f"{schema}/{host}"


def notify_channel(schema: str, host: str) -> str:
    """The channel of the notifications of work for ``host`` recorded in
    ``schema``: :data:`NOTIFY_CHANNEL`, ``_`` and the md5 of
    :func:`notify_payload` in hex (47 characters, under PostgreSQL's 63
    for any host name; the payload tells the unlikely twin apart)."""
    digest = hashlib.md5(notify_payload(schema, host).encode(), usedforsecurity=False)
    return f"{NOTIFY_CHANNEL}_{digest.hexdigest()}"


_T = TypeVar("_T")
_Run = Callable[[str, Callable[[sa.Connection], _T]], _T]
_RunDirect = Callable[[str, Callable[[DirectConnection], _T]], _T]

#: What :meth:`TaskQueue.finish` found.
FINISHED = "finished"
#: The task is no longer running under this worker: nothing was written.
NOT_TAKEN = "not_taken"
#: The instance is no longer in the state the outcome expected: the task was
#: recorded cancelled with the reason, the instance left as it is.
INSTANCE_MOVED_ON = "instance_moved_on"


@attrs.frozen
class InstanceChange:
    """An instance state change recorded with a task's outcome, in its
    transaction: applied only while the instance is in ``expect_vm_states``
    on ``host`` (a change that adds or frees nothing)."""

    instance_uuid: str
    host: str
    expect_vm_states: tuple[str, ...]
    vm_state: str
    task_state: str | None = None


@attrs.frozen
class Outcome:
    """The outcome of a taken ``task`` to record (:meth:`TaskQueue.finish`
    describes each field)."""

    task: Task
    state: str
    detail: str | None = None
    result: Mapping[str, Any] | None = None
    instance_change: InstanceChange | None = None
    follow_up: tuple[WorkRequest, ...] = ()


@attrs.frozen
class Building:
    """An instance recorded building on a host: its ``instance_uuid``, when
    its record was made and last changed (epoch s), and the id of its oldest
    open task (None: no work for it is recorded)."""

    instance_uuid: str
    created_at: float
    updated_at: float
    open_task: int | None


_task = task_writes.task_from_row


class TaskQueue:
    """The work of every host in the records (``store.tasks``).

    ``write`` and ``read`` run a function in a writing or reading
    transaction of the store (its retries, busy timeout and errors).
    """

    def __init__(self, write: _Run[Any], read: _Run[Any],
                 write_direct: _RunDirect[Any]) -> None:
        self._write = write
        self._read = read
        self._direct = write_direct

    # -- asking ---------------------------------------------------------------
    def record(self, requests: Iterable[WorkRequest],
               instance_task_states: Mapping[str, str | None] | None = None,
               now: float | None = None) -> list[Task]:
        """Record ``requests`` as waiting tasks, in one transaction; returns them.

        :param requests: the work to record.
        :param instance_task_states: ``{instance uuid: task_state}`` to set on
            the instances in the same transaction (Nova's task states, e.g.
            ``deleting``), only where the instance is not deleted.
        :param now: the time recorded (epoch s); None: now.
        :returns: the tasks as recorded, in order.
        """
        requests = list(requests)
        stamp = time.time() if now is None else now

        def op(conn: DirectConnection) -> list[Task]:
            for uuid, task_state in (instance_task_states or {}).items():
                conn.execute(task_writes.SET_TASK_STATE,
                             {"uuid": uuid, "task": task_state, "now": stamp})
            return task_writes.insert(conn, requests, stamp)
        kinds = ", ".join(sorted({r.kind for r in requests}))
        hosts = ", ".join(sorted({r.host for r in requests}))
        return self._direct(f"record {kinds} work for {hosts}", op)  # type: ignore[no-any-return]

    def cancel_open(self, instance_uuid: str, detail: str, now: float | None = None) -> int:
        """Cancel ``instance_uuid``'s waiting tasks (a local delete); returns how
        many.  Running ones are left to their worker, which finds the instance
        deleted when it records its outcome."""
        stamp = time.time() if now is None else now
        return self._write(  # type: ignore[no-any-return]
            f"cancel the work of instance {instance_uuid}",
            lambda conn: conn.execute(T_TASK.update().where(
                T_TASK.c.instance_uuid == instance_uuid, T_TASK.c.state == work.WAITING).values(
                state=work.CANCELLED, detail=detail, finished_at=stamp)).rowcount)

    def cancel_waiting(self, task_ids: Collection[int], detail: str,
                       now: float | None = None) -> list[int]:
        """Cancel those of ``task_ids`` that still wait (the asker gave up on
        them); returns their ids.  A task already taken is left to its worker."""
        if not task_ids:
            return []
        stamp = time.time() if now is None else now
        return self._write(  # type: ignore[no-any-return]
            "cancel waiting work",
            lambda conn: sorted(conn.execute(T_TASK.update().where(
                T_TASK.c.id.in_(sorted(task_ids)), T_TASK.c.state == work.WAITING).values(
                state=work.CANCELLED, detail=detail, finished_at=stamp).returning(
                T_TASK.c.id)).scalars()))

    # -- taking and finishing -------------------------------------------------
    def has_work(self, host: str, now: float | None = None) -> bool:
        """Whether ``host`` has a task to take (waiting, or running on a lapsed
        lease): one indexed read."""
        stamp = time.time() if now is None else now
        query = sa.select(T_TASK.c.id).where(T_TASK.c.host == host, sa.or_(
            T_TASK.c.state == work.WAITING,
            sa.and_(T_TASK.c.state == work.RUNNING, T_TASK.c.lease_until < stamp))).limit(1)
        return self._read(f"look for work of host {host}",  # type: ignore[no-any-return]
                          lambda conn: conn.execute(query).first() is not None)

    def take(self, host: str, worker: str, *, limit: int, lease: float,
             now: float | None = None) -> list[Task]:
        """Take up to ``limit`` of ``host``'s tasks for ``worker``, oldest first.

        Each taken task is recorded running under ``worker`` until ``lease``
        seconds from now (renewed by :meth:`renew`), its ``attempts`` counted.

        :param host: the host whose work to take.
        :param worker: the taking worker's identity.
        :param limit: the most tasks to take (>= 1).
        :param lease: seconds the taking holds without renewal.
        :param now: the clock (epoch s); None: now.
        :returns: the tasks taken, oldest first (possibly none).
        """
        return [task for task, _ in self.take_with_instances(
            host, worker, limit=limit, lease=lease, now=now, instances=False)]

    def take_with_instances(self, host: str, worker: str, *, limit: int, lease: float,
                            now: float | None = None, instances: bool = True
                            ) -> list[tuple[Task, Instance | None]]:
        """:meth:`take`, with each task's instance as recorded, read in the
        transaction that takes it (None: the task is about no instance, or
        the instance has no record; every one None with ``instances`` False:
        not read).  On PostgreSQL the take and the read are one round trip."""
        stamp = time.time() if now is None else now
        values = {"host": host, "worker": worker, "now": stamp, "until": stamp + lease,
                  "limit": limit}

        def op(conn: DirectConnection) -> list[tuple[Task, Instance | None]]:
            take = task_writes.TAKE[conn.dialect.name]
            if instances:
                taken, read = conn.execute_together([
                    (take, values), (task_writes.TAKEN_INSTANCES, values)])
                found = {r.uuid: instance_rows.instance_from_row(r) for r in read}
            else:
                taken, found = conn.execute(take, values), {}
            tasks = sorted((_task(r) for r in taken), key=lambda t: t.id)
            return [(t, found.get(t.instance_uuid) if t.instance_uuid else None)
                    for t in tasks]
        return self._direct(f"take the work of host {host}", op)  # type: ignore[no-any-return]

    def renew(self, worker: str, task_ids: Collection[int], lease: float,
              now: float | None = None) -> int:
        """Extend ``worker``'s lease on its running ``task_ids`` to ``lease``
        seconds from now; returns how many it still holds."""
        if not task_ids:
            return 0
        stamp = time.time() if now is None else now
        return self._write(  # type: ignore[no-any-return]
            "renew the lease of running work",
            lambda conn: conn.execute(T_TASK.update().where(
                T_TASK.c.id.in_(sorted(task_ids)), T_TASK.c.taken_by == worker,
                T_TASK.c.state == work.RUNNING).values(lease_until=stamp + lease)).rowcount)

    def finish(self, task: Task, worker: str, state: str, *, detail: str | None = None,
               result: Mapping[str, Any] | None = None,
               instance_change: InstanceChange | None = None,
               follow_up: Sequence[WorkRequest] = (),
               now: float | None = None) -> str:
        """Record ``task``'s outcome, if ``worker`` still holds it; one transaction.

        :param task: the task as taken.
        :param worker: the worker that took it.
        :param state: ``done``, ``failed`` or ``cancelled``.
        :param detail: the outcome in words (the reason, when failed).
        :param result: a JSON object the task produced.
        :param instance_change: an instance state change recorded with the
            outcome; if the instance moved on, the task is recorded
            cancelled (with why) and the instance left as it is.
        :param follow_up: the next tasks of the same work, recorded with it.
        :param now: the clock (epoch s); None: now.
        :returns: :data:`FINISHED`, :data:`NOT_TAKEN` (nothing written) or
            :data:`INSTANCE_MOVED_ON`.
        """
        (outcome,) = self._finish_many(worker, [Outcome(
            task, state, detail=detail, result=result, instance_change=instance_change,
            follow_up=tuple(follow_up))], now=now)
        return outcome

    def finish_many(self, worker: str, outcomes: Sequence["Outcome"],
                    now: float | None = None) -> list[str]:
        """Record the ``outcomes`` of tasks ``worker`` took, in one transaction:
        each as :meth:`finish` records it, on its own conditions (a task no
        longer ``worker``'s is left as it is, the others are recorded).
        Returns what became of each, in order.  On PostgreSQL the outcomes
        and their instance changes are sent in one round trip."""
        for o in outcomes:
            if o.state not in work.FINAL_STATES:
                raise ValueError(f"a task finishes {', '.join(work.FINAL_STATES)}, "
                                 f"not {o.state!r}")
        if not outcomes:
            return []
        stamp = time.time() if now is None else now

        def op(conn: DirectConnection) -> list[str]:
            sent: list[tuple[Any, Mapping[str, Any] | None]] = []
            for o in outcomes:
                values = {"id": o.task.id, "worker": worker, "outcome": o.state,
                          "words": o.detail, "now": stamp, "produced": None
                          if o.result is None else json.dumps(o.result, sort_keys=True)}
                sent.append((task_writes.FINISH, values))
                c = o.instance_change
                if c is not None:
                    # Applied only if the statement before recorded the outcome.
                    sent.append((task_writes.change_instance(c.expect_vm_states), dict(
                        values, uuid=c.instance_uuid, on_host=c.host, vm=c.vm_state,
                        task=c.task_state)))
            answers = iter(conn.execute_together(sent))
            found: list[str] = []
            for o in outcomes:
                mine = next(answers).rowcount
                changed = next(answers).rowcount if o.instance_change is not None else 1
                if not mine:
                    found.append(NOT_TAKEN)
                elif not changed:
                    c = o.instance_change
                    assert c is not None
                    conn.execute(task_writes.CANCEL, {"id": o.task.id, "words": (
                        f"instance {c.instance_uuid} is no longer "
                        f"{'/'.join(c.expect_vm_states)} on host {c.host}")})
                    found.append(INSTANCE_MOVED_ON)
                else:
                    if o.follow_up:
                        task_writes.insert(conn, o.follow_up, stamp)
                    found.append(FINISHED)
            return found
        what = (f"{outcomes[0].task.kind} task {outcomes[0].task.id}" if len(outcomes) == 1
                else f"{len(outcomes)} tasks")
        return self._direct(f"record the outcome of {what}", op)  # type: ignore[no-any-return]

    _finish_many = finish_many

    def release_dead(self, host: str, is_dead: Callable[[str], bool],
                     now: float | None = None) -> list[Task]:
        """Put ``host``'s running tasks whose taker ``is_dead`` back to waiting;
        returns them (a restarted service takes them again at once)."""
        stamp = time.time() if now is None else now

        def op(conn: sa.Connection) -> list[Task]:
            rows = conn.execute(T_TASK.select().where(
                T_TASK.c.host == host, T_TASK.c.state == work.RUNNING)).all()
            dead = [r for r in rows if r.taken_by is None or is_dead(r.taken_by)]
            if dead:
                conn.execute(T_TASK.update().where(T_TASK.c.id.in_([r.id for r in dead]),
                                                   T_TASK.c.state == work.RUNNING).values(
                    state=work.WAITING, lease_until=stamp))
            return [_task(r) for r in dead]
        return self._write(f"take back the work of host {host}", op)  # type: ignore[no-any-return]

    def fail_build(self, instance_uuid: str, host: str, reason: str,
                   now: float | None = None) -> bool:
        """Give up the build of ``instance_uuid`` on ``host``: its open tasks are
        recorded failed with ``reason``, in one transaction, if the instance is
        still building there.  Returns False (nothing written) otherwise; the
        caller then gives the claim back."""
        stamp = time.time() if now is None else now

        def op(conn: sa.Connection) -> bool:
            still = conn.execute(sa.select(T_INST.c.uuid).where(
                T_INST.c.uuid == instance_uuid, T_INST.c.host == host,
                T_INST.c.vm_state == "building").with_for_update()).first()
            if still is None:
                return False
            conn.execute(T_TASK.update().where(
                T_TASK.c.instance_uuid == instance_uuid,
                T_TASK.c.state.in_(work.OPEN_STATES)).values(
                state=work.FAILED, detail=reason, finished_at=stamp, lease_until=None))
            return True
        return self._write(f"give up the build of instance {instance_uuid}",  # type: ignore[no-any-return]
                           op)

    # -- reading --------------------------------------------------------------
    def get(self, task_id: int) -> Task | None:
        """The task numbered ``task_id``, or None."""
        return self._read(f"read task {task_id}",  # type: ignore[no-any-return]
                          lambda conn: next((_task(r) for r in conn.execute(
                              T_TASK.select().where(T_TASK.c.id == task_id))), None))

    def find(self, host: str | None = None, *, instance_uuid: str | None = None,
             states: Collection[str] | None = None, kinds: Collection[str] | None = None,
             ids: Collection[int] | None = None, limit: int | None = None) -> list[Task]:
        """Tasks, oldest first, filtered by host, instance, state, kind and id."""
        query = T_TASK.select().order_by(T_TASK.c.id)
        if host is not None:
            query = query.where(T_TASK.c.host == host)
        if instance_uuid is not None:
            query = query.where(T_TASK.c.instance_uuid == instance_uuid)
        if states is not None:
            query = query.where(T_TASK.c.state.in_(sorted(states)))
        if kinds is not None:
            query = query.where(T_TASK.c.kind.in_(sorted(kinds)))
        if ids is not None:
            query = query.where(T_TASK.c.id.in_(sorted(ids)))
        if limit is not None:
            query = query.limit(limit)
        return self._read("read tasks",  # type: ignore[no-any-return]
                          lambda conn: [_task(r) for r in conn.execute(query)])

    def open_by_instance(self, instance_uuids: Collection[str] | None = None
                         ) -> dict[str, Task]:
        """``{instance uuid: its oldest open task}`` (of ``instance_uuids``, or all)."""
        query = T_TASK.select().where(T_TASK.c.state.in_(work.OPEN_STATES),
                                      T_TASK.c.instance_uuid.is_not(None)).order_by(T_TASK.c.id)
        if instance_uuids is not None:
            query = query.where(T_TASK.c.instance_uuid.in_(sorted(instance_uuids)))

        def op(conn: sa.Connection) -> dict[str, Task]:
            found: dict[str, Task] = {}
            for row in conn.execute(query):
                found.setdefault(row.instance_uuid, _task(row))
            return found
        return self._read("read the open work of instances", op)  # type: ignore[no-any-return]

    def last_failure(self, instance_uuid: str) -> Task | None:
        """The latest failed task of ``instance_uuid`` (its fault), or None."""
        query = T_TASK.select().where(T_TASK.c.instance_uuid == instance_uuid,
                                      T_TASK.c.state == work.FAILED).order_by(
            T_TASK.c.id.desc()).limit(1)
        return self._read(f"read the faults of instance {instance_uuid}",  # type: ignore[no-any-return]
                          lambda conn: next((_task(r) for r in conn.execute(query)), None))

    def building_on(self, host: str) -> list[Building]:
        """The instances recorded building on ``host``, with their open task."""
        open_task = sa.select(sa.func.min(T_TASK.c.id)).where(
            T_TASK.c.instance_uuid == T_INST.c.uuid,
            T_TASK.c.state.in_(work.OPEN_STATES)).scalar_subquery()
        query = sa.select(T_INST.c.uuid, T_INST.c.created_at, T_INST.c.updated_at,
                          open_task).where(T_INST.c.host == host,
                                           T_INST.c.vm_state == "building")
        return self._read(f"read the builds of host {host}",  # type: ignore[no-any-return]
                          lambda conn: [Building(r[0], r[1], r[2], r[3])
                                        for r in conn.execute(query)])

    def waiting_by_host(self) -> dict[str, tuple[int, float]]:
        """``{host: (open tasks, oldest created_at)}`` of the hosts with open work."""
        query = sa.select(T_TASK.c.host, sa.func.count(), sa.func.min(T_TASK.c.created_at)).where(
            T_TASK.c.state.in_(work.OPEN_STATES)).group_by(T_TASK.c.host)
        return self._read("count the open work of every host",  # type: ignore[no-any-return]
                          lambda conn: {r[0]: (int(r[1]), float(r[2]))
                                        for r in conn.execute(query)})
