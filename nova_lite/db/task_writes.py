"""The work queue's hot statements, built once: take, finish, record, notify.

A compute service takes its host's tasks and records their outcomes many
times a second at fleet scale, and every build records a task: these
statements are built once with bound parameters and run on the
transaction's DBAPI cursor (:mod:`nova_lite.db.direct`), each compiled once
per dialect, as the claim's are.  The queue's guarantees are in them:

- ``TAKE`` takes, in one statement, up to ``limit`` of a host's tasks
  that wait (or run under a lease that ran out) and have no earlier open
  task of the same instance, oldest first; on PostgreSQL the candidates
  are locked ``FOR UPDATE SKIP LOCKED`` (two takers get different tasks,
  neither waits), on SQLite the transaction holds the database's write
  lock.
- ``TAKEN_INSTANCES`` reads the taken tasks' instances in the same
  transaction (sent with the take in one round trip on PostgreSQL).
- ``FINISH`` records an outcome only while the task still runs under
  the worker that took it; :func:`change_instance` applies the outcome's
  instance state change only while the instance is in the state expected.
- :func:`insert` records many tasks in one multi-row ``INSERT ...
  RETURNING``; on PostgreSQL the same statement notifies each row's host
  (``pg_notify`` in its ``RETURNING``), which wakes the host's listener on
  its own channel (:func:`nova_lite.db.tasks.notify_channel`) at the
  COMMIT, once per host and transaction however many rows name it.
"""

import functools
import json
import operator
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from nova_lite import work
from nova_lite.db import models
from nova_lite.db.direct import DirectConnection, DirectResult
from nova_lite.work import Task, WorkRequest

T_TASK, T_INST = models.tasks, models.instances

_RUNNING, _WAITING = sa.literal(work.RUNNING), sa.literal(work.WAITING)
_OPEN = [sa.literal(s) for s in work.OPEN_STATES]

#: An earlier open task of the same instance exists.
_EARLIER = T_TASK.alias("earlier")
_OPEN_EARLIER = sa.exists().where(_EARLIER.c.instance_uuid == T_TASK.c.instance_uuid,
                                  _EARLIER.c.id < T_TASK.c.id, _EARLIER.c.state.in_(_OPEN))

#: The ids of the tasks a host's worker may take now (``host``, ``now``,
#: ``limit``), oldest first.
_TAKEABLE = sa.select(T_TASK.c.id).where(
    T_TASK.c.host == sa.bindparam("host"),
    sa.or_(T_TASK.c.state == _WAITING,
           sa.and_(T_TASK.c.state == _RUNNING, T_TASK.c.lease_until < sa.bindparam("now"))),
    sa.or_(T_TASK.c.instance_uuid.is_(None), sa.not_(_OPEN_EARLIER)),
).order_by(T_TASK.c.id).limit(sa.bindparam("limit")).with_for_update(skip_locked=True)


def _take(chosen: sa.ColumnElement[bool]) -> sa.Update:
    return T_TASK.update().where(chosen).values(
        state=_RUNNING, taken_by=sa.bindparam("worker"), lease_until=sa.bindparam("until"),
        started_at=sa.bindparam("now"),
        attempts=T_TASK.c.attempts + sa.literal_column("1")).returning(*T_TASK.c)


#: Take them for ``worker`` until ``until`` (epoch s); returns the tasks as
#: taken.  ``{dialect name: statement}``: on PostgreSQL the candidates are
#: chosen and locked once, as an array (an init plan), and the rows found
#: by their key.
TAKE = {"postgresql": _take(T_TASK.c.id == sa.any_(sa.func.array(_TAKEABLE.scalar_subquery()))),
        "sqlite": _take(T_TASK.c.id.in_(_TAKEABLE.scalar_subquery()))}

#: The instances of the tasks ``worker`` took at ``now`` on ``host``, read in
#: the transaction that took them.
TAKEN_INSTANCES = sa.select(T_INST).where(T_INST.c.uuid.in_(
    sa.select(T_TASK.c.instance_uuid).where(
        T_TASK.c.host == sa.bindparam("host"), T_TASK.c.state == _RUNNING,
        T_TASK.c.taken_by == sa.bindparam("worker"),
        T_TASK.c.started_at == sa.bindparam("now"))))

#: Record task ``id``'s outcome if ``worker`` still runs it.
FINISH = T_TASK.update().where(
    T_TASK.c.id == sa.bindparam("id"),
    T_TASK.c.taken_by == sa.bindparam("worker"),
    T_TASK.c.state == _RUNNING).values(
    state=sa.bindparam("outcome"), detail=sa.bindparam("words"),
    finished_at=sa.bindparam("now"), lease_until=sa.null(), result=sa.bindparam("produced"))

#: Task ``id`` cancelled with ``words`` (its instance moved on meanwhile).
CANCEL = T_TASK.update().where(T_TASK.c.id == sa.bindparam("id")).values(
    state=sa.literal(work.CANCELLED), detail=sa.bindparam("words"))

#: Set instance ``uuid``'s ``task`` state at ``now``, unless it is deleted.
SET_TASK_STATE = T_INST.update().where(
    T_INST.c.uuid == sa.bindparam("uuid"), T_INST.c.vm_state != sa.literal("deleted")).values(
    task_state=sa.bindparam("task"), updated_at=sa.bindparam("now"))


def _notify(host: sa.ColumnElement[str]) -> sa.ColumnElement[Any]:
    """Wake the listener of ``host`` of the current schema on its own channel:
    ``nova_lite_work_`` and the md5 of ``<schema>/<host>``, with
    ``<schema>/<host>`` as payload (delivered at the COMMIT; PostgreSQL
    delivers a channel's identical payloads of one transaction once)."""
    payload = sa.func.current_schema().concat(sa.literal_column("'/'")).concat(host)
    return sa.func.pg_notify(
        sa.literal_column("'nova_lite_work_'").concat(sa.func.md5(payload)), payload)


#: Task ``id`` recorded ``outcome`` by ``worker`` at ``now``: by ``FINISH``
#: in this transaction.
_FINISHED_HERE = sa.exists().where(
    T_TASK.c.id == sa.bindparam("id"), T_TASK.c.taken_by == sa.bindparam("worker"),
    T_TASK.c.state == sa.bindparam("outcome"), T_TASK.c.finished_at == sa.bindparam("now"))


@functools.cache
def change_instance(expect_vm_states: tuple[str, ...]) -> sa.Update:
    """Set instance ``uuid``'s ``vm``/``task`` state (at ``now``) only while it
    is on ``on_host`` in one of ``expect_vm_states``, and only once
    ``FINISH`` recorded the task's outcome (``id``, ``worker``,
    ``outcome``, ``now``) in this transaction: the two are sent together."""
    return T_INST.update().where(
        T_INST.c.uuid == sa.bindparam("uuid"), T_INST.c.host == sa.bindparam("on_host"),
        T_INST.c.vm_state.in_([sa.literal(s) for s in expect_vm_states]),
        _FINISHED_HERE).values(
        vm_state=sa.bindparam("vm"), task_state=sa.bindparam("task"),
        updated_at=sa.bindparam("now"))


#: The most rows one INSERT records (more go in several).
INSERT_ROWS = 100
_INSERTED = ("host", "kind", "instance_uuid", "migration_uuid", "params", "state", "attempts",
             "created_at")


@functools.cache
def _insert(rows: int, notify: bool) -> sa.Insert:
    """An INSERT of ``rows`` waiting tasks (parameters ``<column>_<row>``),
    returning them; with ``notify`` (PostgreSQL) each row's host is
    notified too."""
    returned = (*T_TASK.c, _notify(T_TASK.c.host).label("notified")) if notify else T_TASK.c
    return T_TASK.insert().values([
        {c: sa.bindparam(f"{c}_{i}") for c in _INSERTED} for i in range(rows)]
    ).returning(*returned)


def insert_one_with(source: sa.CTE) -> sa.Insert:
    """The INSERT of one waiting task that notifies its host (PostgreSQL),
    returning it (values from :func:`one_values`), its row written only
    with a row of ``source``
    (a WITH clause of the same statement, of one row or none): a claim's
    task, recorded only if the claim is
    (``claim_writes.PG_SINGLE_CLAIM_WITH_TASK``)."""
    names = _row_names(0)
    return T_TASK.insert().from_select(
        list(_INSERTED),
        sa.select(*[sa.bindparam(name, type_=T_TASK.c[column].type)
                    for column, name in zip(_INSERTED, names)]).select_from(source)
    ).returning(*T_TASK.c, _notify(T_TASK.c.host).label("notified"))


@functools.lru_cache(maxsize=INSERT_ROWS)
def _row_names(i: int) -> tuple[str, ...]:
    """The parameter names of row ``i`` of :func:`_insert`'s statement, made once."""
    return tuple(f"{column}_{i}" for column in (
        "host", "kind", "instance_uuid", "migration_uuid", "params", "state", "attempts",
        "created_at"))


def _row_values(i: int, request: WorkRequest, now: float) -> dict[str, Any]:
    """The parameters of row ``i`` of :func:`_insert`'s statement: ``request``, waiting."""
    return dict(zip(_row_names(i), one_row(request, now)))


#: The parameters of :func:`insert_one_with`, in the order :func:`one_row` gives them.
ONE_NAMES = _row_names(0)


def one_values(request: WorkRequest, now: float) -> dict[str, Any]:
    """The values of :func:`insert_one_with` recording ``request`` at ``now``."""
    return _row_values(0, request, now)


def one_row(request: WorkRequest, now: float) -> tuple[Any, ...]:
    """:func:`one_values` as a tuple, in the order of :data:`ONE_NAMES`."""
    return (request.host, request.kind, request.instance_uuid, request.migration_uuid,
            json.dumps(request.params, sort_keys=True), work.WAITING, 0, now)


#: The columns of a task row that make its :class:`~nova_lite.work.Task`, in order.
_TASK_COLUMNS = ("id", "host", "kind", "instance_uuid", "migration_uuid", "params", "state",
                 "attempts", "taken_by", "lease_until", "detail", "result", "created_at",
                 "started_at", "finished_at")


@functools.lru_cache(maxsize=8)
def _task_columns(prefix: str) -> "operator.attrgetter[tuple[Any, ...]]":
    """What reads :data:`_TASK_COLUMNS` off a row that names them ``<prefix><column>``."""
    return operator.attrgetter(*(prefix + name for name in _TASK_COLUMNS))


def task_from_row(row: Any, prefix: str = "") -> Task:
    """A task row as a :class:`~nova_lite.work.Task`; ``prefix``: the row
    names the task's columns ``<prefix><column>``."""
    (id_, host, kind, instance_uuid, migration_uuid, params, state, attempts, taken_by,
     lease_until, detail, result, created_at, started_at, finished_at) = \
        _task_columns(prefix)(row)
    return Task(
        id=id_, host=host, kind=kind, instance_uuid=instance_uuid,
        migration_uuid=migration_uuid, params=json.loads(params or "{}"),
        state=state, attempts=attempts, taken_by=taken_by,
        lease_until=lease_until, detail=detail,
        result=None if result is None else json.loads(result),
        created_at=created_at, started_at=started_at, finished_at=finished_at)


def insert_statements(conn: DirectConnection, requests: Sequence[WorkRequest],
                      now: float) -> list[tuple[sa.ClauseElement, dict[str, Any]]]:
    """The statements that record ``requests`` as waiting tasks: multi-row
    INSERTs (see :func:`inserted`) that, on PostgreSQL, notify their hosts
    too (delivered at the COMMIT, so no listener wakes before the tasks
    are seen)."""
    notify = conn.dialect.name == "postgresql"
    statements: list[tuple[sa.ClauseElement, dict[str, Any]]] = []
    for start in range(0, len(requests), INSERT_ROWS):
        chunk = requests[start:start + INSERT_ROWS]
        values: dict[str, Any] = {}
        for i, req in enumerate(chunk):
            values.update(_row_values(i, req, now))
        statements.append((_insert(len(chunk), notify), values))
    return statements


def inserted(requests: Sequence[WorkRequest], results: Sequence[DirectResult],
             prefix: str = "") -> list[Task]:
    """The tasks :func:`insert_statements` recorded for ``requests``, in
    order, from its statements' results (in their order); ``prefix``: the
    rows name the tasks' columns ``<prefix><column>`` (a statement that
    holds :func:`insert_one_with`)."""
    made: list[Task] = []
    key = prefix + "id"
    for result in results[:-(-len(requests) // INSERT_ROWS)]:   # the INSERTs'
        # One statement's ids follow its rows' order.
        made.extend(task_from_row(r, prefix)
                    for r in sorted(result.rows, key=lambda r: getattr(r, key)))
    return made


def insert(conn: DirectConnection, requests: Sequence[WorkRequest], now: float) -> list[Task]:
    """Record ``requests`` as waiting tasks in ``conn``'s transaction, in
    multi-row INSERTs, and notify their hosts on PostgreSQL; returns them as
    recorded, in order.  On PostgreSQL the statements are sent together, in
    one round trip."""
    if not requests:
        return []
    return inserted(requests, conn.execute_together(insert_statements(conn, requests, now)))
