"""The consistent hash ring."""

import collections
import uuid

import testtools

from nova_lite_ironic.hash_ring import HashRing

KEYS = [str(uuid.UUID(int=i * 7919 + 17)) for i in range(3000)]


class TestHashRing(testtools.TestCase):

    def test_every_key_has_one_owner_among_the_hosts(self):
        ring = HashRing(["a", "b", "c"])
        owners = {ring.owner(k) for k in KEYS}
        self.assertEqual({"a", "b", "c"}, owners)
        for key in KEYS[:50]:
            self.assertEqual(1, sum(ring.owns(h, key) for h in "abc"))

    def test_same_hosts_same_answer_in_any_order(self):
        one, two = HashRing(["a", "b", "c"]), HashRing(["c", "a", "b", "a"])
        self.assertEqual([one.owner(k) for k in KEYS], [two.owner(k) for k in KEYS])

    def test_host_names_differing_in_case_are_one_member(self):
        # As Nova: the ring is keyed by lower-cased host names.
        ring = HashRing(["Host1", "host1", "HOST2"])
        self.assertEqual(frozenset({"host1", "host2"}), ring.hosts)
        self.assertEqual([HashRing(["host1", "host2"]).owner(k) for k in KEYS[:200]],
                         [ring.owner(k) for k in KEYS[:200]])
        for key in KEYS[:50]:
            self.assertEqual(ring.owns("host1", key), ring.owns("HoSt1", key))

    def test_split_is_roughly_even(self):
        ring = HashRing(["a", "b", "c", "d"])
        counts = collections.Counter(ring.owner(k) for k in KEYS)
        for count in counts.values():
            self.assertGreater(count, len(KEYS) / 4 * 0.7, counts)
            self.assertLess(count, len(KEYS) / 4 * 1.3, counts)

    def test_a_host_leaving_moves_only_its_keys(self):
        before = HashRing(["a", "b", "c"])
        after = HashRing(["a", "b"])
        for key in KEYS:
            if before.owner(key) != "c":
                self.assertEqual(before.owner(key), after.owner(key))
            else:
                self.assertIn(after.owner(key), ("a", "b"))

    def test_a_host_joining_takes_about_its_share(self):
        before = HashRing(["a", "b", "c"])
        after = HashRing(["a", "b", "c", "d"])
        moved = [k for k in KEYS if before.owner(k) != after.owner(k)]
        self.assertTrue(all(after.owner(k) == "d" for k in moved))
        self.assertLess(len(moved), len(KEYS) / 4 * 1.3)

    def test_single_host_owns_everything(self):
        ring = HashRing(["only"])
        self.assertTrue(all(ring.owns("only", k) for k in KEYS[:100]))

    def test_bad_arguments(self):
        self.assertRaises(ValueError, HashRing, [])
        self.assertRaises(ValueError, HashRing, ["a"], points_per_host=0)
