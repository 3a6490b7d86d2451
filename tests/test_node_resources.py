"""NodeResources, and reading Nova-style resource dicts."""

import json

import testtools

from nova_lite.exception import InvalidInput, InvalidNodeResources
from nova_lite.objects import CpuInfo, NodeResources, NUMATopology, PciDevice


def nova_dict(**changes):
    """A resources dict as Nova's libvirt driver returned it."""
    data = {
        "vcpus": 8, "memory_mb": 16384, "local_gb": 100,
        "vcpus_used": 2, "memory_mb_used": 4096, "local_gb_used": 20,
        "hypervisor_type": "QEMU", "hypervisor_version": 8002000,
        "hypervisor_hostname": "compute1.example.org",
        "cpu_info": json.dumps({"arch": "x86_64", "model": "Skylake-Client-IBRS",
                                "vendor": "Intel",
                                "topology": {"sockets": 1, "cores": 4, "threads": 2},
                                "features": ["sse4.2", "avx2"]}),
        "disk_available_least": -5,
        "numa_topology": {"cells": [
            {"id": 0, "cpuset": [0, 1, 2, 3], "memory_mb": 8192, "siblings": [[0, 1], [2, 3]],
             "mempages": [{"size_kb": 4, "total": 2097152}]},
            {"id": 1, "cpuset": [4, 5, 6, 7], "memory": 8192}]},
        "pci_passthrough_devices": json.dumps([
            {"address": "0000:81:00.0", "vendor_id": "8086", "product_id": "1572",
             "dev_type": "type-PF", "numa_node": 1}]),
        "supported_instances": [["x86_64", "kvm", "hvm"], ["i686", "kvm", "hvm"]],
        "stats": {"failure_domain": "rack1"},
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not _DROP}


_DROP = object()


class TestFromDict(testtools.TestCase):

    def test_nova_style_dict(self):
        res = NodeResources.from_dict(nova_dict())
        self.assertEqual((8, 16384, 100), (res.vcpus, res.memory_mb, res.local_gb))
        self.assertEqual((2, 4096, 20), (res.vcpus_used, res.memory_mb_used, res.local_gb_used))
        self.assertEqual(-5, res.disk_available_least)
        self.assertEqual("QEMU", res.hypervisor_type)
        self.assertEqual(8002000, res.hypervisor_version)
        self.assertIsInstance(res.cpu_info, CpuInfo)
        self.assertEqual(4, res.cpu_info.topology.cores)
        self.assertIn("avx2", res.cpu_info.features)
        self.assertIsInstance(res.numa_topology, NUMATopology)
        self.assertEqual(frozenset({4, 5, 6, 7}), res.numa_topology.cell(1).cpuset)
        self.assertEqual(8192, res.numa_topology.cell(1).memory_mb)
        self.assertEqual((PciDevice(address="0000:81:00.0", vendor_id="8086",
                                    product_id="1572", dev_type="type-PF", numa_node=1),),
                         res.pci_devices)
        self.assertEqual(2, len(res.supported_instances))
        self.assertEqual("rack1", res.stats["failure_domain"])
        self.assertEqual({"VCPU": 8, "MEMORY_MB": 16384, "DISK_GB": 100}, res.totals())

    def test_nova_libvirt_primitives(self):
        """Nova's libvirt driver sends versioned-object JSON and extra PCI keys."""
        numa = {"nova_object.name": "NUMATopology", "nova_object.version": "1.2",
                "nova_object.data": {"cells": [{
                    "nova_object.name": "NUMACell",
                    "nova_object.data": {
                        "id": 0, "cpuset": [0, 1], "pcpuset": [2, 3], "memory": 2048,
                        "cpu_usage": 0, "memory_usage": 0, "pinned_cpus": [],
                        "siblings": [[0, 2], [1, 3]],
                        "mempages": [{"nova_object.data": {"size_kb": 4, "total": 524288,
                                                           "used": 0, "reserved": 0}},
                                     {"nova_object.data": {"size_kb": 2048, "total": 16,
                                                           "used": 0, "reserved": 2}}]}}]}}
        pci = [{"dev_id": "pci_0000_81_00_1", "address": "0000:81:00.1",
                "product_id": "154c", "vendor_id": "8086", "numa_node": 0,
                "label": "label_8086_154c", "dev_type": "type-VF",
                "parent_addr": "0000:81:00.0", "parent_ifname": "enp129s0f0"},
               {"dev_id": "pci_0000_81_00_0", "address": "0000:81:00.0",
                "product_id": "1572", "vendor_id": "8086", "numa_node": 0,
                "label": "label_8086_1572", "dev_type": "type-PF"}]
        res = NodeResources.from_dict(nova_dict(numa_topology=json.dumps(numa),
                                                pci_passthrough_devices=json.dumps(pci)))
        cell = res.numa_topology.cell(0)
        self.assertEqual((frozenset({0, 1}), frozenset({2, 3}), 2048),
                         (cell.cpuset, cell.pcpuset, cell.memory_mb))
        self.assertEqual([(4, 524288, 0), (2048, 16, 2)],
                         [(p.size_kb, p.total, p.used) for p in cell.mempages])
        self.assertEqual({"0000:81:00.0", "0000:81:00.1"}, {d.address for d in res.pci_devices})
        vf = [d for d in res.pci_devices if d.dev_type == "type-VF"][0]
        self.assertEqual("0000:81:00.0", vf.parent_addr)

    def test_minimal_dict(self):
        data = nova_dict(cpu_info=_DROP, numa_topology=_DROP, pci_passthrough_devices=_DROP,
                         supported_instances=_DROP, stats=_DROP, disk_available_least=_DROP)
        res = NodeResources.from_dict(data)
        self.assertIsNone(res.numa_topology)
        self.assertIsNone(res.disk_available_least)
        self.assertEqual((), res.pci_devices)

    def test_round_trip(self):
        res = NodeResources.from_dict(nova_dict(resource_class="CUSTOM_GOLD",
                                                uuid="5c2a6c3e-0000-4000-8000-000000000001"))
        self.assertEqual(res, NodeResources.from_dict(res.to_dict()))
        self.assertEqual(res, NodeResources.from_dict(json.loads(json.dumps(res.to_dict()))))

    def _problems(self, data, nodename="node-7"):
        exc = self.assertRaises(InvalidNodeResources, NodeResources.from_dict, data,
                                nodename=nodename)
        self.assertIsInstance(exc, InvalidInput)
        return exc, str(exc)

    def test_every_missing_key_is_named(self):
        data = nova_dict()
        for key in ("vcpus", "memory_mb", "local_gb", "hypervisor_type"):
            del data[key]
        exc, text = self._problems(data)
        for key in ("vcpus", "memory_mb", "local_gb", "hypervisor_type"):
            self.assertIn(f"missing key '{key}'", text)
        self.assertEqual(4, len(exc.problems), exc.problems)
        self.assertIn("node-7", text)

    def test_every_malformed_key_is_named(self):
        data = nova_dict(vcpus="eight", memory_mb=-1, local_gb=float("nan"),
                         vcpus_used=True, memory_mb_used=[1], local_gb_used=float("inf"),
                         hypervisor_hostname=42)
        exc, text = self._problems(data)
        for key in ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used",
                    "local_gb_used", "hypervisor_hostname"):
            self.assertIn(f"'{key}'", text)
        self.assertIn("'eight'", text)
        self.assertIn("nan", text)
        self.assertIn(">= 0", text)
        self.assertEqual(7, len(exc.problems), exc.problems)

    def test_missing_and_malformed_together(self):
        data = nova_dict(vcpus=-4, memory_mb_used="lots", cpu_info="{not json",
                         numa_topology={"cells": [{"id": 0}]}, reserved={"MEMORY_MB": 10**6})
        del data["local_gb"]
        exc, text = self._problems(data)
        for key in ("vcpus", "memory_mb_used", "local_gb", "cpu_info", "numa_topology",
                    "reserved"):
            self.assertIn(key, text)

    def test_reserved_greater_than_total(self):
        exc, text = self._problems(nova_dict(reserved={"MEMORY_MB": 32768}))
        self.assertIn("reserved", text)
        self.assertIn("MEMORY_MB", text)
        self.assertIn("32768", text)

    def test_malformed_nested_records(self):
        exc, text = self._problems(nova_dict(
            pci_passthrough_devices=[{"address": "0000:81:00.0"}],
            supported_instances=[["x86_64"]],
            stats=["not", "a", "mapping"]))
        for key in ("pci_passthrough_devices", "supported_instances", "stats"):
            self.assertIn(key, text)

    def test_not_a_dict(self):
        for bad in (None, [], "vcpus=8"):
            self._problems(bad)

    def test_floats_are_truncated_as_nova_does(self):
        self.assertEqual(8, NodeResources.from_dict(nova_dict(vcpus=8.0)).vcpus)
        res = NodeResources.from_dict(nova_dict(local_gb=97.85, local_gb_used=12.9,
                                                disk_available_least=-0.4))
        self.assertEqual((97, 12, 0), (res.local_gb, res.local_gb_used,
                                       res.disk_available_least))
        self.assertEqual(-3, NodeResources.from_dict(
            nova_dict(disk_available_least=-3.7)).disk_available_least)
        self._problems(nova_dict(vcpus=float("nan")))

    def test_negative_used_is_read_as_zero_with_a_warning(self):
        import fixtures
        logs = self.useFixture(fixtures.FakeLogger(level="WARNING"))
        res = NodeResources.from_dict(nova_dict(memory_mb_used=-14958), nodename="n1")
        self.assertEqual(0, res.memory_mb_used)
        self.assertIn("memory_mb_used=-14958", logs.output)
        self.assertIn("n1", logs.output)
        self._problems(nova_dict(memory_mb=-1))

    def test_raw_resource_class_is_normalised(self):
        self.assertEqual("CUSTOM_BAREMETAL", NodeResources.from_dict(
            nova_dict(resource_class="baremetal")).resource_class)
        self.assertEqual("CUSTOM_GPU_A100_8X_", NodeResources.from_dict(
            nova_dict(resource_class="gpu_a100 (8x)")).resource_class)
        self.assertEqual("CUSTOM_GOLD", NodeResources.from_dict(
            nova_dict(resource_class="CUSTOM_GOLD")).resource_class)

    def test_cpu_info_topology_and_maxphysaddr(self):
        cpu = json.dumps({"arch": "x86_64", "model": "EPYC", "vendor": "AMD",
                          "topology": {"cells": 2, "sockets": 2, "cores": 16, "threads": 2},
                          "maxphysaddr": {"mode": "passthrough", "bits": 48},
                          "features": ["svm"]})
        info = NodeResources.from_dict(nova_dict(cpu_info=cpu)).cpu_info
        self.assertEqual((2, 2, 16, 2), (info.topology.cells, info.topology.sockets,
                                         info.topology.cores, info.topology.threads))
        self.assertEqual(("passthrough", 48), (info.maxphysaddr.mode, info.maxphysaddr.bits))
        res = NodeResources.from_dict(nova_dict(cpu_info=cpu))
        self.assertEqual(res, NodeResources.from_dict(json.loads(json.dumps(res.to_dict()))))
        exc, text = self._problems(nova_dict(cpu_info={"topology": {"cores": "many"}}))
        self.assertIn("cpu_info", text)
        self.assertIn("topology.cores", text)


class TestNodeResources(testtools.TestCase):

    def test_validation(self):
        self.assertRaises(InvalidInput, NodeResources, vcpus=-1, memory_mb=1, local_gb=1)
        self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1, local_gb=1,
                          reserved={"MEMORY_MB": 2})
        self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1, local_gb=1,
                          reserved={"BOGUS": 0})

    def test_totals(self):
        res = NodeResources(vcpus=4, memory_mb=1024, local_gb=0, pcpus=2,
                            resource_class="CUSTOM_BAREMETAL_GOLD")
        self.assertEqual({"VCPU": 4, "PCPU": 2, "MEMORY_MB": 1024, "CUSTOM_BAREMETAL_GOLD": 1},
                         res.totals())
        self.assertEqual(-3, NodeResources(vcpus=1, memory_mb=1, local_gb=1,
                                           disk_available_least=-3).disk_available_least)
