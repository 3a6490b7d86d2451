"""Small read-only queries for the scheduler and the operator commands.

Plain functions on a SQLAlchemy connection, run through
``store.db.read(description, fn)``; they never write.
"""

import attrs
import sqlalchemy as sa

from nova_lite import validators as v
from nova_lite.db import arguments, models

T_NODES, T_SVC = models.compute_nodes, models.services


@attrs.frozen
class NodeVersion:
    """Identity and generation of one compute node row."""

    uuid: str
    host: str
    nodename: str
    generation: int
    id: int | None = None

    @property
    def bucket(self):
        """The fingerprint bucket of the row (see :func:`nodes_fingerprint`)."""
        assert self.id is not None   # a row read from the records has its id
        return self.id % NODE_BUCKETS


@attrs.frozen
class ServiceRow:
    """A service row with its ``disabled_reason`` (None if the column is absent)."""

    host: str
    binary: str
    created_at: float
    updated_at: float
    report_count: int
    disabled: bool
    disabled_reason: str | None = None

    def is_up(self, service_down_time, now):
        """True if the last heartbeat is within ``service_down_time`` seconds of ``now``."""
        return now - self.updated_at <= service_down_time


#: Node rows are fingerprinted in this many buckets (by ``id % NODE_BUCKETS``):
#: more buckets make the fingerprint longer and each changed bucket shorter
#: to re-read (10,000 nodes: 40 rows a bucket).
NODE_BUCKETS = 256


def _bucket():
    return T_NODES.c.id % NODE_BUCKETS


def nodes_fingerprint(conn):
    """``{bucket: (count, sum of generations, sum of ids)}`` of the node rows.

    Generations and ids only grow, so any change to a node's generation,
    and any node added or removed, changes its bucket's triple: a reader
    re-reads only the buckets whose triple moved (:func:`node_versions`).
    """
    return {int(b): (int(c), int(g), int(i))
            for b, c, g, i in conn.execute(_NODES_FINGERPRINT).all()}


def _nodes_fingerprint():
    bucket = _bucket()   # one expression: PostgreSQL matches GROUP BY to it
    return sa.select(bucket, sa.func.count(), sa.func.sum(T_NODES.c.generation),
                     sa.func.sum(T_NODES.c.id)).group_by(bucket)


# Built once: a scheduler asks it on every request.
_NODES_FINGERPRINT = _nodes_fingerprint()


def node_versions(conn, buckets=None):
    """``{uuid: NodeVersion}`` of every compute node row (or of those ``buckets``)."""
    query = sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename,
                      T_NODES.c.generation, T_NODES.c.id)
    if buckets is not None:
        query = query.where(_bucket().in_(sorted(buckets)))
    return {r[0]: NodeVersion(*r) for r in conn.execute(query).all()}


def services_fingerprint(conn, binary):
    """A tuple that changes when a service row of ``binary`` is added or removed, or
    is enabled or disabled (or its reason changes); heartbeats leave it alone.

    Sums over the rows (see :func:`nodes_fingerprint`): enabling or disabling
    changes a per-row mix of id and disabled flag.  Sums can collide in
    principle, and heartbeats are not in it, so a reader also re-reads the
    rows now and then.
    """
    return tuple(conn.execute(_SERVICES_FINGERPRINT, {"binary": binary}).one())


def _services_fingerprint():
    disabled_mix = sa.case(
        (T_SVC.c.disabled, (T_SVC.c.id * 7919 + 1) % 1000003), else_=0)
    columns = [sa.func.count(), sa.func.coalesce(sa.func.sum(T_SVC.c.id), 0),
               sa.func.coalesce(sa.func.sum(disabled_mix), 0)]
    if "disabled_reason" in T_SVC.c:
        columns.append(sa.func.coalesce(sa.func.sum(
            sa.func.length(sa.func.coalesce(T_SVC.c.disabled_reason, "")) * T_SVC.c.id), 0))
    return sa.select(*columns).where(T_SVC.c.binary == sa.bindparam("binary"))


# Built once: a scheduler asks both fingerprints on every request.
_SERVICES_FINGERPRINT = _services_fingerprint()


def list_services(conn, binary, host=None):
    """Service rows of ``binary`` (of ``host``, or all) sorted by host, as ServiceRow."""
    reason = T_SVC.c.disabled_reason if "disabled_reason" in T_SVC.c else sa.null()
    # Plain tuples in ServiceRow's field order: a scheduler reads every row often.
    query = sa.select(T_SVC.c.host, T_SVC.c.binary, T_SVC.c.created_at, T_SVC.c.updated_at,
                      T_SVC.c.report_count, T_SVC.c.disabled, reason).where(
        T_SVC.c.binary == binary).order_by(T_SVC.c.host)
    if host is not None:
        query = query.where(T_SVC.c.host == host)
    return [ServiceRow(h, b, c, u, n, bool(d), r) for h, b, c, u, n, d, r in
            conn.execute(query).tuples().all()]


def set_service_disabled(conn, host, binary, disabled, reason=None):
    """Enable or disable the (host, binary) service; returns the number of rows changed.

    A write: run it with ``store.db.write``.  ``reason`` is kept only while
    disabled (and only if the schema has ``disabled_reason``); a reason the
    records cannot hold (over 255 characters, a control character) raises
    InvalidInput before any statement, on every backend.
    """
    arguments.check_lookup(host=host, binary=binary)
    if reason is not None:
        v.check_text(reason, "disabled reason")
    values: dict[str, object] = {"disabled": bool(disabled)}
    if "disabled_reason" in T_SVC.c:
        values["disabled_reason"] = reason if disabled else None
    return conn.execute(T_SVC.update().where(
        T_SVC.c.host == host, T_SVC.c.binary == binary).values(**values)).rowcount
