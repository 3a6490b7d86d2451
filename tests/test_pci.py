"""PCI pools, claims, NUMA policies and the PF/VF rule."""

import attrs
import testtools

from nova_lite import pci
from nova_lite.exception import InvalidInput, NovaLiteError
from nova_lite.objects import PciDevice, PciRequest

GPU = ("10de", "1db4")
PF = ("8086", "1572")
VF = ("8086", "154c")


def dev(address, ids=GPU, numa_node=0, dev_type="type-PCI", parent_addr=None):
    return PciDevice(address=address, vendor_id=ids[0], product_id=ids[1],
                     dev_type=dev_type, numa_node=numa_node, parent_addr=parent_addr)


def req(count=1, ids=GPU, policy="legacy", alias=None):
    return PciRequest(count=count, vendor_id=ids[0], product_id=ids[1],
                      numa_policy=policy, alias_name=alias)


def sriov_nic():
    """One PF on node 0 with two VFs."""
    return [dev("0000:81:00.0", PF, dev_type="type-PF"),
            dev("0000:81:10.0", VF, dev_type="type-VF", parent_addr="0000:81:00.0"),
            dev("0000:81:10.2", VF, dev_type="type-VF", parent_addr="0000:81:00.0")]


class PoolsTest(testtools.TestCase):

    def test_pools_group_by_vendor_product_node_type(self):
        devices = [dev("0000:04:00.0", numa_node=0), dev("0000:05:00.0", numa_node=0),
                   dev("0000:84:00.0", numa_node=1), dev("0000:06:00.0", numa_node=None)]
        stats = pci.PciStats(devices, frozenset({"0000:05:00.0"}))
        self.assertEqual(
            (pci.PciPool("10de", "1db4", None, "type-PCI", count=1, free=1),
             pci.PciPool("10de", "1db4", 0, "type-PCI", count=2, free=1),
             pci.PciPool("10de", "1db4", 1, "type-PCI", count=1, free=1)),
            stats.pools())

    def test_no_devices(self):
        stats = pci.PciStats([], frozenset())
        self.assertEqual((), stats.pools())
        self.assertTrue(stats.supports([]))
        self.assertFalse(stats.supports([req()]))

    def test_unknown_in_use_addresses_are_ignored(self):
        stats = pci.PciStats([dev("0000:04:00.0")], frozenset({"0000:ff:00.0"}))
        self.assertEqual(1, stats.pools()[0].free)

    def test_duplicate_addresses_are_refused(self):
        self.assertRaises(InvalidInput, pci.PciStats,
                          [dev("0000:04:00.0"), dev("0000:04:00.0")], frozenset())

    def test_records_only(self):
        self.assertRaises(InvalidInput, pci.PciStats, [{"address": "0000:04:00.0"}], frozenset())


class ClaimTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.stats = pci.PciStats(
            [dev("0000:84:00.0", numa_node=1), dev("0000:05:00.0", numa_node=0),
             dev("0000:04:00.0", numa_node=0), dev("0000:06:00.0", numa_node=None)],
            frozenset())

    def test_claim_lowest_address_first(self):
        self.assertEqual(("0000:04:00.0",), self.stats.claim([req()]))
        self.assertEqual(("0000:04:00.0", "0000:05:00.0", "0000:06:00.0"),
                         self.stats.claim([req(3)]))

    def test_address_order_is_numeric_not_textual(self):
        stats = pci.PciStats([dev("0000:0a:00.0"), dev("0000:09:00.0")], frozenset())
        self.assertEqual(("0000:09:00.0",), stats.claim([req()]))

    def test_claim_skips_devices_in_use(self):
        stats = attrs.evolve(self.stats, in_use=frozenset({"0000:04:00.0"}))
        self.assertEqual(("0000:05:00.0",), stats.claim([req()]))

    def test_claim_does_not_mutate(self):
        self.stats.claim([req(2)])
        self.assertEqual(frozenset(), self.stats.in_use)
        self.assertEqual(("0000:04:00.0",), self.stats.claim([req()]))

    def test_with_claimed_and_released(self):
        addresses = self.stats.claim([req(2)])
        claimed = self.stats.with_claimed(addresses)
        self.assertEqual(("0000:06:00.0",), claimed.claim([req()]))
        self.assertEqual(self.stats, claimed.with_released(addresses))

    def test_several_requests_take_distinct_devices(self):
        stats = pci.PciStats([dev("0000:04:00.0"), dev("0000:05:00.0"),
                              dev("0000:81:00.0", PF, dev_type="type-PF")], frozenset())
        self.assertEqual(("0000:04:00.0", "0000:81:00.0", "0000:05:00.0"),
                         stats.claim([req(), req(ids=PF), req()]))

    def test_too_many_fails_naming_request(self):
        err = self.assertRaises(pci.PciClaimError, self.stats.claim, [req(5, alias="gpu")])
        self.assertIsInstance(err, NovaLiteError)
        self.assertIn("Claim pci failed", str(err))
        self.assertIn("5 x 10de:1db4", str(err))
        self.assertIn('alias "gpu"', str(err))
        self.assertIn("only 4 free", str(err))
        self.assertEqual(4, err.available)
        self.assertFalse(self.stats.supports([req(5)]))

    def test_unknown_product_fails(self):
        err = self.assertRaises(pci.PciClaimError, self.stats.claim, [req(ids=("dead", "beef"))])
        self.assertIn("1 x dead:beef", str(err))

    def test_failure_names_the_request_that_failed(self):
        err = self.assertRaises(pci.PciClaimError, self.stats.claim, [req(2), req(3)])
        self.assertIn("3 x 10de:1db4", str(err))
        self.assertEqual(2, err.available)


class NUMAPolicyTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.stats = pci.PciStats(
            [dev("0000:04:00.0", numa_node=0), dev("0000:06:00.0", numa_node=None),
             dev("0000:84:00.0", numa_node=1)], frozenset())

    def test_no_numa_topology_takes_any_device(self):
        for policy in ("legacy", "required", "preferred"):
            self.assertEqual(3, len(self.stats.claim([req(3, policy=policy)], numa_cells=None)))

    def test_required_only_local(self):
        self.assertEqual(("0000:84:00.0",), self.stats.claim([req(policy="required")], {1}))
        self.assertFalse(self.stats.supports([req(2, policy="required")], {1}))
        err = self.assertRaises(pci.PciClaimError, self.stats.claim,
                                [req(2, policy="required")], {1})
        self.assertIn('numa_policy "required"', str(err))
        self.assertIn("NUMA cells [1]", str(err))

    def test_required_refuses_devices_without_numa_node(self):
        stats = pci.PciStats([dev("0000:06:00.0", numa_node=None)], frozenset())
        self.assertFalse(stats.supports([req(policy="required")], {0}))

    def test_legacy_allows_local_or_unknown_node(self):
        # NUMA-local devices come first, then the lowest address.
        self.assertEqual(("0000:84:00.0", "0000:06:00.0"),
                         self.stats.claim([req(2, policy="legacy")], {1}))
        self.assertFalse(self.stats.supports([req(3, policy="legacy")], {1}))

    def test_preferred_takes_local_first_then_any(self):
        self.assertEqual(("0000:84:00.0",), self.stats.claim([req(policy="preferred")], {1}))
        self.assertEqual(("0000:84:00.0", "0000:04:00.0", "0000:06:00.0"),
                         self.stats.claim([req(3, policy="preferred")], {1}))

    def test_preferred_with_nothing_local(self):
        self.assertEqual(("0000:04:00.0",), self.stats.claim([req(policy="preferred")], {7}))

    def test_several_cells(self):
        self.assertEqual(("0000:04:00.0", "0000:84:00.0"),
                         self.stats.claim([req(2, policy="required")], {0, 1}))


class SRIOVTest(testtools.TestCase):

    def test_all_free(self):
        stats = pci.PciStats(sriov_nic(), frozenset())
        self.assertEqual([("154c", 2), ("1572", 1)],
                         [(p.product_id, p.free) for p in stats.pools()])
        self.assertEqual(3, len(stats.free_devices()))

    def test_pf_with_vf_in_use_is_not_free(self):
        stats = pci.PciStats(sriov_nic(), frozenset({"0000:81:10.0"}))
        self.assertFalse(stats.supports([req(ids=PF)]))
        self.assertEqual(("0000:81:10.2",), stats.claim([req(ids=VF)]))
        pf_pool = next(p for p in stats.pools() if p.dev_type == "type-PF")
        self.assertEqual((1, 0), (pf_pool.count, pf_pool.free))

    def test_vfs_of_allocated_pf_are_not_free(self):
        stats = pci.PciStats(sriov_nic(), frozenset({"0000:81:00.0"}))
        self.assertFalse(stats.supports([req(ids=VF)]))
        self.assertEqual((), stats.free_devices())

    def test_one_claim_respects_the_rule_between_its_requests(self):
        stats = pci.PciStats(sriov_nic(), frozenset())
        self.assertFalse(stats.supports([req(ids=VF), req(ids=PF)]))
        self.assertFalse(stats.supports([req(ids=PF), req(ids=VF)]))
        self.assertEqual(("0000:81:10.0", "0000:81:10.2"), stats.claim([req(2, ids=VF)]))

    def test_other_pfs_are_unaffected(self):
        devices = sriov_nic() + [
            dev("0000:82:00.0", PF, dev_type="type-PF"),
            dev("0000:82:10.0", VF, dev_type="type-VF", parent_addr="0000:82:00.0")]
        stats = pci.PciStats(devices, frozenset({"0000:81:00.0"}))
        self.assertEqual(("0000:82:10.0",), stats.claim([req(ids=VF)]))
        self.assertEqual(("0000:82:00.0",), stats.claim([req(ids=PF)]))


class VdpaTest(testtools.TestCase):

    def test_vdpa_devices_never_serve_an_alias_request(self):
        devices = [dev("0000:81:00.0", PF, dev_type="type-PF"),
                   dev("0000:81:10.0", VF, dev_type="vdpa", parent_addr="0000:81:00.0"),
                   dev("0000:81:10.2", VF, dev_type="type-VF", parent_addr="0000:81:00.0")]
        stats = pci.PciStats(devices=devices)
        request = PciRequest(count=1, vendor_id=VF[0], product_id=VF[1])
        self.assertEqual(("0000:81:10.2",), stats.claim([request]))
        self.assertRaises(pci.PciClaimError, stats.claim,
                          [PciRequest(count=2, vendor_id=VF[0], product_id=VF[1])])
        self.assertIn("vdpa", {p.dev_type for p in stats.pools()})
