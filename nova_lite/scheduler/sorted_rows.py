"""``SortedRows``: a sorted sequence of tuples kept as a list of sorted blocks.

A plain sorted list of n entries moves half of them on every insertion or
removal (O(n) each: at 100,000 hosts, tens of microseconds, several times
per changed host).  Here the entries sit in blocks of at most
``2 * load`` entries, each block sorted, every entry of a block before
every entry of the next, with the last (greatest) entry of each block
kept aside in ``maxes``: an insertion or removal finds its block by
bisection on ``maxes`` and moves at most ``2 * load`` entries, so k
changes cost O(k (log n + load)), not O(k n).

Read by position (``rows[i]``, ``len(rows)``), so :mod:`bisect` and any
code written for a sorted list read it unchanged (its own
:meth:`SortedRows.bisect_left` and :meth:`SortedRows.bisect_right` give
the same positions without reading entry by entry); positions are found by
bisection on the blocks' first positions, rebuilt (O(n / load)) on the
first read after a change, and the block read last is remembered, so a
walk down the order costs O(1) a step.
"""

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

#: Entries per block after a split or a bulk load; a block splits at twice this.
LOAD = 1000


class SortedRows:
    """Entries (any mutually comparable values: tuples here) in ascending
    order, equal entries allowed; ``load``: the block size (see the module
    docstring)."""

    __slots__ = ("_load", "_blocks", "_maxes", "_starts", "_len", "_hit")

    def __init__(self, entries: Iterable[Any] = (), load: int = LOAD) -> None:
        if load < 1:
            raise ValueError(f"load must be at least 1, got {load}")
        self._load = load
        self._blocks: list[list[Any]] = []
        self._maxes: list[Any] = []          # the last entry of each block
        self._starts: list[int] | None = []  # position of each block's first entry
        self._len = 0
        self._hit = (0, 0, -1)               # (start, end, block) of the block read last
        self.update(entries)

    # -- changes ------------------------------------------------------------------
    def update(self, entries: Iterable[Any]) -> None:
        """Add every entry of ``entries`` at once: sorted in with what is here
        (O((n + m) log(n + m))), for many entries at a time."""
        added = list(entries)
        if not added:
            return
        merged = list(itertools.chain.from_iterable(self._blocks))
        merged.extend(added)
        merged.sort()
        load = self._load
        self._blocks = [merged[i:i + load] for i in range(0, len(merged), load)]
        self._maxes = [block[-1] for block in self._blocks]
        self._len = len(merged)
        self._changed()

    def add(self, entry: Any) -> None:
        """Insert ``entry`` after any equal ones."""
        blocks, maxes = self._blocks, self._maxes
        if not blocks:
            blocks.append([entry])
            maxes.append(entry)
        else:
            i = bisect.bisect_right(maxes, entry)
            if i == len(blocks):   # above every entry: the last block takes it
                i -= 1
                blocks[i].append(entry)
                maxes[i] = entry
            else:
                bisect.insort_right(blocks[i], entry)
            if len(blocks[i]) > 2 * self._load:
                self._split(i)
        self._len += 1
        self._changed()

    def _split(self, i: int) -> None:
        block = self._blocks[i]
        half = len(block) // 2
        tail = block[half:]
        del block[half:]
        self._blocks.insert(i + 1, tail)
        self._maxes[i] = block[-1]
        self._maxes.insert(i + 1, tail[-1])

    def remove(self, entry: Any) -> None:
        """Remove one entry equal to ``entry``; ValueError if there is none."""
        maxes = self._maxes
        i = bisect.bisect_left(maxes, entry)
        if i < len(maxes):
            block = self._blocks[i]
            j = bisect.bisect_left(block, entry)
            if j < len(block) and block[j] == entry:
                del block[j]
                if block:
                    maxes[i] = block[-1]
                else:
                    del self._blocks[i]
                    del maxes[i]
                self._len -= 1
                self._changed()
                return
        raise ValueError(f"{entry!r} is not in the rows")

    def _changed(self) -> None:
        self._starts = None
        self._hit = (0, 0, -1)

    # -- reads --------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def _block_starts(self) -> list[int]:
        """The position of each block's first entry (rebuilt after a change)."""
        starts = self._starts
        if starts is None:
            starts = self._starts = list(itertools.accumulate(
                (len(block) for block in self._blocks[:-1]), initial=0))
        return starts

    def __getitem__(self, position: int) -> Any:
        start, end, b = self._hit
        if not start <= position < end:
            if position < 0:
                position += self._len
            if not 0 <= position < self._len:
                raise IndexError("SortedRows index out of range")
            starts = self._block_starts()
            b = bisect.bisect_right(starts, position) - 1
            start = starts[b]
            self._hit = (start, start + len(self._blocks[b]), b)
        return self._blocks[b][position - start]

    def bisect_left(self, value: Any, key: Callable[[Any], Any] | None = None) -> int:
        """:func:`bisect.bisect_left` of ``value`` in these entries (by ``key``
        of each, if given): the first position whose entry is not below
        ``value``.  O(log n), with no read by position: the block by its
        greatest entry, then the place in that block."""
        maxes = self._maxes
        b = bisect.bisect_left(maxes, value, key=key)
        if b == len(maxes):
            return self._len
        return self._block_starts()[b] + bisect.bisect_left(self._blocks[b], value, key=key)

    def bisect_right(self, value: Any, key: Callable[[Any], Any] | None = None) -> int:
        """:func:`bisect.bisect_right` of ``value`` in these entries (by ``key``
        of each, if given): the first position whose entry is above
        ``value``.  O(log n), as :meth:`bisect_left`."""
        maxes = self._maxes
        b = bisect.bisect_right(maxes, value, key=key)
        if b == len(maxes):
            return self._len
        return self._block_starts()[b] + bisect.bisect_right(self._blocks[b], value, key=key)

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self._blocks)

    def __repr__(self) -> str:
        return f"SortedRows({list(self)!r})"


__all__ = ["LOAD", "SortedRows"]
