"""The parsers against real libvirt output: test:///default's fixed host.

A node file cannot give the test driver NUMA cells (see ``backends``), but
test:///default has two: CPUs 0-7 with 2 GiB and CPUs 8-15 with 4 GiB.
This holds the NUMA and capabilities parsing to what real libvirt prints,
and the CPU feature traits to libvirt's own CPU map (``baselineCPU`` works
on the test driver).
"""

import logging

import fixtures
import os_traits as ot

from nova_lite_libvirt import host_traits
from nova_lite_libvirt.capabilities import HostCapabilities, parse_capabilities
from nova_lite_libvirt.config import LibvirtConfig
from nova_lite_libvirt.cpus import select_cpus
from nova_lite_libvirt.host import Host
from nova_lite_libvirt.host_model import HostModel
from nova_lite_libvirt.numa import build_numa_topology
from nova_lite_libvirt.tests import base

SKYLAKE = HostCapabilities(arch="x86_64", model="Skylake-Client-IBRS", vendor="Intel",
                           features=frozenset({"vmx", "ds"}))


class TestDefaultHostTest(base.RealBackendCase):

    def setUp(self):
        super().setUp()
        self.host = Host("test:///default")
        self.addCleanup(self.host.close)

    def test_numa_cells_from_real_capabilities(self):
        caps = self.host.capabilities()
        self.assertEqual([0, 1], [c.id for c in caps.cells])
        self.assertEqual([list(range(8)), list(range(8, 16))],
                         [[cpu.id for cpu in c.cpus] for c in caps.cells])
        self.assertEqual([2 * 1024 * 1024, 4 * 1024 * 1024], [c.memory_kib for c in caps.cells])
        self.assertEqual(1, caps.cells[1].cpus[0].socket_id)
        self.assertEqual({9}, caps.cells[1].cpus[1].siblings)

    def test_numa_topology_follows_cpu_sets_on_real_output(self):
        caps = self.host.capabilities()
        online = self.host.online_cpus()
        self.assertEqual({0, 2, 4}, online)
        selection = select_cpus(online, LibvirtConfig(cpu_shared_set={0, 2},
                                                      cpu_dedicated_set={4}))
        cell0, cell1 = build_numa_topology(caps, selection).cells
        self.assertEqual(({0, 2}, {4}, 2048), (cell0.cpuset, cell0.pcpuset, cell0.memory_mb))
        self.assertEqual(({0}, {2}, {4}), cell0.siblings)
        self.assertEqual((set(), set(), 4096), (cell1.cpuset, cell1.pcpuset, cell1.memory_mb))

    def test_capabilities_text_round_trips_through_parser(self):
        caps = parse_capabilities(self.host.connection().getCapabilities())
        self.assertEqual("i686", caps.arch)
        self.assertIn("pae", caps.features)
        self.assertEqual(("hvm", "xen"), tuple(g.os_type for g in caps.guests))

    def test_traits_of_the_default_host(self):
        # Two cells, every CPU its own sibling: no hyperthreading; an i686 CPU
        # without a model; no domain capabilities; hypervisor type TEST.
        self.useFixture(fixtures.FakeLogger())   # its disk and memory figures warn
        model = HostModel(self.host, LibvirtConfig(instances_path=self.tmp),
                          meminfo_path=self.meminfo_path, statvfs=self.statvfs)
        self.assertEqual({ot.HW_ARCH_I686}, set(model.resources().traits))

    def test_cpu_model_features_from_libvirts_cpu_map(self):
        features = self.host.expanded_cpu_features(SKYLAKE)
        # What libvirt's x86 CPU map gives Skylake-Client-IBRS, beside the
        # listed vmx and ds.
        self.assertLessEqual({"vmx", "ds", "avx2", "sse4.2", "aes", "pclmuldq", "fma", "bmi1",
                              "mpx"}, features)
        self.assertNotIn("avx512f", features)   # a Skylake server feature
        traits = host_traits.cpu_traits(SKYLAKE, "kvm", features)
        self.assertLessEqual({ot.HW_CPU_X86_AVX2, ot.HW_CPU_X86_SSE42, ot.HW_CPU_X86_AESNI,
                              ot.HW_CPU_X86_CLMUL, ot.HW_CPU_X86_FMA3, ot.HW_CPU_X86_BMI,
                              ot.HW_CPU_X86_MPX, ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX},
                             traits)
        self.assertNotIn(ot.HW_CPU_X86_AVX512F, traits)
        # The capabilities' own list alone gives the vmx traits only.
        self.assertEqual({ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX},
                         host_traits.cpu_traits(SKYLAKE, "kvm"))

    def test_a_model_libvirt_does_not_know_is_not_expanded(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        caps = HostCapabilities(arch="x86_64", model="NoSuchModel", features=frozenset({"avx"}))
        self.assertIsNone(self.host.expanded_cpu_features(caps))
        self.assertIn("Unknown CPU model NoSuchModel", log.output)
        self.assertEqual({ot.HW_CPU_X86_AVX}, host_traits.cpu_traits(caps, "kvm"))

    def test_domain_capabilities_are_not_supported(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.DEBUG))
        caps = self.host.capabilities()
        self.assertEqual((), self.host.domain_capabilities(caps, "test"))
        self.assertIn("not supported by the connection driver", log.output)
