"""``SortedRows`` holds what a plain sorted list holds, in the same order.

Random runs of adds, bulk updates and removals (many equal keys, blocks
of one to a few entries so that blocks split and empty often) against a
plain list kept sorted with :mod:`bisect`; every position, the length,
iteration, :mod:`bisect` searches by key and the rows' own searches
must agree after each step.
"""

import bisect
import operator

import hypothesis
from hypothesis import strategies as st
import testtools

from nova_lite.scheduler.sorted_rows import SortedRows

_KEY = operator.itemgetter(0)

entries = st.tuples(st.integers(-4, 4), st.sampled_from("abc"), st.integers(0, 3))
steps = st.lists(st.one_of(
    st.tuples(st.just("add"), entries),
    st.tuples(st.just("update"), st.lists(entries, max_size=12)),
    st.tuples(st.just("remove"), st.integers(0, 10**6)),
    st.tuples(st.just("remove_missing"), entries)), max_size=60)


class SortedRowsTests(testtools.TestCase):

    def check(self, rows, naive):
        self.assertEqual(len(naive), len(rows))
        self.assertEqual(naive, list(rows))
        self.assertEqual(naive, [rows[i] for i in range(len(rows))])
        self.assertEqual(naive[::-1], [rows[i] for i in range(len(rows) - 1, -1, -1)])
        if naive:
            self.assertEqual(naive[-1], rows[-1])
        for key in range(-5, 6):
            self.assertEqual(bisect.bisect_left(naive, key, key=_KEY),
                             bisect.bisect_left(rows, key, key=_KEY))
            self.assertEqual(bisect.bisect_right(naive, key, key=_KEY),
                             bisect.bisect_right(rows, key, key=_KEY))
            # its own searches, by block, give the same positions
            self.assertEqual(bisect.bisect_left(naive, key, key=_KEY),
                             rows.bisect_left(key, key=_KEY))
            self.assertEqual(bisect.bisect_right(naive, key, key=_KEY),
                             rows.bisect_right(key, key=_KEY))
        for entry in {*naive, (0, "b", 1), (-5, "a", 0), (5, "c", 3)}:
            self.assertEqual(bisect.bisect_left(naive, entry), rows.bisect_left(entry))
            self.assertEqual(bisect.bisect_right(naive, entry), rows.bisect_right(entry))
        self.assertRaises(IndexError, rows.__getitem__, len(naive))
        # each block's greatest entry is the one kept aside for it
        self.assertEqual([block[-1] for block in rows._blocks], rows._maxes)
        self.assertNotIn([], rows._blocks)

    @hypothesis.settings(max_examples=500)
    @hypothesis.given(st.lists(entries, max_size=20), steps, st.integers(1, 4))
    def test_agrees_with_a_sorted_list(self, initial, ops, load):
        rows = SortedRows(initial, load=load)
        naive = sorted(initial)
        self.check(rows, naive)
        for op, arg in ops:
            if op == "add":
                rows.add(arg)
                bisect.insort_right(naive, arg)
            elif op == "update":
                rows.update(arg)
                naive = sorted(naive + arg)
            elif op == "remove":
                if not naive:
                    continue
                entry = naive[arg % len(naive)]
                rows.remove(entry)
                naive.remove(entry)
            elif arg not in naive:
                self.assertRaises(ValueError, rows.remove, arg)
            self.check(rows, naive)

    def test_blocks_stay_within_twice_the_load(self):
        rows = SortedRows(load=3)
        for i in range(100):
            rows.add((i * 37 % 101,))
        self.assertLessEqual(max(len(b) for b in rows._blocks), 6)
        self.assertEqual(sorted((i * 37 % 101,) for i in range(100)), list(rows))
        self.assertEqual([b[-1] for b in rows._blocks], rows._maxes)

    def test_own_searches_pass_equal_keys_that_span_blocks(self):
        # one entry a block: the three 1s sit in three blocks
        rows = SortedRows([(0, "z"), (1, "a"), (1, "b"), (1, "c"), (2, "d")], load=1)
        self.assertEqual(1, rows.bisect_left(1, key=_KEY))
        self.assertEqual(4, rows.bisect_right(1, key=_KEY))
        self.assertEqual(5, rows.bisect_right(2, key=_KEY))
        self.assertEqual(0, rows.bisect_right(-1, key=_KEY))
        self.assertEqual(0, SortedRows().bisect_left(1, key=_KEY))

    def test_load_must_be_positive(self):
        self.assertRaises(ValueError, SortedRows, load=0)
