"""The host model through the driver, on both backends (Nova's host cases)."""

import logging
import os
import uuid

import attrs
import fixtures

from nova_lite.exception import NodeNotFound
from nova_lite.hardware import format_cpu_spec
from nova_lite.objects import CpuTopology, MemPage, PciDevice, SupportedInstance

from nova_lite_libvirt.cpus import CPUSetNotOnline
from nova_lite_libvirt.disks import overcommit_total
from nova_lite_libvirt.host_model import available_least_gb
from nova_lite_libvirt.testing import DiskSpec, GuestSpec, HostSpec, PciDeviceSpec, PciVFSpec
from nova_lite_libvirt.tests import base
from nova_lite_libvirt.tests.base import GiB, MiB

EIGHT_CPUS = HostSpec(numa_nodes=2, sockets=1, cores=2, threads=2)


def guest(name, vcpus=1, memory_mib=512, running=True, disks=()):
    return GuestSpec(name=name, uuid=str(uuid.uuid4()), vcpus=vcpus, memory_mib=memory_mib,
                     running=running, disks=disks)


class HostModelTests:
    """Mixed into a backend case (see ``base``)."""

    # -- CPUs ----------------------------------------------------------------
    def test_vcpus_are_the_online_cpus_when_no_option_is_set(self):
        # Nova: online CPUs {0,1,2,3} and no option -> VCPU set {0,1,2,3}.
        driver = self.start_driver(HostSpec(cores=2, threads=2))
        self.assertEqual(self.spec.online, driver.model.cpu_selection().shared)
        report = self.report(driver)
        self.assertEqual(len(self.spec.online), report.vcpus)
        self.assertEqual(0, report.pcpus)

    def test_cpu_shared_set_with_cpus_not_online_is_an_error(self):
        # Nova: cpu_shared_set '4-6' with only {4,5} online -> error.
        driver = self.make_libvirt_driver(attrs.evolve(EIGHT_CPUS, online_cpus={4, 5}),
                                          cpu_shared_set="4-6")
        exc = self.assertRaises(CPUSetNotOnline, driver.init_host, base.HOST)
        text = str(exc)
        self.assertIn("[compute] cpu_shared_set", text)
        self.assertIn("configured CPUs: 4-6", text)
        self.assertIn(f"online CPUs: {format_cpu_spec(self.spec.online)}", text)
        self.assertEqual(frozenset({4, 5, 6}), exc.configured)
        self.assertEqual(self.spec.online, exc.online)

    def test_dedicated_set_gives_pcpus_and_shared_set_vcpus(self):
        driver = self.start_driver(EIGHT_CPUS, cpu_shared_set="0", cpu_dedicated_set="2,4")
        report = self.report(driver)
        self.assertEqual((1, 2), (report.vcpus, report.pcpus))

    def test_dedicated_set_alone_leaves_no_shared_cpus(self):
        report = self.report(self.start_driver(EIGHT_CPUS, cpu_dedicated_set="0,2"))
        self.assertEqual((0, 2), (report.vcpus, report.pcpus))

    def test_vcpu_pin_set_beside_cpu_shared_set_is_accepted_with_a_warning(self):
        # As Nova: vcpu_pin_set decides the VCPU inventory, and a WARNING says so.
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        report = self.report(self.start_driver(EIGHT_CPUS, vcpu_pin_set="0,2",
                                               cpu_shared_set="4-7"))
        self.assertEqual(2, report.vcpus)
        self.assertIn("vcpu_pin_set", log.output)
        self.assertIn("cpu_shared_set", log.output)

    def test_vcpu_pin_set_limits_vcpus(self):
        report = self.report(self.start_driver(EIGHT_CPUS, vcpu_pin_set="0,2"))
        self.assertEqual((2, 0), (report.vcpus, report.pcpus))

    def test_dedicated_cpu_not_online_is_an_error_naming_the_option(self):
        driver = self.make_libvirt_driver(attrs.evolve(EIGHT_CPUS, online_cpus={0, 2, 4}),
                                          cpu_dedicated_set="0,7")
        exc = self.assertRaises(CPUSetNotOnline, driver.init_host, base.HOST)
        self.assertIn("[compute] cpu_dedicated_set", str(exc))
        self.assertEqual(frozenset({7}), exc.missing)

    def test_a_cpu_going_offline_fails_the_next_report(self):
        self.require("host_changes")
        driver = self.start_driver(EIGHT_CPUS, cpu_dedicated_set="2-3")
        self.backend.fixture.update_spec(online_cpus={0, 1, 2})
        exc = self.assertRaises(CPUSetNotOnline, self.report, driver)
        self.assertEqual(frozenset({3}), exc.missing)

    # -- memory --------------------------------------------------------------------
    def test_memory_used_is_total_minus_free_buffers_cached(self):
        # Nova: 15814 MiB total, 10 GiB available -> 5574 MiB used.
        driver = self.start_driver(HostSpec(memory_mib=15814))
        report = self.report(driver)
        self.assertEqual((15814, 5574), (report.memory_mb, report.memory_mb_used))

    def test_memory_clamp_warns_once_naming_both_sources(self):
        # getInfo counts 8154 MiB; meminfo shows 24105 MiB available.
        self.meminfo_path = base.write_meminfo(self.tmp, free_kib=24105 * 1024,
                                               name="meminfo-big")
        driver = self.start_driver(HostSpec(memory_mib=8154))
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        self.assertEqual((8154, 0), (self.report(driver).memory_mb,
                                     self.report(driver).memory_mb_used))
        self.report(driver)
        warnings = [line for line in log.output.splitlines() if "getInfo()" in line]
        self.assertEqual(1, len(warnings), log.output)
        for text in ("8154 MiB", "24105 MiB", self.meminfo_path, "-15951"):
            self.assertIn(text, warnings[0])

    def test_file_backed_memory_sums_running_guests(self):
        spec = HostSpec(guests=[guest("a", memory_mib=4096), guest("b", memory_mib=2048),
                                guest("off", memory_mib=1024, running=False)])
        driver = self.start_driver(spec, libvirt_options={"file_backed_memory": "1048576"})
        report = self.report(driver)
        self.assertEqual((1048576, 6144), (report.memory_mb, report.memory_mb_used))

    # -- disk -------------------------------------------------------------------------
    def test_disk_sizes_come_from_statvfs_of_instances_path(self):
        report = self.report(self.start_driver())
        self.assertEqual((100, 40, 50), (report.local_gb, report.local_gb_used,
                                         report.disk_available_least))

    def test_disk_sizes_of_the_real_filesystem(self):
        self.statvfs = os.statvfs
        driver = self.start_driver()
        report = self.report(driver)
        st = os.statvfs(driver.config.instances_path)
        self.assertEqual(st.f_frsize * st.f_blocks // GiB, report.local_gb)
        # Other tests write files meanwhile: allow the free GiB to move by one.
        self.assertLessEqual(abs(st.f_frsize * st.f_bavail // GiB - report.disk_available_least),
                             1)

    def test_overcommit_of_two_disks_sums_exactly(self):
        qcow2 = base.write_qcow2(os.path.join(self.tmp, "disk1.qcow2"), 10 * GiB, 80 * MiB)
        raw = base.write_sparse(os.path.join(self.tmp, "disk2.raw"), 5 * GiB)
        self.assertEqual(80 * MiB, os.stat(qcow2).st_blocks * 512)
        spec = HostSpec(guests=[
            guest("g1", disks=[DiskSpec(qcow2, "vda", "qcow2")]),
            guest("g2", running=False, disks=[DiskSpec(raw, "vda", "raw")])])
        driver = self.start_driver(spec)
        expected = (10 * GiB - 80 * MiB) + 5 * GiB
        self.assertEqual(10653532160 + 5368709120, expected)
        self.assertEqual(expected, overcommit_total(driver.libvirt_host.guest_xmls()))
        report = self.report(driver)
        self.assertEqual(available_least_gb(50 * GiB, expected), report.disk_available_least)
        self.assertEqual(35, report.disk_available_least)

    def test_available_least_subtracts_from_exact_free_bytes(self):
        # 74.6 GiB free, 0.5 GiB over-committed: Nova says 74 (rounding first: 73).
        frsize = 4096
        free = int(74.6 * GiB) // frsize

        def statvfs(path):
            return os.statvfs_result((frsize, frsize, 100 * GiB // frsize, free, free,
                                      1000, 500, 500, 0, 255))
        self.statvfs = statvfs
        raw = base.write_sparse(os.path.join(self.tmp, "half.raw"), GiB // 2)
        driver = self.start_driver(HostSpec(guests=[guest("g", disks=[DiskSpec(raw, "vda")])]))
        report = self.report(driver)
        self.assertEqual(74, report.disk_available_least)

    def test_vanished_or_unreadable_disks_are_logged_and_skipped(self):
        good = base.write_sparse(os.path.join(self.tmp, "good.raw"), 3 * GiB)
        bad = os.path.join(self.tmp, "bad.qcow2")
        with open(bad, "wb") as handle:
            handle.write(b"this file is not a qcow2 image at all" * 4)
        gone = os.path.join(self.tmp, "gone.raw")
        spec = HostSpec(guests=[guest("g", disks=[
            DiskSpec(good, "vda"), DiskSpec(gone, "vdb"), DiskSpec(bad, "vdc", "qcow2")])])
        driver = self.start_driver(spec)
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        report = self.report(driver)
        self.assertEqual(available_least_gb(50 * GiB, 3 * GiB), report.disk_available_least)
        self.assertIn("vanished", log.output)
        self.assertIn(gone, log.output)
        self.assertIn("not a qcow2 image", log.output)

    # -- guests -------------------------------------------------------------------------
    def test_vcpus_used_counts_running_guests_only(self):
        spec = HostSpec(guests=[guest("a", vcpus=2), guest("b", vcpus=4),
                                guest("off", vcpus=8, running=False)])
        driver = self.start_driver(spec)
        self.assertEqual(6, self.report(driver).vcpus_used)
        self.assertEqual(sorted(g.uuid for g in spec.guests), sorted(driver.list_instances()))

    # -- identity -----------------------------------------------------------------------
    def test_hypervisor_type_version_and_hostname(self):
        driver = self.start_driver()
        report = self.report(driver)
        self.assertEqual(self.spec.hypervisor_type, report.hypervisor_type)
        self.assertIsInstance(report.hypervisor_version, int)
        self.assertEqual(self.spec.hypervisor_version, report.hypervisor_version)
        self.assertEqual(self.spec.hostname, report.hypervisor_hostname)
        self.assertEqual([self.spec.hostname], driver.get_available_nodes())
        self.assertEqual(str(self.spec.lib_version), report.stats["libvirt_version"])

    def test_changed_hostname_is_logged_and_the_old_one_kept(self):
        self.require("host_changes")
        driver = self.start_driver()
        old = self.spec.hostname
        log = self.useFixture(fixtures.FakeLogger(level=logging.ERROR))
        self.backend.fixture.update_spec(hostname="renamed.example.org")
        self.assertEqual([old], driver.get_available_nodes(refresh=True))
        self.assertEqual(old, self.report(driver).hypervisor_hostname)
        self.assertIn("renamed.example.org", log.output)

    def test_unknown_node_is_refused(self):
        driver = self.start_driver()
        self.assertRaises(NodeNotFound, driver.get_available_resource, "not-this-host")

    # -- cpu_info, NUMA, PCI, guest types ------------------------------------------------
    def test_cpu_info(self):
        spec = HostSpec(numa_nodes=2, sockets=2, cores=4, threads=2, cpu_vendor="AMD",
                        cpu_model="EPYC-Rome", cpu_features={"svm", "avx2"})
        report = self.report(self.start_driver(spec))
        info = report.cpu_info
        self.assertEqual((self.spec.arch, self.spec.cpu_model, self.spec.cpu_vendor),
                         (info.arch, info.model, info.vendor))
        # As Nova: topology.cells is the number of NUMA cells (1 without any).
        cells = len(report.numa_topology.cells) if report.numa_topology else 1
        self.assertEqual(CpuTopology(sockets=2, cores=4, threads=2, cells=cells),
                         info.topology)
        self.assertEqual(self.spec.cpu_features, info.features)

    def test_numa_cells_follow_shared_and_dedicated_sets(self):
        self.require("numa")
        spec = HostSpec(numa_nodes=2, sockets=1, cores=2, threads=2, memory_mib=16384,
                        huge_pages={2048: 512})
        driver = self.start_driver(spec, cpu_shared_set="0-1,4", cpu_dedicated_set="2-3,6-7")
        cell0, cell1 = self.report(driver).numa_topology.cells
        self.assertEqual(({0, 1}, {2, 3}), (cell0.cpuset, cell0.pcpuset))
        self.assertEqual(({4}, {6, 7}), (cell1.cpuset, cell1.pcpuset))
        self.assertEqual(({0, 1}, {2, 3}), cell0.siblings)
        self.assertEqual(({4}, {6, 7}), cell1.siblings)  # CPU 5 is in neither set
        self.assertEqual((8192, 8192), (cell0.memory_mb, cell1.memory_mb))
        self.assertEqual((MemPage(size_kb=4, total=(8192 - 1024) * 256),
                          MemPage(size_kb=2048, total=512),
                          MemPage(size_kb=1048576, total=0)), cell0.mempages)

    def test_numa_cells_without_options_share_every_online_cpu(self):
        self.require("numa")
        spec = attrs.evolve(EIGHT_CPUS, online_cpus={0, 1, 2, 4, 5, 6, 7})
        cell0, cell1 = self.report(self.start_driver(spec)).numa_topology.cells
        self.assertEqual(({0, 1, 2}, set()), (cell0.cpuset, cell0.pcpuset))
        self.assertEqual(({0, 1}, {2}), cell0.siblings)  # offline 3 is nobody's sibling
        self.assertEqual({4, 5, 6, 7}, cell1.cpuset)

    def test_no_numa_cells_means_no_topology(self):
        spec = HostSpec(numa_in_capabilities=False)
        self.assertIsNone(self.report(self.start_driver(spec)).numa_topology)

    def test_pci_devices_with_pfs_and_vfs(self):
        spec = HostSpec(numa_nodes=2, pci_devices=[
            PciDeviceSpec("0000:81:00.0", "8086", "1572", numa_node=1,
                          vfs=[PciVFSpec("0000:81:02.0", "154c"),
                               PciVFSpec("0000:81:02.1", "154c")]),
            PciDeviceSpec("0000:04:00.0", "10de", "1db4")])
        devices = self.report(self.start_driver(spec)).pci_devices
        self.assertEqual((
            PciDevice(address="0000:04:00.0", vendor_id="10de", product_id="1db4"),
            PciDevice(address="0000:81:00.0", vendor_id="8086", product_id="1572",
                      dev_type="type-PF", numa_node=1),
            PciDevice(address="0000:81:02.0", vendor_id="8086", product_id="154c",
                      dev_type="type-VF", numa_node=1, parent_addr="0000:81:00.0"),
            PciDevice(address="0000:81:02.1", vendor_id="8086", product_id="154c",
                      dev_type="type-VF", numa_node=1, parent_addr="0000:81:00.0")), devices)

    def test_supported_instances(self):
        report = self.report(self.start_driver())
        arch = self.spec.guest_arch or self.spec.arch
        expected = tuple(SupportedInstance(arch=arch, hypervisor_type=dt, vm_mode=os_type)
                         for os_type in self.spec.guest_os_types
                         for dt in self.spec.domain_types)
        self.assertEqual(expected, report.supported_instances)


class HostModelFakeTest(HostModelTests, base.FakeBackendCase):
    pass


class HostModelRealTest(HostModelTests, base.RealBackendCase):
    pass
