"""``DriverConformanceTests``: the checks every virt driver must pass.

Use it as a mixin beside ``testtools.TestCase``::

    class TestMyDriver(DriverConformanceTests, testtools.TestCase):
        driver_name = "mydriver"          # entry point name
        driver_kwargs = {"endpoint": "..."}

or override :meth:`DriverConformanceTests.make_driver`.  A capability the
driver does not declare is skipped, and the skip names it; a declared one
that raises NotImplementedError fails.
"""

import uuid

import fixtures

from nova_lite import conf
from nova_lite.objects import Flavor, Instance, NodeResources, Overhead
from nova_lite.virt import driver as driver_api
from nova_lite.virt import loader


class DriverConformanceTests:
    """Mixin of conformance tests; see the module docstring."""

    #: Entry point name of the driver under test.
    driver_name = None
    #: Extra keyword arguments for ``load_driver``.
    driver_kwargs = {}
    #: Host name passed to ``init_host``.
    conformance_host = "conformance-host"

    def make_settings(self):
        """Settings for the driver (override to customise)."""
        state_path = self.useFixture(fixtures.TempDir()).path
        return conf.Settings(host=self.conformance_host, state_path=state_path)

    def make_driver(self):
        """Build the driver under test (not yet ``init_host``-ed)."""
        if not self.driver_name:
            raise AssertionError(
                f"{type(self).__name__} must set driver_name or override make_driver()")
        return loader.load_driver(self.driver_name, settings=self.make_settings(),
                                  **dict(self.driver_kwargs))

    def setUp(self):
        super().setUp()
        self.driver = self.make_driver()
        self.driver.init_host(self.conformance_host)

    # -- helpers ----------------------------------------------------------
    def _require(self, capability):
        caps = self.driver.capabilities
        if not getattr(caps, capability, False):
            self.skipTest(f"capability {capability} not declared by "
                          f"{type(self.driver).__name__}")

    def _call_declared(self, capability, func, *args):
        try:
            return func(*args)
        except NotImplementedError:
            self.fail(f"{type(self.driver).__name__} declares {capability} but "
                      f"{func.__name__} raises NotImplementedError")

    def _nodes(self):
        nodes = self.driver.get_available_nodes()
        self.assertIsInstance(nodes, list, "get_available_nodes must return a list")
        self.assertTrue(nodes, "get_available_nodes returned no node")
        return nodes

    def _report(self, nodename):
        report = self.driver.get_available_resource(nodename)
        if isinstance(report, dict):
            report = NodeResources.from_dict(report, nodename=nodename)
        self.assertIsInstance(report, NodeResources,
                              f"get_available_resource({nodename!r}) must return NodeResources")
        return report

    @staticmethod
    def _flavor():
        return Flavor(name="conformance.tiny", vcpus=1, memory_mb=64, root_gb=0)

    # -- the contract -----------------------------------------------------
    def test_is_a_compute_driver(self):
        self.assertIsInstance(self.driver, driver_api.ComputeDriver)
        self.assertIsInstance(self.driver.capabilities, driver_api.Capabilities)
        self.assertIn(self.driver.api_version, driver_api.SUPPORTED_API_VERSIONS)

    def test_node_names_are_unique_strings(self):
        nodes = self._nodes()
        for name in nodes:
            self.assertIsInstance(name, str)
            self.assertTrue(name.strip(), "node names must not be blank")
        self.assertEqual(len(nodes), len(set(nodes)), f"duplicate node names: {nodes}")

    def test_node_list_is_stable(self):
        first = sorted(self._nodes())
        self.assertEqual(first, sorted(self.driver.get_available_nodes()))
        self.assertEqual(first, sorted(self.driver.get_available_nodes(refresh=True)))

    def test_resource_report_schema_for_every_node(self):
        for nodename in self._nodes():
            report = self._report(nodename)
            self.assertTrue(report.hypervisor_type, f"{nodename}: empty hypervisor_type")
            self.assertTrue(report.hypervisor_hostname,
                            f"{nodename}: empty hypervisor_hostname")
            self.assertTrue(report.totals(), f"{nodename}: the report offers no resource")
            # The record must survive its own serialisation.
            self.assertEqual(report, NodeResources.from_dict(report.to_dict()))

    def test_resource_report_is_deterministic(self):
        for nodename in self._nodes():
            self.assertEqual(self._report(nodename), self._report(nodename))

    def test_node_is_available(self):
        for nodename in self._nodes():
            self.assertTrue(self.driver.node_is_available(nodename))
        self.assertFalse(self.driver.node_is_available(f"no-such-node-{uuid.uuid4()}"))

    def test_overhead_is_non_negative_and_deterministic(self):
        flavor = self._flavor()
        inst = Instance(uuid=str(uuid.uuid4()), flavor=flavor, host=self.conformance_host)
        for subject in (flavor, inst):
            first = self.driver.estimate_instance_overhead(subject)
            self.assertIsInstance(first, Overhead)
            for value in (first.memory_mb, first.disk_gb, first.vcpus):
                self.assertGreaterEqual(value, 0)
            self.assertEqual(first, self.driver.estimate_instance_overhead(subject))

    # -- optional capabilities -----------------------------------------------
    def test_lifecycle(self):
        self._require("supports_lifecycle")
        nodename = self._nodes()[0]
        inst = Instance(uuid=str(uuid.uuid4()), flavor=self._flavor(),
                        host=self.conformance_host, node=nodename)
        before = self._call_declared("supports_lifecycle", self.driver.list_instances)
        self.assertNotIn(inst.uuid, before)
        self._call_declared("supports_lifecycle", self.driver.spawn, inst)
        try:
            self.assertIn(inst.uuid, self.driver.list_instances())
        finally:
            self._call_declared("supports_lifecycle", self.driver.destroy, inst)
        self.assertNotIn(inst.uuid, self.driver.list_instances())

    def test_numa_topology(self):
        self._require("supports_numa")
        for nodename in self._nodes():
            topo = self._report(nodename).numa_topology
            if topo is None:
                continue  # a driver may report NUMA only where the host has it
            self.assertTrue(topo.cells, f"{nodename}: NUMA topology without cells")
            for cell in topo.cells:
                self.assertFalse(cell.cpuset & cell.pcpuset,
                                 f"{nodename}: cell {cell.id} has CPUs both shared and "
                                 "dedicated")

    def test_pci_devices(self):
        self._require("supports_pci")
        for nodename in self._nodes():
            devices = self._report(nodename).pci_devices
            addresses = [d.address for d in devices]
            self.assertEqual(len(addresses), len(set(addresses)),
                             f"{nodename}: duplicate PCI addresses")
            known = set(addresses)
            for dev in devices:
                if dev.dev_type == "type-VF" and dev.parent_addr:
                    self.assertIn(dev.parent_addr, known,
                                  f"{nodename}: VF {dev.address} names unknown PF")

    def test_pcpus(self):
        self._require("supports_pcpus")
        for nodename in self._nodes():
            self.assertGreaterEqual(self._report(nodename).pcpus, 0)

    def test_is_node_deleted_is_false_for_live_nodes(self):
        self._require("supports_node_deletion_check")
        for nodename in self._nodes():
            self.assertFalse(self._call_declared(
                "supports_node_deletion_check", self.driver.is_node_deleted, nodename))
