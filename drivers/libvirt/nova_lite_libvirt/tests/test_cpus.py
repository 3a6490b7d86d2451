"""CPU selection and the driver's settings (no libvirt needed)."""

import attrs
import fixtures
import testtools

from nova_lite import conf
from nova_lite.exception import InvalidConfig
from nova_lite.virt import loader

from nova_lite_libvirt.config import LibvirtConfig, LibvirtOptions
from nova_lite_libvirt.driver import LibvirtDriver
from nova_lite_libvirt.cpus import CPUSetNotOnline, online_cpus_from_map, select_cpus


class SelectCpusTest(testtools.TestCase):

    def test_no_option_gives_every_online_cpu(self):
        # Nova: online {0,1,2,3}, nothing configured -> VCPU set {0,1,2,3}.
        sel = select_cpus({0, 1, 2, 3}, LibvirtConfig())
        self.assertEqual(({0, 1, 2, 3}, set()), (sel.shared, sel.dedicated))

    def test_shared_set_not_online_names_option_and_both_sets(self):
        # Nova: cpu_shared_set '4-6' with online {4,5} -> error.
        exc = self.assertRaises(CPUSetNotOnline, select_cpus, {4, 5},
                                LibvirtConfig(cpu_shared_set={4, 5, 6}))
        self.assertEqual("[compute] cpu_shared_set", exc.option)
        self.assertEqual("4-6", exc.value)
        self.assertIn("configured CPUs: 4-6", str(exc))
        self.assertIn("online CPUs: 4-5", str(exc))
        self.assertEqual({6}, exc.missing)
        self.assertIsInstance(exc, InvalidConfig)

    def test_vcpu_pin_set_wins_over_cpu_shared_set(self):
        sel = select_cpus(range(8), LibvirtConfig(vcpu_pin_set={0, 1}, cpu_shared_set={2, 3}))
        self.assertEqual({0, 1}, sel.shared)

    def test_vcpu_pin_set_not_online_names_it(self):
        exc = self.assertRaises(CPUSetNotOnline, select_cpus, {0, 1},
                                LibvirtConfig(vcpu_pin_set={1, 2}))
        self.assertEqual("vcpu_pin_set", exc.option)

    def test_dedicated_only_leaves_no_shared(self):
        sel = select_cpus(range(4), LibvirtConfig(cpu_dedicated_set={2, 3}))
        self.assertEqual((set(), {2, 3}), (sel.shared, sel.dedicated))

    def test_shared_and_dedicated(self):
        sel = select_cpus(range(8), LibvirtConfig(cpu_shared_set={0, 1},
                                                  cpu_dedicated_set={4, 5, 6}))
        self.assertEqual(({0, 1}, {4, 5, 6}, set(range(8))),
                         (sel.shared, sel.dedicated, sel.online))

    def test_online_cpus_from_cpu_map(self):
        self.assertEqual({0, 2, 4}, online_cpus_from_map(
            (8, [True, False, True, False, True, False, False, False], 3)))


class ConfigTest(testtools.TestCase):

    def test_from_settings_reads_core_and_libvirt_options(self):
        settings = conf.Settings(
            state_path="/srv/nl", libvirt_connection_uri="qemu+ssh://h/system",
            cpu_shared_set="0-1", cpu_dedicated_set="2-3",
            sections={"libvirt": {"virt_type": "QEMU", "file_backed_memory": "2048",
                                  "instance_memory_overhead_mb": "32"}})
        cfg = LibvirtConfig.from_settings(settings)
        self.assertEqual(LibvirtConfig(
            connection_uri="qemu+ssh://h/system", instances_path="/srv/nl/instances",
            cpu_shared_set={0, 1}, cpu_dedicated_set={2, 3}, virt_type="qemu",
            file_backed_memory_mb=2048, instance_memory_overhead_mb=32), cfg)

    def test_defaults(self):
        cfg = LibvirtConfig.from_settings(conf.Settings())
        self.assertEqual(("qemu:///system", "kvm", 0, 0),
                         (cfg.connection_uri, cfg.virt_type, cfg.file_backed_memory_mb,
                          cfg.instance_memory_overhead_mb))
        self.assertIsNone(cfg.cpu_shared_set)

    def test_bad_libvirt_option_names_it(self):
        settings = conf.Settings(sections={"libvirt": {"file_backed_memory": "lots"}})
        exc = self.assertRaises(InvalidConfig, LibvirtConfig.from_settings, settings)
        self.assertEqual("[libvirt] file_backed_memory", exc.option)
        settings = conf.Settings(sections={"libvirt": {"instance_memory_overhead_mb": "-1"}})
        self.assertRaises(InvalidConfig, LibvirtConfig.from_settings, settings)
        settings = conf.Settings(sections={"libvirt": {"virt_type": "k v m"}})
        self.assertRaises(InvalidConfig, LibvirtConfig.from_settings, settings)

    def test_nova_rejections(self):
        self.assertRaises(InvalidConfig, LibvirtConfig, vcpu_pin_set={0},
                          cpu_dedicated_set={1})
        exc = self.assertRaises(InvalidConfig, LibvirtConfig, cpu_shared_set={0, 1},
                                cpu_dedicated_set={1, 2})
        self.assertIn("CPUs 1", str(exc))
        exc = self.assertRaises(InvalidConfig, LibvirtConfig, cpu_shared_set={0},
                                reserved_host_cpus=1)
        self.assertEqual("reserved_host_cpus", exc.option)

    def write(self, text):
        path = self.useFixture(fixtures.TempDir()).join("nova-lite.conf")
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def test_the_driver_declares_its_options(self):
        self.assertIs(LibvirtOptions, LibvirtDriver.options)
        self.assertIn(("libvirt", LibvirtOptions), loader.installed_driver_options())
        self.assertEqual(frozenset({"libvirt", "devices"}), conf.option_sections(LibvirtOptions))

    def test_declared_options_from_ini(self):
        s = conf.load_settings(self.write(
            "[libvirt]\nconnection_uri = qemu+ssh://kvm1/system\nvirt_type = QEMU\n"
            "file_backed_memory = 4096\n"))
        options = conf.driver_options(s, LibvirtDriver)
        self.assertEqual(LibvirtOptions(connection_uri="qemu+ssh://kvm1/system",
                                        virt_type="qemu", file_backed_memory=4096), options)
        self.assertEqual("qemu+ssh://kvm1/system", LibvirtConfig.from_settings(s).connection_uri)

    def test_bad_connection_uri_names_the_option_and_value(self):
        for raw in ("", "no scheme here", "qemu:///sys tem"):
            path = self.write(f"[libvirt]\nconnection_uri = {raw}\n")
            exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
            self.assertEqual("[libvirt] connection_uri", exc.option, raw)
            self.assertEqual(raw, exc.value)
            self.assertIn("'[libvirt] connection_uri'", str(exc))

    def test_unknown_libvirt_option_is_rejected(self):
        exc = self.assertRaises(InvalidConfig, conf.load_settings,
                                self.write("[libvirt]\nconection_uri = qemu:///system\n"))
        self.assertEqual("[libvirt] conection_uri", exc.option)
        self.assertIn("unknown option", str(exc))
        settings = conf.Settings(sections={"libvirt": {"virt-type": "kvm"}})
        exc = self.assertRaises(InvalidConfig, LibvirtConfig.from_settings, settings)
        self.assertEqual("[libvirt] virt-type", exc.option)

    def test_a_section_no_driver_declares_is_kept_raw(self):
        s = conf.load_settings(self.write("[libvirt_extra]\nanything = 1\n"))
        self.assertEqual({"anything": "1"}, dict(s.section("libvirt_extra")))

    def test_connection_uri_precedence(self):
        # INI [libvirt] connection_uri, then Settings.libvirt_connection_uri, then qemu:///system.
        from_code = conf.Settings(libvirt_connection_uri="test:///default")
        both = conf.Settings(libvirt_connection_uri="test:///default",
                             sections={"libvirt": {"connection_uri": "qemu+ssh://h/system"}})
        self.assertEqual(("test:///default", "qemu+ssh://h/system", "qemu:///system"),
                         tuple(LibvirtConfig.from_settings(s).connection_uri
                               for s in (from_code, both, conf.Settings())))

    def test_code_set_connection_uri_reaches_the_driver(self):
        settings = conf.Settings(libvirt_connection_uri="qemu+tcp://kvm9/system")
        driver = loader.load_driver("libvirt", settings=settings)
        self.addCleanup(driver.close)
        self.assertEqual("qemu+tcp://kvm9/system", driver.libvirt_host.uri)
        settings = attrs.evolve(settings, sections={"libvirt": {
            "connection_uri": "qemu:///session"}})
        driver = loader.load_driver("libvirt", settings=settings)
        self.addCleanup(driver.close)
        self.assertEqual("qemu:///session", driver.libvirt_host.uri)

    def test_settings_from_ini(self):
        path = self.useFixture(fixtures.TempDir()).join("nova-lite.conf")
        with open(path, "w") as handle:
            handle.write("[DEFAULT]\nstate_path = /tmp/x\n[compute]\ncpu_dedicated_set = 4-7\n"
                         "[libvirt]\nconnection_uri = test:///default\nvirt_type = qemu\n")
        cfg = LibvirtConfig.from_settings(conf.load_settings(path))
        self.assertEqual(("test:///default", "qemu", frozenset({4, 5, 6, 7})),
                         (cfg.connection_uri, cfg.virt_type, cfg.cpu_dedicated_set))
