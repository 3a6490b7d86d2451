"""Compute services: one record, one "up" rule, and the statements on ``services``.

A service row says two separate things:

- whether the service is **up**: its last heartbeat (``updated_at``, epoch
  s) is at most ``service_down_time`` seconds old
  (:meth:`ServiceRecord.is_up`, or :func:`heartbeat_within` in SQL);
- whether it is **enabled**: an operator may disable it (``disabled``,
  with an optional ``disabled_reason``) whatever its heartbeat says.

Each reader decides which of the two it needs: the scheduler's
ComputeFilter refuses a host that is disabled or down (with a reason for
each), ``service list``, the API and the metrics show both, and the leak
finder and heal only ask whether a service is up.

The functions below run on a SQLAlchemy connection inside a
:class:`~nova_lite.db.store.Store` transaction; callers outside
``nova_lite.db`` use the Store's methods (``heartbeat``,
``list_services``, ``set_service_disabled``) and
:class:`~nova_lite.db.node_changes.ChangeReader`.
"""

import time
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from nova_lite.db import models
from nova_lite.db.direct import DirectConnection

#: The ``binary`` of the compute services in the ``services`` table.
COMPUTE_BINARY = "nova-lite-compute"

T_SVC = models.services


def heartbeat_deadline(service_down_time: float, now: float) -> float:
    """The oldest heartbeat (epoch s) that still counts as up at ``now`` (epoch
    s), for a ``service_down_time`` in seconds: a service is up when its last
    heartbeat is at or after it."""
    return now - service_down_time


@attrs.frozen
class ServiceRecord:
    """A row of ``services``: ``updated_at`` is the last heartbeat and
    ``created_at`` the first (epoch s); ``report_count`` counts heartbeats;
    ``disabled`` (with ``disabled_reason``, or None) is the operator's
    choice, separate from being up (:meth:`is_up`)."""

    host: str
    binary: str
    created_at: float
    updated_at: float
    report_count: int
    disabled: bool
    disabled_reason: str | None = None

    def is_up(self, service_down_time: float, now: float | None = None) -> bool:
        """True if the last heartbeat is within ``service_down_time`` seconds of
        ``now`` (epoch s, default the current time).  Whether the service is
        enabled is a separate question: see ``disabled``."""
        now = time.time() if now is None else now
        return self.updated_at >= heartbeat_deadline(service_down_time, now)


def heartbeat_within(service_down_time: float, now: float) -> sa.ColumnElement[bool]:
    """:meth:`ServiceRecord.is_up` as a SQL condition on ``services`` rows."""
    return heartbeat_since(heartbeat_deadline(service_down_time, now))


def heartbeat_since(deadline: "float | sa.ColumnElement[float]") -> sa.ColumnElement[bool]:
    """The ``services`` rows that beat at or after ``deadline`` (epoch s, or a
    bound parameter of it: see :func:`heartbeat_deadline`): those up."""
    return T_SVC.c.updated_at >= deadline


def heartbeat_before(deadline: "float | sa.ColumnElement[float]") -> sa.ColumnElement[bool]:
    """The ``services`` rows whose last heartbeat is before ``deadline``
    (epoch s, or a bound parameter of it): those down.

    Found by the ``(binary, updated_floor)`` index: a heartbeat before the
    deadline has its floor (``updated_at`` rounded down to a whole
    ``HEARTBEAT_GRAIN_S`` of ``nova_lite.db.models``) before it too,
    and ``updated_at`` then keeps the rows really down.  The range is
    bounded on both sides, though no heartbeat is before the epoch: on
    PostgreSQL a prepared statement's generic plan guesses that a lone
    ``updated_floor < $1`` keeps a third of the rows and reads the whole
    table, while a range with both ends is guessed narrow and read by the
    index.
    """
    return sa.and_(T_SVC.c.updated_floor >= 0, T_SVC.c.updated_floor < deadline,
                   T_SVC.c.updated_at < deadline)


def heartbeat_outside(service_down_time: float, now: float) -> sa.ColumnElement[bool]:
    """The complement of :func:`heartbeat_within`: the services down at
    ``now`` (epoch s) for a ``service_down_time`` in seconds."""
    return heartbeat_before(heartbeat_deadline(service_down_time, now))


#: The columns of a ServiceRecord, in its field order.
_COLUMNS = (T_SVC.c.host, T_SVC.c.binary, T_SVC.c.created_at, T_SVC.c.updated_at,
            T_SVC.c.report_count, T_SVC.c.disabled, T_SVC.c.disabled_reason)
# Built once: a scheduler reads every row often.
_LIST = sa.select(*_COLUMNS).where(
    T_SVC.c.binary == sa.bindparam("binary")).order_by(T_SVC.c.host)
_LIST_HOST = _LIST.where(T_SVC.c.host == sa.bindparam("host"))


def list_services(conn: Connection, binary: str, host: str | None = None
                  ) -> list[ServiceRecord]:
    """The service rows of ``binary`` (of ``host``, or all), sorted by host."""
    if host is None:
        found = conn.execute(_LIST, {"binary": binary})
    else:
        found = conn.execute(_LIST_HOST, {"binary": binary, "host": host})
    # Plain tuples in the record's field order: cheaper than Row attributes.
    return [ServiceRecord(h, b, c, u, n, bool(d), r)
            for h, b, c, u, n, d, r in found.all()]


def beat(conn: "Connection | DirectConnection", host: str, binary: str,
         now: float) -> ServiceRecord:
    """Refresh the (host, binary) row's heartbeat at ``now`` (epoch s), creating
    it (enabled, ``report_count`` 1) if it is new; returns it.

    One statement on either backend: an insert that, on the (host, binary)
    conflict, updates the existing row instead, returning the row.  On
    PostgreSQL the same statement sets ``synchronous_commit = off`` for its
    transaction only (``set_config(..., true)``, as ``SET LOCAL`` would), so
    the beat commits without waiting for its WAL to reach the disk: a server
    crash may lose the last beats (at most a fraction of a second of them),
    which only makes the service look down a little earlier than it would
    have; the next beat, at most ``report_interval`` seconds later, replaces
    them.  Nothing else is written in that transaction.
    """
    row = conn.execute(_BEAT[conn.dialect.name], {
        "host": host, "binary": binary, "now": now}).one()
    return ServiceRecord(row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6])


def _beat(insert: Any, async_commit: bool = False) -> sa.Insert:
    """The heartbeat upsert built with a dialect's ``insert`` (it has
    ``on_conflict_do_update``); with ``async_commit`` (PostgreSQL) it also
    turns ``synchronous_commit`` off for its own transaction."""
    now = sa.bindparam("now", type_=sa.Float)
    if async_commit:
        # The row comes from a one-row SELECT over set_config(): it runs
        # before the row is inserted, within the statement.
        setting = sa.select(sa.func.set_config("synchronous_commit", "off", sa.true())
                            .label("synchronous_commit")).subquery("async_commit")
        row = sa.select(sa.bindparam("host", type_=sa.String),
                        sa.bindparam("binary", type_=sa.String), now, now,
                        sa.literal(1), sa.false()).select_from(setting)
        stmt = insert(T_SVC).from_select(
            ["host", "binary", "created_at", "updated_at", "report_count", "disabled"], row)
    else:
        stmt = insert(T_SVC).values(
            host=sa.bindparam("host"), binary=sa.bindparam("binary"), created_at=now,
            updated_at=now, report_count=1, disabled=False)
    return stmt.on_conflict_do_update(
        index_elements=[T_SVC.c.host, T_SVC.c.binary],
        set_={"updated_at": stmt.excluded.updated_at,
              "report_count": T_SVC.c.report_count + 1}).returning(*_COLUMNS)


# Built once per backend: every service beats every report_interval.
# Only the heartbeat's transaction skips the wait for the WAL flush.
_BEAT = {"sqlite": _beat(sqlite_insert),
         "postgresql": _beat(postgresql_insert, async_commit=True)}


def set_disabled(conn: Connection, host: str, binary: str, disabled: bool,
                 reason: str | None = None) -> ServiceRecord | None:
    """Enable or disable the (host, binary) service; returns it as changed, or
    None if there is no such service.  ``reason`` is kept only while disabled."""
    changed = conn.execute(T_SVC.update().where(
        T_SVC.c.host == host, T_SVC.c.binary == binary).values(
        disabled=bool(disabled), disabled_reason=reason if disabled else None)).rowcount
    return list_services(conn, binary, host)[0] if changed else None


def services_of_hosts(conn: Connection, binary: str, hosts: list[str]) -> list[ServiceRecord]:
    """The ``binary`` service rows of ``hosts`` (by the (host, binary) key, 500
    hosts per ``IN`` list): their heartbeats as they are now."""
    found: list[ServiceRecord] = []
    ordered = sorted(hosts)
    for i in range(0, len(ordered), 500):
        found.extend(ServiceRecord(h, b, c, u, n, bool(d), r) for h, b, c, u, n, d, r in
                     conn.execute(_LIST.where(T_SVC.c.host.in_(ordered[i:i + 500])),
                                  {"binary": binary}))
    return found


__all__ = ["COMPUTE_BINARY", "ServiceRecord", "beat",
           "heartbeat_before", "heartbeat_deadline", "heartbeat_outside", "heartbeat_since",
           "heartbeat_within", "list_services",
           "services_of_hosts", "set_disabled"]
