"""The typed records of nova_lite.objects."""

import attrs
import testtools

from nova_lite import objects
from nova_lite.exception import InvalidInput
from nova_lite.resources import Inventory
from tests.base import flavor, instance


class TestFlavor(testtools.TestCase):

    def test_fields(self):
        f = flavor(swap=1024, extra_specs={"hw:cpu_policy": "dedicated"})
        self.assertEqual(1, f.vcpus)
        self.assertEqual("dedicated", f.extra_specs["hw:cpu_policy"])
        with testtools.ExpectedException(TypeError):
            f.extra_specs["x"] = "y"

    def test_validation_names_field_and_value(self):
        for kwargs, word in [(dict(vcpus=0), "vcpus"), (dict(vcpus=-1), "vcpus"),
                             (dict(memory_mb=0), "memory_mb"), (dict(vcpus=True), "vcpus"),
                             (dict(root_gb=-1), "root_gb"), (dict(swap=1.5), "swap"),
                             (dict(name=""), "name"), (dict(memory_mb="512"), "memory_mb")]:
            exc = self.assertRaises(InvalidInput, flavor, **kwargs)
            self.assertIn(f"Flavor.{word}", str(exc))

    def test_frozen(self):
        self.assertRaises(attrs.exceptions.FrozenInstanceError, setattr, flavor(), "vcpus", 2)


class TestInstance(testtools.TestCase):

    def test_evolve(self):
        inst = instance()
        self.assertEqual(objects.BUILDING, inst.vm_state)
        gone = attrs.evolve(inst, vm_state="deleted")
        self.assertEqual("deleted", gone.vm_state)
        self.assertEqual(inst.uuid, gone.uuid)
        self.assertEqual(objects.BUILDING, inst.vm_state)

    def test_nova_vm_states(self):
        for state in ("active", "building", "stopped", "resized", "deleted", "shelved",
                      "shelved_offloaded", "error", "soft-delete", "paused", "suspended"):
            self.assertEqual(state, instance(vm_state=state).vm_state)
        exc = self.assertRaises(InvalidInput, instance, vm_state="DELETED")
        self.assertIn("vm_state", str(exc))

    def test_holds_resources(self):
        self.assertTrue(instance(vm_state="active").holds_resources)
        self.assertTrue(instance(vm_state="shelved").holds_resources)
        self.assertFalse(instance(vm_state="deleted").holds_resources)
        self.assertFalse(instance(vm_state="shelved_offloaded").holds_resources)

    def test_flavor_must_be_a_flavor(self):
        self.assertRaises(TypeError, objects.Instance, uuid="u", flavor={"vcpus": 1})


class TestMigration(testtools.TestCase):

    def _migration(self, **kw):
        values = dict(uuid="m", instance_uuid="i", source_compute="h1", source_node="n1",
                      dest_compute="h1", dest_node="n1", old_flavor=flavor(),
                      new_flavor=flavor(name="big", vcpus=2))
        values.update(kw)
        return objects.Migration(**values)

    def test_in_progress(self):
        self.assertTrue(self._migration().in_progress)
        self.assertTrue(self._migration(status="finished").in_progress)
        for done in ("confirmed", "reverted", "error"):
            self.assertFalse(self._migration(status=done).in_progress)

    def test_same_node(self):
        self.assertTrue(self._migration().same_node)
        self.assertFalse(self._migration(dest_node="n2").same_node)
        self.assertFalse(self._migration(dest_compute="h2").same_node)


class TestOverheadAndTopology(testtools.TestCase):

    def test_overhead(self):
        self.assertEqual(objects.Overhead(0, 0, 0), objects.ZERO_OVERHEAD)
        self.assertRaises(InvalidInput, objects.Overhead, memory_mb=-1)
        self.assertRaises(InvalidInput, objects.Overhead, vcpus=0.5)

    def test_numa_topology_rejects_duplicate_cells(self):
        cell = objects.NUMACell(id=0, cpuset={0, 1}, memory_mb=1024)
        exc = self.assertRaises(InvalidInput, objects.NUMATopology, cells=[cell, cell])
        self.assertIn("duplicate", str(exc))

    def test_numa_cell_cpus(self):
        cell = objects.NUMACell(id=0, cpuset=[0, 1], pcpuset=[2, 3], memory_mb=1024)
        self.assertEqual(frozenset({0, 1, 2, 3}), cell.all_cpus)
        self.assertRaises(InvalidInput, objects.NUMACell, id=0, cpuset="0-3", memory_mb=1)
        self.assertRaises(InvalidInput, objects.NUMACell, id=0, cpuset=[-1], memory_mb=1)

    def test_pci_device(self):
        dev = objects.PciDevice(address="0000:81:00.1", vendor_id="8086", product_id="154c",
                                dev_type="type-VF", numa_node=0, parent_addr="0000:81:00.0")
        self.assertEqual("type-VF", dev.dev_type)
        self.assertRaises(InvalidInput, objects.PciDevice, address="a", vendor_id="1",
                          product_id="2", dev_type="type-XYZ")


class TestComputeNode(testtools.TestCase):

    def test_capacity_used_free(self):
        node = objects.ComputeNode(
            uuid="u", host="h", nodename="n",
            inventories={"VCPU": Inventory(total=4, allocation_ratio=4.0),
                         "MEMORY_MB": Inventory(total=8192, reserved=512)},
            usage={"VCPU": 3, "MEMORY_MB": 8000})
        self.assertEqual(16, node.capacity("VCPU"))
        self.assertEqual(3, node.used("VCPU"))
        self.assertEqual(13, node.free("VCPU"))
        # reserved lives in the inventory only: subtracted once
        self.assertEqual(7680, node.capacity("MEMORY_MB"))
        self.assertEqual(0, node.free("MEMORY_MB"))
        self.assertEqual(320, node.over("MEMORY_MB"))
        self.assertEqual(0, node.over("VCPU"))
        self.assertEqual(0, node.capacity("DISK_GB"))
        self.assertEqual(0, node.free("DISK_GB"))
        self.assertEqual((), node.numa_usage())


class TestModuleCycle(testtools.TestCase):

    def test_node_resources_does_not_import_objects(self):
        import subprocess
        import sys
        code = ("import sys, nova_lite.node_resources; "
                "assert 'nova_lite.objects' not in sys.modules, sorted(sys.modules)")
        subprocess.run([sys.executable, "-c", code], check=True)
        from nova_lite import node_resources, objects
        self.assertIs(node_resources.NodeResources, objects.NodeResources)
        self.assertIs(node_resources.CpuInfo, objects.CpuInfo)
