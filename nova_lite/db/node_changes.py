"""Which compute node records changed since a view last looked.

Views that keep the node records in memory (the scheduler's host view, the
API's node cache) ask one aggregate query,
``queries.nodes_fingerprint``, whether any node moved.
When it did, a :class:`NodeChangeTracker` reads the generations of the
nodes in the fingerprint buckets that moved, then the records of the nodes
that are new or whose generation or host changed; more of them than the
view's bulk limit are one read of every node instead.
"""

from collections.abc import Mapping
from typing import Any

import attrs

from nova_lite.db import queries
from nova_lite.exception import NodeNotFound
from nova_lite.objects import ComputeNode


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

    def __init__(self, store, bulk_reload: int) -> None:
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
        else:
            fresh = []
            for version in changed:
                try:
                    fresh.append(self.store.get_compute_node(version.host, version.nodename))
                except NodeNotFound:
                    gone.add(version.uuid)
        for uuid, version in versions.items():
            self._buckets[uuid] = version.bucket
        for uuid in gone:
            self._buckets.pop(uuid, None)
        self.fingerprint = fingerprint
        return NodeChanges(fresh=tuple(fresh), gone=frozenset(gone))


__all__ = ["NodeChangeTracker", "NodeChanges"]
