"""CPU-set specs: parse_cpu_spec and format_cpu_spec."""

import hypothesis
import testtools
from hypothesis import strategies as st

from nova_lite import hardware
from nova_lite.exception import InvalidCPUSpec, InvalidInput


class ParseCPUSpecTest(testtools.TestCase):

    def assertParses(self, spec, expected):
        self.assertEqual(expected, hardware.parse_cpu_spec(spec), f"spec {spec!r}")

    def test_single_ids(self):
        self.assertParses("1", {1})
        self.assertParses("1,2", {1, 2})
        self.assertParses("0", {0})

    def test_blank_items_are_ignored(self):
        self.assertParses(", ,   1 ,  ,,  2,    ,", {1, 2})
        self.assertParses("3,", {3})

    def test_blank_spec_is_empty(self):
        self.assertParses("", set())
        self.assertParses("  , ", set())

    def test_ranges(self):
        self.assertParses("1-1", {1})
        self.assertParses(" 1 - 1, 1 - 2 , 1 -3", {1, 2, 3})
        self.assertParses("0-7", set(range(8)))

    def test_exclusions(self):
        self.assertParses("1,^2", {1})
        self.assertParses("1-2, ^1", {2})
        self.assertParses("1-3,5,^2", {1, 3, 5})
        self.assertParses(" 1 -    3        ,   ^2,        5", {1, 3, 5})
        self.assertParses("0-3,^2, 8", {0, 1, 3, 8})

    def test_exclusion_applies_wherever_it_appears(self):
        self.assertParses("^1,0-3", {0, 2, 3})

    def test_space_after_caret(self):
        self.assertParses("1-3,^ 2", {1, 3})

    def test_everything_excluded_is_empty(self):
        self.assertParses(" 1,1, ^1", set())
        self.assertParses("1,^1", set())
        self.assertParses("^0-1", set())

    def test_excluded_range(self):
        self.assertParses("0-3,^1-2", {0, 3})
        self.assertParses("0-7,^2-3", {0, 1, 4, 5, 6, 7})

    def test_returns_a_mutable_set(self):
        self.assertIsInstance(hardware.parse_cpu_spec("1"), set)

    def test_malformed_items_raise(self):
        for spec in (" -1-3,5,^2", "1-3-,5,^2", "-3,5,^2", "1-,5,^2", "1-3,5,^2^",
                     "1-3,5,^2-", "--13,^^5,^2", "a-3,5,^2", "1-a,5,^2", "1-3,b,^2",
                     "1-3,5,^c", "3 - 1, 5 , ^ 2 ", "a", "3-1", "1-", "^", "-1",
                     "1-2-3", "1.5", "0x3", "1 2"):
            self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, spec)

    def test_error_quotes_bad_item_and_whole_spec(self):
        err = self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, "0-3,x")
        self.assertEqual('Invalid CPU spec "0-3,x": bad item "x"', str(err))

    def test_reversed_range_error_says_why(self):
        err = self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, "0, 3 - 1")
        self.assertIn('"0, 3 - 1"', str(err))
        self.assertIn('bad item "3 - 1"', str(err))
        self.assertIn("start 3 is greater than end 1", str(err))

    def test_error_is_invalid_input_and_value_error(self):
        err = self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, "^")
        self.assertIsInstance(err, InvalidInput)
        self.assertIsInstance(err, ValueError)
        self.assertIn('bad item "^"', str(err))

    def test_non_string_raises(self):
        for spec in (None, 3, {1, 2}, b"1-2"):
            err = self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, spec)
            self.assertIn(repr(spec), str(err))

    def test_huge_range_is_refused(self):
        err = self.assertRaises(InvalidCPUSpec, hardware.parse_cpu_spec, "0-99999999")
        self.assertIn("maximum", str(err))


class FormatCPUSpecTest(testtools.TestCase):

    def test_empty(self):
        self.assertEqual("", hardware.format_cpu_spec(set()))
        self.assertEqual("", hardware.format_cpu_spec([]))

    def test_ranges(self):
        self.assertEqual("1,3", hardware.format_cpu_spec({1, 3}))
        self.assertEqual("1,3", hardware.format_cpu_spec([3, 1]))
        self.assertEqual("1-2,4,6", hardware.format_cpu_spec({1, 2, 4, 6}))
        self.assertEqual("0-1", hardware.format_cpu_spec({0, 1}))
        self.assertEqual("0-3,5,7-8", hardware.format_cpu_spec({0, 1, 2, 3, 5, 7, 8}))
        self.assertEqual("10-11,13-16,19-20,40,42,48", hardware.format_cpu_spec(
            [10, 11, 13, 14, 15, 16, 19, 20, 40, 42, 48]))

    def test_without_ranges(self):
        self.assertEqual("1,2,4,6", hardware.format_cpu_spec({1, 2, 4, 6}, allow_ranges=False))
        self.assertEqual("10,11,13,14,15,16,19,20,40,42,48", hardware.format_cpu_spec(
            [48, 10, 11, 13, 14, 15, 16, 19, 20, 40, 42], allow_ranges=False))

    def test_duplicates_collapse(self):
        self.assertEqual("1-2", hardware.format_cpu_spec([2, 1, 2]))

    def test_bad_ids_raise(self):
        for cpus in ([-1], ["1"], [True], [1.0]):
            self.assertRaises(InvalidInput, hardware.format_cpu_spec, cpus)

    @hypothesis.given(st.sets(st.integers(min_value=0, max_value=300)), st.booleans())
    def test_format_then_parse_round_trips(self, cpus, allow_ranges):
        spec = hardware.format_cpu_spec(cpus, allow_ranges=allow_ranges)
        self.assertEqual(cpus, hardware.parse_cpu_spec(spec))
