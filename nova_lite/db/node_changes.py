"""What changed in the node and service records since a view last looked.

Views that keep the records in memory (the scheduler's host view, the
API's node cache and through it the metrics) each hold a
:class:`ChangeReader`.  Its first look reads everything; each later look is
one read that asks the indexed change sequence (see
:mod:`nova_lite.db.queries`) for the rows changed since the mark of the
last look, as a Kubernetes watch asks from a ``resourceVersion``: one
statement (:func:`nova_lite.db.look.look_since`) gives the next mark, the
versions of the changed nodes with the sums of their allocations, the
tombstones of deleted nodes and, if asked, the service rows added,
enabled, disabled or deleted and the stamps of the host aggregates.  A
changed node whose description (report, host, name, flags, inventories)
the view holds, by its ``described_seq`` (revision 0012), is renewed from
the look alone, its generation and usage, kept with that description (a
claim's change costs a few numbers, not the node's report, and no
statement more); any other node whose generation or host the view does
not hold is read again whole, 1,000 per statement.  Others read the
service rows of some hosts by key (for their heartbeats, which do not move
the sequence) and the host aggregates when one of them changed.  A look at
a fleet where nothing changed is one statement.  Nothing is scanned in
full after the first look, however many rows changed.

A view whose last look is older than half of
:data:`~nova_lite.db.queries.TOMBSTONE_KEEP_S` reads everything again (the
tombstones it would need may be pruned).
"""

import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from nova_lite.db import aggregates, models, queries, rows, services
from nova_lite.db.look import Look, look_since
from nova_lite.db.aggregates import Aggregate
from nova_lite.db.services import ServiceRecord
from nova_lite.objects import ComputeNode
from nova_lite.resources import Inventory

if TYPE_CHECKING:
    from nova_lite.db.store import Store

#: Node uuids per statement of a batched read (one parameter: the number
#: bounds only how many rows one statement brings back).
_CHUNK = 1000

_AGGREGATE_STAMPS = sa.select(models.aggregates.c.id, models.aggregates.c.updated_at
                              ).order_by(models.aggregates.c.id)


@attrs.frozen
class Changes:
    """What moved since the last look.

    ``full``: this look read everything (the first one, or one after too
    long): ``nodes`` (and ``services``, if watched) are every record, and
    what the view holds beyond them is gone.  Otherwise ``nodes``: the node
    records new or changed (generation or host) since; ``gone_nodes``: the
    uuids of nodes no longer recorded; ``services``: the service records
    added, enabled or disabled since, and those asked for by host;
    ``gone_services``: the hosts whose service row was deleted.
    ``aggregates``: every host aggregate, when one changed (or on a full
    look), else None.
    """

    full: bool
    nodes: tuple[ComputeNode, ...] = ()
    gone_nodes: frozenset[str] = frozenset()
    services: tuple[ServiceRecord, ...] = ()
    gone_services: frozenset[str] = frozenset()
    aggregates: tuple[Aggregate, ...] | None = None


def _held_record(held: Any) -> ComputeNode | None:
    """The node record a view holds: ``held`` itself, or its ``node`` (a
    scheduler's HostState); None if it holds none."""
    record = getattr(held, "node", held)
    return record if isinstance(record, ComputeNode) else None


def _unchanged(known: Mapping[str, Any], version: queries.NodeVersion) -> bool:
    held = known.get(version.uuid)
    return held is not None and held.generation == version.generation \
        and held.host == version.host


class ChangeReader:
    """Follows the change sequence of a store's node rows (and, with
    ``binary``, of that binary's service rows; with ``aggregates``, of the
    host aggregates) for one view.  Not thread-safe: a view serialises its looks.
    """

    def __init__(self, store: "Store", binary: str | None = None,
                 aggregates: bool = False) -> None:
        self.store = store
        self.binary = binary
        self.watch_aggregates = aggregates
        #: The mark of the last look (None before the first).
        self.mark: int | None = None
        # Which description of each node the view holds: that of the last
        # full read for a ``described_seq`` below its mark, else the value
        # recorded here when the node was last read whole.
        self._full_mark = 0
        self._described: dict[str, int] = {}
        self._looked_at = 0.0   # time.time() of the last look
        self._stamps: tuple[tuple[int, float], ...] | None = None   # aggregates' (id, updated_at)
        self._next_stamps: tuple[tuple[int, float], ...] | None = self._stamps

    def read(self, known: Mapping[str, Any], hosts: Collection[str] = ()) -> Changes:
        """The changes since the last look.

        ``known`` maps each node uuid the view holds to its copy (anything
        with ``generation`` and ``host``): a changed row whose generation and
        host the view already holds is not read again.  ``hosts``: hosts
        whose service row is read again whatever the sequence says (for
        their heartbeats).
        """
        now = time.time()
        since = self.mark
        if since is None or self.full_due(now):
            changes, mark, described = self._read_all()
            self._full_mark, self._described = mark, described
        else:
            # The look on the driver's cursor (one statement, its rows
            # plain tuples); what it says is still to read, if anything, in
            # a read of its own.
            look = self.store.db.read_each_direct("change look", lambda conn: look_since(
                conn, since, self.binary, self.watch_aggregates))
            changes, described = self._changes_since(look, known, hosts)
            mark = look.mark
            self._described.update(described)
        self.mark = mark
        self._stamps = self._next_stamps
        self._looked_at = now
        return changes

    def full_due(self, now: float | None = None) -> bool:
        """Whether the next look reads everything (the first one, or one
        after too long); ``now``: time.time()."""
        now = time.time() if now is None else now
        return self.mark is None or now - self._looked_at >= queries.TOMBSTONE_KEEP_S / 2

    def _aggregates(self, conn: sa.Connection) -> tuple[Aggregate, ...] | None:
        """Every aggregate, if watched (else None); their stamps wait in
        ``_next_stamps`` until the read transaction is over (a retried one
        asks again)."""
        if not self.watch_aggregates:
            return None
        self._next_stamps = tuple(conn.execute(_AGGREGATE_STAMPS).all())
        return tuple(aggregates.read_all(conn))

    def _read_all(self) -> tuple[Changes, int, dict[str, int]]:
        # The mark comes first: what changes after it is asked again next time.
        mark = self.store.db.read("change mark", queries.change_mark)
        # The descriptions at or past the mark, in the nodes' own snapshot:
        # which of them the records read hold.
        nodes, described = self.store.db.read_snapshot("every node", lambda conn: (
            rows.load_nodes(conn), queries.described_since(conn, mark)))
        found: list[ServiceRecord] = []
        found_aggregates = None
        if self.binary is not None or self.watch_aggregates:
            binary = self.binary

            def op(conn: sa.Connection) -> tuple[list[ServiceRecord], Any]:
                svcs = services.list_services(conn, binary) if binary is not None else []
                return svcs, self._aggregates(conn)
            found, found_aggregates = self.store.db.read("services and aggregates", op)
        return Changes(full=True, nodes=tuple(nodes), services=tuple(found),
                       aggregates=found_aggregates), mark, described

    def _changes_since(self, look: Look, known: Mapping[str, Any], hosts: Collection[str]
                       ) -> tuple[Changes, dict[str, int]]:
        """The changes ``look`` found, and ``{uuid: described_seq}`` of the
        nodes read whole: the look's versions, services and aggregates'
        stamps came in one statement (its snapshot covers them all); the
        reads after it, if any are needed, may see more, asked again next
        time."""
        # A row seen already comes again: it is read only if the view does
        # not hold its generation, host and description.
        changed = [v for v in look.versions
                   if not (_unchanged(known, v) and self._holds_description(v))]
        # A node whose description the view holds is renewed from the look
        # alone: its generation and the sums of its allocations, read
        # together (what a claim changes).  One whose allocations hold more
        # than the standard classes is read whole, as is any other.
        fresh: list[ComputeNode] = []
        whole: list[str] = []
        memo: dict[tuple[int, int], Inventory] = {}   # inventories shared by nodes of a kind
        for version in changed:
            record = _held_record(known.get(version.uuid))
            used = look.usage[version.uuid]
            if record is not None and self._holds_description(version) \
                    and record.host == version.host and not used.has_extras:
                fresh.append(rows.with_usage(record, version.generation, dict(used.amounts),
                                             memo))
            else:
                whole.append(version.uuid)
        deleted = set(look.deleted)
        found = list(look.services) if self.binary is not None else []
        deleted_services = set(look.gone_services) if self.binary is not None else set()
        seen_hosts = {s.host for s in found}
        asked_hosts = [h for h in hosts if h not in seen_hosts] if self.binary is not None else []
        if look.stamps is not None:
            self._next_stamps = look.stamps
        stamps_moved = look.stamps is not None and look.stamps != self._stamps
        described: dict[str, int] = {}
        gone = set()
        gone_services: set[str] = set()
        found_aggregates = None
        if whole or deleted or asked_hosts or deleted_services or stamps_moved:
            def more(conn: sa.Connection) -> tuple[list[ComputeNode], set[str], list[ServiceRecord],
                                                   set[str], tuple[Aggregate, ...] | None]:
                described.clear()
                read = load_nodes_by_uuid(conn, whole, described) if whole else []
                existing = queries.existing_nodes(conn, deleted) if deleted else set()
                binary = self.binary or ""   # (services are asked for with a binary only)
                services_asked = services.services_of_hosts(
                    conn, binary, asked_hosts) if asked_hosts else []
                still = set()
                left = deleted_services - {s.host for s in found + services_asked}
                if left:   # recorded again since: still there
                    still = {s.host for s in services.services_of_hosts(
                        conn, binary, sorted(left))}
                return read, existing, services_asked, left - still, (
                    tuple(aggregates.read_all(conn)) if stamps_moved else None)

            read, existing, services_asked, gone_services, found_aggregates = \
                self.store.db.read_each("changed records", more)
            fresh.extend(read)
            found += services_asked
            gone = deleted - existing
        gone |= {v.uuid for v in changed} - {node.uuid for node in fresh}   # deleted meanwhile
        return Changes(full=False, nodes=tuple(fresh), gone_nodes=frozenset(gone),
                       services=tuple(found), gone_services=frozenset(gone_services),
                       aggregates=found_aggregates), described

    def _holds_description(self, version: queries.NodeVersion) -> bool:
        """Whether the view holds the description ``version`` is of: read by
        the last full read (it saw every change before its mark) or by the
        node's last read whole."""
        return version.described_seq < self._full_mark \
            or self._described.get(version.uuid) == version.described_seq


def load_nodes_by_uuid(conn: sa.Connection, uuids: Sequence[str],
                       described: dict[str, int] | None = None) -> list[ComputeNode]:
    """The ComputeNode records of ``uuids`` that still exist, one statement per
    1,000 of them, and one more for those with allocations the database
    cannot sum (``rows.load_nodes_of``; ``rows.load_nodes`` selects by host
    and name only)."""
    found: list[ComputeNode] = []
    for i in range(0, len(uuids), _CHUNK):
        found.extend(rows.load_nodes_of(conn, uuids[i:i + _CHUNK], described))
    return found


__all__ = ["ChangeReader", "Changes", "load_nodes_by_uuid"]
