"""Free is never negative: over-commitment is its own figure.

Covers the records (``ComputeNode``), the tracker and its stored record, the
claim decision, the audit (with its WARNING) and the bare-metal rule: a
reserved unit of a node that is in use is not also counted against it.
"""

import attrs
import fixtures

from nova_lite import audit
from nova_lite.compute import accounting
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.objects import Allocation, ComputeNode, NodeResources
from nova_lite.resources import Inventory
from nova_lite.scheduler.host_state import HostState
from tests import base

RC = "CUSTOM_BAREMETAL"
BAREMETAL = base.flavor(name="bm", vcpus=1, memory_mb=1, root_gb=0, extra_specs={
    f"resources:{RC}": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
    "resources:DISK_GB": "0"})


def bare_metal_report(nodename, reserved=False):
    """What a bare-metal driver reports: one unit, reserved while deployed."""
    return NodeResources(vcpus=0, memory_mb=0, local_gb=0, hypervisor_type="ironic",
                         hypervisor_hostname=nodename, resource_class=RC,
                         reserved={RC: 1} if reserved else {})


class TestComputeNodeRecord(base.TestCase):

    def node(self, used, reserved=0, driver_reserved=0, total=1):
        report = NodeResources(vcpus=0, memory_mb=0, local_gb=0, resource_class=RC,
                               reserved={RC: driver_reserved} if driver_reserved else {})
        return ComputeNode(uuid="u", host="h", nodename="n", resources=report,
                           inventories={RC: Inventory(total=total, reserved=reserved)},
                           usage={RC: used} if used else {})

    def test_deployed_bare_metal_node(self):
        node = self.node(used=1, reserved=1, driver_reserved=1)
        self.assertEqual((1, 1, 0, 0), (node.capacity(RC), node.used(RC), node.free(RC),
                                        node.over(RC)))
        self.assertEqual({}, node.over_classes())

    def test_reserved_but_unused_bare_metal_node(self):
        node = self.node(used=0, reserved=1, driver_reserved=1)
        self.assertEqual((0, 0, 0, 0), (node.capacity(RC), node.used(RC), node.free(RC),
                                        node.over(RC)))

    def test_reserved_by_settings_is_not_covered_by_usage(self):
        # Only the driver's own reserved units may be the units in use.
        node = self.node(used=1, reserved=1, driver_reserved=0)
        self.assertEqual((0, 0, 1), (node.capacity(RC), node.free(RC), node.over(RC)))
        self.assertEqual({RC: 1}, node.over_classes())

    def test_shrunken_node(self):
        node = ComputeNode(uuid="u", host="h", nodename="n",
                           inventories={"DISK_GB": Inventory(total=7)}, usage={"DISK_GB": 10})
        self.assertEqual((0, 3), (node.free("DISK_GB"), node.over("DISK_GB")))
        self.assertEqual((0, 0), (HostState(node).free("DISK_GB"), HostState(node).free_disk_gb))


class TestTracker(base.TestCase):

    def bare_metal(self):
        driver, rt = self.make_tracker("fake.multinode", nodes=["bm-1"], audit=False)
        driver.inject_fault("bm-1", report=bare_metal_report("bm-1"))
        self.assertEqual({}, dict(rt.update_available_resource().failed))
        return driver, rt

    def assertFigures(self, node, capacity, used, free, over):
        self.assertEqual({"capacity": capacity, "used": used, "free": free, "over": over},
                         {"capacity": node.capacity(RC), "used": node.used(RC),
                          "free": node.free(RC), "over": node.over(RC)})

    def test_deployed_node_is_used_once_and_never_claimable_twice(self):
        driver, rt = self.bare_metal()
        first = rt.instance_claim(base.instance(BAREMETAL), "bm-1")
        # Deployed: the driver now reserves the unit the instance holds.
        driver.inject_fault("bm-1", report=bare_metal_report("bm-1", reserved=True))
        rt.update_available_resource()
        for node in (rt.get_node("bm-1"), rt.store.get_compute_node(self.host, "bm-1"),
                     ResourceTracker(self.host, driver, store=rt.store,
                                     settings=rt.settings).get_node("bm-1")):
            self.assertEqual((1, 1), (node.inventory(RC).total, node.inventory(RC).reserved))
            self.assertFigures(node, capacity=1, used=1, free=0, over=0)
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(BAREMETAL), "bm-1")
        self.assertIn(f"Free {RC} 0.00 {RC} < requested 1 {RC}", str(exc))
        # Deleted, still reserved (cleaning): nothing used, nothing free.
        rt.update_usage(attrs.evolve(first.instance, vm_state="deleted"))
        self.assertFigures(rt.get_node("bm-1"), capacity=0, used=0, free=0, over=0)
        self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                          base.instance(BAREMETAL), "bm-1")
        # Available again.
        driver.inject_fault("bm-1", report=bare_metal_report("bm-1"))
        rt.update_available_resource()
        self.assertFigures(rt.get_node("bm-1"), capacity=1, used=0, free=1, over=0)
        rt.instance_claim(base.instance(BAREMETAL), "bm-1")

    def test_audit_of_a_deployed_node_reports_nothing_over(self):
        driver, rt = self.bare_metal()
        rt.instance_claim(base.instance(BAREMETAL), "bm-1")
        driver.inject_fault("bm-1", report=bare_metal_report("bm-1", reserved=True))
        rt.update_available_resource()
        logs = self.useFixture(fixtures.FakeLogger(level="WARNING"))
        report = audit.audit_host(rt)
        (row,) = [r for r in report.nodes[0].resources if r.resource_class == RC]
        self.assertEqual((1, 0, 0), (row.capacity, row.free, row.over))
        self.assertNotIn("over capacity", logs.output)

    def test_shrunken_disk_shows_over_and_warns_naming_the_instances(self):
        driver, rt = self.make_tracker("fake.multinode", nodes=["n1"], vcpus=8,
                                       memory_mb=8192, local_gb=20)
        held = [rt.instance_claim(base.instance(base.flavor(root_gb=5)), "n1").instance
                for _ in range(2)]
        driver.set_node_size("n1", local_gb=7)
        rt.update_available_resource()
        node = rt.get_node("n1")
        self.assertEqual((7, 10, 0, 3), (node.capacity("DISK_GB"), node.used("DISK_GB"),
                                         node.free("DISK_GB"), node.over("DISK_GB")))
        stored = rt.store.get_compute_node(self.host, "n1")
        self.assertEqual((0, 3), (stored.free("DISK_GB"), stored.over("DISK_GB")))
        logs = self.useFixture(fixtures.FakeLogger(level="WARNING"))
        report = audit.audit_host(rt)
        (row,) = [r for r in report.nodes[0].resources if r.resource_class == "DISK_GB"]
        self.assertEqual((0, 3), (row.free, row.over))
        self.assertIn("n1", logs.output)
        self.assertIn("over capacity in DISK_GB by 3", logs.output)
        for inst in held:
            self.assertIn(inst.uuid, logs.output)
        # Over capacity, it still takes changes that make it no worse.
        rt.instance_claim(base.instance(base.flavor(root_gb=0)), "n1")
        self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                          base.instance(base.flavor(root_gb=1)), "n1")

    def test_host_shrunk_below_reserved_is_recorded_and_admits_nothing(self):
        driver, rt = self.make_tracker(
            "fake.multinode", nodes=["n1"], vcpus=8, memory_mb=4096, local_gb=20,
            settings=self.settings(reserved_host_memory_mb=2048))
        driver.set_node_size("n1", memory_mb=1024)
        result = rt.update_available_resource()
        self.assertEqual(("n1",), result.audited)
        node = rt.get_node("n1")
        self.assertEqual((1024, 1024, 0, 0), (
            node.inventory("MEMORY_MB").total, node.inventory("MEMORY_MB").reserved,
            node.capacity("MEMORY_MB"), node.free("MEMORY_MB")))
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(base.flavor(memory_mb=2000)), "n1")
        self.assertIn("Free memory 0.00 MB < requested 2000 MB", str(exc))


class TestOverReports(base.TestCase):

    def test_names_class_figures_and_instances(self):
        node = ComputeNode(uuid="u1", host="h", nodename="n",
                           inventories={"MEMORY_MB": Inventory(total=1000, reserved=500)},
                           usage={"MEMORY_MB": 700})
        allocs = [Allocation(consumer_uuid=c, consumer_type="instance", instance_uuid=c,
                             node_uuid="u1", resources={"MEMORY_MB": 350},
                             flavor=base.flavor()) for c in ("i-1", "i-2")]
        self.assertEqual([("MEMORY_MB", 200, 500, 700, ["i-1", "i-2"])],
                         accounting.over_capacity_reports(node, allocs))
        logs = self.useFixture(fixtures.FakeLogger(level="WARNING"))
        self.assertEqual(1, accounting.log_over_capacity(node, allocs))
        self.assertIn("h/n", logs.output)
        self.assertIn("MEMORY_MB by 200", logs.output)
        self.assertIn("i-1, i-2", logs.output)


class TestLimitsThroughTheTracker(base.TestCase):

    def test_limits_not_a_mapping_is_refused_naming_limits_and_nothing_written(self):
        from nova_lite.exception import InvalidInput
        _, rt = self.make_tracker()
        exc = self.assertRaises(InvalidInput, rt.instance_claim, base.instance(), self.host,
                                limits="abc")
        self.assertIn("limits must be a mapping", str(exc))
        self.assertEqual([], rt.store.list_allocations())

    def test_limits_object_with_to_dict(self):
        class SchedulerLimits:
            def to_dict(self):
                return {"memory_mb": 1024.0, "vcpu": None, "disk_gb": None,
                        "numa_topology": None}

        _, rt = self.make_tracker()
        rt.instance_claim(base.instance(base.flavor(memory_mb=1024)), self.host,
                          limits=SchedulerLimits())
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                base.instance(base.flavor(memory_mb=1)), self.host,
                                limits=SchedulerLimits())
        self.assertIn("Free memory 0.00 MB < requested 1 MB", str(exc))
