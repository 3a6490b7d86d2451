"""Cluster-wide figures for the metrics and the web API, read in bulk.

- :class:`NodeCache` keeps the :class:`~nova_lite.objects.ComputeNode`
  records of a store and re-reads only those changed since its last look,
  found through the nodes' indexed change sequence
  (:class:`~nova_lite.db.node_changes.ChangeReader`): every change to a
  node's inventories or allocations bumps its generation, which moves it,
  and a node added or removed moves it or leaves a tombstone, as the
  scheduler's host view relies on.
- :func:`class_totals` sums, per resource class, total, reserved,
  capacity, used, free and over over some nodes.  Capacity, free and over
  come from :meth:`~nova_lite.objects.ComputeNode.capacity`, ``free()`` and
  ``over()`` (``floor((total - reserved) x ratio)``, exact),
  never from a second formula, so they agree with ``hypervisor stats``.

Amounts are in each class's unit: VCPU and PCPU count CPUs, MEMORY_MB is
MiB, DISK_GB is GiB, custom classes count units.
"""

import collections
import logging
import operator
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import heap
from nova_lite.db.node_changes import ChangeReader, Changes
from nova_lite.exception import MarkerNotFound
from nova_lite.objects import ComputeNode

if TYPE_CHECKING:   # the store's modules import nothing from here; kept light all the same
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)


@attrs.frozen
class ClassTotals:
    """One resource class summed over nodes (in the class's unit).

    ``capacity`` is the sum of each node's ``floor((total - reserved) x
    ratio)``; ``free`` the sum of each node's ``max(0, capacity - used)``
    (never negative) and ``over`` the sum of what nodes hold beyond their
    capacity, so ``capacity - used`` equals ``free - over``.
    """

    resource_class: str
    total: int
    reserved: int
    capacity: int
    used: int
    free: int
    over: int


@attrs.frozen
class ClusterTotals:
    """Totals of every resource class over ``nodes`` nodes on ``hosts`` hosts."""

    nodes: int
    hosts: int
    resources: tuple[ClassTotals, ...]

    def resource(self, rc: str) -> ClassTotals:
        """The totals of ``rc`` (zeros if no node offers or uses it)."""
        for line in self.resources:
            if line.resource_class == rc:
                return line
        return ClassTotals(rc, 0, 0, 0, 0, 0, 0)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict."""
        return attrs.asdict(self)


def node_classes(node: ComputeNode) -> list[str]:
    """The classes a node offers or uses, sorted."""
    return sorted(set(node.inventories) | set(node.usage))


#: One class of one node: (resource class, total, reserved, capacity, used, free, over).
_Figures = tuple[str, int, int, int, int, int, int]


def node_figures(node: ComputeNode) -> list[_Figures]:
    """``(rc, total, reserved, capacity, used, free, over)`` of each class
    ``node`` offers or uses, sorted by class: ``capacity``, ``free`` and
    ``over`` as the node's own ``capacity()``, ``free()`` and ``over()``
    give them."""
    inventories, usage = node.inventories, node.usage
    out = []
    for rc in node_classes(node):
        inv = inventories.get(rc) or node.inventory(rc)
        used = usage.get(rc, 0)
        capacity = inv.capacity
        if used > capacity:   # past capacity: reserved units in use may count as used
            capacity = node.capacity(rc)
        out.append((rc, inv.total, inv.reserved, capacity, used, max(0, capacity - used),
                    max(0, used - capacity)))
    return out


class FiguresMemo:
    """:func:`node_figures` of nodes, computed once for all the nodes
    without usage that share one inventories mapping (nodes of one kind,
    as a full read of the records gives them).  Keep one only while the
    nodes it saw are alive (it knows their mappings by identity)."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[object, list[_Figures]]] = {}

    def figures(self, node: ComputeNode) -> list[_Figures]:
        if node.usage:
            return node_figures(node)
        seen = self._seen.get(id(node.inventories))
        if seen is not None and seen[0] is node.inventories:
            return seen[1]
        found = node_figures(node)
        self._seen[id(node.inventories)] = (node.inventories, found)
        return found


def class_totals(nodes: Iterable[ComputeNode]) -> tuple[ClassTotals, ...]:
    """Per resource class sums over ``nodes``, sorted by class name."""
    sums: dict[str, list[int]] = {}
    memo = FiguresMemo()
    for node in nodes:
        for rc, *figures in memo.figures(node):
            line = sums.get(rc)
            if line is None:
                sums[rc] = list(figures)
            else:
                for i, amount in enumerate(figures):
                    line[i] += amount
    return tuple(ClassTotals(rc, *sums[rc]) for rc in sorted(sums))


def cluster_totals(nodes: list[ComputeNode]) -> ClusterTotals:
    """:class:`ClusterTotals` of ``nodes``."""
    return ClusterTotals(nodes=len(nodes), hosts=len({n.host for n in nodes}),
                         resources=class_totals(nodes))


#: The order of the nodes: by host, then name.
_BY_NAME = operator.attrgetter("host", "nodename")


class NodeCache:
    """The compute node records of ``store``, re-read only where they changed.

    Each call of :meth:`nodes`, :meth:`page` or :meth:`totals` costs one
    read transaction of a few indexed queries while nothing changed; the
    nodes changed since the last call (and only those whose generation or
    host the cache does not hold already) are read again, 500 per query,
    however many changed, and deleted ones dropped, as the scheduler's
    host view does.  Thread-safe.
    """

    def __init__(self, store: "Store") -> None:
        self.store = store
        self._lock = threading.Lock()
        self._changes = ChangeReader(store)
        self._nodes: dict[str, ComputeNode] = {}
        self._ordered: list[ComputeNode] = []
        self._position: dict[str, int] = {}   # uuid -> index in _ordered
        self._totals: ClusterTotals | None = None
        # The sums behind totals(), kept as nodes come and go: {class: [the six
        # sums, nodes counted]}, and the number of nodes of each host.
        self._sums: dict[str, list[int]] = {}
        self._hosts: collections.Counter[str] = collections.Counter()

    def _refresh(self) -> None:
        with heap.full_read(self._changes.full_due(), lambda: len(self._nodes)):
            self._take(self._changes.read(self._nodes))

    def _take(self, changes: Changes) -> None:
        if not (changes.full or changes.nodes or changes.gone_nodes):
            return
        if changes.full:
            self._take_all(changes.nodes)
        else:
            self._take_changed(changes)
        self._totals = None
        LOG.debug("Node cache: %d nodes, %d re-read, %d gone", len(self._nodes),
                  len(changes.nodes), len(changes.gone_nodes))

    def _take_all(self, nodes: Iterable[ComputeNode]) -> None:
        """Hold ``nodes`` (every node, as a full read gives them) and nothing else."""
        self._nodes = {node.uuid: node for node in nodes}
        self._hosts = collections.Counter(node.host for node in self._nodes.values())
        self._sums = {}
        # Nodes without usage that share an inventories mapping (nodes of one
        # kind) have equal figures: counted once, times their number.
        alike: dict[int, list[Any]] = {}
        memo = FiguresMemo()
        for node in self._nodes.values():
            if node.usage:
                self._add(memo.figures(node), 1)
                continue
            found = alike.get(id(node.inventories))
            if found is None:
                alike[id(node.inventories)] = [node, 1]
            else:
                found[1] += 1
        for node, count in alike.values():
            self._add(memo.figures(node), count)
        self._ordered = sorted(self._nodes.values(), key=_BY_NAME)
        self._position = {n.uuid: i for i, n in enumerate(self._ordered)}

    def _add(self, figures: list[_Figures], count: int) -> None:
        """Add to the sums ``count`` nodes of these figures (integers all;
        ``count`` below 0 takes them out)."""
        for rc, *values in figures:
            sums = self._sums.get(rc)
            if sums is None:
                sums = self._sums[rc] = [0] * 7
            for i, value in enumerate(values):
                sums[i] += value * count
            sums[6] += count

    def _take_changed(self, changes: Changes) -> None:
        reorder = bool(changes.gone_nodes)
        memo = FiguresMemo()
        for node in changes.nodes:
            held = self._nodes.get(node.uuid)
            if held is None or (held.host, held.nodename) != (node.host, node.nodename):
                reorder = True
            if held is not None:
                self._count(held, -1, memo)
            self._count(node, 1, memo)
            self._nodes[node.uuid] = node
        for uuid in changes.gone_nodes:
            held = self._nodes.pop(uuid, None)
            if held is not None:
                self._count(held, -1, memo)
        if reorder:
            self._ordered = sorted(self._nodes.values(), key=_BY_NAME)
            self._position = {n.uuid: i for i, n in enumerate(self._ordered)}
        else:   # same nodes in the same order: replace the changed ones in place
            for node in changes.nodes:
                self._ordered[self._position[node.uuid]] = node

    def _count(self, node: ComputeNode, sign: int, memo: FiguresMemo) -> None:
        """Add ``node`` to the sums (``sign`` 1) or take it out (-1); ``memo``:
        the figures of this refresh's nodes of a kind (see :class:`FiguresMemo`)."""
        self._hosts[node.host] += sign
        if not self._hosts[node.host]:
            del self._hosts[node.host]
        figures = memo.figures(node)
        self._add(figures, sign)
        for rc, *_ in figures:
            if not self._sums[rc][6]:
                del self._sums[rc]

    def nodes(self) -> list[ComputeNode]:
        """Every live compute node record, sorted by host and name."""
        with self._lock:
            self._refresh()
            return list(self._ordered)

    def page(self, limit: int, marker: str | None = None) -> tuple[list[ComputeNode], bool]:
        """One page of :meth:`nodes`: up to ``limit`` nodes (>= 1) after the node
        whose uuid is ``marker`` (None: from the first), and whether more follow.

        Raises :class:`~nova_lite.exception.MarkerNotFound` if no live node
        has the uuid ``marker``.
        """
        with self._lock:
            self._refresh()
            start = 0
            if marker is not None:
                if marker not in self._position:
                    raise MarkerNotFound(marker, "compute node uuid")
                start = self._position[marker] + 1
            end = start + limit
            return self._ordered[start:end], end < len(self._ordered)

    def totals(self) -> ClusterTotals:
        """:class:`ClusterTotals` of every node, as :func:`cluster_totals` sums
        them, kept up to date node by node (a change costs the changed
        nodes, not a pass over every node)."""
        with self._lock:
            self._refresh()
            if self._totals is None:
                self._totals = ClusterTotals(
                    nodes=len(self._nodes), hosts=len(self._hosts),
                    resources=tuple(ClassTotals(rc, *self._sums[rc][:6])
                                    for rc in sorted(self._sums)))
            return self._totals


__all__ = ["ClassTotals", "ClusterTotals", "NodeCache", "class_totals", "cluster_totals",
           "node_classes"]
