"""``HostIndex``: the host states kept in order of each weigher's value.

A request then looks only at the best hosts of each order until no host
it has not looked at can rank above its picks (Fagin's threshold
algorithm), instead of filtering and weighing every host.  The result is
the one a full pass gives (:func:`nova_lite.scheduler.weighers.weights`
then the best ``count`` by weight, ties in (host, node name) order), as
long as:

- every filter decides on one host alone (``passes``), and each
  ``minimums`` entry ``{attr: amount}`` is implied by the filters (the
  orders are then cut to the hosts that hold at least that amount);
- every weigher's raw value is an integer attribute of the HostState.

Each order is a :class:`~nova_lite.scheduler.sorted_rows.SortedRows` of
``(key, host, nodename, uuid)`` with ``key`` the value (ascending, for a
negative multiplier) or minus it (descending), so equal values come in
(host, node name) order, the full pass's tie order.  Its blocks keep a
changed host's move at O(log n + block size), not O(n): k changed hosts
cost O(k log n), however large the fleet.
"""

import bisect
import operator
from collections.abc import Callable, Iterable, Mapping

import attrs

from nova_lite.scheduler.host_state import HostState
from nova_lite.scheduler.sorted_rows import LOAD, SortedRows

#: HostState attributes an order can hold: integer amounts, never negative.
INDEXABLE = frozenset({"free_ram_mb", "free_disk_gb", "free_vcpus", "free_pcpus"})

_KEY = operator.itemgetter(0)
#: One row of an order: (key, host, node name, node uuid).
_Row = tuple[int, str, str, str]


@attrs.frozen
class WeighSpec:
    """One weigher as the index sees it: the HostState attribute it weighs
    and its multiplier (non-zero; positive spreads, negative packs)."""

    attr: str
    multiplier: float


#: More entries put at once than this are sorted in, not inserted one by one.
BULK_PUT = 64


class HostIndex:
    """Orders of HostStates by the attributes of ``weighs`` (WeighSpec records).

    Call :meth:`put` after a state's amounts changed (or it is new) and
    :meth:`discard` when it is gone.  What is put waits, unsorted, until the
    orders are next read or changed: more than ``bulk_put`` states put at
    once (the first read of a fleet) are then sorted in once, in O(n log
    n), not inserted one by one; fewer are inserted one by one, each in
    O(log n + ``load``).  ``load``: the block size of the orders (see
    :class:`~nova_lite.scheduler.sorted_rows.SortedRows`).
    """

    def __init__(self, weighs: Iterable[WeighSpec], bulk_put: int = BULK_PUT,
                 load: int = LOAD) -> None:
        self.weighs = tuple(weighs)
        self._bulk_put = bulk_put
        self._orders: dict[tuple[str, bool], SortedRows] = {
            (w.attr, w.multiplier > 0): SortedRows(load=load) for w in self.weighs}
        # entries put but not in their order yet, per order
        self._pending: dict[tuple[str, bool], list[_Row]] = {
            order: [] for order in self._orders}
        # uuid -> ((order, entry), ...)
        self._entries: dict[str, tuple[tuple[tuple[str, bool], _Row], ...]] = {}

    def put(self, state: HostState) -> None:
        """Place ``state`` (anything with ``uuid``, ``host``, ``nodename`` and the
        attributes) in every order, moving it if it was there."""
        held = self._entries.get(state.uuid)
        placed: list[tuple[tuple[str, bool], _Row]] = []
        for i, (order, pending) in enumerate(self._pending.items()):
            attr, descending = order
            value = getattr(state, attr)
            entry = (-value if descending else value, state.host, state.nodename, state.uuid)
            placed.append((order, entry))
            if held is None:
                pending.append(entry)
                continue
            if held[i][1] == entry:   # its amounts did not move: it stays where it is
                continue
            if pending:
                self._settle()
            rows = self._orders[order]
            rows.remove(held[i][1])
            rows.add(entry)
        self._entries[state.uuid] = tuple(placed)

    def _settle(self) -> None:
        """Put the pending entries in their orders."""
        for order, pending in self._pending.items():
            if not pending:
                continue
            rows = self._orders[order]
            if len(pending) > self._bulk_put:
                rows.update(pending)
            else:
                for entry in pending:
                    rows.add(entry)
            pending.clear()

    def discard(self, uuid: str) -> None:
        """Remove the state with ``uuid`` (nothing if it is not here)."""
        if uuid not in self._entries:
            return
        self._settle()
        for order, entry in self._entries.pop(uuid):
            self._orders[order].remove(entry)

    def __len__(self) -> int:
        return len(self._entries)

    def best(self, states: Mapping[str, HostState], passes: Callable[[HostState], bool], count: int,
             minimums: Mapping[str, int], ordered: Iterable[HostState]) -> list[HostState]:
        """The best ``count`` passing states, best first; ``[]`` if none passes.

        ``states``: ``{uuid: HostState}`` of the indexed states;
        ``passes(state)``: the filters' verdict; ``minimums``: ``{attr:
        amount}`` every passing state holds; ``ordered``: every state in
        (host, node name) order (used when no weigher tells hosts apart).
        """
        self._settle()
        scans: list[_Scan] = []
        for w in self.weighs:
            rows = self._orders[(w.attr, w.multiplier > 0)]
            start, end = _range(rows, w.multiplier > 0, minimums.get(w.attr))
            first = _first_passing(rows, range(start, end), states, passes)
            if first is None:
                return []
            last = _first_passing(rows, range(end - 1, first - 1, -1), states, passes)
            assert last is not None   # the walk down ends at ``first`` at the latest
            best, worst = abs(rows[first][0]), abs(rows[last][0])
            if best == worst:
                continue   # every passing host alike: the full pass skips this weigher too
            low, high = (worst, best) if w.multiplier > 0 else (best, worst)
            scans.append(_Scan(w.attr, rows, first, last + 1, low, w.multiplier,
                               w.multiplier / (high - low)))
        if not scans:
            picked: list[HostState] = []
            for state in ordered:
                if passes(state):
                    picked.append(state)
                    if len(picked) == count:
                        break
            return picked
        return _threshold(scans, states, passes, count)


@attrs.define
class _Scan:
    """One order as a request walks it: ``rows[pos:end]`` not read yet;
    ``low`` and ``scale`` normalise the value as the full pass does."""

    attr: str
    rows: SortedRows
    pos: int
    end: int
    low: int
    multiplier: float
    scale: float


def _range(rows: SortedRows, descending: bool, minimum: int | None) -> tuple[int, int]:
    """``(start, end)`` of the rows whose value is at least ``minimum``."""
    if not minimum:
        return 0, len(rows)
    if descending:
        return 0, rows.bisect_right(-minimum, key=_KEY)
    return rows.bisect_left(minimum, key=_KEY), len(rows)


def _first_passing(rows: SortedRows, positions: Iterable[int], states: Mapping[str, HostState],
                   passes: Callable[[HostState], bool]) -> int | None:
    for i in positions:
        if passes(states[rows[i][3]]):
            return i
    return None


def _total(state: HostState, scans: Iterable[_Scan]) -> float:
    total = 0.0
    for s in scans:   # the same arithmetic, in the same order, as weighers.weights()
        total = total + (getattr(state, s.attr) - s.low) * s.scale
    return total


def _threshold(scans: list[_Scan], states: Mapping[str, HostState],
               passes: Callable[[HostState], bool], count: int) -> list[HostState]:
    """The threshold algorithm over ``scans`` (see the module docstring)."""
    # A host not read yet holds, in each order, the value read last or a worse
    # one; values are integers, so a worse one costs at least |scale|, which
    # float rounding (at most `slack`) cannot hide unless the ranges are huge.
    step = min(abs(s.scale) for s in scans)
    slack = 1e-9 * (1.0 + sum(abs(s.multiplier) for s in scans))
    seen: set[str] = set()
    picked: list[tuple[float, str, str, str]] = []   # (-total, host, nodename, uuid), best first
    while True:
        for s in scans:
            if s.pos >= s.end:   # one order read to its end: every passing host seen
                return [states[p[3]] for p in picked]
            entry = s.rows[s.pos]
            s.pos += 1
            uuid = entry[3]
            if uuid in seen:
                continue
            seen.add(uuid)
            state = states[uuid]
            if passes(state):
                bisect.insort(picked, (-_total(state, scans), entry[1], entry[2], uuid))
                del picked[count:]
        if len(picked) < count:
            continue
        bound = 0.0
        for s in scans:
            bound = bound + (abs(s.rows[s.pos - 1][0]) - s.low) * s.scale
        worst = picked[-1]
        if step > slack:
            # A host equal to the last read value in every order totals `bound`
            # exactly and comes after each last read host in (host, node) order.
            last_read = max(s.rows[s.pos - 1][1:3] for s in scans)
            done = bound < -worst[0] or (bound == -worst[0] and last_read >= worst[1:3])
        else:
            done = bound + slack < -worst[0]
        if done:
            return [states[p[3]] for p in picked]
