"""Mediated devices (vGPUs) reported as child providers, on both backends.

libvirt's test driver reads GPUs (PCI devices with an ``mdev_types``
capability) and mediated devices from its node file, so every test of
:class:`MdevTests` runs on the fake and on real libvirt alike.
"""

import logging
import os
import uuid

import fixtures
import testtools

from nova_lite import conf
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db.store import Store
from nova_lite.exception import ComputeResourcesUnavailable, InvalidConfig
from nova_lite.objects import Flavor, Instance
from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory
from nova_lite.virt import loader

from nova_lite_libvirt import mdev as mdevs
from nova_lite_libvirt.config import LibvirtConfig
from nova_lite_libvirt.testing import (
    FakeLibvirtFixture, GpuSpec, HostSpec, MdevSpec, MdevTypeSpec, PciDeviceSpec, node_xml,
    spec_from_node_xml)
from nova_lite_libvirt.testing import xml as specxml
from nova_lite_libvirt.tests import base

GPU1, GPU2 = "0000:84:00.0", "0000:85:00.0"
# Tesla M60 boards offer both types; which one a GPU uses is the configuration's choice.
M60_TYPES = (MdevTypeSpec("nvidia-35", 16, "GRID M60-0B"),
             MdevTypeSpec("nvidia-36", 8, "GRID M60-0Q"))
BOTH = {"enabled_mdev_types": "nvidia-35, nvidia-36"}


def mdev(type_id, number):
    return MdevSpec(str(uuid.UUID(int=number)), type_id, iommu_group=number)


def vgpu_inventory(total):
    return Inventory(total=total, reserved=0, min_unit=1, max_unit=total, step_size=1,
                     allocation_ratio=1)


class MdevTests:
    """Run on each backend (see ``base``)."""

    def start(self, spec=None, devices=None, **sections):
        """The driver with ``[devices]`` and other sections, on the host of
        ``spec`` (None: the host of the previous call)."""
        if spec is not None:
            self.uri, self.spec = self.backend.start(self, spec)
        settings = conf.Settings(host=base.HOST, state_path=self.tmp,
                                 libvirt_connection_uri=self.uri,
                                 sections={"devices": dict(devices or {}), **sections})
        driver = loader.load_driver("libvirt", settings=settings, meminfo_path=self.meminfo_path,
                                    statvfs=self.statvfs)
        self.addCleanup(driver.close)
        driver.init_host(base.HOST)
        return driver

    def child(self, device):
        return f"{self.spec.hostname}_{device}"

    def test_two_gpus_of_different_types(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES, numa_node=0),
                              GpuSpec(GPU2, M60_TYPES, numa_node=1)])
        driver = self.start(spec, BOTH, **{"mdev_nvidia-35": {"device_addresses": GPU1},
                                           "mdev_nvidia-36": {"device_addresses": GPU2}})
        report = self.report(driver)
        self.assertEqual(
            (ChildProvider(name=self.child("pci_0000_84_00_0"),
                           inventories={"VGPU": vgpu_inventory(16)}),
             ChildProvider(name=self.child("pci_0000_85_00_0"),
                           inventories={"VGPU": vgpu_inventory(8)})),
            report.providers)
        # The GPUs are PCI devices too.
        self.assertEqual([GPU1, GPU2], [d.address for d in report.pci_devices])

    def test_each_type_its_own_resource_class(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES), GpuSpec(GPU2, M60_TYPES)])
        driver = self.start(spec, BOTH, **{
            "mdev_nvidia-35": {"device_addresses": GPU1, "mdev_class": "CUSTOM_M60_0B"},
            "vgpu_nvidia-36": {"device_addresses": GPU2.upper()}})   # Nova's older section
        self.assertEqual([{"CUSTOM_M60_0B": vgpu_inventory(16)}, {"VGPU": vgpu_inventory(8)}],
                         [dict(c.inventories) for c in self.report(driver).providers])

    def test_a_type_not_enabled_reports_nothing(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, [M60_TYPES[0]]), GpuSpec(GPU2, [M60_TYPES[1]])])
        driver = self.start(spec, {"enabled_mdev_types": "nvidia-35"})
        self.assertEqual([self.child("pci_0000_84_00_0")],
                         [c.name for c in self.report(driver).providers])
        driver = self.start()
        self.assertEqual((), self.report(driver).providers)

    def test_a_device_listed_for_no_type_reports_nothing(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES), GpuSpec(GPU2, M60_TYPES)])
        driver = self.start(spec, {"enabled_mdev_types": "nvidia-36"},
                            **{"mdev_nvidia-36": {"device_addresses": GPU2}})
        self.assertEqual([self.child("pci_0000_85_00_0")],
                         [c.name for c in self.report(driver).providers])

    def test_first_type_without_addresses_is_every_devices_default(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES), GpuSpec(GPU2, M60_TYPES)])
        logger = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        driver = self.start(spec, {"enabled_vgpu_types": "nvidia-36, nvidia-35"})
        self.assertEqual([{"VGPU": vgpu_inventory(8)}] * 2,
                         [dict(c.inventories) for c in self.report(driver).providers])
        self.assertIn("enabled_vgpu_types is deprecated", logger.output)
        self.assertIn("nvidia-35 is not used", logger.output)

    def test_existing_mediated_devices_are_counted(self):
        # 2 nvidia-35 created: 14 more available; one of another type is not counted.
        gpu = GpuSpec(GPU1, [MdevTypeSpec("nvidia-35", 14), MdevTypeSpec("nvidia-36", 7)],
                      mdevs=[mdev("nvidia-35", 1), mdev("nvidia-35", 2), mdev("nvidia-36", 3)])
        full = GpuSpec(GPU2, [MdevTypeSpec("nvidia-35", 0)],
                       mdevs=[mdev("nvidia-35", 10 + n) for n in range(16)])
        driver = self.start(HostSpec(gpus=[gpu, full]), {"enabled_mdev_types": "nvidia-35"})
        self.assertEqual([{"VGPU": vgpu_inventory(16)}, {"VGPU": vgpu_inventory(16)}],
                         [dict(c.inventories) for c in self.report(driver).providers])
        created = driver.libvirt_host.mediated_devices()
        self.assertEqual(19, len(created))
        self.assertEqual(("nvidia-35", "pci_0000_84_00_0", 1),
                         (created[0].type_id, created[0].parent, created[0].iommu_group))

    def test_a_device_with_no_room_is_not_a_provider(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, [MdevTypeSpec("nvidia-35", 0)]),
                              GpuSpec(GPU2, [MdevTypeSpec("nvidia-35", 4)])])
        driver = self.start(spec, {"enabled_mdev_types": "nvidia-35"})
        self.assertEqual([self.child("pci_0000_85_00_0")],
                         [c.name for c in self.report(driver).providers])

    def test_claims_land_on_the_gpus_through_the_records(self):
        spec = HostSpec(gpus=[GpuSpec(GPU1, [MdevTypeSpec("nvidia-35", 1)]),
                              GpuSpec(GPU2, [MdevTypeSpec("nvidia-35", 3)])])
        driver = self.start(spec, {"enabled_mdev_types": "nvidia-35"})
        store = Store(f"sqlite:///{os.path.join(self.tmp, 'nova-lite.db')}")
        self.addCleanup(store.close)
        rt = ResourceTracker(base.HOST, driver, store=store)
        (nodename,) = driver.get_available_nodes()
        rt.update_available_resource()
        node = rt.get_node(nodename)
        recorded = store.child_providers([node.uuid])[node.uuid]
        self.assertEqual(self.report(driver).providers, tuple(r.provider for r in recorded))

        flavor = Flavor(name="vgpu", vcpus=1, memory_mb=512, root_gb=1,
                        extra_specs={"resources:VGPU": "1"})
        claims = [rt.instance_claim(Instance(uuid=str(uuid.uuid4()), flavor=flavor,
                                             project_id="demo"), nodename=nodename)
                  for _ in range(4)]
        gpu1, gpu2 = self.child("pci_0000_84_00_0"), self.child("pci_0000_85_00_0")
        # Each on the GPU with the most room (3 against 1, 2 against 1), by name on a tie.
        self.assertEqual([gpu2, gpu2, gpu1, gpu2],
                         [name for c in claims for name in c.allocation.providers])
        self.assertEqual([{"VGPU": 1}] * 4,
                         [dict(v) for c in claims for v in c.allocation.providers.values()])
        node = rt.get_node(nodename)
        self.assertEqual({gpu1: {"VGPU": 1}, gpu2: {"VGPU": 3}},
                         {k: dict(v) for k, v in node.provider_usage.items()})
        self.assertEqual(0, node.used("VGPU"))   # the children hold them, not the node
        inst = Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="demo")
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim, inst,
                                nodename=nodename)
        self.assertIn("VGPU: no child provider has room for 1", str(exc))
        rt.update_available_resource()   # the next audit keeps the claims where they landed
        self.assertEqual({gpu1: {"VGPU": 1}, gpu2: {"VGPU": 3}},
                         {k: dict(v) for k, v in rt.get_node(nodename).provider_usage.items()})

    def test_node_file_round_trip(self):
        spec = HostSpec(pci_devices=[PciDeviceSpec("0000:04:00.0", "8086", "1572")],
                        gpus=[GpuSpec(GPU1, M60_TYPES, mdevs=[mdev("nvidia-35", 1)],
                                      numa_node=1)])
        back = spec_from_node_xml(node_xml(spec))
        self.assertEqual((spec.gpus, spec.pci_devices), (back.gpus, back.pci_devices))


class MdevFakeTest(MdevTests, base.FakeBackendCase):

    def test_malformed_device_is_named_and_left_out(self):
        bad = GpuSpec(GPU1, [MdevTypeSpec("nvidia-35", "lots")])
        spec = HostSpec(gpus=[bad, GpuSpec(GPU2, M60_TYPES)])
        logger = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        driver = self.start(spec, {"enabled_mdev_types": "nvidia-35"})
        self.assertEqual([self.child("pci_0000_85_00_0")],
                         [c.name for c in self.report(driver).providers])
        self.assertIn("Skipping mediated device parent: node device pci_0000_84_00_0: "
                      "malformed mdev_types capability", logger.output)
        self.assertNotIn("Traceback", logger.output)

    def test_a_binding_without_the_listing_flag_reports_no_gpu(self):
        driver = self.start(HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES)]),
                            {"enabled_mdev_types": "nvidia-35"})
        logger = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite_libvirt.testing.fakelibvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES",
            fixtures.MonkeyPatch.delete))
        self.assertEqual((), self.report(driver).providers)
        self.assertIn("cannot list mediated device parents (it has no "
                      "VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES)", logger.output)

    def test_no_type_enabled_asks_libvirt_nothing_about_mediated_devices(self):
        driver = self.start(HostSpec(gpus=[GpuSpec(GPU1, M60_TYPES)]))
        calls = []
        conn = driver.libvirt_host.connection()
        listing = conn.listAllDevices
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite_libvirt.testing.fakelibvirt.virConnect.listAllDevices",
            lambda self, flags=0: calls.append(flags) or listing(flags)))
        self.report(driver)
        fake = driver.libvirt_host.libvirt
        self.assertNotIn(fake.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES, calls)
        self.assertIn(fake.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV, calls)


class MdevRealTest(MdevTests, base.RealBackendCase):

    def test_default_test_driver_has_no_mediated_devices(self):
        settings = conf.Settings(host=base.HOST, state_path=self.tmp,
                                 libvirt_connection_uri="test:///default",
                                 sections={"devices": {"enabled_mdev_types": "nvidia-35"}})
        driver = loader.load_driver("libvirt", settings=settings,
                                    meminfo_path=self.meminfo_path, statvfs=self.statvfs)
        self.addCleanup(driver.close)
        driver.init_host(base.HOST)
        host = driver.libvirt_host
        listed = [d.name() for d in host.connection().listAllDevices(0)]
        self.assertIn("computer", listed)   # libvirt does list its node devices
        self.assertEqual(([], []), (host.mdev_parents(), host.mediated_devices()))
        self.assertEqual((), self.report(driver).providers)

    def test_fake_answers_the_node_device_calls_as_libvirt(self):
        spec = HostSpec(pci_devices=[PciDeviceSpec("0000:04:00.0", "8086", "1572")],
                        gpus=[GpuSpec(GPU1, M60_TYPES, mdevs=[mdev("nvidia-35", 1)]),
                              GpuSpec(GPU2, ())])
        real = self.start(spec, BOTH)
        self.useFixture(FakeLibvirtFixture(self.spec))
        fake_libvirt = loader.load_driver("libvirt", settings=conf.Settings(
            host=base.HOST, state_path=self.tmp, sections={"devices": BOTH}),
            meminfo_path=self.meminfo_path, statvfs=self.statvfs)
        self.addCleanup(fake_libvirt.close)
        fake_libvirt.init_host(base.HOST)
        answers = [self.nodedev_answers(d.libvirt_host) for d in (real, fake_libvirt)]
        self.assertEqual(answers[0], answers[1])
        self.assertEqual(self.report(real).providers, self.report(fake_libvirt).providers)
        # GPU2 offers no type; nvidia-35, the default type, is GPU1's: 1 created + 16.
        self.assertEqual([{"VGPU": vgpu_inventory(17)}],
                         [dict(c.inventories) for c in self.report(real).providers])

    @staticmethod
    def nodedev_answers(host):
        libvirt, conn = host.libvirt, host.connection()

        def names(flag):
            return sorted(d.name() for d in conn.listAllDevices(getattr(libvirt, flag)))
        mdev_name = specxml.mdev_nodedev_name(mdev("nvidia-35", 1), GpuSpec(GPU1))
        device = conn.nodeDeviceLookupByName(mdev_name)
        return {
            "mdev_types": names("VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES"),
            "mdev": names("VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV"),
            "pci": names("VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV"),
            "listDevices": [sorted(conn.listDevices(cap, 0))
                            for cap in ("mdev_types", "mdev", "pci")],
            "lookup": (device.name(), device.parent(), device.listCaps(),
                       mdevs.parse_mediated_device(device.XMLDesc(0))),
            "parents": host.mdev_parents(),
        }


class MdevParserTest(testtools.TestCase):

    def test_parent_in_libvirts_shape(self):
        parent = mdevs.parse_mdev_parent(specxml.device_xml(specxml.gpu_element(
            GpuSpec(GPU1, M60_TYPES))))
        self.assertEqual(mdevs.MdevParent(
            name="pci_0000_84_00_0", address=GPU1,
            types=[mdevs.MdevType("nvidia-35", 16, "GRID M60-0B", "vfio-pci"),
                   mdevs.MdevType("nvidia-36", 8, "GRID M60-0Q", "vfio-pci")]), parent)
        # A parent that is not a PCI device lists its types at the top level.
        virtual = mdevs.parse_mdev_parent(
            "<device><name>mtty</name><capability type='mdev_types'><type id='mtty-1'>"
            "<deviceAPI>vfio-pci</deviceAPI><availableInstances>24</availableInstances>"
            "</type></capability></device>")
        self.assertEqual(mdevs.MdevParent("mtty", None, [mdevs.MdevType("mtty-1", 24, None,
                                                                         "vfio-pci")]), virtual)
        self.assertIsNone(mdevs.parse_mdev_parent(specxml.nodedev_xml(
            PciDeviceSpec(GPU1, "10de", "13f2"))))

    def test_malformed_parents_name_the_device(self):
        for xml, words in (
                ("<device><name>pci_0000_84_00_0</name><capability type='pci'><domain>0"
                 "</domain><bus>132</bus><slot>0</slot><function>0</function>"
                 "<capability type='mdev_types'><type><availableInstances>1"
                 "</availableInstances></type></capability></capability></device>",
                 "node device pci_0000_84_00_0: malformed mdev_types capability (a <type> "
                 "has no id)"),
                ("<device><name>gpu7</name><capability type='mdev_types'><type id='x'>"
                 "<availableInstances>-2</availableInstances></type></capability></device>",
                 "node device gpu7: malformed mdev_types capability (availableInstances of "
                 "type x is negative (-2))"),
                ("<device><name>gpu8</name><capability type='mdev_types'><type id='x'/>"
                 "</capability></device>",
                 "node device gpu8: malformed mdev_types capability"),
                ("<device><name>gpu9", "gpu9: node device XML does not parse")):
            exc = self.assertRaises(ValueError, mdevs.parse_mdev_parent, xml, "gpu9")
            self.assertIn(words, str(exc))

    def test_mediated_device(self):
        gpu = GpuSpec(GPU1)
        parsed = mdevs.parse_mediated_device(specxml.device_xml(
            specxml.mdev_element(mdev("nvidia-35", 7), gpu)))
        self.assertEqual(mdevs.MediatedDevice(
            name="mdev_00000000_0000_0000_0000_000000000007_0000_84_00_0", type_id="nvidia-35",
            parent="pci_0000_84_00_0", uuid=str(uuid.UUID(int=7)), iommu_group=7), parsed)
        exc = self.assertRaises(ValueError, mdevs.parse_mediated_device,
                                "<device><name>mdev_x</name><parent>pci_0000_84_00_0</parent>"
                                "<capability type='mdev'><iommuGroup number='1'/>"
                                "</capability></device>")
        self.assertEqual("node device mdev_x: malformed mdev capability (no type id)", str(exc))
        self.assertIsNone(mdevs.parse_mediated_device(specxml.device_xml(
            specxml.gpu_element(gpu))))

    def test_mdevs_of_a_parent_no_longer_listed_still_count(self):
        config = LibvirtConfig.from_settings(conf.Settings(
            sections={"devices": {"enabled_mdev_types": "nvidia-35"}})).mdev
        created = [mdevs.MediatedDevice(f"mdev_{n}", "nvidia-35", "pci_0000_84_00_0")
                   for n in range(3)]
        self.assertEqual((ChildProvider(name="cmp1_pci_0000_84_00_0",
                                        inventories={"VGPU": vgpu_inventory(3)}),),
                         mdevs.mdev_providers("cmp1", [], created, config))


class MdevConfigTest(testtools.TestCase):

    def mdev_config(self, devices=None, **sections):
        return LibvirtConfig.from_settings(conf.Settings(
            sections={"devices": dict(devices or {}), **sections})).mdev

    def test_mapping(self):
        config = self.mdev_config(
            {"enabled_mdev_types": "nvidia-35,nvidia-36, nvidia-37"},
            **{"mdev_nvidia-35": {"device_addresses": f"{GPU1}, 0000:86:00.0"},
               "mdev_nvidia-36": {"mdev_class": "CUSTOM_Q"}})
        self.assertEqual(("nvidia-35", "nvidia-36"), config.enabled_types)  # 37: unused
        self.assertEqual(("nvidia-35", "VGPU"), (config.type_for(GPU1), config.class_for(GPU1)))
        self.assertEqual(("nvidia-36", "CUSTOM_Q"),
                         (config.type_for(GPU2), config.class_for(GPU2)))
        self.assertEqual("nvidia-36", config.type_for(None))
        none = self.mdev_config()
        self.assertEqual(((), None), (none.enabled_types, none.type_for(GPU1)))
        new_wins = self.mdev_config({"enabled_mdev_types": "a-1", "enabled_vgpu_types": "b-2"})
        self.assertEqual(("a-1",), new_wins.enabled_types)

    def test_bad_values_name_the_option(self):
        for devices, sections, option, words in (
                (BOTH, {"mdev_nvidia-35": {"device_addresses": GPU1},
                        "mdev_nvidia-36": {"device_addresses": f"{GPU2},{GPU1}"}},
                 "[mdev_nvidia-36] device_addresses", "already a device of type nvidia-35"),
                (BOTH, {"mdev_nvidia-35": {"device_addresses": "84:00.0"}},
                 "[mdev_nvidia-35] device_addresses", "not a PCI address"),
                (BOTH, {"mdev_nvidia-35": {"mdev_class": "GPU"}},
                 "[mdev_nvidia-35] mdev_class", "must be VGPU or a custom resource class"),
                (BOTH, {"mdev_nvidia-36": {"device_adresses": GPU1}},
                 "[mdev_nvidia-36] device_adresses", "unknown option"),
                (BOTH, {"vgpu_nvidia-36": {"max_instances": "4"}},
                 "[vgpu_nvidia-36] max_instances", "not supported"),
                ({"enabled_mdev_types": "nvidia 35"}, {}, "[devices] enabled_mdev_types",
                 "is not a mediated device type id"),
                ({"enabled_mdev_types": "a-1,a-1"}, {}, "[devices] enabled_mdev_types",
                 "names a type twice")):
            exc = self.assertRaises(InvalidConfig, self.mdev_config, devices, **sections)
            self.assertEqual(option, exc.option)
            self.assertIn(words, str(exc))

    def test_ini_file(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "nova-lite.conf")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("[devices]\nenabled_vgpu_types = nvidia-35\n"
                         "[mdev_nvidia-35]\ndevice_addresses = 0000:84:00.0\n"
                         "mdev_class = CUSTOM_M60\n")
        config = LibvirtConfig.from_settings(conf.load_settings(path)).mdev
        self.assertEqual(("nvidia-35", "CUSTOM_M60"), (config.type_for(GPU1),
                                                       config.class_for(GPU1)))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("[devices]\nenabled_mdev_type = nvidia-35\n")
        exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
        self.assertEqual("[devices] enabled_mdev_type", exc.option)
