"""Small read-only queries on the compute node rows, for the views that keep them.

Plain functions on a SQLAlchemy connection; they never write.  Code
outside ``nova_lite.db`` reaches them through the Store
(:meth:`~nova_lite.db.store.Store.nodes_fingerprint`,
:meth:`~nova_lite.db.store.Store.change_fingerprints`) and
:class:`~nova_lite.db.node_changes.NodeChangeTracker`.  The service rows
have their own module, :mod:`nova_lite.db.services`.
"""

from collections.abc import Iterable

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nova_lite.db import models

T_NODES = models.compute_nodes


@attrs.frozen
class NodeVersion:
    """Identity and generation of one compute node row."""

    uuid: str
    host: str
    nodename: str
    generation: int
    id: int | None = None

    @property
    def bucket(self) -> int:
        """The fingerprint bucket of the row (see :func:`nodes_fingerprint`)."""
        if self.id is None:
            raise ValueError(f"NodeVersion of node {self.uuid} was read without its id: "
                             "it has no fingerprint bucket")
        return self.id % NODE_BUCKETS


#: Node rows are fingerprinted in this many buckets (by ``id % NODE_BUCKETS``):
#: more buckets make the fingerprint longer and each changed bucket shorter
#: to re-read (10,000 nodes: 40 rows a bucket).
NODE_BUCKETS = 256


def _bucket() -> sa.ColumnElement[int]:
    return T_NODES.c.id % NODE_BUCKETS


def nodes_fingerprint(conn: Connection) -> dict[int, tuple[int, int, int]]:
    """``{bucket: (count, sum of generations, sum of ids)}`` of the node rows.

    Generations and ids only grow, so any change to a node's generation,
    and any node added or removed, changes its bucket's triple: a reader
    re-reads only the buckets whose triple moved (:func:`node_versions`).
    """
    return {int(b): (int(c), int(g), int(i))
            for b, c, g, i in conn.execute(_NODES_FINGERPRINT).all()}


def _nodes_fingerprint() -> sa.Select:
    bucket = _bucket()   # one expression: PostgreSQL matches GROUP BY to it
    return sa.select(bucket, sa.func.count(), sa.func.sum(T_NODES.c.generation),
                     sa.func.sum(T_NODES.c.id)).group_by(bucket)


# Built once: a scheduler asks it on every request.
_NODES_FINGERPRINT = _nodes_fingerprint()


def node_versions(conn: Connection, buckets: Iterable[int] | None = None
                  ) -> dict[str, NodeVersion]:
    """``{uuid: NodeVersion}`` of every compute node row (or of those ``buckets``)."""
    query = sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename,
                      T_NODES.c.generation, T_NODES.c.id)
    if buckets is not None:
        query = query.where(_bucket().in_(sorted(buckets)))
    return {r[0]: NodeVersion(*r) for r in conn.execute(query).all()}
