"""DriverConformanceTests itself: skips name the capability, lies fail."""

import testtools

from nova_lite.objects import NodeResources, Overhead
from nova_lite.testing import DriverConformanceTests
from nova_lite.virt import driver as driver_api


class MinimalDriver(driver_api.ComputeDriver):
    """Declares nothing optional; the three required methods only."""

    def init_host(self, host):
        self.host = host

    def get_available_nodes(self, refresh=False):
        return ["only"]

    def get_available_resource(self, nodename):
        return NodeResources(vcpus=2, memory_mb=2048, local_gb=20, hypervisor_type="mini",
                             hypervisor_hostname=nodename)


class LyingDriver(MinimalDriver):
    """Declares the lifecycle but does not implement it."""

    capabilities = driver_api.Capabilities(supports_lifecycle=True)


class LegacyDictDriver(MinimalDriver):
    """Reports a Nova-style dict, which the core accepts."""

    def get_available_resource(self, nodename):
        return {"vcpus": 2, "memory_mb": 2048, "local_gb": 20, "vcpus_used": 0,
                "memory_mb_used": 0, "local_gb_used": 0, "hypervisor_type": "mini",
                "hypervisor_version": 1, "hypervisor_hostname": nodename}


class UnstableDriver(MinimalDriver):
    """A node list that changes on every call."""

    calls = 0

    def get_available_nodes(self, refresh=False):
        UnstableDriver.calls += 1
        return [f"node{UnstableDriver.calls}"]


class BareMetalDriver(MinimalDriver):
    """Two bare-metal nodes, each one unit of its own CUSTOM_ class."""

    def get_available_nodes(self, refresh=False):
        return ["bm-0", "bm-1"]

    def get_available_resource(self, nodename):
        return NodeResources(vcpus=0, memory_mb=0, local_gb=0, hypervisor_type="ironic",
                             hypervisor_hostname=nodename, resource_class="CUSTOM_GOLD")


class CrampedDriver(MinimalDriver):
    """A node smaller than the reserved host memory: no claim can fit."""

    def get_available_resource(self, nodename):
        return NodeResources(vcpus=1, memory_mb=256, local_gb=1, hypervisor_type="mini",
                             hypervisor_hostname=nodename)


class DriftingOverheadDriver(MinimalDriver):
    """Its overhead estimate grows on every call, so the audit and the claim disagree."""

    def __init__(self, settings=None):
        super().__init__(settings=settings)
        self.calls = 0

    def estimate_instance_overhead(self, instance_or_flavor):
        self.calls += 1
        return Overhead(memory_mb=self.calls)


def run_conformance(driver_class, test_name):
    class Case(DriverConformanceTests, testtools.TestCase):
        def make_driver(self):
            return driver_class()
    case = Case(test_name)
    result = testtools.TestResult()
    case.run(result)
    return result


class TestConformanceSuite(testtools.TestCase):

    def test_minimal_driver_passes_and_skips_naming_capabilities(self):
        result = run_conformance(MinimalDriver, "test_resource_report_schema_for_every_node")
        self.assertTrue(result.wasSuccessful(), result.errors + result.failures)
        for test, capability in [("test_lifecycle", "supports_lifecycle"),
                                 ("test_numa_topology", "supports_numa"),
                                 ("test_pci_devices", "supports_pci"),
                                 ("test_is_node_deleted_is_false_for_live_nodes",
                                  "supports_node_deletion_check")]:
            result = run_conformance(MinimalDriver, test)
            self.assertTrue(result.wasSuccessful())
            reasons = list(result.skip_reasons)
            self.assertEqual(1, len(reasons), (test, reasons))
            self.assertIn(capability, reasons[0])

    def test_declared_capability_raising_not_implemented_fails(self):
        result = run_conformance(LyingDriver, "test_lifecycle")
        self.assertFalse(result.wasSuccessful())
        self.assertEqual({}, result.skip_reasons)
        text = str(result.failures[0][1])
        self.assertIn("supports_lifecycle", text)
        self.assertIn("NotImplementedError", text)

    def test_legacy_dict_report_is_accepted(self):
        for test in ("test_resource_report_schema_for_every_node",
                     "test_resource_report_is_deterministic"):
            result = run_conformance(LegacyDictDriver, test)
            self.assertTrue(result.wasSuccessful(), result.errors + result.failures)

    def test_unstable_node_list_fails(self):
        result = run_conformance(UnstableDriver, "test_node_list_is_stable")
        self.assertFalse(result.wasSuccessful())

    def test_driver_name_is_required(self):
        class Nameless(DriverConformanceTests, testtools.TestCase):
            pass
        result = testtools.TestResult()
        Nameless("test_is_a_compute_driver").run(result)
        self.assertFalse(result.wasSuccessful())
        self.assertIn("driver_name", str((result.errors + result.failures)[0][1]))


class TestTrackerRoundTrip(testtools.TestCase):
    """The audit/claim/free/refuse round trip through a real ResourceTracker."""

    TESTS = ("test_tracker_audit_claim_and_free",
             "test_tracker_refuses_a_claim_that_does_not_fit")

    def test_minimal_and_bare_metal_drivers_pass(self):
        for driver_class in (MinimalDriver, LegacyDictDriver, BareMetalDriver):
            for test in self.TESTS:
                result = run_conformance(driver_class, test)
                self.assertTrue(result.wasSuccessful(),
                                (driver_class.__name__, test, result.errors + result.failures))

    def test_no_room_anywhere_fails_naming_the_nodes(self):
        for test in self.TESTS:
            result = run_conformance(CrampedDriver, test)
            self.assertFalse(result.wasSuccessful())
            text = str((result.errors + result.failures)[0][1])
            self.assertIn("no node has room for the conformance flavor", text)
            self.assertIn("only:", text)

    def test_drifting_overhead_fails_the_round_trip(self):
        result = run_conformance(DriftingOverheadDriver, "test_tracker_audit_claim_and_free")
        self.assertFalse(result.wasSuccessful())
