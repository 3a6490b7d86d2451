"""Parsing of meminfo, disk images, domain/node-device/capabilities XML."""

import os
import struct
import uuid

import fixtures
import testtools

from nova_lite.objects import PciDevice

from nova_lite_libvirt import disks, meminfo
from nova_lite_libvirt.capabilities import parse_capabilities
from nova_lite_libvirt.host_model import available_least_gb
from nova_lite_libvirt.nodedev import parse_pci_device
from nova_lite_libvirt.testing import DiskSpec, GuestSpec, HostSpec, PciDeviceSpec, PciVFSpec
from nova_lite_libvirt.testing import xml as specxml
from nova_lite_libvirt.tests import base
from nova_lite_libvirt.tests.base import GiB, MiB

# A VF as real libvirt prints it (decimal bus/slot, hex ids, NUMA node).
VF_XML = """<device>
  <name>pci_0000_04_11_7</name>
  <parent>pci_0000_00_01_1</parent>
  <capability type='pci'>
    <class>0x020000</class>
    <domain>0</domain><bus>4</bus><slot>17</slot><function>7</function>
    <product id='0x1520'>I350 Ethernet Controller Virtual Function</product>
    <vendor id='0x8086'>Intel Corporation</vendor>
    <capability type='phys_function'>
      <address domain='0x0000' bus='0x04' slot='0x00' function='0x3'/>
    </capability>
    <iommuGroup number='41'><address domain='0x0000' bus='0x04' slot='0x11' function='0x7'/>
    </iommuGroup>
    <numa node='0'/>
  </capability>
</device>"""


class MeminfoTest(testtools.TestCase):

    def test_nova_case(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        path = base.write_meminfo(tmp, free_kib=4 * GiB // 1024, buffers_kib=2 * GiB // 1024,
                                  cached_kib=4 * GiB // 1024)
        self.assertEqual(10240, meminfo.available_mib(path))
        self.assertEqual(5574, meminfo.used_mib(15814, path))

    def test_unreadable_or_incomplete_file_reports_zero(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        log = self.useFixture(fixtures.FakeLogger())
        self.assertEqual(0, meminfo.used_mib(1024, os.path.join(tmp, "missing")))
        partial = os.path.join(tmp, "partial")
        with open(partial, "w") as handle:
            handle.write("MemFree: 10 kB\n")
        self.assertEqual(0, meminfo.used_mib(1024, partial))
        self.assertIn("lacks Buffers, Cached", log.output)

    def test_never_negative(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        path = base.write_meminfo(tmp, free_kib=64 * GiB // 1024)
        self.assertEqual(0, meminfo.used_mib(1024, path))


class DisksTest(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path

    def test_qcow2_virtual_size_from_header(self):
        path = base.write_qcow2(os.path.join(self.tmp, "a.qcow2"), 10 * GiB, 1 * MiB)
        self.assertEqual(10 * GiB, disks.virtual_size(path, "qcow2"))
        self.assertEqual(1 * MiB, disks.virtual_size(path, "raw"))  # declared format rules

    def test_qcow2_v2_and_bad_headers(self):
        path = os.path.join(self.tmp, "v2.qcow2")
        with open(path, "wb") as handle:
            handle.write(struct.pack(">4sIQIIQ", b"QFI\xfb", 2, 0, 0, 16, 3 * GiB))
        self.assertEqual(3 * GiB, disks.virtual_size(path, "qcow2"))
        with open(path, "wb") as handle:
            handle.write(b"\0" * 64)
        self.assertRaises(ValueError, disks.virtual_size, path, "qcow2")

    def test_overcommit_two_disks_exact(self):
        one = base.write_qcow2(os.path.join(self.tmp, "1.qcow2"), 10 * GiB, 80 * MiB)
        two = base.write_sparse(os.path.join(self.tmp, "2.raw"), 5 * GiB)
        guests = [(g.name, specxml.guest_xml(g)) for g in (
            GuestSpec("a", str(uuid.uuid4()), disks=[DiskSpec(one, "vda", "qcow2")]),
            GuestSpec("b", str(uuid.uuid4()), disks=[DiskSpec(two, "vda")]))]
        self.assertEqual(10653532160 + 5368709120, disks.overcommit_total(guests))

    def test_fully_allocated_disk_is_not_overcommitted(self):
        path = os.path.join(self.tmp, "full.raw")
        with open(path, "wb") as handle:
            handle.write(os.urandom(64 * 1024))  # fully written: nothing left to grow
        self.assertEqual(0, disks.disk_overcommit(disks.GuestDisk("vda", path)))

    def test_only_file_disks_count(self):
        xml = """<domain><devices>
          <disk type='file' device='cdrom'><source file='/x.iso'/><target dev='hdc'/></disk>
          <disk type='block' device='disk'><source dev='/dev/sdb'/><target dev='vdb'/></disk>
          <disk type='network' device='disk'><source protocol='rbd' name='p/v'/></disk>
          <disk type='file' device='disk'><driver type='qcow2'/><source file='/i/disk'/>
            <target dev='vda'/></disk></devices></domain>"""
        self.assertEqual([disks.GuestDisk("vda", "/i/disk", "qcow2")], disks.file_disks(xml))

    def test_available_least_truncates_toward_zero(self):
        self.assertEqual(1, available_least_gb(2 * GiB, GiB // 2))
        self.assertEqual(-1, available_least_gb(1 * GiB, 2 * GiB + GiB // 2))
        self.assertEqual(-2, available_least_gb(0, 2 * GiB))


class NodeDeviceTest(testtools.TestCase):

    def test_real_vf_xml(self):
        self.assertEqual(PciDevice(address="0000:04:11.7", vendor_id="8086",
                                   product_id="1520", dev_type="type-VF", numa_node=0,
                                   parent_addr="0000:04:00.3"), parse_pci_device(VF_XML))

    def test_pf_without_vfs_enabled_and_plain_device(self):
        pf = PciDeviceSpec("0000:81:00.0", "15b3", "1013", sriov=True)
        self.assertEqual("type-PF", parse_pci_device(specxml.nodedev_xml(pf)).dev_type)
        gpu = parse_pci_device(specxml.nodedev_xml(PciDeviceSpec("0001:0a:1f.3", "10de",
                                                                 "1DB4")))
        self.assertEqual(PciDevice(address="0001:0a:1f.3", vendor_id="10de",
                                   product_id="1db4"), gpu)

    def test_non_pci_and_malformed(self):
        self.assertIsNone(parse_pci_device(
            "<device><name>net_eth0</name><capability type='net'/></device>"))
        self.assertRaises(ValueError, parse_pci_device,
                          "<device><name>pci_x</name><capability type='pci'>"
                          "<domain>zz</domain></capability></device>")

    def test_vf_spec_round_trip(self):
        pf = PciDeviceSpec("0000:81:00.0", "8086", "1572", 1, vfs=[PciVFSpec("0000:81:02.1",
                                                                             "154c")])
        vf = parse_pci_device(specxml.nodedev_xml(pf.vfs[0], pf))
        self.assertEqual(("type-VF", "0000:81:00.0", 1, "8086"),
                         (vf.dev_type, vf.parent_addr, vf.numa_node, vf.vendor_id))


class CapabilitiesTest(testtools.TestCase):

    def test_spec_capabilities(self):
        spec = HostSpec(numa_nodes=2, sockets=1, cores=2, threads=2, online_cpus={0, 1, 2, 4},
                        arch="amd64")
        caps = parse_capabilities(specxml.capabilities_xml(spec))
        self.assertEqual(("x86_64", "Skylake-Client-IBRS", "Intel", 1, 2, 2),
                         (caps.arch, caps.model, caps.vendor, caps.sockets, caps.cores,
                          caps.threads))
        cell0 = caps.cells[0]
        self.assertEqual([0, 1, 2, 3], [c.id for c in cell0.cpus])
        self.assertEqual(({0, 1}, {2}, set()), (cell0.cpus[0].siblings, cell0.cpus[2].siblings,
                                                cell0.cpus[3].siblings))
        self.assertIsNone(cell0.cpus[3].core_id)  # offline CPUs carry no topology
        self.assertEqual((4, 2097152), cell0.pages[0])
        self.assertEqual([("x86_64", "hvm", ("qemu", "kvm"))],
                         [(g.arch, g.os_type, g.domain_types) for g in caps.guests])

    def test_not_capabilities(self):
        self.assertRaises(ValueError, parse_capabilities, "<node/>")
        self.assertRaises(ValueError, parse_capabilities, "<capabilities")
