"""Which compute node records changed since a view last looked.

Views that keep the node records in memory (the scheduler's host view, the
API's node cache) ask one aggregate query,
``queries.nodes_fingerprint``, whether any node moved.
When it did, a :class:`NodeChangeTracker` reads the generations of the
nodes in the fingerprint buckets that moved, then the records of the nodes
that are new or whose generation or host changed, all in one read (more
of them than the view's bulk limit are one read of every node instead).
"""

import collections
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from nova_lite.db import models, queries, rows
from nova_lite.objects import ComputeNode

if TYPE_CHECKING:
    from nova_lite.db.store import Store

#: Node uuids per ``IN (...)`` list of a batched read.
_CHUNK = 500


@attrs.frozen
class NodeChanges:
    """What moved since the last look.

    ``fresh``: the records read again (new nodes and changed ones; after a
    bulk read, every node).  ``gone``: uuids of nodes no longer recorded.
    """

    fresh: tuple[ComputeNode, ...]
    gone: frozenset[str]


class NodeChangeTracker:
    """Remembers the last fingerprint a view saw and each node's bucket.

    ``bulk_reload``: more changed nodes than this are read in one read of
    every node rather than one by one.
    """

    def __init__(self, store: "Store", bulk_reload: int) -> None:
        self.store = store
        self.bulk_reload = bulk_reload
        #: The fingerprint of the last look (``{bucket: sums}``), None before the first.
        self.fingerprint: dict | None = None
        self._buckets: dict[str, int] = {}   # node uuid -> its fingerprint bucket

    def changes(self, fingerprint: dict, known: Mapping[str, Any]) -> NodeChanges:
        """The changes since the last look, given the ``fingerprint`` just read.

        ``known`` maps each node uuid the view holds to its copy (anything
        with ``generation`` and ``host``).  The fingerprint must be read
        before this call: a change after it makes the next look differ, so a
        stale record is never kept.
        """
        if fingerprint == self.fingerprint:
            return NodeChanges(fresh=(), gone=frozenset())
        old = self.fingerprint or {}
        buckets = None if self.fingerprint is None else {   # None: first look, every node
            b for b in set(fingerprint) | set(old) if fingerprint.get(b) != old.get(b)}
        versions = self.store.db.read(
            "node generations", lambda conn: queries.node_versions(conn, buckets))
        changed = [v for u, v in versions.items()
                   if u not in known or known[u].generation != v.generation
                   or known[u].host != v.host]
        gone = {u for u, b in self._buckets.items()
                if (buckets is None or b in buckets) and u not in versions}
        if len(changed) > self.bulk_reload:
            fresh = self.store.get_compute_nodes()
        elif changed:
            wanted = [v.uuid for v in changed]
            fresh = self.store.db.read("changed compute nodes",
                                       lambda conn: load_nodes_by_uuid(conn, wanted))
            gone.update(set(wanted) - {node.uuid for node in fresh})   # deleted meanwhile
        else:
            fresh = []
        for uuid, version in versions.items():
            self._buckets[uuid] = version.bucket
        for uuid in gone:
            self._buckets.pop(uuid, None)
        self.fingerprint = fingerprint
        return NodeChanges(fresh=tuple(fresh), gone=frozenset(gone))


def load_nodes_by_uuid(conn: sa.Connection, uuids: Sequence[str]) -> list[ComputeNode]:
    """The ComputeNode records of ``uuids`` that still exist, a few queries per
    500 of them (``rows.load_nodes`` selects by host and name only)."""
    found: list[ComputeNode] = []
    for i in range(0, len(uuids), _CHUNK):
        chunk = uuids[i:i + _CHUNK]
        node_rows = conn.execute(models.compute_nodes.select().where(
            models.compute_nodes.c.uuid.in_(chunk))).all()
        inventories: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
        for r in conn.execute(models.inventories.select().where(
                models.inventories.c.node_uuid.in_(chunk))):
            inventories[r.node_uuid].append(r)
        usage = rows.usage_by_node(conn, models.allocations.c.node_uuid.in_(chunk))
        found.extend(rows._node(row, inventories.get(row.uuid, ()),
                                usage.get(row.uuid, rows.NO_USAGE)) for row in node_rows)
    return found


__all__ = ["NodeChangeTracker", "NodeChanges", "load_nodes_by_uuid"]
