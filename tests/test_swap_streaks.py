"""SwapStreaks: which nodes a store alone writes, by its claims' compare-and-swaps."""

import testtools

from nova_lite.db.swap_streaks import SwapStreaks


class TestPresumedAnotherWriter(testtools.TestCase):
    """PostgreSQL's streaks: a node is not presumed this store's alone."""

    def test_a_node_is_written_alone_after_a_streak_of_swaps(self):
        streaks = SwapStreaks(3, presumed_alone=False)
        self.assertFalse(streaks.alone("n"))
        for _ in range(2):
            streaks.count("n", swapped=True)
            self.assertFalse(streaks.alone("n"))
        streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))
        for _ in range(10):
            streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))
        self.assertFalse(streaks.alone("other"))

    def test_a_claim_that_is_not_a_swap_starts_the_streak_again(self):
        streaks = SwapStreaks(2, presumed_alone=False)
        streaks.count("n", swapped=True)
        streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))
        streaks.count("n", swapped=False)
        self.assertFalse(streaks.alone("n"))
        self.assertEqual(0, len(streaks))   # back at the presumed state: nothing kept
        streaks.count("n", swapped=True)
        self.assertFalse(streaks.alone("n"))
        streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))


class TestPresumedAlone(testtools.TestCase):
    """SQLite's streaks: a node is presumed this store's alone until a race."""

    def test_a_lost_race_makes_the_next_swaps_count_again(self):
        streaks = SwapStreaks(3, presumed_alone=True)
        self.assertTrue(streaks.alone("n"))
        streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))
        self.assertEqual(0, len(streaks))
        streaks.count("n", swapped=False)
        for _ in range(3):
            self.assertFalse(streaks.alone("n"))
            streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))
        self.assertEqual(0, len(streaks))
        self.assertTrue(streaks.alone("other"))

    def test_a_race_within_the_streak_starts_it_again(self):
        streaks = SwapStreaks(2, presumed_alone=True)
        streaks.count("n", swapped=False)
        streaks.count("n", swapped=True)
        streaks.count("n", swapped=False)
        streaks.count("n", swapped=True)
        self.assertFalse(streaks.alone("n"))
        streaks.count("n", swapped=True)
        self.assertTrue(streaks.alone("n"))


class TestBound(testtools.TestCase):

    def test_streaks_are_forgotten_when_one_more_node_would_pass_the_bound(self):
        streaks = SwapStreaks(2, presumed_alone=False, most_nodes=3)
        for node in ("a", "b", "c"):
            streaks.count(node, swapped=True)
            streaks.count(node, swapped=True)
        self.assertEqual(3, len(streaks))
        self.assertTrue(all(streaks.alone(n) for n in "abc"))
        # A node already kept moves on without forgetting the others.
        streaks.count("a", swapped=True)
        self.assertEqual(3, len(streaks))
        streaks.count("d", swapped=True)
        self.assertEqual(1, len(streaks))
        self.assertFalse(any(streaks.alone(n) for n in "abcd"))

    def test_presumed_alone_forgets_its_races_at_the_bound(self):
        streaks = SwapStreaks(2, presumed_alone=True, most_nodes=2)
        streaks.count("a", swapped=False)
        streaks.count("b", swapped=False)
        self.assertFalse(streaks.alone("a"))
        streaks.count("c", swapped=False)
        self.assertEqual(1, len(streaks))
        self.assertTrue(streaks.alone("a"))
        self.assertFalse(streaks.alone("c"))

    def test_bad_settings_are_refused(self):
        for after, most in ((0, 1), (1, 0), (-1, 5)):
            err = self.assertRaises(ValueError, SwapStreaks, after, False, most)
            self.assertIn(f"after={after}", str(err))
