"""NUMA fitting for claims, and NUMA usage."""

from decimal import Decimal

import testtools

from nova_lite import numa, pci
from nova_lite.exception import InvalidInput
from nova_lite.objects import (
    InstanceNUMACell,
    InstanceNUMATopology,
    MemPage,
    NUMACell,
    NUMACellUsage,
    NUMATopology,
    PciDevice,
    PciRequest,
)


def host_cell(cid, cpus=(), memory_mb=4096, pcpus=(), siblings=(), mempages=()):
    return NUMACell(id=cid, cpuset=set(cpus), memory_mb=memory_mb, pcpuset=set(pcpus),
                    siblings=siblings, mempages=mempages)


def two_cell_host(memory_mb=4096):
    """Cell 0: shared CPUs 0-3; cell 1: shared CPUs 4-7; no dedicated CPUs."""
    return NUMATopology(cells=[host_cell(0, range(4), memory_mb),
                               host_cell(1, range(4, 8), memory_mb)])


def pinning_host():
    """Cell 0: dedicated 0-3 (siblings 0/2, 1/3); cell 1: dedicated 4-7 (4/6, 5/7)."""
    return NUMATopology(cells=[
        host_cell(0, pcpus=range(4), siblings=[{0, 2}, {1, 3}]),
        host_cell(1, pcpus=range(4, 8), siblings=[{4, 6}, {5, 7}])])


def request(*cells):
    return InstanceNUMATopology(cells=cells)


def shared(cid, vcpus, memory_mb=1024, pagesize_kb=None):
    return InstanceNUMACell(id=cid, cpuset=set(vcpus), memory_mb=memory_mb,
                            pagesize_kb=pagesize_kb)


def dedicated(cid, vcpus, memory_mb=1024):
    return InstanceNUMACell(id=cid, cpuset=set(vcpus), memory_mb=memory_mb,
                            cpu_policy="dedicated")


def fit(host, req, usage=None, **kwargs):
    return numa.fit_instance_to_host(host, req, usage, **kwargs)


class MemoryFitTest(testtools.TestCase):

    def test_fits_on_first_cell(self):
        placed = fit(two_cell_host(), request(shared(0, [0, 1], 2048)))
        self.assertEqual(0, placed.cells[0].host_cell)
        self.assertTrue(placed.is_placed)
        self.assertEqual({}, dict(placed.cells[0].cpu_pinning))

    def test_returns_a_copy(self):
        req = request(shared(0, [0], 1024))
        placed = fit(two_cell_host(), req)
        self.assertIsNone(req.cells[0].host_cell)
        self.assertEqual(req.cells[0].memory_mb, placed.cells[0].memory_mb)

    def test_used_memory_moves_to_next_cell(self):
        usage = [NUMACellUsage(id=0, memory_mb=3072)]
        placed = fit(two_cell_host(), request(shared(0, [0], 2048)), usage)
        self.assertEqual(1, placed.cells[0].host_cell)

    def test_exact_fit(self):
        usage = [NUMACellUsage(id=0, memory_mb=2048), NUMACellUsage(id=1, memory_mb=4096)]
        placed = fit(two_cell_host(), request(shared(0, [0], 2048)), usage)
        self.assertEqual(0, placed.cells[0].host_cell)

    def test_no_memory_anywhere_returns_none(self):
        self.assertIsNone(fit(two_cell_host(), request(shared(0, [0], 8192))))

    def test_ram_ratio_overcommits(self):
        req = request(shared(0, [0], 6144))
        self.assertIsNone(fit(two_cell_host(), req, ram_allocation_ratio=1.4))
        self.assertEqual(0, fit(two_cell_host(), req, ram_allocation_ratio=1.5)
                         .cells[0].host_cell)

    def test_ratio_is_exact(self):
        # 10 x 0.7 is 7, not 6.999...: a float ratio must not lose a MB.
        host = NUMATopology(cells=[host_cell(0, [0], memory_mb=10)])
        self.assertIsNotNone(fit(host, request(shared(0, [0], 7)), ram_allocation_ratio=0.7))
        self.assertIsNotNone(fit(host, request(shared(0, [0], 7)),
                                 ram_allocation_ratio=Decimal("0.7")))

    def test_bad_ratio_is_refused(self):
        for ratio in (0, -1, "2", True):
            self.assertRaises(InvalidInput, fit, two_cell_host(), request(shared(0, [0])),
                              cpu_allocation_ratio=ratio)


class PageFitTest(testtools.TestCase):

    def host(self, used=0):
        pages = [MemPage(size_kb=4, total=1048576), MemPage(size_kb=2048, total=512, used=used)]
        return NUMATopology(cells=[host_cell(0, range(4), 4096, mempages=pages[:1]),
                                   host_cell(1, range(4, 8), 4096, mempages=pages)])

    def test_large_pages_pick_the_cell_that_has_them(self):
        placed = fit(self.host(), request(shared(0, [0], 1024, pagesize_kb=2048)))
        self.assertEqual(1, placed.cells[0].host_cell)

    def test_pages_used_by_claims_count(self):
        req = request(shared(0, [0], 1024, pagesize_kb=2048))   # 512 pages
        usage = [NUMACellUsage(id=1, pages_used={2048: 1})]
        self.assertIsNone(fit(self.host(), req, usage))

    def test_pages_held_outside_claims_count(self):
        req = request(shared(0, [0], 1024, pagesize_kb=2048))
        self.assertIsNone(fit(self.host(used=1), req))
        self.assertIsNotNone(fit(self.host(), request(shared(0, [0], 1022, pagesize_kb=2048))))

    def test_pages_are_not_overcommitted(self):
        req = request(shared(0, [0], 2048, pagesize_kb=2048))
        self.assertIsNone(fit(self.host(), req, ram_allocation_ratio=16))

    def test_pages_ignore_plain_memory_usage(self):
        usage = [NUMACellUsage(id=1, memory_mb=4096)]
        placed = fit(self.host(), request(shared(0, [0], 1024, pagesize_kb=2048)), usage)
        self.assertEqual(1, placed.cells[0].host_cell)

    def test_memory_not_a_multiple_of_page_size(self):
        req = request(shared(0, [0], 1023, pagesize_kb=1048576))
        host = NUMATopology(cells=[host_cell(0, [0], 4096,
                                             mempages=[MemPage(size_kb=1048576, total=4)])])
        self.assertIsNone(fit(host, req))
        self.assertIn("not a multiple", numa.numa_fit_problem(host, req))

    def test_unknown_page_size(self):
        req = request(shared(0, [0], 1024, pagesize_kb=1048576))
        self.assertIsNone(fit(self.host(), req))
        self.assertIn("no 1048576 KiB pages", numa.numa_fit_problem(self.host(), req))


class SharedCPUFitTest(testtools.TestCase):

    def test_shared_vcpus_fill_then_move(self):
        usage = [NUMACellUsage(id=0, shared_vcpus=3)]
        self.assertEqual(0, fit(two_cell_host(), request(shared(0, [0])), usage)
                         .cells[0].host_cell)
        self.assertEqual(1, fit(two_cell_host(), request(shared(0, [0, 1])), usage)
                         .cells[0].host_cell)

    def test_cpu_ratio_overcommits(self):
        usage = [NUMACellUsage(id=0, shared_vcpus=4), NUMACellUsage(id=1, shared_vcpus=4)]
        req = request(shared(0, [0, 1]))
        self.assertIsNone(fit(two_cell_host(), req, usage))
        placed = fit(two_cell_host(), req, usage, cpu_allocation_ratio=1.5)
        self.assertEqual(0, placed.cells[0].host_cell)
        usage = [NUMACellUsage(id=0, shared_vcpus=5), NUMACellUsage(id=1, shared_vcpus=4)]
        self.assertEqual(1, fit(two_cell_host(), req, usage, cpu_allocation_ratio=1.5)
                         .cells[0].host_cell)

    def test_cell_cannot_have_more_vcpus_than_host_cell_cpus(self):
        req = request(shared(0, range(5)))
        self.assertIsNone(fit(two_cell_host(), req, cpu_allocation_ratio=16))
        self.assertIn("exceed", numa.numa_fit_problem(two_cell_host(), req))

    def test_shared_cells_do_not_use_dedicated_cpus(self):
        self.assertIsNone(fit(pinning_host(), request(shared(0, [0]))))
        self.assertIn("no shared CPUs", numa.numa_fit_problem(pinning_host(),
                                                                 request(shared(0, [0]))))


class DedicatedCPUFitTest(testtools.TestCase):

    def test_pins_whole_cores_first(self):
        placed = fit(pinning_host(), request(dedicated(0, [0, 1])))
        cell = placed.cells[0]
        self.assertEqual(0, cell.host_cell)
        self.assertEqual({0: 0, 1: 2}, dict(cell.cpu_pinning))
        self.assertEqual(frozenset({0, 2}), cell.pinned_host_cpus)

    def test_single_vcpu_fills_a_half_used_core(self):
        usage = [NUMACellUsage(id=0, pinned_cpus={0})]
        placed = fit(pinning_host(), request(dedicated(0, [0])), usage)
        self.assertEqual({0: 2}, dict(placed.cells[0].cpu_pinning))

    def test_pinned_cpus_are_never_reused(self):
        usage = [NUMACellUsage(id=0, pinned_cpus={0, 2})]
        placed = fit(pinning_host(), request(dedicated(0, [0, 1, 2])), usage)
        self.assertEqual(1, placed.cells[0].host_cell)
        placed = fit(pinning_host(), request(dedicated(0, [0, 1])), usage)
        self.assertEqual({0: 1, 1: 3}, dict(placed.cells[0].cpu_pinning))

    def test_no_overcommit_for_dedicated(self):
        usage = [NUMACellUsage(id=0, pinned_cpus={0, 1, 2}),
                 NUMACellUsage(id=1, pinned_cpus={4, 5, 6})]
        req = request(dedicated(0, [0, 1]))
        self.assertIsNone(fit(pinning_host(), req, usage, cpu_allocation_ratio=16))
        self.assertIn("free dedicated CPUs 1 < requested 2",
                      numa.numa_fit_problem(pinning_host(), req, usage))

    def test_without_siblings(self):
        host = NUMATopology(cells=[host_cell(0, pcpus=[3, 1, 2])])
        placed = fit(host, request(dedicated(0, [5, 7])))
        self.assertEqual({5: 1, 7: 2}, dict(placed.cells[0].cpu_pinning))

    def test_shared_and_dedicated_cells_together(self):
        host = NUMATopology(cells=[host_cell(0, [0, 1], pcpus=[2, 3]),
                                   host_cell(1, [4, 5], pcpus=[6, 7])])
        usage = [NUMACellUsage(id=0, shared_vcpus=2)]
        placed = fit(host, request(dedicated(0, [0, 1]), shared(1, [2, 3])), usage)
        self.assertEqual([0, 1], [c.host_cell for c in placed.cells])
        self.assertEqual({0: 2, 1: 3}, dict(placed.cells[0].cpu_pinning))


class MultiCellFitTest(testtools.TestCase):

    def test_two_cells_onto_two_host_cells(self):
        placed = fit(two_cell_host(), request(shared(0, [0, 1], 2048), shared(1, [2, 3], 2048)))
        self.assertEqual([0, 1], [c.host_cell for c in placed.cells])

    def test_cells_are_permuted_to_fit(self):
        usage = [NUMACellUsage(id=0, memory_mb=3072)]
        placed = fit(two_cell_host(), request(shared(0, [0], 2048), shared(1, [1], 512)), usage)
        self.assertEqual([1, 0], [c.host_cell for c in placed.cells])

    def test_instance_cells_need_distinct_host_cells(self):
        req = request(shared(0, [0], 512), shared(1, [1], 512), shared(2, [2], 512))
        self.assertIsNone(fit(two_cell_host(), req))
        self.assertIn("3 instance cells but only 2 host cells",
                      numa.numa_fit_problem(two_cell_host(), req))

    def test_two_cells_that_both_want_the_same_host_cell(self):
        usage = [NUMACellUsage(id=1, memory_mb=4096)]
        req = request(shared(0, [0], 512), shared(1, [1], 512))
        self.assertIsNone(fit(two_cell_host(), req, usage))
        self.assertIn("no distinct host cell", numa.numa_fit_problem(two_cell_host(), req,
                                                                        usage))

    def test_dedicated_two_cells(self):
        placed = fit(pinning_host(), request(dedicated(0, [0, 1]), dedicated(1, [2, 3])))
        self.assertEqual({0: 0, 1: 2}, dict(placed.cells[0].cpu_pinning))
        self.assertEqual({2: 4, 3: 6}, dict(placed.cells[1].cpu_pinning))

    def test_no_host_topology(self):
        self.assertIsNone(fit(None, request(shared(0, [0]))))
        self.assertIn("no NUMA topology", numa.numa_fit_problem(None, request(shared(0, [0]))))

    def test_empty_request_fits_trivially(self):
        self.assertEqual(request(), fit(two_cell_host(), request()))

    def test_problem_names_cells_and_reasons(self):
        req = request(shared(0, [0], 8192))
        problem = numa.numa_fit_problem(two_cell_host(), req)
        self.assertTrue(problem.startswith(numa.NUMA_FIT_FAILED + ": "), problem)
        self.assertIn("instance cell 0 fits no host cell", problem)
        self.assertIn("host cell 0: free memory 4096 MB < requested 8192 MB", problem)
        self.assertIn("host cell 1: free memory 4096 MB < requested 8192 MB", problem)

    def test_no_problem_when_it_fits(self):
        self.assertIsNone(numa.numa_fit_problem(two_cell_host(), request(shared(0, [0]))))

    def test_wrong_argument_types(self):
        self.assertRaises(InvalidInput, fit, two_cell_host(), [shared(0, [0])])
        self.assertRaises(InvalidInput, fit, two_cell_host(), request(shared(0, [0])),
                          [{"id": 0, "memory_mb": 1}])


def gpu(address, numa_node):
    return PciDevice(address=address, vendor_id="10de", product_id="1db4", numa_node=numa_node)


def gpu_request(policy="required", count=1):
    return PciRequest(count=count, vendor_id="10de", product_id="1db4", numa_policy=policy)


class PciAffinityFitTest(testtools.TestCase):

    def stats(self, in_use=frozenset()):
        return pci.PciStats([gpu("0000:84:00.0", 1)], in_use)

    def test_pci_affinity_moves_the_instance_to_the_device_cell(self):
        req = request(shared(0, [0]))
        self.assertEqual(0, fit(two_cell_host(), req).cells[0].host_cell)
        placed = fit(two_cell_host(), req, pci=self.stats(), pci_requests=[gpu_request()])
        self.assertEqual(1, placed.cells[0].host_cell)

    def test_two_cell_instance_is_placed_with_any_cell_on_the_device_node(self):
        host = NUMATopology(cells=[host_cell(i, [i], 4096) for i in range(3)])
        req = request(shared(0, [0]), shared(1, [1]))
        placed = fit(host, req, pci=pci.PciStats([gpu("0000:84:00.0", 2)], frozenset()),
                     pci_requests=[gpu_request()])
        self.assertEqual([0, 2], [c.host_cell for c in placed.cells])

    def test_required_device_cell_full_means_no_fit(self):
        usage = [NUMACellUsage(id=1, memory_mb=4096)]
        req = request(shared(0, [0]))
        self.assertIsNone(fit(two_cell_host(), req, usage, pci=self.stats(),
                              pci_requests=[gpu_request()]))
        self.assertEqual(numa.NUMA_PCI_FIT_FAILED, numa.numa_fit_problem(
            two_cell_host(), req, usage, pci=self.stats(), pci_requests=[gpu_request()]))

    def test_preferred_prefers_the_device_cell(self):
        placed = fit(two_cell_host(), request(shared(0, [0])), pci=self.stats(),
                     pci_requests=[gpu_request("preferred")])
        self.assertEqual(1, placed.cells[0].host_cell)

    def test_preferred_falls_back_to_any_cell(self):
        usage = [NUMACellUsage(id=1, memory_mb=4096)]
        placed = fit(two_cell_host(), request(shared(0, [0])), usage, pci=self.stats(),
                     pci_requests=[gpu_request("preferred")])
        self.assertEqual(0, placed.cells[0].host_cell)

    def test_legacy_accepts_devices_without_numa_node(self):
        stats = pci.PciStats([gpu("0000:06:00.0", None)], frozenset())
        placed = fit(two_cell_host(), request(shared(0, [0])), pci=stats,
                     pci_requests=[gpu_request("legacy")])
        self.assertEqual(0, placed.cells[0].host_cell)
        self.assertIsNone(fit(two_cell_host(), request(shared(0, [0])), pci=stats,
                              pci_requests=[gpu_request("required")]))

    def test_device_in_use_means_no_fit(self):
        self.assertIsNone(fit(two_cell_host(), request(shared(0, [0])),
                              pci=self.stats(frozenset({"0000:84:00.0"})),
                              pci_requests=[gpu_request()]))

    def test_no_pci_requests_ignores_pci(self):
        placed = fit(two_cell_host(), request(shared(0, [0])), pci=self.stats())
        self.assertEqual(0, placed.cells[0].host_cell)


class NUMAUsageTest(testtools.TestCase):

    def test_usage_sums_placed_instances_per_cell(self):
        host = NUMATopology(cells=[
            host_cell(0, [0, 1], pcpus=[2, 3], mempages=[MemPage(size_kb=2048, total=1024)]),
            host_cell(1, [4, 5], pcpus=[6, 7])])
        first = fit(host, request(dedicated(0, [0, 1], 512)))
        second = fit(host, request(shared(0, [0], 1024, pagesize_kb=2048), shared(1, [1, 2], 256)))
        usage = numa.numa_usage_for(host, [first, second])
        self.assertEqual(2, len(usage))
        cell0, cell1 = usage
        self.assertEqual((0, frozenset({2, 3}), 1, 1536, {2048: 512}),
                         (cell0.id, cell0.pinned_cpus, cell0.shared_vcpus, cell0.memory_mb,
                          dict(cell0.pages_used)))
        self.assertEqual((1, frozenset(), 2, 256, {}),
                         (cell1.id, cell1.pinned_cpus, cell1.shared_vcpus, cell1.memory_mb,
                          dict(cell1.pages_used)))

    def test_usage_feeds_the_next_fit(self):
        host = pinning_host()
        placed = []
        for _ in range(4):
            placed.append(fit(host, request(dedicated(0, [0, 1])),
                              numa.numa_usage_for(host, placed)))
        self.assertEqual([0, 0, 1, 1], [p.cells[0].host_cell for p in placed])
        pinned = [cpu for p in placed for cpu in p.cells[0].pinned_host_cpus]
        self.assertEqual(list(range(8)), sorted(pinned))
        self.assertIsNone(fit(host, request(dedicated(0, [0])),
                              numa.numa_usage_for(host, placed)))

    def test_unplaced_and_missing_are_skipped(self):
        host = two_cell_host()
        usage = numa.numa_usage_for(host, [None, request(shared(0, [0]))])
        self.assertEqual((NUMACellUsage(id=0), NUMACellUsage(id=1)), usage)
        self.assertEqual(usage, numa.numa_usage_for(host, []))
