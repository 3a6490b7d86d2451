"""The traits a libvirt node reports, and where each comes from.

The mixin runs on both backends; libvirt's test driver gives a host CPU of
arch i686 with no model and no NUMA cells in a node file's capabilities,
and no domain capabilities (``backends.TEST_DRIVER_DIFFERENCES``), so there
it shows what a host that says little reports.  The fake-only cases drive
each source of traits (CPU features and their expansion, NUMA siblings,
domain capabilities, versions) through the spec.
"""

import logging

import attrs
import fixtures
import os_traits as ot
import testtools

from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.traits import CAPABILITY_TRAITS, STANDARD_TRAITS, capability_traits

from nova_lite_libvirt import host_traits
from nova_lite_libvirt.capabilities import HostCapabilities
from nova_lite_libvirt.cpu_traits import X86_FEATURE_TRAITS, cpu_feature_traits
from nova_lite_libvirt.testing import HostSpec, MachineSpec
from nova_lite_libvirt.testing.fakelibvirt import constants as c
from nova_lite_libvirt.testing.fakelibvirt import make_error
from nova_lite_libvirt.tests import base

DOMAIN_CAPS_PREFIXES = ("COMPUTE_STORAGE_BUS_", "COMPUTE_GRAPHICS_MODEL_", "COMPUTE_ARCH_")


def cpu_feature_trait_names(traits):
    return {t for t in traits if t.startswith("HW_CPU_X86_")}


def domain_caps_trait_names(traits):
    return {t for t in traits if t.startswith(DOMAIN_CAPS_PREFIXES)}


class TraitsTests:
    """Mixed into a backend case (see ``base``)."""

    def test_arch_trait_is_the_host_cpu_arch(self):
        traits = self.report(self.start_driver(HostSpec())).traits
        self.assertIn(f"HW_ARCH_{self.spec.arch.upper()}", traits)
        self.assertEqual(1, len({t for t in traits if t.startswith("HW_ARCH_")}))

    def test_every_trait_is_standard_and_none_is_a_capability_trait(self):
        driver = self.start_driver(HostSpec())
        traits = self.report(driver).traits
        self.assertTrue(traits)
        self.assertEqual(set(), traits - STANDARD_TRAITS)
        # The core adds capability traits; the driver declares none of them.
        self.assertEqual(set(), traits & set(CAPABILITY_TRAITS.values()))
        self.assertEqual(frozenset(), capability_traits(driver.capabilities))

    def test_the_audit_records_the_reported_traits(self):
        driver = self.start_driver(HostSpec())
        rt = ResourceTracker(base.HOST, driver)
        rt.update_available_resource()
        (nodename,) = driver.get_available_nodes()
        # The driver declares no trait-bearing capability: the core adds
        # only COMPUTE_NODE, which every compute node has.
        self.assertEqual(self.report(driver).traits | {"COMPUTE_NODE"},
                         rt.get_node(nodename).traits)

    def test_hyperthreading_comes_from_the_numa_cells_siblings(self):
        traits = self.report(self.start_driver(HostSpec(threads=2))).traits
        # The node file's capabilities have no cells: no sibling to see.
        self.assertEqual(self.spec.numa_in_capabilities, ot.HW_CPU_HYPERTHREADING in traits)

    def test_domain_capabilities_libvirt_refuses_leave_the_report_whole(self):
        # Guests of domain type 'test': the driver asks, libvirt's test
        # driver (and the fake, as it) answer VIR_ERR_NO_SUPPORT.
        log = self.useFixture(fixtures.FakeLogger(level=logging.DEBUG))
        driver = self.start_driver(HostSpec(domain_types=("test",), domain_capabilities=False),
                                   libvirt_options={"virt_type": "test"})
        traits = self.report(driver).traits
        self.assertEqual(set(), domain_caps_trait_names(traits))
        self.assertEqual(set(), cpu_feature_trait_names(traits))   # not kvm/qemu
        self.assertIn("No domain capabilities from libvirt", log.output)
        self.assertIn("virConnectGetDomainCapabilities", log.output)


class TraitsFakeTest(TraitsTests, base.FakeBackendCase):

    def traits(self, spec=None, **options):
        return self.report(self.start_driver(spec or HostSpec(), **options)).traits

    def fake_hypervisor(self):
        return self.backend.fixture.hypervisor

    def count_calls(self, name):
        """Count the calls of the fake hypervisor's method ``name``."""
        hypervisor = self.fake_hypervisor()
        calls = []
        original = getattr(hypervisor, name)

        def counted(*args):
            calls.append(args)
            return original(*args)
        setattr(hypervisor, name, counted)
        return calls

    # -- CPU features ----------------------------------------------------------
    def test_cpu_features_of_the_capabilities_become_traits(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.DEBUG))
        traits = self.traits(HostSpec(cpu_features={"avx2", "sse4.2", "aes", "svm", "ds",
                                                    "made-up-feature"}))
        self.assertEqual({ot.HW_CPU_X86_AVX2, ot.HW_CPU_X86_SSE42, ot.HW_CPU_X86_AESNI,
                          ot.HW_CPU_X86_SVM, ot.HW_CPU_X86_AMD_SVM},
                         cpu_feature_trait_names(traits))
        self.assertIn("CPU features without a trait: ds, made-up-feature", log.output)

    def test_features_the_cpu_model_implies_are_traits_too(self):
        # QEMU hosts list only what the model lacks; baselineCPU expands it.
        spec = HostSpec(cpu_features={"vmx"}, cpu_model_features={"avx2", "pclmuldq", "fma"})
        self.assertEqual({ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX, ot.HW_CPU_X86_AVX2,
                          ot.HW_CPU_X86_CLMUL, ot.HW_CPU_X86_FMA3},
                         cpu_feature_trait_names(self.traits(spec)))

    def test_a_cpu_without_a_model_is_not_expanded(self):
        spec = HostSpec(cpu_model="", cpu_features={"vmx"}, cpu_model_features={"avx2"})
        driver = self.start_driver(spec)
        calls = self.count_calls("baseline_cpu")
        self.assertEqual({ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX},
                         cpu_feature_trait_names(self.report(driver).traits))
        self.assertEqual([], calls)

    def test_cpu_features_only_for_kvm_and_qemu_guests(self):
        spec = HostSpec(domain_types=("lxc",), cpu_features={"avx2"})
        traits = self.traits(spec, libvirt_options={"virt_type": "lxc"})
        self.assertEqual(set(), cpu_feature_trait_names(traits))
        self.assertIn(ot.HW_ARCH_X86_64, traits)
        self.assertIn(ot.HW_CPU_HYPERTHREADING, traits)
        self.assertIn(ot.HW_CPU_X86_AVX2,
                      self.traits(HostSpec(cpu_features={"avx2"}),
                                  libvirt_options={"virt_type": "qemu"}))

    def test_an_aarch64_host_has_no_x86_feature_traits(self):
        spec = HostSpec(arch="aarch64", cpu_model="", cpu_vendor="",
                        cpu_features={"aes", "fp", "asimd", "sha2"})
        traits = self.traits(spec)
        self.assertEqual(set(), {t for t in traits if t.startswith("HW_CPU_X86_")})
        self.assertIn(ot.HW_ARCH_AARCH64, traits)
        self.assertIn(ot.COMPUTE_ARCH_AARCH64, traits)

    def test_a_failed_expansion_falls_back_to_the_listed_features(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        spec = HostSpec(cpu_features={"vmx"}, cpu_model_features={"avx2"})
        driver = self.make_libvirt_driver(spec)

        def unsupported(cpus, flags):
            raise make_error(c.VIR_ERR_NO_SUPPORT, "this function is not supported by the "
                             "connection driver: virConnectBaselineCPU", c.VIR_FROM_CPU)
        self.fake_hypervisor().baseline_cpu = unsupported
        driver.init_host(base.HOST)
        traits = self.report(driver).traits
        self.assertEqual({ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX},
                         cpu_feature_trait_names(traits))
        self.assertIn("cannot expand the host CPU's features", log.output)
        self.assertIn("virConnectBaselineCPU", log.output)

    def test_an_expansion_that_does_not_parse_falls_back(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        driver = self.start_driver(HostSpec(cpu_features={"sse"}, cpu_model_features={"avx"}))
        self.fake_hypervisor().baseline_cpu = lambda cpus, flags: "<cpu><feature name="
        self.assertEqual({ot.HW_CPU_X86_SSE}, cpu_feature_trait_names(self.report(driver).traits))
        self.assertIn("does not parse", log.output)

    def test_odd_capabilities_cpu_elements_are_skipped(self):
        driver = self.make_libvirt_driver(HostSpec(cpu_model=""))
        self.fake_hypervisor().capabilities = lambda: (
            "<capabilities><host><cpu><arch>x86_64</arch><feature/><feature name=''/>"
            "<feature name='avx2'/><feature name='AVX512F'/><features><sse4.2/></features>"
            "</cpu></host></capabilities>")
        driver.init_host(base.HOST)
        traits = self.report(driver).traits
        # Names are libvirt's, lower case: 'AVX512F' is no feature of the table.
        self.assertEqual({ot.HW_CPU_X86_AVX2, ot.HW_CPU_X86_SSE42},
                         cpu_feature_trait_names(traits))
        self.assertNotIn(ot.HW_CPU_HYPERTHREADING, traits)   # no cells, no siblings

    # -- hyperthreading -----------------------------------------------------------
    def test_no_hyperthreading_with_one_thread_per_core(self):
        self.assertNotIn(ot.HW_CPU_HYPERTHREADING, self.traits(HostSpec(threads=1)))

    def test_hyperthreading_goes_when_the_siblings_go_offline(self):
        # Siblings are online CPUs only; with every core's second thread
        # offline the cells show no sibling.
        spec = HostSpec(cores=2, threads=2, online_cpus={0, 2})
        self.assertNotIn(ot.HW_CPU_HYPERTHREADING, self.traits(spec))

    # -- domain capabilities -------------------------------------------------------
    def test_buses_and_video_models_of_every_machine_type_asked(self):
        machines = (MachineSpec("pc-i440fx-8.2", "pc", disk_buses=("ide", "virtio"),
                                video_models=("cirrus",)),
                    MachineSpec("pc-q35-8.2", "q35", disk_buses=("sata", "virtio"),
                                video_models=("virtio", "ramfb")),
                    # No alias and not the default: not asked, as Nova.
                    MachineSpec("microvm", None, disk_buses=("usb",), video_models=("vga",)))
        self.assertEqual({ot.COMPUTE_STORAGE_BUS_IDE, ot.COMPUTE_STORAGE_BUS_SATA,
                          ot.COMPUTE_STORAGE_BUS_VIRTIO, ot.COMPUTE_GRAPHICS_MODEL_CIRRUS,
                          ot.COMPUTE_GRAPHICS_MODEL_VIRTIO, ot.COMPUTE_ARCH_X86_64},
                         domain_caps_trait_names(self.traits(HostSpec(machines=machines))))

    def test_default_qemu_host_traits(self):
        self.assertEqual(
            {ot.COMPUTE_STORAGE_BUS_IDE, ot.COMPUTE_STORAGE_BUS_FDC, ot.COMPUTE_STORAGE_BUS_SCSI,
             ot.COMPUTE_STORAGE_BUS_VIRTIO, ot.COMPUTE_STORAGE_BUS_USB,
             ot.COMPUTE_STORAGE_BUS_SATA,   # nvme: no such trait
             ot.COMPUTE_GRAPHICS_MODEL_VGA, ot.COMPUTE_GRAPHICS_MODEL_CIRRUS,
             ot.COMPUTE_GRAPHICS_MODEL_VMVGA, ot.COMPUTE_GRAPHICS_MODEL_QXL,
             ot.COMPUTE_GRAPHICS_MODEL_VIRTIO, ot.COMPUTE_GRAPHICS_MODEL_NONE,
             ot.COMPUTE_GRAPHICS_MODEL_BOCHS,   # ramfb: no such trait
             ot.COMPUTE_ARCH_X86_64, ot.HW_ARCH_X86_64, ot.HW_CPU_HYPERTHREADING,
             ot.COMPUTE_NET_VIRTIO_PACKED, ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX,
             ot.HW_CPU_X86_SSSE3, ot.HW_CPU_X86_SSE42, ot.HW_CPU_X86_AVX2},
            set(self.traits(HostSpec())))

    def test_no_domain_capabilities_no_domain_capability_traits(self):
        traits = self.traits(HostSpec(domain_capabilities=False))
        self.assertEqual(set(), domain_caps_trait_names(traits))
        self.assertIn(ot.HW_CPU_X86_AVX2, traits)

    def test_domain_capabilities_are_asked_only_for_the_configured_domain_type(self):
        spec = HostSpec(domain_types=("qemu",))
        driver = self.start_driver(spec)   # virt_type kvm: no guest offers it
        calls = self.count_calls("domain_capabilities")
        self.assertEqual(set(), domain_caps_trait_names(self.report(driver).traits))
        self.assertEqual([], calls)

    def test_domain_capabilities_that_do_not_parse_are_left_out(self):
        log = self.useFixture(fixtures.FakeLogger(level=logging.DEBUG))
        driver = self.make_libvirt_driver(HostSpec())
        answers = iter(["<domainCapabilities><devices>", "<notDomainCaps/>"])
        self.fake_hypervisor().domain_capabilities = lambda *args: next(answers)
        driver.init_host(base.HOST)
        traits = self.report(driver).traits
        self.assertEqual(set(), domain_caps_trait_names(traits))
        self.assertIn(ot.HW_CPU_X86_AVX2, traits)
        self.assertIn("does not parse", log.output)
        self.assertIn("expected <domainCapabilities>", log.output)

    # -- versions -------------------------------------------------------------------
    def test_packed_ring_needs_qemu_4_2_and_libvirt_6_3(self):
        for spec, expected in (
                (HostSpec(hypervisor_version=4002000, lib_version=6003000), True),
                (HostSpec(hypervisor_version=4001002, lib_version=9000000), False),
                (HostSpec(hypervisor_version=8002000, lib_version=6002000), False),
                (HostSpec(hypervisor_type="LXC", hypervisor_version=8002000), False)):
            driver = self.start_driver(spec)
            self.assertEqual(expected, ot.COMPUTE_NET_VIRTIO_PACKED in self.report(driver).traits,
                             spec)
            driver.close()

    # -- cost ---------------------------------------------------------------------------
    def test_libvirt_is_asked_once_per_connection(self):
        driver = self.start_driver(HostSpec(cpu_model_features={"avx"}))
        baseline = self.count_calls("baseline_cpu")
        domain_caps = self.count_calls("domain_capabilities")
        first = self.report(driver).traits
        self.assertEqual(1, len(baseline))
        self.assertEqual(2, len(domain_caps))   # pc and q35
        for _ in range(3):
            self.assertEqual(first, self.report(driver).traits)
        self.assertEqual((1, 2), (len(baseline), len(domain_caps)))

        # A changed host CPU is seen at the next audit (capabilities are read
        # every time); only its expansion is asked again.
        self.backend.fixture.update_spec(cpu_features=frozenset({"vmx", "avx512f"}))
        self.assertIn(ot.HW_CPU_X86_AVX512F, self.report(driver).traits)
        self.assertEqual((2, 2), (len(baseline), len(domain_caps)))

        # A new connection asks everything again.
        self.backend.fixture.restart_daemon()
        self.report(driver)
        self.assertEqual((3, 4), (len(baseline), len(domain_caps)))


class TraitsRealTest(TraitsTests, base.RealBackendCase):

    def test_the_test_driver_says_only_its_arch(self):
        # i686 with features pae and nonpae (no trait), no model to expand,
        # no cells, guests of domain type test only, hypervisor type TEST.
        self.assertEqual({ot.HW_ARCH_I686}, set(self.report(self.start_driver()).traits))


class TableTest(testtools.TestCase):

    def test_every_trait_of_the_table_is_a_standard_trait(self):
        names = {t for traits in X86_FEATURE_TRAITS.values() for t in traits}
        self.assertEqual(set(), names - STANDARD_TRAITS)
        self.assertEqual(46, len(names))   # 44 features, svm and vmx giving two

    def test_nova_facts(self):
        self.assertEqual({ot.HW_CPU_X86_SSE42}, cpu_feature_traits("x86_64", {"sse4.2"}))
        self.assertEqual({ot.HW_CPU_X86_AVX2}, cpu_feature_traits("i686", {"avx2"}))
        self.assertEqual({ot.HW_CPU_X86_CLMUL}, cpu_feature_traits("x86_64", {"pclmuldq"}))
        self.assertEqual({ot.HW_CPU_X86_VMX, ot.HW_CPU_X86_INTEL_VMX},
                         cpu_feature_traits("x86_64", {"vmx"}))

    def test_other_arches_have_no_cpu_feature_traits(self):
        self.assertEqual(frozenset(), cpu_feature_traits("aarch64", {"aes", "sse4.2"}))
        self.assertEqual(frozenset(), cpu_feature_traits("", {"avx2"}))

    def test_machine_types_asked(self):
        self.assertEqual(("pc", "q35"), host_traits.machine_types("x86_64", ["q35", "pc"]))
        self.assertEqual(("virt",), host_traits.machine_types("aarch64", []))
        self.assertEqual((None, "a"), host_traits.machine_types("riscv64", ["a"]))

    def test_host_traits_of_a_bare_host(self):
        self.assertEqual(frozenset(), host_traits.host_traits(
            HostCapabilities(), "kvm", "QEMU", 1000000, 1000000))
        caps = attrs.evolve(HostCapabilities(), arch="sparc", features=frozenset({"avx2"}))
        self.assertEqual({ot.HW_ARCH_SPARC},
                         host_traits.host_traits(caps, "kvm", "QEMU", 1000000, 1000000))
