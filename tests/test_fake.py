"""The fake hypervisor: conformance of every fake entry point, and its controls."""

import attrs
import testtools

from nova_lite import objects
from nova_lite.objects import NUMACell, NUMATopology, Overhead, PciDevice
from nova_lite.testing import DriverConformanceTests, FakeDriverFixture
from nova_lite.virt import fake
from tests.base import flavor, instance


class TestFakeConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "fake"


class TestSmallFakeConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "fake.small"


class TestMediumFakeConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "fake.medium"


class TestMultiNodeFakeConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "fake.multinode"


class TestMultiNodeFakeManyNodesConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "fake.multinode"
    driver_kwargs = {"nodes": ["n1", "n2", "n3", "n4"]}


class TestNUMAFakeConformance(DriverConformanceTests, testtools.TestCase):
    """The fake with a NUMA topology, PCI devices and overhead still conforms."""

    driver_name = "fake"
    driver_kwargs = {
        "numa_topology": NUMATopology(cells=[
            NUMACell(id=0, cpuset={0, 1}, pcpuset={2, 3}, memory_mb=4096),
            NUMACell(id=1, cpuset={4, 5}, pcpuset={6, 7}, memory_mb=4096)]),
        "pci_devices": [
            PciDevice(address="0000:81:00.0", vendor_id="8086", product_id="1572",
                      dev_type="type-PF", numa_node=0),
            PciDevice(address="0000:81:00.1", vendor_id="8086", product_id="154c",
                      dev_type="type-VF", numa_node=0, parent_addr="0000:81:00.0")],
        "overhead": Overhead(memory_mb=64, disk_gb=1, vcpus=0),
        "pcpus": 4,
    }


class TestFakeSizes(testtools.TestCase):

    def _report(self, name, **kw):
        drv = self.useFixture(FakeDriverFixture(name, host="h", **kw)).driver
        return drv, drv.get_available_resource(drv.get_available_nodes()[0])

    def test_nova_default_sizes(self):
        drv, res = self._report("fake")
        self.assertEqual(["h"], drv.get_available_nodes())
        self.assertEqual((1000, 800000, 600000), (res.vcpus, res.memory_mb, res.local_gb))
        self.assertEqual("h", res.hypervisor_hostname)
        self.assertEqual("fake", res.hypervisor_type)

    def test_small_and_medium(self):
        _, res = self._report("fake.small")
        self.assertEqual((1, 8192, 1024), (res.vcpus, res.memory_mb, res.local_gb))
        _, res = self._report("fake.medium")
        self.assertEqual((10, 8192, 1028), (res.vcpus, res.memory_mb, res.local_gb))

    def test_sizes_by_keyword(self):
        _, res = self._report("fake", vcpus=8, memory_mb=4096, local_gb=50, pcpus=2)
        self.assertEqual((8, 4096, 50, 2), (res.vcpus, res.memory_mb, res.local_gb, res.pcpus))

    def test_multinode_default_nodes(self):
        drv = self.useFixture(FakeDriverFixture("fake.multinode", host="h")).driver
        self.assertEqual(["h-node0", "h-node1"], drv.get_available_nodes())
        self.assertIsInstance(drv, fake.FakeMultiNodeDriver)


class TestFakeControls(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.fixture = self.useFixture(FakeDriverFixture(
            "fake.multinode", host="h", nodes=["a", "b"], vcpus=16, memory_mb=8192,
            local_gb=100))
        self.driver = self.fixture.driver

    def test_spawn_and_destroy_change_the_hypervisor_view(self):
        inst = instance(flavor(vcpus=2, memory_mb=1024, root_gb=10, ephemeral_gb=5),
                        node="b")
        self.driver.spawn(inst)
        self.assertEqual([inst.uuid], self.driver.list_instances())
        res = self.driver.get_available_resource("b")
        self.assertEqual((2, 1024, 15, 85), (res.vcpus_used, res.memory_mb_used,
                                             res.local_gb_used, res.disk_available_least))
        self.assertEqual(0, self.driver.get_available_resource("a").vcpus_used)
        self.driver.destroy(inst)
        self.driver.destroy(inst)   # not an error
        self.assertEqual([], self.driver.list_instances())
        self.assertEqual(0, self.driver.get_available_resource("b").vcpus_used)

    def test_respawn_on_another_node_counts_once_there(self):
        inst = instance(flavor(vcpus=2), node="a")
        self.driver.spawn(inst)
        self.driver.spawn(attrs.evolve(inst, node="b"))   # the guest moved
        self.assertEqual(0, self.driver.get_available_resource("a").vcpus_used)
        self.assertEqual(2, self.driver.get_available_resource("b").vcpus_used)
        self.assertEqual([inst.uuid], self.driver.list_instances())
        self.driver.destroy_all()
        self.assertEqual(0, self.driver.get_available_resource("b").vcpus_used)

    def test_spawn_on_unknown_node(self):
        self.assertRaises(LookupError, self.driver.spawn, instance(node="zz"))

    def test_set_nodes(self):
        self.driver.set_nodes(["b", "c"])
        self.assertEqual(["b", "c"], self.driver.get_available_nodes())
        self.assertTrue(self.driver.is_node_deleted("a"))
        self.assertFalse(self.driver.is_node_deleted("c"))
        self.assertFalse(self.driver.node_is_available("a"))
        self.assertRaises(LookupError, self.driver.get_available_resource, "a")

    def test_set_node_size(self):
        self.driver.set_node_size("a", vcpus=4)
        self.assertEqual(4, self.driver.get_available_resource("a").vcpus)
        self.assertEqual(8192, self.driver.get_available_resource("a").memory_mb)
        self.assertEqual(16, self.driver.get_available_resource("b").vcpus)

    def test_inject_fault(self):
        self.driver.inject_fault("a", exception=RuntimeError("disk on fire"))
        self.driver.inject_fault("b", report={"vcpus": "many"})
        self.assertRaisesRegex(RuntimeError, "disk on fire",
                               self.driver.get_available_resource, "a")
        self.assertEqual({"vcpus": "many"}, self.driver.get_available_resource("b"))
        self.driver.clear_faults()
        self.assertEqual(16, self.driver.get_available_resource("a").vcpus)

    def test_overhead(self):
        drv = self.useFixture(FakeDriverFixture(
            "fake", overhead=Overhead(memory_mb=10, disk_gb=1, vcpus=1))).driver
        self.assertEqual(Overhead(10, 1, 1), drv.estimate_instance_overhead(flavor()))
        self.assertEqual(Overhead(10, 1, 1), drv.estimate_instance_overhead(instance()))
        self.assertEqual(objects.ZERO_OVERHEAD,
                         self.driver.estimate_instance_overhead(flavor()))

    def test_fixture_destroys_guests_at_cleanup(self):
        fixture = FakeDriverFixture("fake")
        fixture.setUp()
        fixture.driver.spawn(instance())
        self.assertEqual(1, len(fixture.driver.list_instances()))
        fixture.cleanUp()
        self.assertEqual([], fixture.driver.list_instances())


class TestFakeNodeUuids(testtools.TestCase):

    def test_stable_per_host_and_node(self):
        one = self.useFixture(FakeDriverFixture("fake.multinode", host="h1",
                                                nodes=["a", "b"])).driver
        again = self.useFixture(FakeDriverFixture("fake.multinode", host="h1",
                                                  nodes=["a"])).driver
        other = self.useFixture(FakeDriverFixture("fake.multinode", host="h2",
                                                  nodes=["a"])).driver
        uuid_a = one.get_available_resource("a").uuid
        self.assertEqual(uuid_a, again.get_available_resource("a").uuid)
        self.assertNotEqual(uuid_a, one.get_available_resource("b").uuid)
        self.assertNotEqual(uuid_a, other.get_available_resource("a").uuid)
        one.set_nodes(["b"])
        one.set_nodes(["a", "b"])
        self.assertEqual(uuid_a, one.get_available_resource("a").uuid)
