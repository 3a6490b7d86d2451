"""Claims on the ResourceTracker: arithmetic, messages, NUMA and PCI.

Real trackers on the fake driver and SQLite files; an audit after a claim
must give the same usage as the claim left.
"""

import attrs

from nova_lite.compute.claims import Claim, ComputeResourcesUnavailable, NopClaim
from nova_lite.exception import InvalidInput, NodeNotFound
from nova_lite.numa import NUMA_FIT_FAILED
from nova_lite.objects import (
    InstanceNUMACell, InstanceNUMATopology, NUMACell, NUMATopology, Overhead, PciDevice,
    PciRequest)
from tests import base
from tests.base import flavor, instance


class ClaimTestCase(base.TestCase):

    def claim(self, rt, flv, nodename=None, limits=None, **inst_kw):
        return rt.instance_claim(instance(flv, **inst_kw), nodename or self.host,
                                 limits=limits)

    def rejected(self, rt, flv, nodename=None, limits=None, **inst_kw):
        return self.assertRaises(ComputeResourcesUnavailable, self.claim, rt, flv,
                                 nodename, limits, **inst_kw)

    def audit_keeps(self, rt, nodename=None):
        """An audit rebuilds the same usage from the records."""
        nodename = nodename or self.host
        before = dict(rt.get_node(nodename).usage)
        rt.update_available_resource()
        self.assertUsage(rt, nodename, before)


class TestClaimArithmetic(ClaimTestCase):

    def test_requested_equal_to_free_passes_one_more_fails(self):
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100,
                                  settings=self.settings(cpu_allocation_ratio=1.0,
                                                         reserved_host_memory_mb=0))
        self.claim(rt, flavor(vcpus=3, memory_mb=8000, root_gb=99))
        node = rt.get_node(self.host)
        self.assertEqual((1, 192, 1), (node.free("VCPU"), node.free("MEMORY_MB"),
                                       node.free("DISK_GB")))
        exc = self.rejected(rt, flavor(vcpus=2, memory_mb=192, root_gb=1))
        self.assertEqual(["Free vcpu 1.00 VCPU < requested 2 VCPU"], exc.reasons)
        exc = self.rejected(rt, flavor(vcpus=1, memory_mb=193, root_gb=1))
        self.assertEqual(["Free memory 192.00 MB < requested 193 MB"], exc.reasons)
        exc = self.rejected(rt, flavor(vcpus=1, memory_mb=192, root_gb=2))
        self.assertEqual(["Free disk 1.00 GB < requested 2 GB"], exc.reasons)
        # the exact fit
        claim = self.claim(rt, flavor(vcpus=1, memory_mb=192, root_gb=1))
        self.assertIsInstance(claim, Claim)
        node = rt.get_node(self.host)
        self.assertEqual((0, 0, 0), (node.free("VCPU"), node.free("MEMORY_MB"),
                                     node.free("DISK_GB")))
        self.assertUsage(rt, self.host, {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 100})
        self.audit_keeps(rt)

    def test_rejection_message_in_novas_words(self):
        _, rt = self.make_tracker(vcpus=8, memory_mb=8192, local_gb=45)
        exc = self.rejected(rt, flavor(vcpus=1, memory_mb=16384, root_gb=50))
        self.assertEqual("Insufficient compute resources: Free memory 8192.00 MB < requested "
                         "16384 MB; Free disk 45.00 GB < requested 50 GB.", str(exc))
        self.assertEqual(["Free memory 8192.00 MB < requested 16384 MB",
                          "Free disk 45.00 GB < requested 50 GB"], exc.reasons)
        self.assertUsage(rt, self.host, {})

    def test_every_dimension_is_reported(self):
        _, rt = self.make_tracker(vcpus=2, memory_mb=1024, local_gb=10,
                                  settings=self.settings(cpu_allocation_ratio=1.0,
                                                         reserved_host_memory_mb=0))
        exc = self.rejected(rt, flavor(vcpus=3, memory_mb=2048, root_gb=8, swap=4096))
        self.assertEqual(
            "Insufficient compute resources: Free memory 1024.00 MB < requested 2048 MB; "
            "Free disk 10.00 GB < requested 12 GB; Free vcpu 2.00 VCPU < requested 3 VCPU.",
            str(exc))

    def test_overhead_counts_in_claim_and_usage(self):
        _, rt = self.make_tracker(vcpus=4, memory_mb=2048, local_gb=10,
                                  overhead=Overhead(memory_mb=256, disk_gb=1, vcpus=1),
                                  settings=self.settings(cpu_allocation_ratio=1.0,
                                                         reserved_host_memory_mb=0))
        claim = self.claim(rt, flavor(vcpus=1, memory_mb=768, root_gb=4))
        expected = {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 5}
        self.assertEqual(expected, claim.claimed)
        self.assertUsage(rt, self.host, expected)
        self.audit_keeps(rt)
        # the exact fit counts the overhead too
        self.claim(rt, flavor(vcpus=1, memory_mb=768, root_gb=4))
        exc = self.rejected(rt, flavor(vcpus=1, memory_mb=1, root_gb=0))
        self.assertEqual(["Free memory 0.00 MB < requested 257 MB",
                          "Free disk 0.00 GB < requested 1 GB",
                          "Free vcpu 0.00 VCPU < requested 2 VCPU"], exc.reasons)
        self.audit_keeps(rt)
        self.assertUsage(rt, self.host, {"VCPU": 4, "MEMORY_MB": 2048, "DISK_GB": 10})

    def test_explicit_limits_narrow(self):
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100,
                                  settings=self.settings(reserved_host_memory_mb=512,
                                                         reserved_host_disk_mb=10 * 1024))
        self.claim(rt, flavor(vcpus=1, memory_mb=1000, root_gb=10))
        limits = {"memory_mb": 4096, "disk_gb": 50, "vcpu": 4}
        # free = limit - reserved - used
        exc = self.rejected(rt, flavor(vcpus=4, memory_mb=2585, root_gb=31), limits=limits)
        self.assertEqual(["Free memory 2584.00 MB < requested 2585 MB",
                          "Free disk 30.00 GB < requested 31 GB",
                          "Free vcpu 3.00 VCPU < requested 4 VCPU"], exc.reasons)
        self.claim(rt, flavor(vcpus=3, memory_mb=2584, root_gb=30), limits=limits)
        # without limits the inventory still has room
        self.claim(rt, flavor(vcpus=1, memory_mb=1000, root_gb=10))
        self.audit_keeps(rt)

    def test_explicit_limits_never_widen(self):
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100,
                                  settings=self.settings(reserved_host_memory_mb=512,
                                                         cpu_allocation_ratio=1.0))
        limits = {"memory_mb": 10 ** 6, "disk_gb": 10 ** 6, "vcpu": 10 ** 6}
        exc = self.rejected(rt, flavor(vcpus=5, memory_mb=7681, root_gb=101), limits=limits)
        self.assertEqual(["Free memory 7680.00 MB < requested 7681 MB",
                          "Free disk 100.00 GB < requested 101 GB",
                          "Free vcpu 4.00 VCPU < requested 5 VCPU"], exc.reasons)
        self.claim(rt, flavor(vcpus=4, memory_mb=7680, root_gb=100), limits=limits)

    def test_limit_as_the_scheduler_sends_it_agrees_with_inventory(self):
        # L = total x ratio: with ratio 1 and reserved R, free = L - R - used.
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100,
                                  settings=self.settings(reserved_host_memory_mb=512))
        limits = {"memory_mb": 8192}
        exc = self.rejected(rt, flavor(memory_mb=7681), limits=limits)
        self.assertEqual(["Free memory 7680.00 MB < requested 7681 MB"], exc.reasons)
        self.claim(rt, flavor(memory_mb=7680), limits=limits)

    def test_reserved_host_amounts_count(self):
        # Nova's default reserved_host_memory_mb is 512
        settings = self.settings()
        self.assertEqual(512, settings.reserved_host_memory_mb)
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100, settings=settings)
        node = rt.get_node(self.host)
        self.assertEqual(512, node.inventory("MEMORY_MB").reserved)
        self.assertEqual(7680, node.capacity("MEMORY_MB"))
        exc = self.rejected(rt, flavor(memory_mb=7681))
        self.assertEqual(["Free memory 7680.00 MB < requested 7681 MB"], exc.reasons)
        self.claim(rt, flavor(memory_mb=7680))
        # reserved is in the inventory, never in the usage
        self.assertUsage(rt, self.host, {"VCPU": 1, "MEMORY_MB": 7680, "DISK_GB": 1})
        self.assertEqual(0, rt.get_node(self.host).free("MEMORY_MB"))

    def test_reserved_host_cpus_and_disk_count(self):
        settings = self.settings(reserved_host_cpus=1, reserved_host_disk_mb=1025,
                                 cpu_allocation_ratio=1.0, reserved_host_memory_mb=0)
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=100, settings=settings)
        exc = self.rejected(rt, flavor(vcpus=4, root_gb=99))
        self.assertEqual(["Free disk 98.00 GB < requested 99 GB",
                          "Free vcpu 3.00 VCPU < requested 4 VCPU"], exc.reasons)
        self.claim(rt, flavor(vcpus=3, root_gb=98))

    def test_capacity_is_exact(self):
        settings = self.settings(cpu_allocation_ratio=0.7, reserved_host_memory_mb=0)
        _, rt = self.make_tracker(vcpus=10, settings=settings)
        self.assertEqual(7, rt.get_node(self.host).capacity("VCPU"))
        for _ in range(7):
            self.claim(rt, flavor(vcpus=1))
        exc = self.rejected(rt, flavor(vcpus=1))
        self.assertEqual(["Free vcpu 0.00 VCPU < requested 1 VCPU"], exc.reasons)

    def test_capacity_exact_where_floats_are_not(self):
        # floor(100 * 0.29) is 28 in binary floats, 29 exactly
        settings = self.settings(cpu_allocation_ratio=0.29, reserved_host_memory_mb=0)
        _, rt = self.make_tracker(vcpus=100, settings=settings)
        self.assertEqual(29, rt.get_node(self.host).capacity("VCPU"))
        self.claim(rt, flavor(vcpus=29))
        self.rejected(rt, flavor(vcpus=1))

    def test_swap_counts_as_disk(self):
        _, rt = self.make_tracker(vcpus=4, memory_mb=8192, local_gb=10)
        exc = self.rejected(rt, flavor(root_gb=9, swap=1025))
        self.assertEqual(["Free disk 10.00 GB < requested 11 GB"], exc.reasons)
        claim = self.claim(rt, flavor(root_gb=8, ephemeral_gb=1, swap=1024))
        self.assertEqual(10, claim.claimed["DISK_GB"])
        self.assertUsage(rt, self.host, {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 10})
        self.audit_keeps(rt)

    def test_unknown_node_is_a_hard_error(self):
        _, rt = self.make_tracker()
        exc = self.assertRaises(NodeNotFound, self.claim, rt, flavor(), "no-such-node")
        self.assertIn("no-such-node", str(exc))
        self.assertEqual("no-such-node", exc.nodename)

    def test_claim_before_any_audit_is_a_hard_error(self):
        _, rt = self.make_tracker(audit=False)
        exc = self.assertRaises(NodeNotFound, self.claim, rt, flavor(), self.host)
        self.assertIn(self.host, str(exc))


class TestClaimObjects(ClaimTestCase):

    def test_claim_places_the_instance(self):
        _, rt = self.make_tracker()
        inst = instance(flavor())
        claim = rt.instance_claim(inst, self.host)
        self.assertEqual((self.host, self.host), (claim.instance.host, claim.instance.node))
        self.assertEqual(inst.uuid, claim.instance.uuid)
        self.assertEqual(self.host, claim.nodename)
        self.assertIsNone(claim.migration)
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual((self.host, self.host), (stored.host, stored.node))

    def test_context_manager_aborts_on_exception_and_reraises(self):
        driver, rt = self.make_tracker()
        inst = instance(flavor(vcpus=2, memory_mb=1024, root_gb=5))

        class SpawnFailed(Exception):
            pass

        def build():
            with rt.instance_claim(inst, self.host) as claim:
                self.assertUsage(rt, self.host, {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 5})
                driver.spawn(claim.instance)
                raise SpawnFailed("boom")
        self.assertRaises(SpawnFailed, build)
        self.assertUsage(rt, self.host, {})
        self.assertIsNone(rt.store.get_instance(inst.uuid).node)
        self.audit_keeps(rt)
        self.assertUsage(rt, self.host, {})

    def test_context_manager_keeps_claim_on_success(self):
        _, rt = self.make_tracker()
        with rt.instance_claim(instance(flavor()), self.host) as claim:
            pass
        self.assertEqual({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, claim.claimed)
        self.assertUsage(rt, self.host, claim.claimed)
        claim.abort()
        claim.abort()   # idempotent
        self.assertUsage(rt, self.host, {})

    def test_abort_instance_claim(self):
        _, rt = self.make_tracker()
        keep = self.claim(rt, flavor(vcpus=2))
        drop = self.claim(rt, flavor(vcpus=3))
        rt.abort_instance_claim(drop.instance, self.host)
        self.assertUsage(rt, self.host, keep.claimed)
        self.audit_keeps(rt)
        self.assertUsage(rt, self.host, keep.claimed)

    def test_nop_claim(self):
        claim = NopClaim()
        self.assertEqual({}, claim.claimed)
        self.assertIsNone(claim.migration)
        claim.abort()

        def fail():
            with NopClaim() as c:
                self.assertIsInstance(c, NopClaim)
                raise KeyError("x")
        self.assertRaises(KeyError, fail)

    def test_rebuild_on_the_same_node_is_a_nop_claim(self):
        _, rt = self.make_tracker()
        claim = self.claim(rt, flavor(vcpus=2))
        before = dict(rt.get_node(self.host).usage)
        rebuild = rt.rebuild_claim(claim.instance, self.host)
        self.assertIsInstance(rebuild, NopClaim)
        self.assertEqual({}, rebuild.claimed)
        self.assertUsage(rt, self.host, before)
        self.assertRaises(NodeNotFound, rt.rebuild_claim, claim.instance, "elsewhere")

    def test_rebuild_elsewhere_claims_there(self):
        _, rt = self.make_tracker("fake.multinode", nodes=["a", "b"], vcpus=4)
        inst = rt.instance_claim(instance(flavor(vcpus=2)), "a").instance
        evac = rt.rebuild_claim(inst, "b")
        self.assertEqual("evacuation", evac.migration.migration_type)
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}, evac.claimed)
        self.assertUsage(rt, "b", evac.claimed)
        self.audit_keeps(rt, "b")
        evac.abort()
        self.assertUsage(rt, "b", {})
        self.assertEqual("error", rt.store.list_migrations(inst.uuid)[0].status)


def numa_host():
    """Two cells, each with 4 dedicated CPUs (siblings paired) and 2 shared CPUs."""
    return NUMATopology(cells=[
        NUMACell(id=0, cpuset={0, 1}, pcpuset={2, 3, 4, 5}, memory_mb=4096,
                 siblings=[{2, 3}, {4, 5}]),
        NUMACell(id=1, cpuset={6, 7}, pcpuset={8, 9, 10, 11}, memory_mb=4096,
                 siblings=[{8, 9}, {10, 11}])])


def dedicated(vcpus, memory_mb=512):
    cell = InstanceNUMACell(id=0, cpuset=set(range(vcpus)), memory_mb=memory_mb,
                            cpu_policy="dedicated")
    return InstanceNUMATopology(cells=[cell])


GPU = PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4", numa_node=0)
GPU2 = PciDevice(address="0000:82:00.0", vendor_id="10de", product_id="1db4", numa_node=1)


class TestNUMAAndPCIClaims(ClaimTestCase):

    def tracker(self, **kw):
        settings = self.settings(cpu_allocation_ratio=1.0, reserved_host_memory_mb=0)
        return self.make_tracker(vcpus=4, pcpus=8, memory_mb=8192, local_gb=100,
                                 numa_topology=numa_host(), settings=settings, **kw)

    def test_dedicated_instance_gets_pinned_cpus(self):
        _, rt = self.tracker()
        flv = flavor(vcpus=3, memory_mb=1024)
        claim = self.claim(rt, flv, numa_topology=dedicated(3, 1024))
        self.assertEqual({"PCPU": 3, "MEMORY_MB": 1024, "DISK_GB": 1}, claim.claimed)
        cell, = claim.instance.numa_topology.cells
        self.assertIn(cell.host_cell, (0, 1))
        pinned = cell.pinned_host_cpus
        self.assertEqual(3, len(pinned))
        self.assertLessEqual(pinned, numa_host().cell(cell.host_cell).pcpuset)
        self.assertEqual({0, 1, 2}, set(cell.cpu_pinning))
        # the pinning is recorded with the instance and the allocation
        stored = rt.store.get_instance(claim.instance.uuid)
        self.assertEqual(pinned, stored.numa_topology.cells[0].pinned_host_cpus)
        # a second one lands on the other cell, on different CPUs
        other = self.claim(rt, flv, numa_topology=dedicated(3, 1024))
        other_cell, = other.instance.numa_topology.cells
        self.assertNotEqual(cell.host_cell, other_cell.host_cell)
        self.assertFalse(pinned & other_cell.pinned_host_cpus)
        self.audit_keeps(rt)
        node = rt.get_node(self.host)
        self.assertEqual(2, len(node.numa_placements))
        pinned_now = set().union(*(u.pinned_cpus for u in node.numa_usage()))
        self.assertEqual(pinned | other_cell.pinned_host_cpus, pinned_now)

    def test_instance_that_does_not_fit_is_rejected_with_the_numa_reason(self):
        _, rt = self.tracker()
        self.claim(rt, flavor(vcpus=3), numa_topology=dedicated(3))
        self.claim(rt, flavor(vcpus=3), numa_topology=dedicated(3))
        # 2 PCPUs are free in the inventory, but one on each cell
        self.assertEqual(2, rt.get_node(self.host).free("PCPU"))
        exc = self.rejected(rt, flavor(vcpus=2), numa_topology=dedicated(2))
        self.assertEqual(1, len(exc.reasons), exc.reasons)
        self.assertTrue(exc.reasons[0].startswith(NUMA_FIT_FAILED), exc.reasons)
        self.assertIn(NUMA_FIT_FAILED, str(exc))
        self.assertUsage(rt, self.host, {"PCPU": 6, "MEMORY_MB": 1024, "DISK_GB": 2})
        # one CPU still fits
        self.claim(rt, flavor(vcpus=1), numa_topology=dedicated(1))

    def test_dedicated_flavor_alone_gets_pinned_cpus(self):
        """hw:cpu_policy=dedicated in the flavor is enough, as in Nova."""
        _, rt = self.tracker()
        pinned = flavor(name="pinned", vcpus=4, memory_mb=1024,
                        extra_specs={"hw:cpu_policy": "dedicated"})
        first = self.claim(rt, pinned)
        self.assertEqual({"PCPU": 4, "MEMORY_MB": 1024, "DISK_GB": 1}, first.claimed)
        cell, = first.instance.numa_topology.cells
        self.assertEqual(4, len(cell.pinned_host_cpus))
        self.assertEqual(numa_host().cell(cell.host_cell).pcpuset, cell.pinned_host_cpus)
        second = self.claim(rt, pinned)
        self.assertFalse(cell.pinned_host_cpus
                         & second.instance.numa_topology.cells[0].pinned_host_cpus)
        exc = self.rejected(rt, flavor(name="one", vcpus=1,
                                       extra_specs={"hw:cpu_policy": "dedicated"}))
        self.assertIn(NUMA_FIT_FAILED, str(exc))
        self.audit_keeps(rt)

    def test_numa_nodes_flavor_spreads_over_cells(self):
        _, rt = self.tracker()
        spread = flavor(vcpus=4, memory_mb=2048,
                        extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"})
        claim = self.claim(rt, spread)
        cells = claim.instance.numa_topology.cells
        self.assertEqual({0, 1}, {c.host_cell for c in cells})
        self.assertEqual([2, 2], [len(c.pinned_host_cpus) for c in cells])
        self.assertEqual([1024, 1024], [c.memory_mb for c in cells])
        self.assertRaises(InvalidInput, self.claim, rt, flavor(
            vcpus=3, extra_specs={"hw:numa_nodes": "2"}))

    def test_dedicated_flavor_on_a_node_without_numa(self):
        _, rt = self.make_tracker(pcpus=4)
        exc = self.rejected(rt, flavor(vcpus=1, extra_specs={"hw:cpu_policy": "dedicated"}))
        self.assertIn(NUMA_FIT_FAILED, str(exc))

    def test_numa_memory_is_claimed(self):
        _, rt = self.tracker()
        self.claim(rt, flavor(vcpus=1, memory_mb=4096), numa_topology=dedicated(1, 4096))
        self.claim(rt, flavor(vcpus=1, memory_mb=4096), numa_topology=dedicated(1, 4096))
        exc = self.rejected(rt, flavor(vcpus=1, memory_mb=64), numa_topology=dedicated(1, 64))
        self.assertIn(NUMA_FIT_FAILED, str(exc))

    def test_delete_frees_the_pinned_cpus(self):
        _, rt = self.tracker()
        first = self.claim(rt, flavor(vcpus=4), numa_topology=dedicated(4))
        self.claim(rt, flavor(vcpus=4), numa_topology=dedicated(4))
        self.assertIn(NUMA_FIT_FAILED,
                      str(self.rejected(rt, flavor(vcpus=1), numa_topology=dedicated(1))))
        rt.update_usage(attrs.evolve(first.instance, vm_state="deleted"))
        again = self.claim(rt, flavor(vcpus=4), numa_topology=dedicated(4))
        self.assertEqual(first.instance.numa_topology.cells[0].pinned_host_cpus,
                         again.instance.numa_topology.cells[0].pinned_host_cpus)
        self.audit_keeps(rt)

    def test_numa_request_on_a_node_without_numa(self):
        _, rt = self.make_tracker(pcpus=4)
        exc = self.rejected(rt, flavor(vcpus=1), numa_topology=dedicated(1))
        self.assertIn(NUMA_FIT_FAILED, str(exc))

    def test_pci_devices_allocated_and_freed(self):
        _, rt = self.tracker(pci_devices=[GPU, GPU2])
        gpu = [PciRequest(count=1, vendor_id="10de", product_id="1db4")]
        first = self.claim(rt, flavor(), pci_requests=gpu)
        second = self.claim(rt, flavor(), pci_requests=gpu)
        self.assertEqual(1, len(first.instance.pci_devices))
        self.assertEqual({GPU.address, GPU2.address},
                         set(first.instance.pci_devices + second.instance.pci_devices))
        self.assertEqual({GPU.address, GPU2.address}, set(rt.get_node(self.host).pci_in_use))
        exc = self.rejected(rt, flavor(), pci_requests=gpu)
        self.assertIn("10de:1db4", str(exc))
        self.assertIn("pci", str(exc).lower())
        self.audit_keeps(rt)
        self.assertEqual({GPU.address, GPU2.address}, set(rt.get_node(self.host).pci_in_use))
        # freed at once by a delete
        rt.update_usage(attrs.evolve(first.instance, vm_state="deleted"))
        self.assertEqual(set(second.instance.pci_devices),
                         set(rt.get_node(self.host).pci_in_use))
        third = self.claim(rt, flavor(), pci_requests=gpu)
        self.assertEqual(first.instance.pci_devices, third.instance.pci_devices)
        # and by an aborted claim
        third.abort()
        self.assertEqual(set(second.instance.pci_devices),
                         set(rt.get_node(self.host).pci_in_use))
        self.audit_keeps(rt)

    def test_pci_with_numa_affinity(self):
        _, rt = self.tracker(pci_devices=[GPU, GPU2])
        required = PciRequest(count=1, vendor_id="10de", product_id="1db4",
                              numa_policy="required")
        # two GPUs on one cell do not exist: rejected, NUMA and PCI together
        exc = self.rejected(rt, flavor(vcpus=1), numa_topology=dedicated(1),
                            pci_requests=[attrs.evolve(required, count=2)])
        self.assertIn("PCI", str(exc))
        self.assertUsage(rt, self.host, {})
        # one GPU: the instance lands on the GPU's cell
        claim = self.claim(rt, flavor(vcpus=4), numa_topology=dedicated(4),
                           pci_requests=[required])
        cell, = claim.instance.numa_topology.cells
        dev, = claim.instance.pci_devices
        self.assertEqual({GPU.address: 0, GPU2.address: 1}[dev], cell.host_cell)
        # the other cell's GPU goes with the other cell
        other = self.claim(rt, flavor(vcpus=1), numa_topology=dedicated(1),
                           pci_requests=[required])
        other_dev, = other.instance.pci_devices
        self.assertNotEqual(dev, other_dev)
        self.assertNotEqual(cell.host_cell, other.instance.numa_topology.cells[0].host_cell)
        # no cell has a free GPU now
        exc = self.rejected(rt, flavor(vcpus=1), numa_topology=dedicated(1),
                            pci_requests=[required])
        self.assertIn("PCI", str(exc))
        self.audit_keeps(rt)
