"""The fake held to real libvirt: same spec, same answers.

Runs in the real tier only.  For each host spec, the driver on libvirt's
test driver and the driver on the fake (given the spec as the test driver
reports it, see ``backends``) must produce equal NodeResources, and the
libvirt calls the driver makes must return the same shapes, units and
error codes.
"""

import os
import uuid
import xml.etree.ElementTree as ET

import attrs
import testtools

from nova_lite.virt import loader

from nova_lite_libvirt import libvirt_api
from nova_lite_libvirt.testing import (
    DiskSpec, FakeLibvirtFixture, GpuSpec, GuestSpec, HostSpec, MdevSpec, MdevTypeSpec,
    PciDeviceSpec, PciVFSpec, node_xml, spec_from_node_xml)
from nova_lite_libvirt.tests import backends, base
from nova_lite_libvirt.tests.base import GiB, MiB

DOMAIN = """<domain type='kvm'><name>probe</name><uuid>{uuid}</uuid>
<memory unit='MiB'>256</memory><vcpu>3</vcpu><os><type>hvm</type></os></domain>"""


class FidelityTest(base.RealBackendCase):

    def rich_spec(self):
        qcow2 = base.write_qcow2(os.path.join(self.tmp, "d1.qcow2"), 10 * GiB, 80 * MiB)
        raw = base.write_sparse(os.path.join(self.tmp, "d2.raw"), 5 * GiB)
        return HostSpec(
            numa_nodes=2, sockets=2, cores=4, threads=2, memory_mib=15814, cpu_mhz=3100,
            guests=[GuestSpec("web", str(uuid.uuid4()), 2048, 2,
                              disks=[DiskSpec(qcow2, "vda", "qcow2")]),
                    GuestSpec("db", str(uuid.uuid4()), 4096, 4, running=False,
                              disks=[DiskSpec(raw, "vda")])],
            pci_devices=[PciDeviceSpec("0000:81:00.0", "8086", "1572", numa_node=1,
                                       vfs=[PciVFSpec("0000:81:02.0", "154c"),
                                            PciVFSpec("0000:81:02.1", "154c")]),
                         PciDeviceSpec("0000:04:00.0", "10de", "1db4", numa_node=0)],
            gpus=[GpuSpec("0000:84:00.0", [MdevTypeSpec("nvidia-35", 15, "GRID M60-0B")],
                          mdevs=[MdevSpec(str(uuid.uuid4()), "nvidia-35", 40)], numa_node=1)])

    def both(self, spec, **options):
        """(real driver, fake driver) for ``spec``, init_host-ed."""
        real = self.start_driver(spec, **options)
        self.useFixture(FakeLibvirtFixture(self.spec))
        settings = self.libvirt_settings("qemu:///system", options.pop("libvirt_options", None),
                                         **options)
        fake = loader.load_driver("libvirt", settings=settings, meminfo_path=self.meminfo_path,
                                  statvfs=self.statvfs)
        self.addCleanup(fake.close)
        fake.init_host(base.HOST)
        return real, fake

    def assert_same_report(self, spec, **options):
        real, fake = self.both(spec, **options)
        real_report, fake_report = self.report(real), self.report(fake)
        self.assertEqual(real_report, fake_report)
        self.assertEqual(dict(real_report.stats), dict(fake_report.stats))
        self.assertEqual(sorted(real.list_instances()), sorted(fake.list_instances()))
        return real_report

    def test_default_host(self):
        self.assert_same_report(HostSpec())

    def test_rich_host(self):
        report = self.assert_same_report(self.rich_spec())
        self.assertEqual((15814, 2, 5), (report.memory_mb, report.vcpus_used,
                                         len(report.pci_devices)))

    def test_mediated_devices(self):
        report = self.assert_same_report(self.rich_spec(), sections={
            "devices": {"enabled_mdev_types": "nvidia-35"}})
        self.assertEqual([16], [c.inventories["VGPU"].total for c in report.providers])

    def test_cpu_options(self):
        self.assert_same_report(HostSpec(numa_nodes=2), cpu_shared_set="0",
                                cpu_dedicated_set="2,4")

    def test_file_backed_memory(self):
        self.assert_same_report(self.rich_spec(),
                                libvirt_options={"file_backed_memory": "65536"})

    def test_domain_calls_have_the_same_shapes_and_errors(self):
        real, fake = self.both(HostSpec())
        uid = str(uuid.uuid4())
        answers = [self.domain_answers(d.libvirt_host.connection(), d.libvirt_host.libvirt, uid)
                   for d in (real, fake)]
        self.assertEqual(answers[0], answers[1])

    def test_trait_calls_have_the_same_shapes_and_errors(self):
        real, _fake = self.both(HostSpec())
        conn, libvirt = real.libvirt_host.connection(), real.libvirt_host.libvirt
        flag = libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES
        listed = "<cpu><arch>x86_64</arch><model>Skylake-Client-IBRS</model>" \
                 "<vendor>Intel</vendor><feature name='vmx'/><feature name='ds'/></cpu>"
        expanded = self.cpu_answer(conn.baselineCPU([listed], flag))
        # The fake knows its host's model: give it what libvirt's CPU map says.
        implied = frozenset(name for _policy, name in expanded[3]) - {"vmx", "ds"}
        spec = attrs.evolve(self.spec, cpu_model="Skylake-Client-IBRS",
                            cpu_model_features=implied)
        self.useFixture(FakeLibvirtFixture(spec))
        fake_libvirt = libvirt_api.import_libvirt()
        fake_conn = fake_libvirt.open("qemu:///system")
        answers = [self.trait_answers(cn, lv, listed) for cn, lv in
                   ((conn, libvirt), (fake_conn, fake_libvirt))]
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(expanded, answers[1]["expanded"])

    @staticmethod
    def cpu_answer(text):
        cpu = ET.fromstring(text)
        model = cpu.find("model")
        return (dict(cpu.attrib), (model.text, dict(model.attrib)), cpu.findtext("vendor"),
                frozenset((f.get("policy"), f.get("name")) for f in cpu.findall("feature")))

    def trait_answers(self, conn, libvirt, listed):
        def code(call, *args):
            try:
                call(*args)
            except libvirt.libvirtError as exc:
                return exc.get_error_code(), exc.get_error_domain()
            return None

        flag = libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES
        return {
            "listed": self.cpu_answer(conn.baselineCPU([listed], 0)),
            "expanded": self.cpu_answer(conn.baselineCPU([listed], flag)),
            "no_model": code(conn.baselineCPU, ["<cpu><arch>x86_64</arch></cpu>"], flag),
            "unknown_model": code(conn.baselineCPU,
                                  ["<cpu><arch>x86_64</arch><model>Nope</model></cpu>"], flag),
            "no_cpus": code(conn.baselineCPU, [], flag),
            "domain_caps": code(conn.getDomainCapabilities, None, "i686", None, "test", 0),
        }

    def domain_answers(self, conn, libvirt, uid):
        """Shapes, units and error codes of the calls the driver relies on."""
        out = {}

        def code(call, *args):
            try:
                call(*args)
            except libvirt.libvirtError as exc:
                return exc.get_error_code()
            return None

        info = conn.getInfo()
        out["getInfo"] = [type(x).__name__ for x in info]
        count, flags, online = conn.getCPUMap()
        out["getCPUMap"] = (type(count).__name__, type(flags).__name__, online == sum(flags))
        dom = conn.defineXML(DOMAIN.format(uuid=uid))
        out["defined"] = (dom.info()[:4], dom.ID(), dom.isActive(), dom.isPersistent(),
                          dom.state()[0])
        dom.create()
        out["running"] = (dom.info()[:4], dom.ID() > 0, dom.isActive(), dom.state()[0])
        out["listed_active"] = [d.UUIDString() for d in conn.listAllDomains(
            libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)]
        out["undefine_running"] = code(dom.undefine)
        out["transient"] = (dom.isPersistent(), dom.isActive())
        dom.destroy()
        out["gone_after_destroy"] = code(conn.lookupByUUIDString, uid)
        out["info_of_gone"] = code(dom.info)
        out["destroy_gone"] = code(dom.destroy)
        dom = conn.defineXML(DOMAIN.format(uuid=uid))
        out["destroy_shut_off"] = code(dom.destroy)
        other = DOMAIN.format(uuid=str(uuid.uuid4()))
        out["name_clash"] = code(conn.defineXML, other)
        out["no_name"] = code(conn.defineXML, "<domain type='kvm'><memory>1</memory></domain>")
        dom.undefine()
        out["undefine_gone"] = code(dom.undefine)
        out["lookup_name"] = code(conn.lookupByName, "nope")
        out["nodedev_missing"] = code(conn.nodeDeviceLookupByName, "pci_9999_99_99_9")
        return out


class FidelityDifferencesTest(base.RealBackendCase):
    """The listed differences are real: each one shows on the test driver."""

    def test_online_cpu_map_is_fixed(self):
        self.start_driver(HostSpec(numa_nodes=1, cores=8, threads=1))
        self.assertEqual(frozenset({0, 2, 4}), self.spec.online)

    def test_start_of_running_domain_error_code(self):
        libvirt = libvirt_api.import_libvirt()
        driver = self.start_driver()
        conn = driver.libvirt_host.connection()
        dom = conn.defineXML(DOMAIN.format(uuid=str(uuid.uuid4())))
        dom.create()
        exc = self.assertRaises(libvirt.libvirtError, dom.create)
        self.assertEqual(libvirt.VIR_ERR_INTERNAL_ERROR, exc.get_error_code())
        self.assertIn("start_running_error", backends.TEST_DRIVER_DIFFERENCES)


# A node file written by hand, as an operator or a reviewer would.
HAND_WRITTEN_NODE = """<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
  <cpu><nodes>1</nodes><sockets>2</sockets><cores>6</cores><threads>2</threads>
       <active>24</active><mhz>2600</mhz><model>x86_64</model></cpu>
  <memory>65536000</memory>
  <domain type='test'>
    <name>vm-a</name><uuid>6ad0a4c0-5bd5-4a4e-b1b4-0a5d1b2c3d4e</uuid>
    <memory unit='GiB'>4</memory><vcpu>4</vcpu><os><type>hvm</type></os>
  </domain>
  <domain type='test'>
    <name>vm-b</name><uuid>7be1b5d1-6ce6-4b5f-82c5-1b6e2c3d4e5f</uuid>
    <memory>1048576</memory><currentMemory>524288</currentMemory><vcpu>2</vcpu>
    <os><type>hvm</type></os><test:runstate>5</test:runstate>
  </domain>
  <device>
    <name>pci_0000_3b_00_0</name><parent>computer</parent>
    <capability type='pci'><domain>0</domain><bus>59</bus><slot>0</slot><function>0</function>
      <product id='0x1017'/><vendor id='0x15b3'/>
      <capability type='virt_functions' maxCount='8'/></capability>
  </device>
</node>"""


class HandWrittenNodeFileTest(base.RealBackendCase):
    """A node file this package did not write: the fake agrees with libvirt."""

    def test_fake_from_the_same_file_reports_the_same(self):
        spec = spec_from_node_xml(HAND_WRITTEN_NODE)
        path = os.path.join(self.tmp, "hand.xml")
        with open(path, "w") as handle:
            handle.write(HAND_WRITTEN_NODE)
        settings = self.libvirt_settings(f"test://{path}")
        real = loader.load_driver("libvirt", settings=settings, meminfo_path=self.meminfo_path,
                                  statvfs=self.statvfs)
        self.addCleanup(real.close)
        real.init_host(base.HOST)
        report = self.report(real)
        libvirt = real.libvirt_host.libvirt
        conn = libvirt.open(f"test://{path}")
        self.addCleanup(conn.close)
        _n, flags, _o = conn.getCPUMap()
        self.assertEqual(sum(flags), report.vcpus)
        self.assertEqual(conn.getInfo()[1], report.memory_mb)
        self.assertEqual(4, report.vcpus_used)
        self.assertEqual(["6ad0a4c0-5bd5-4a4e-b1b4-0a5d1b2c3d4e",
                          "7be1b5d1-6ce6-4b5f-82c5-1b6e2c3d4e5f"], sorted(real.list_instances()))
        effective = backends.as_test_driver_reports(
            spec, backends.probe_test_driver(spec, self.tmp))
        self.useFixture(FakeLibvirtFixture(effective))
        fake = loader.load_driver("libvirt", settings=self.libvirt_settings("qemu:///system"),
                                  meminfo_path=self.meminfo_path, statvfs=self.statvfs)
        self.addCleanup(fake.close)
        fake.init_host(base.HOST)
        self.assertEqual(report, self.report(fake))
        self.assertEqual(sorted(real.list_instances()), sorted(fake.list_instances()))



class NodeFileTest(testtools.TestCase):
    """Reading node files needs no libvirt."""

    def test_spec_round_trips_through_a_node_file(self):
        spec = spec_from_node_xml(HAND_WRITTEN_NODE)
        self.assertEqual(spec, spec_from_node_xml(node_xml(spec)))
        self.assertEqual((1, 2, 6, 2, 64000), (spec.numa_nodes, spec.sockets, spec.cores,
                                               spec.threads, spec.memory_mib))
        self.assertEqual([(4096, True), (512, False)],
                         [(g.memory_mib, g.running) for g in spec.guests])
