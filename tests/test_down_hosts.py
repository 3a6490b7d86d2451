"""Which hosts that are down a live compute service takes on in one pass."""

from nova_lite.compute.down_hosts import down_hosts_share
from tests import base

DOWN = [f"down-{i:03d}" for i in range(100)]


class TestDownHostsShare(base.TestCase):

    def test_at_most_the_limit_sorted_by_name(self):
        share = down_hosts_share(DOWN, "live-1", 10)
        self.assertEqual(10, len(share))
        self.assertEqual(sorted(share), share)
        self.assertTrue(set(share) <= set(DOWN))

    def test_fewer_than_the_limit_are_all_taken(self):
        self.assertEqual(["a", "b"], down_hosts_share(["b", "a", "b"], "live-1", 10))
        self.assertEqual([], down_hosts_share([], "live-1", 10))

    def test_the_same_peer_takes_the_same_hosts_whatever_the_order_given(self):
        self.assertEqual(down_hosts_share(DOWN, "live-1", 10),
                         down_hosts_share(list(reversed(DOWN)), "live-1", 10))

    def test_live_peers_take_different_hosts(self):
        shares = [frozenset(down_hosts_share(DOWN, f"live-{i}", 10)) for i in range(20)]
        # Not every peer takes the same first ten: between them they cover
        # most of the outage in one interval.
        self.assertGreater(len(set(shares)), 15)
        self.assertGreater(len(frozenset().union(*shares)), 70)
