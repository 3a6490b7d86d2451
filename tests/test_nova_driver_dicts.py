"""``NodeResources.from_dict`` on the exact dicts Nova's in-tree drivers return.

Each dict below has the keys, value types and encodings that Nova's
``get_available_resource`` builds in ``nova/virt/libvirt/driver.py`` (with
``host.py``'s PCI devices and the NUMA topology's versioned-object JSON),
``nova/virt/ironic/driver.py`` (``_node_resource``) and ``nova/virt/fake.py``
(``FakeDriver`` and ``FakeDriverWithPciResources``); the figures are a host's.
The typed result is compared field by field, with Nova's conversions:
numbers truncated to integers as Nova's ComputeNode object stores them, the
raw Ironic resource class normalised as Nova names it.
"""

import json
import uuid

import testtools

from nova_lite.objects import (
    CpuInfo, CpuTopology, MaxPhysAddr, MemPage, NodeResources, NUMACell, NUMATopology,
    PciDevice, SupportedInstance)
from nova_lite.resources import Inventory

NODE_UUID = "4f7a0e1c-5d1b-4a8e-9a4e-0c3c2b1a9d10"
GiB = 1024 ** 3


def _primitive(name, version, data):
    """A Nova versioned object as ``obj_to_primitive()`` makes it."""
    return {"nova_object.name": name, "nova_object.namespace": "nova",
            "nova_object.version": version, "nova_object.data": data,
            "nova_object.changes": sorted(data)}


def _pages(size_kb, total, used=0, reserved=0):
    return _primitive("NUMAPagesTopology", "1.1", {"size_kb": size_kb, "total": total,
                                                   "used": used, "reserved": reserved})


def _cell(cell_id, cpus, memory, siblings, pages):
    return _primitive("NUMACell", "1.5", {
        "id": cell_id, "cpuset": cpus, "pcpuset": cpus, "memory": memory,
        "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [], "siblings": siblings,
        "mempages": pages, "socket": 0,
        "network_metadata": _primitive("NetworkMetadata", "1.0",
                                       {"physnets": [], "tunneled": False})})


def libvirt_dict():
    """What Nova's LibvirtDriver.get_available_resource returns for a 2-cell host."""
    free_bytes, overcommit = int(74.6 * GiB), GiB // 2
    numa = _primitive("NUMATopology", "1.2", {"cells": [
        _cell(0, [0, 1, 2, 3], 7907, [[0, 2], [1, 3]],
              [_pages(4, 2024192), _pages(2048, 0), _pages(1048576, 0)]),
        _cell(1, [4, 5, 6, 7], 7907, [[4, 6], [5, 7]],
              [_pages(4, 1499904), _pages(2048, 512, used=16, reserved=8),
               _pages(1048576, 0)])]})
    pci = [
        {"dev_id": "pci_0000_00_02_0", "address": "0000:00:02.0", "product_id": "3e92",
         "vendor_id": "8086", "numa_node": None, "label": "label_8086_3e92",
         "dev_type": "type-PCI"},
        {"dev_id": "pci_0000_81_00_0", "address": "0000:81:00.0", "product_id": "1017",
         "vendor_id": "15b3", "numa_node": 1, "label": "label_15b3_1017",
         "dev_type": "type-PF", "capabilities": {"vpd": {"card_serial_number": "MT2113"}}},
        {"dev_id": "pci_0000_81_00_2", "address": "0000:81:00.2", "product_id": "1018",
         "vendor_id": "15b3", "numa_node": 1, "label": "label_15b3_1018",
         "dev_type": "type-VF", "parent_addr": "0000:81:00.0", "parent_ifname": "ens1f0",
         "capabilities": {"network": ["rx", "tx", "sg", "tso"],
                          "sriov": {"pf_mac_address": "52:54:00:1e:59:c6", "vf_num": 1}}},
        {"dev_id": "pci_0000_81_00_3", "address": "0000:81:00.3", "product_id": "1018",
         "vendor_id": "15b3", "numa_node": 1, "label": "label_15b3_1018",
         "dev_type": "vdpa", "parent_addr": "0000:81:00.0", "parent_ifname": "ens1f0"},
    ]
    return {
        "supported_instances": [("x86_64", "kvm", "hvm"), ("x86_64", "qemu", "hvm"),
                                ("i686", "qemu", "hvm")],
        "vcpus": 8,
        "memory_mb": 15814,
        "local_gb": 100 * GiB * 0.9785 / GiB,          # bytes / units.Gi: a float
        "vcpus_used": 2,
        "memory_mb_used": 5574,
        "local_gb_used": 37.21875,
        "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000,
        "hypervisor_hostname": "compute1.example.org",
        "uuid": NODE_UUID,
        "cpu_info": json.dumps({
            "arch": "x86_64", "model": "Skylake-Client-IBRS", "vendor": "Intel",
            "topology": {"cells": 2, "sockets": 1, "cores": 4, "threads": 2},
            "maxphysaddr": {"mode": "emulate", "bits": 42},
            "features": ["avx2", "sse4.2", "vmx"]}),
        "disk_available_least": (free_bytes / GiB * GiB - overcommit) / GiB,
        "pci_passthrough_devices": json.dumps(pci),
        "numa_topology": json.dumps(numa),
        "stats": {"uptime": " 10:41:07 up 3 days,  2:14,  1 user,  load average: 0.08"},
    }


def ironic_dict(resource_class="baremetal", cpu_arch="x86_64", capabilities=True):
    """What Nova's IronicDriver._node_resource returns (CPU, RAM, disk all 0)."""
    stats = {"cpu_arch": cpu_arch}
    if capabilities:
        stats.update({"boot_mode": "uefi", "secure_boot": "true"})
    return {
        "uuid": NODE_UUID, "hypervisor_hostname": NODE_UUID,
        "hypervisor_type": "ironic", "hypervisor_version": 1,
        "resource_class": resource_class, "cpu_info": None,
        "vcpus": 0, "vcpus_used": 0, "local_gb": 0, "local_gb_used": 0,
        "disk_available_least": 0, "memory_mb": 0, "memory_mb_used": 0,
        "supported_instances": [(cpu_arch, "baremetal", "hvm")] if cpu_arch else [],
        "stats": stats, "numa_topology": None,
    }


def fake_dict(nodename="compute"):
    """What Nova's FakeDriver.get_available_resource returns."""
    return {
        "hypervisor_type": "fake", "hypervisor_version": 1000,
        "hypervisor_hostname": nodename, "cpu_info": json.dumps({
            "arch": "x86_64", "model": "Nehalem", "vendor": "Intel",
            "features": ["pge", "clflush"],
            "topology": {"cores": 1, "threads": 1, "sockets": 4}}),
        "disk_available_least": 0,
        "supported_instances": [("x86_64", "fake", "hvm")], "numa_topology": None,
        "vcpus": 1000, "memory_mb": 800000, "local_gb": 600000,
        "vcpus_used": 0, "memory_mb_used": 0, "local_gb_used": 0,
        "host_hostname": nodename, "host_name_label": nodename,
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_DNS, nodename)),
    }


def fake_pci_dict():
    """FakeDriverWithPciResources: PFs and VFs with Nova's fake ids."""
    data = fake_dict()
    data["pci_passthrough_devices"] = json.dumps([
        {"address": "0000:01:00.0", "product_id": "fake-product_id",
         "vendor_id": "fake-vendor_id", "status": "available", "dev_type": "type-PF",
         "parent_addr": None, "numa_node": 0, "label": "fake-label"},
        {"address": "0000:01:00.1", "product_id": "fake-product_id",
         "vendor_id": "fake-vendor_id", "status": "available", "dev_type": "type-VF",
         "parent_addr": "0000:01:00.0", "numa_node": 0, "label": "fake-label",
         "parent_ifname": "compute-ens1"}])
    return data


class TestNovaLibvirtDict(testtools.TestCase):

    def test_field_by_field(self):
        res = NodeResources.from_dict(libvirt_dict(), nodename="compute1.example.org")
        self.assertEqual(8, res.vcpus)
        self.assertEqual(15814, res.memory_mb)
        self.assertEqual(97, res.local_gb)               # 97.85 GiB, truncated
        self.assertEqual(2, res.vcpus_used)
        self.assertEqual(5574, res.memory_mb_used)
        self.assertEqual(37, res.local_gb_used)
        self.assertEqual(74, res.disk_available_least)   # 74.1, truncated
        self.assertEqual("QEMU", res.hypervisor_type)
        self.assertEqual(8002000, res.hypervisor_version)
        self.assertEqual("compute1.example.org", res.hypervisor_hostname)
        self.assertEqual(NODE_UUID, res.uuid)
        self.assertIsNone(res.resource_class)
        self.assertEqual(0, res.pcpus)
        self.assertEqual({}, dict(res.reserved))
        self.assertEqual(CpuInfo(
            arch="x86_64", model="Skylake-Client-IBRS", vendor="Intel",
            topology=CpuTopology(cells=2, sockets=1, cores=4, threads=2),
            features={"avx2", "sse4.2", "vmx"},
            maxphysaddr=MaxPhysAddr(mode="emulate", bits=42)), res.cpu_info)
        self.assertEqual(NUMATopology(cells=[
            NUMACell(id=0, cpuset={0, 1, 2, 3}, pcpuset={0, 1, 2, 3}, memory_mb=7907,
                     siblings=[{0, 2}, {1, 3}],
                     mempages=[MemPage(4, 2024192), MemPage(2048, 0),
                               MemPage(1048576, 0)]),
            NUMACell(id=1, cpuset={4, 5, 6, 7}, pcpuset={4, 5, 6, 7}, memory_mb=7907,
                     siblings=[{4, 6}, {5, 7}],
                     # Nova's reserved pages are held outside claims: counted as used.
                     mempages=[MemPage(4, 1499904), MemPage(2048, 512, used=24),
                               MemPage(1048576, 0)])]), res.numa_topology)
        self.assertEqual((
            PciDevice(address="0000:00:02.0", vendor_id="8086", product_id="3e92",
                      dev_type="type-PCI", numa_node=None),
            PciDevice(address="0000:81:00.0", vendor_id="15b3", product_id="1017",
                      dev_type="type-PF", numa_node=1),
            PciDevice(address="0000:81:00.2", vendor_id="15b3", product_id="1018",
                      dev_type="type-VF", numa_node=1, parent_addr="0000:81:00.0"),
            PciDevice(address="0000:81:00.3", vendor_id="15b3", product_id="1018",
                      dev_type="vdpa", numa_node=1, parent_addr="0000:81:00.0"),
        ), res.pci_devices)
        self.assertEqual((SupportedInstance("x86_64", "kvm", "hvm"),
                          SupportedInstance("x86_64", "qemu", "hvm"),
                          SupportedInstance("i686", "qemu", "hvm")), res.supported_instances)
        self.assertEqual({"uptime": libvirt_dict()["stats"]["uptime"]}, dict(res.stats))

    def test_round_trip(self):
        res = NodeResources.from_dict(libvirt_dict())
        self.assertEqual(res, NodeResources.from_dict(json.loads(json.dumps(res.to_dict()))))

    def test_negative_memory_used_as_nova_computes_it(self):
        # getInfo 8154 MiB, meminfo 23112 MiB available: Nova reports -14958.
        res = NodeResources.from_dict(dict(libvirt_dict(), memory_mb_used=-14958))
        self.assertEqual(0, res.memory_mb_used)


class TestNovaIronicDict(testtools.TestCase):

    def test_field_by_field(self):
        res = NodeResources.from_dict(ironic_dict(), nodename=NODE_UUID)
        self.assertEqual((0, 0, 0, 0, 0, 0, 0), (
            res.vcpus, res.memory_mb, res.local_gb, res.vcpus_used, res.memory_mb_used,
            res.local_gb_used, res.disk_available_least))
        self.assertEqual(("ironic", 1, NODE_UUID, NODE_UUID), (
            res.hypervisor_type, res.hypervisor_version, res.hypervisor_hostname, res.uuid))
        self.assertEqual("CUSTOM_BAREMETAL", res.resource_class)
        self.assertIsNone(res.cpu_info)
        self.assertIsNone(res.numa_topology)
        self.assertEqual((), res.pci_devices)
        self.assertEqual((SupportedInstance("x86_64", "baremetal", "hvm"),),
                         res.supported_instances)
        self.assertEqual({"cpu_arch": "x86_64", "boot_mode": "uefi", "secure_boot": "true"},
                         dict(res.stats))
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, res.totals())

    def test_names_normalised_as_nova(self):
        for raw, name in [("baremetal", "CUSTOM_BAREMETAL"),
                          ("gpu_a100 (8x)", "CUSTOM_GPU_A100_8X_"),
                          ("iron-nfv.gold", "CUSTOM_IRON_NFV_GOLD")]:
            self.assertEqual(name, NodeResources.from_dict(
                ironic_dict(resource_class=raw)).resource_class)

    def test_node_without_cpu_arch(self):
        res = NodeResources.from_dict(ironic_dict(cpu_arch=None, capabilities=False))
        self.assertEqual((), res.supported_instances)
        self.assertEqual({}, dict(res.stats))   # Nova's None stat is left out

    def test_inventory_is_one_unit_of_the_class(self):
        from nova_lite import conf
        from nova_lite.compute import accounting
        invs = accounting.build_inventories(NodeResources.from_dict(ironic_dict()),
                                            conf.Settings())
        self.assertEqual({"CUSTOM_BAREMETAL": Inventory(total=1)}, dict(invs))


class TestNovaFakeDict(testtools.TestCase):

    def test_field_by_field(self):
        res = NodeResources.from_dict(fake_dict("compute"), nodename="compute")
        self.assertEqual((1000, 800000, 600000, 0, 0, 0, 0), (
            res.vcpus, res.memory_mb, res.local_gb, res.vcpus_used, res.memory_mb_used,
            res.local_gb_used, res.disk_available_least))
        self.assertEqual(("fake", 1000, "compute"), (
            res.hypervisor_type, res.hypervisor_version, res.hypervisor_hostname))
        self.assertEqual(str(uuid.uuid5(uuid.NAMESPACE_DNS, "compute")), res.uuid)
        self.assertEqual(CpuInfo(arch="x86_64", model="Nehalem", vendor="Intel",
                                 topology=CpuTopology(sockets=4, cores=1, threads=1),
                                 features={"pge", "clflush"}), res.cpu_info)
        self.assertEqual((SupportedInstance("x86_64", "fake", "hvm"),),
                         res.supported_instances)
        self.assertIsNone(res.numa_topology)
        self.assertEqual({}, dict(res.stats))

    def test_with_pci_resources(self):
        res = NodeResources.from_dict(fake_pci_dict())
        self.assertEqual((
            PciDevice(address="0000:01:00.0", vendor_id="fake-vendor_id",
                      product_id="fake-product_id", dev_type="type-PF", numa_node=0),
            PciDevice(address="0000:01:00.1", vendor_id="fake-vendor_id",
                      product_id="fake-product_id", dev_type="type-VF", numa_node=0,
                      parent_addr="0000:01:00.0")), res.pci_devices)
