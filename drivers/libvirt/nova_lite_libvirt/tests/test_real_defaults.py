"""The parsers against real libvirt output: test:///default's fixed host.

A node file cannot give the test driver NUMA cells (see ``backends``), but
test:///default has two: CPUs 0-7 with 2 GiB and CPUs 8-15 with 4 GiB.
This holds the NUMA and capabilities parsing to what real libvirt prints.
"""

from nova_lite_libvirt.capabilities import parse_capabilities
from nova_lite_libvirt.config import LibvirtConfig
from nova_lite_libvirt.cpus import select_cpus
from nova_lite_libvirt.host import Host
from nova_lite_libvirt.numa import build_numa_topology
from nova_lite_libvirt.tests import base


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
