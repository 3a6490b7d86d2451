"""The accounting rules as pure functions: inventories, requests, fitting."""

from fractions import Fraction

import fixtures
import testtools

from nova_lite import conf
from nova_lite.compute import accounting
from nova_lite.exception import InvalidInput
from nova_lite.objects import NodeResources, Overhead, ZERO_OVERHEAD
from nova_lite.resources import Inventory
from tests.base import flavor


def report(vcpus=8, memory_mb=16384, local_gb=100, **kw):
    return NodeResources(vcpus=vcpus, memory_mb=memory_mb, local_gb=local_gb, **kw)


class TestBuildInventories(testtools.TestCase):

    def test_nova_defaults(self):
        invs = accounting.build_inventories(report(), conf.Settings())
        self.assertEqual(Inventory(total=8, reserved=0, allocation_ratio=4.0), invs["VCPU"])
        self.assertEqual(Inventory(total=16384, reserved=512), invs["MEMORY_MB"])
        self.assertEqual(Inventory(total=100, reserved=0), invs["DISK_GB"])
        self.assertEqual(32, invs["VCPU"].capacity)
        self.assertEqual(16384 - 512, invs["MEMORY_MB"].capacity)
        self.assertNotIn("PCPU", invs)   # a zero total is no inventory

    def test_settings_reserved_and_ratios(self):
        settings = conf.Settings(reserved_host_cpus=2, reserved_host_memory_mb=1024,
                                 reserved_host_disk_mb=1025, cpu_allocation_ratio=0.7,
                                 ram_allocation_ratio=1.5, disk_allocation_ratio=2.0)
        invs = accounting.build_inventories(report(vcpus=12, pcpus=4), settings)
        self.assertEqual((2, Fraction(7, 10), 7), (invs["VCPU"].reserved,
                                                  invs["VCPU"].allocation_ratio,
                                                  invs["VCPU"].capacity))
        self.assertEqual((1024, 23040), (invs["MEMORY_MB"].reserved,
                                         invs["MEMORY_MB"].capacity))
        # reserved_host_disk_mb is MB, rounded up to whole GB
        self.assertEqual((2, 196), (invs["DISK_GB"].reserved, invs["DISK_GB"].capacity))
        self.assertEqual(Inventory(total=4), invs["PCPU"])

    def test_driver_reserved_adds_to_settings(self):
        invs = accounting.build_inventories(
            report(reserved={"MEMORY_MB": 256, "VCPU": 1}), conf.Settings())
        self.assertEqual(768, invs["MEMORY_MB"].reserved)
        self.assertEqual(1, invs["VCPU"].reserved)

    def test_reserved_greater_than_total_is_recorded_all_reserved(self):
        logs = self.useFixture(fixtures.FakeLogger(level="WARNING"))
        invs = accounting.build_inventories(report(memory_mb=256), conf.Settings())
        self.assertEqual((256, 256, 0), (invs["MEMORY_MB"].total, invs["MEMORY_MB"].reserved,
                                         invs["MEMORY_MB"].capacity))
        self.assertIn("reserved_host_memory_mb = 512", logs.output)
        self.assertIn("MEMORY_MB total 256", logs.output)
        # It admits nothing of that class.
        self.assertEqual(["Free memory 0.00 MB < requested 1 MB"],
                         accounting.amount_problems(invs, {}, {"MEMORY_MB": 1}))

    def test_bare_metal_class(self):
        invs = accounting.build_inventories(
            report(vcpus=0, memory_mb=0, local_gb=0, resource_class="CUSTOM_GOLD"),
            conf.Settings(reserved_host_memory_mb=0))
        self.assertEqual({"CUSTOM_GOLD": Inventory(total=1)}, dict(invs))


class TestRequestedResources(testtools.TestCase):

    def test_flavor(self):
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 25},
                         accounting.requested_resources(
                             flavor(vcpus=2, memory_mb=2048, root_gb=20, ephemeral_gb=5),
                             ZERO_OVERHEAD))

    def test_overhead_counts(self):
        self.assertEqual({"VCPU": 3, "MEMORY_MB": 2048 + 100, "DISK_GB": 27},
                         accounting.requested_resources(
                             flavor(vcpus=2, memory_mb=2048, root_gb=25),
                             Overhead(memory_mb=100, disk_gb=2, vcpus=1)))

    def test_swap_counts_as_disk_rounded_up(self):
        for swap, disk in ((0, 10), (1, 11), (512, 11), (1024, 11), (1025, 12), (4096, 14)):
            req = accounting.requested_resources(flavor(root_gb=10, swap=swap), ZERO_OVERHEAD)
            self.assertEqual(disk, req["DISK_GB"], swap)

    def test_dedicated_cpus_ask_for_pcpu(self):
        req = accounting.requested_resources(
            flavor(vcpus=4, extra_specs={"hw:cpu_policy": "dedicated"}), ZERO_OVERHEAD)
        self.assertEqual(4, req["PCPU"])
        self.assertNotIn("VCPU", req)

    def test_resources_extra_specs_override(self):
        req = accounting.requested_resources(
            flavor(vcpus=4, memory_mb=4096, root_gb=0,
                   extra_specs={"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "0",
                                "resources:MEMORY_MB": "0"}),
            Overhead(memory_mb=10))
        self.assertEqual({"CUSTOM_BAREMETAL_GOLD": 1}, req)
        self.assertRaises(InvalidInput, accounting.requested_resources,
                          flavor(extra_specs={"resources:VCPU": "x"}), ZERO_OVERHEAD)
        self.assertRaises(InvalidInput, accounting.requested_resources,
                          flavor(extra_specs={"resources:VCPU": "-1"}), ZERO_OVERHEAD)


class TestAmountProblems(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.invs = {"VCPU": Inventory(total=10), "MEMORY_MB": Inventory(total=8192),
                     "DISK_GB": Inventory(total=50, reserved=5)}

    def test_boundary(self):
        used = {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 40}
        self.assertEqual([], accounting.amount_problems(
            self.invs, used, {"VCPU": 6, "MEMORY_MB": 4096, "DISK_GB": 5}))
        self.assertEqual(["Free vcpu 6.00 VCPU < requested 7 VCPU"],
                         accounting.amount_problems(self.invs, used, {"VCPU": 7}))
        self.assertEqual(["Free memory 4096.00 MB < requested 4097 MB"],
                         accounting.amount_problems(self.invs, used, {"MEMORY_MB": 4097}))
        self.assertEqual(["Free disk 5.00 GB < requested 6 GB"],
                         accounting.amount_problems(self.invs, used, {"DISK_GB": 6}))

    def test_every_reason_in_nova_order(self):
        reasons = accounting.amount_problems(
            self.invs, {}, {"VCPU": 11, "DISK_GB": 50, "MEMORY_MB": 16384})
        self.assertEqual(["Free memory 8192.00 MB < requested 16384 MB",
                          "Free disk 45.00 GB < requested 50 GB",
                          "Free vcpu 10.00 VCPU < requested 11 VCPU"], reasons)

    def test_class_not_offered(self):
        self.assertEqual(["Free pcpu 0.00 PCPU < requested 2 PCPU"],
                         accounting.amount_problems(self.invs, {}, {"PCPU": 2}))

    def test_limits_narrow(self):
        # free = limit - reserved - used
        limits = {"memory_mb": 4096, "disk_gb": 30, "vcpu": 3}
        used = {"VCPU": 1, "MEMORY_MB": 1000, "DISK_GB": 10}
        self.assertEqual([], accounting.amount_problems(
            self.invs, used, {"VCPU": 2, "MEMORY_MB": 3096, "DISK_GB": 15}, limits))
        self.assertEqual(["Free memory 3096.00 MB < requested 3097 MB",
                          "Free disk 15.00 GB < requested 16 GB",
                          "Free vcpu 2.00 VCPU < requested 3 VCPU"],
                         accounting.amount_problems(
                             self.invs, used, {"VCPU": 3, "MEMORY_MB": 3097, "DISK_GB": 16},
                             limits))

    def test_limits_never_widen(self):
        limits = {"memory_mb": 10 ** 6, "disk_gb": 10 ** 6, "vcpu": 10 ** 6}
        self.assertEqual(["Free memory 8192.00 MB < requested 8193 MB",
                          "Free disk 45.00 GB < requested 46 GB",
                          "Free vcpu 10.00 VCPU < requested 11 VCPU"],
                         accounting.amount_problems(
                             self.invs, {}, {"VCPU": 11, "MEMORY_MB": 8193, "DISK_GB": 46},
                             limits))

    def test_fractional_limits_and_other_keys(self):
        limits = {"memory_mb": 1000.5, "numa_topology": object(), "vcpu": None}
        self.assertEqual(["Free memory 1000.50 MB < requested 1001 MB"],
                         accounting.amount_problems(self.invs, {}, {"MEMORY_MB": 1001},
                                                    limits))
        self.assertRaises(InvalidInput, accounting.amount_problems, self.invs, {},
                          {"VCPU": 1}, {"vcpu": "8"})

    def test_over_capacity_node_accepts_no_worse_changes(self):
        used = {"VCPU": 20}
        self.assertEqual([], accounting.amount_problems(self.invs, used, {"MEMORY_MB": 1}))
        self.assertEqual(["Free vcpu 0.00 VCPU < requested 1 VCPU"],
                         accounting.amount_problems(self.invs, used, {"VCPU": 1}))

    def test_unit_rules(self):
        invs = {"VCPU": Inventory(total=64, max_unit=8)}
        reasons = accounting.amount_problems(invs, {}, {"VCPU": 9})
        self.assertEqual(1, len(reasons))
        self.assertIn("max_unit 8", reasons[0])


class TestFlavorNUMARequest(testtools.TestCase):

    def test_no_request(self):
        self.assertIsNone(accounting.flavor_numa_request(flavor(vcpus=4)))
        self.assertIsNone(accounting.flavor_numa_request(
            flavor(extra_specs={"hw:cpu_policy": "shared"})))

    def test_dedicated(self):
        req = accounting.flavor_numa_request(
            flavor(vcpus=4, memory_mb=2048, extra_specs={"hw:cpu_policy": "dedicated"}))
        cell, = req.cells
        self.assertEqual((frozenset({0, 1, 2, 3}), 2048, "dedicated", None),
                         (cell.cpuset, cell.memory_mb, cell.cpu_policy, cell.pagesize_kb))

    def test_numa_nodes_and_pages(self):
        req = accounting.flavor_numa_request(flavor(
            vcpus=4, memory_mb=4096,
            extra_specs={"hw:numa_nodes": "2", "hw:mem_page_size": "2MB"}))
        self.assertEqual([frozenset({0, 1}), frozenset({2, 3})],
                         [c.cpuset for c in req.cells])
        self.assertEqual([2048, 2048], [c.memory_mb for c in req.cells])
        self.assertEqual({2048}, {c.pagesize_kb for c in req.cells})
        self.assertEqual({"shared"}, {c.cpu_policy for c in req.cells})
        for text, kb in (("small", 4), ("2048", 2048), ("1GB", 1048576), ("2048KB", 2048)):
            req = accounting.flavor_numa_request(
                flavor(extra_specs={"hw:mem_page_size": text}))
            self.assertEqual(kb, req.cells[0].pagesize_kb, text)

    def test_bad_specs_name_the_spec(self):
        for specs, word in [({"hw:numa_nodes": "0"}, "hw:numa_nodes"),
                            ({"hw:numa_nodes": "x"}, "hw:numa_nodes"),
                            ({"hw:numa_nodes": "3"}, "hw:numa_nodes"),
                            ({"hw:mem_page_size": "huge"}, "hw:mem_page_size"),
                            ({"hw:cpu_policy": "mixed", "hw:numa_nodes": "1"},
                             "hw:cpu_policy")]:
            exc = self.assertRaises(InvalidInput, accounting.flavor_numa_request,
                                    flavor(vcpus=4, memory_mb=1024, extra_specs=specs))
            self.assertIn(word, str(exc))

    def test_bogus_policies_and_zero_page_size_name_the_spec(self):
        for specs, word in [({"hw:cpu_policy": "bogus"}, "hw:cpu_policy='bogus'"),
                            ({"hw:cpu_thread_policy": "bogus"},
                             "hw:cpu_thread_policy='bogus'"),
                            ({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "x"},
                             "hw:cpu_thread_policy"),
                            ({"hw:mem_page_size": "0"}, "hw:mem_page_size='0'"),
                            ({"hw:mem_page_size": "0MB"}, "hw:mem_page_size='0MB'")]:
            exc = self.assertRaises(InvalidInput, accounting.flavor_numa_request,
                                    flavor(vcpus=4, memory_mb=1024, extra_specs=specs))
            self.assertIn(word, str(exc))
        for thread in ("prefer", "isolate", "require"):
            self.assertIsNone(accounting.flavor_numa_request(
                flavor(extra_specs={"hw:cpu_thread_policy": thread})))


class TestLimits(testtools.TestCase):

    invs = {"MEMORY_MB": Inventory(total=8192, reserved=512)}

    def test_object_with_to_dict_as_nova_schedulerlimits(self):
        class SchedulerLimits:
            def to_dict(self):
                return {"memory_mb": 4096, "vcpu": None, "disk_gb": None,
                        "numa_topology": None}

        self.assertEqual(["Free memory 3584.00 MB < requested 3585 MB"],
                         accounting.amount_problems(self.invs, {}, {"MEMORY_MB": 3585},
                                                    SchedulerLimits()))

    def test_not_a_mapping_names_limits(self):
        for bad in ("abc", 5, ["memory_mb"]):
            exc = self.assertRaises(InvalidInput, accounting.amount_problems,
                                    self.invs, {}, {"MEMORY_MB": 1}, bad)
            self.assertIn("limits must be a mapping", str(exc))

    def test_free_in_reasons_is_never_negative(self):
        # A limit below what is already used, and a node used beyond capacity.
        self.assertEqual(["Free memory 0.00 MB < requested 1 MB"],
                         accounting.amount_problems(self.invs, {"MEMORY_MB": 4000},
                                                    {"MEMORY_MB": 1}, {"memory_mb": 2048}))
        self.assertEqual(["Free memory 0.00 MB < requested 1 MB"],
                         accounting.amount_problems(self.invs, {"MEMORY_MB": 9000},
                                                    {"MEMORY_MB": 1}))
