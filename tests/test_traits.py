"""Traits: names, flavors' requests, drivers' reports and the scheduler's answer."""

import attrs
import os_traits
import testtools

from nova_lite import conf, objects, traits
from nova_lite.compute import api, moves
from nova_lite.compute.worker import Worker
from nova_lite.exception import InvalidConfig, InvalidInput, InvalidNodeResources
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec
from nova_lite.scheduler.report import MAX_REASONS, summarise
from nova_lite.virt import driver
from nova_lite.virt.fake import FakeDriver
from tests import base
from tests import test_scheduler
from tests.test_scheduler import SchedulerScenario


def trait_flavor(name="gold", **specs):
    return base.flavor(name=name, memory_mb=1024, extra_specs={
        f"trait:{trait}": value for trait, value in specs.items()})


class TestNames(testtools.TestCase):

    def test_standard_and_custom_names_are_traits(self):
        for name in ("HW_CPU_X86_AVX2", "COMPUTE_NET_VIRTIO_PACKED", "CUSTOM_GOLD",
                     "CUSTOM_A_1"):
            self.assertIsNone(traits.trait_problem(name), name)
            self.assertEqual(name, traits.validate_trait(name))

    def test_other_names_are_refused_saying_why(self):
        cases = {
            "HW_CPU_X86_AVX3": "unknown trait 'HW_CPU_X86_AVX3': not a standard trait of "
                               f"os-traits {traits.OS_TRAITS_VERSION}",
            "hw_cpu_x86_avx2": "unknown trait 'hw_cpu_x86_avx2'",
            "CUSTOM_gold": "custom trait 'CUSTOM_gold' may hold only upper-case letters",
            "CUSTOM_": "custom trait 'CUSTOM_'",
            "CUSTOM_" + "A" * 250: "longer than 255 characters",
            "": "unknown trait ''",
        }
        for name, expected in cases.items():
            exc = self.assertRaises(InvalidInput, traits.validate_trait, name, "node n1")
            self.assertIn(expected, str(exc))
            self.assertTrue(str(exc).startswith("node n1: "), str(exc))
        self.assertIn("must be a string", traits.trait_problem(7))

    def test_a_set_of_names(self):
        self.assertEqual(frozenset({"CUSTOM_X", "HW_CPU_X86_AVX2"}),
                         traits.trait_set(["HW_CPU_X86_AVX2", "CUSTOM_X", "CUSTOM_X"]))
        self.assertEqual(frozenset(), traits.trait_set(None))
        exc = self.assertRaises(InvalidInput, traits.trait_set, "HW_CPU_X86_AVX2", "where")
        self.assertIn("where must be a collection of trait names", str(exc))
        self.assertRaises(InvalidInput, traits.trait_set, ["HW_CPU_X86_AVX2", "NOPE"])


class TestCapabilityTable(testtools.TestCase):

    def test_every_capability_of_the_table_is_a_driver_capability_and_a_trait(self):
        fields = {f.name for f in attrs.fields(driver.Capabilities)}
        self.assertEqual(set(), set(traits.CAPABILITY_TRAITS) - fields)
        self.assertEqual(set(), set(traits.CAPABILITY_TRAITS.values()) - traits.STANDARD_TRAITS)

    def test_every_capability_of_a_driver_is_in_the_table_or_a_nova_lite_one(self):
        own = {"supports_lifecycle", "supports_numa", "supports_pci", "supports_pcpus",
               "supports_node_deletion_check"}
        fields = {f.name for f in attrs.fields(driver.Capabilities)}
        self.assertEqual(own, fields - set(traits.CAPABILITY_TRAITS))

    def test_a_node_records_declared_capability_traits_only_and_compute_node(self):
        caps = driver.Capabilities(supports_multiattach=True)
        self.assertEqual({"CUSTOM_A", os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
                          os_traits.COMPUTE_NODE},
                         traits.node_traits(frozenset({"CUSTOM_A",
                                                       os_traits.COMPUTE_VOLUME_EXTEND}), caps))

    def test_the_declared_capabilities_give_their_traits(self):
        caps = driver.Capabilities(supports_multiattach=True, supports_same_host_resize=True,
                                   supports_numa=True, supports_image_type_qcow2=False)
        self.assertEqual({os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
                          os_traits.COMPUTE_SAME_HOST_COLD_MIGRATE},
                         traits.capability_traits(caps))
        self.assertEqual(frozenset(), traits.capability_traits(driver.Capabilities()))


class TestFlavorTraits(testtools.TestCase):

    def test_required_and_forbidden(self):
        request = traits.flavor_traits({"trait:HW_CPU_X86_AVX2": "required",
                                        "trait:CUSTOM_SLOW": "forbidden",
                                        "hw:cpu_policy": "shared"})
        self.assertEqual(frozenset({"HW_CPU_X86_AVX2"}), request.required)
        self.assertEqual(frozenset({"CUSTOM_SLOW"}), request.forbidden)
        self.assertTrue(request)
        self.assertFalse(traits.flavor_traits({"hw:cpu_policy": "shared"}))

    def test_a_bad_value_or_name_names_the_spec(self):
        exc = self.assertRaises(InvalidInput, traits.flavor_traits,
                                {"trait:HW_CPU_X86_AVX2": "maybe"}, "flavor gold")
        self.assertIn("flavor gold extra spec trait:HW_CPU_X86_AVX2='maybe': the value must "
                      "be 'required' or 'forbidden'", str(exc))
        exc = self.assertRaises(InvalidInput, traits.flavor_traits,
                                {"trait:AVX2": "required"}, "flavor gold")
        self.assertIn("flavor gold extra spec trait:AVX2: unknown trait 'AVX2'", str(exc))

    def test_a_request_spec_refuses_a_bad_trait_spec_when_made(self):
        exc = self.assertRaises(InvalidInput, RequestSpec, trait_flavor(HW_CPU_X86_AVX2="yes"))
        self.assertIn("flavor gold extra spec trait:HW_CPU_X86_AVX2", str(exc))
        spec = RequestSpec(trait_flavor(HW_CPU_X86_AVX2="required"))
        self.assertEqual(frozenset({"HW_CPU_X86_AVX2"}), spec.traits.required)

    def test_the_reason_names_each_missing_and_forbidden_trait(self):
        request = traits.TraitRequest(required=frozenset({"CUSTOM_B", "CUSTOM_A"}),
                                      forbidden=frozenset({"CUSTOM_X", "CUSTOM_Y"}))
        self.assertIsNone(request.reason(frozenset({"CUSTOM_A", "CUSTOM_B", "CUSTOM_Z"})))
        self.assertEqual("lacks required trait(s) CUSTOM_A, CUSTOM_B; has forbidden "
                         "trait(s) CUSTOM_Y",
                         request.reason(frozenset({"CUSTOM_Y"})))


class TestNodeResourcesTraits(testtools.TestCase):

    def report(self, **kw):
        return dict({"vcpus": 4, "memory_mb": 4096, "local_gb": 40, "vcpus_used": 0,
                     "memory_mb_used": 0, "local_gb_used": 0, "hypervisor_type": "fake",
                     "hypervisor_version": 1, "hypervisor_hostname": "n1"}, **kw)

    def test_traits_round_trip_through_the_dict(self):
        res = objects.NodeResources(vcpus=1, memory_mb=1, local_gb=1,
                                    traits=["HW_CPU_X86_AVX2", "CUSTOM_GOLD"])
        self.assertEqual(["CUSTOM_GOLD", "HW_CPU_X86_AVX2"], res.to_dict()["traits"])
        self.assertEqual(res, objects.NodeResources.from_dict(res.to_dict()))
        self.assertEqual(frozenset(), objects.NodeResources.from_dict(self.report()).traits)

    def test_every_bad_trait_of_a_report_is_named(self):
        exc = self.assertRaises(InvalidNodeResources, objects.NodeResources.from_dict,
                                self.report(traits=["HW_CPU_X86_AVX2", "AVX9", "CUSTOM_x"]),
                                "n1")
        self.assertEqual(2, len(exc.problems))
        self.assertIn("unknown trait 'AVX9'", str(exc))
        self.assertIn("custom trait 'CUSTOM_x'", str(exc))
        exc = self.assertRaises(InvalidNodeResources, objects.NodeResources.from_dict,
                                self.report(traits="HW_CPU_X86_AVX2"), "n1")
        self.assertIn("'traits' must be a list of trait names", str(exc))
        self.assertRaises(InvalidInput, objects.NodeResources, vcpus=1, memory_mb=1,
                          local_gb=1, traits=["NOT_A_TRAIT"])


class TestFakeDriverTraits(testtools.TestCase):

    def test_from_settings_from_arguments_and_per_node(self):
        settings = conf.Settings(sections={"fake": {"traits": "HW_CPU_X86_AVX2, CUSTOM_GOLD"}})
        fake = FakeDriver(settings=settings, nodes=["a", "b"])
        fake.init_host("h")
        self.assertEqual({"HW_CPU_X86_AVX2", "CUSTOM_GOLD"},
                         fake.get_available_resource("a").traits)
        fake.set_node_traits("b", ["CUSTOM_SILVER"])
        self.assertEqual({"CUSTOM_SILVER"}, fake.get_available_resource("b").traits)
        fake.set_node_traits("b", None)
        self.assertEqual({"HW_CPU_X86_AVX2", "CUSTOM_GOLD"},
                         fake.get_available_resource("b").traits)
        own = FakeDriver(settings=settings, traits=["CUSTOM_X"])
        own.init_host("h")
        self.assertEqual({"CUSTOM_X"}, own.get_available_resource("h").traits)

    def test_a_bad_trait_in_settings_names_the_option(self):
        settings = conf.Settings(sections={"fake": {"traits": "HW_CPU_X86_AVX2,AVX3"}})
        exc = self.assertRaises(InvalidConfig, FakeDriver, settings=settings)
        self.assertIn("[fake] traits", str(exc))
        self.assertIn("unknown trait 'AVX3'", str(exc))


class TestReports(testtools.TestCase):

    def test_several_reasons_are_each_named_with_their_counts(self):
        rejected = [(i, "lacks required trait(s) CUSTOM_A") for i in range(3)] + \
            [(9, "has forbidden trait(s) CUSTOM_B")]
        text = str(summarise("Traits", 5, rejected))
        self.assertEqual("Traits removed 4 of 5 hosts: lacks required trait(s) CUSTOM_A "
                         "(3 hosts); has forbidden trait(s) CUSTOM_B (1 host)", text)
        many = [(i, f"reason {i}") for i in range(MAX_REASONS + 2)]
        self.assertTrue(str(summarise("F", 9, many)).endswith("; and 2 other reason(s)"))
        self.assertEqual("F removed 2 of 2 hosts: same",
                         str(summarise("F", 2, [(1, "same"), (2, "same")])))


class TraitScheduling(SchedulerScenario):
    """host1 has AVX2, host2 AVX2 and CUSTOM_SLOW, host3 nothing of its own."""

    def setUp(self):
        super().setUp()
        own = {"host1": ["HW_CPU_X86_AVX2"], "host2": ["HW_CPU_X86_AVX2", "CUSTOM_SLOW"],
               "host3": []}
        for host, names in own.items():
            rt = self.trackers[host]
            rt.driver.set_node_traits(host, names)
            rt.update_available_resource()

    def hosts_chosen(self, flavor, manager=None, count=6):
        manager = manager or self.manager()
        return {manager.select_destinations(flavor)[0].host for _ in range(count)}

    def test_the_node_records_its_traits_with_its_capabilities(self):
        node = self.store.get_compute_node("host2", "host2")
        self.assertEqual({"HW_CPU_X86_AVX2", "CUSTOM_SLOW", "COMPUTE_SAME_HOST_COLD_MIGRATE",
                          "COMPUTE_NODE"}, node.traits)

    def test_a_capability_trait_the_driver_does_not_declare_is_not_recorded(self):
        rt = self.trackers["host3"]
        rt.driver.set_node_traits("host3", ["COMPUTE_VOLUME_MULTI_ATTACH", "CUSTOM_OK"])
        rt.update_available_resource()
        self.assertEqual({"CUSTOM_OK", "COMPUTE_SAME_HOST_COLD_MIGRATE", "COMPUTE_NODE"},
                         self.store.get_compute_node("host3", "host3").traits)

    def test_required_and_forbidden_traits_steer_the_choice(self):
        self.assertEqual({"host1", "host2"},
                         self.hosts_chosen(trait_flavor(HW_CPU_X86_AVX2="required")))
        self.assertEqual({"host1"}, self.hosts_chosen(trait_flavor(
            HW_CPU_X86_AVX2="required", CUSTOM_SLOW="forbidden")))
        self.assertEqual({"host1", "host3"},
                         self.hosts_chosen(trait_flavor(CUSTOM_SLOW="forbidden")))
        self.assertEqual({"host1", "host2", "host3"},
                         self.hosts_chosen(trait_flavor(COMPUTE_SAME_HOST_COLD_MIGRATE="required"),
                                           count=9))

    def test_with_no_filter_enabled_traits_are_still_honoured(self):
        for indexed in (True, False):
            manager = HostManager(self.store, self.settings(enabled_filters=""),
                                  indexed=indexed)
            self.assertEqual({"host1"}, self.hosts_chosen(trait_flavor(
                HW_CPU_X86_AVX2="required", CUSTOM_SLOW="forbidden"), manager), indexed)

    def test_no_valid_host_names_the_trait_that_removed_each_host(self):
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations,
                                trait_flavor(CUSTOM_SLOW="required", HW_CPU_X86_AVX2="forbidden"))
        self.assertIn("Traits removed 3 of 3 hosts: ", str(exc))
        self.assertIn("lacks required trait(s) CUSTOM_SLOW; has forbidden trait(s) "
                      "HW_CPU_X86_AVX2 (1 host)", str(exc))
        self.assertIn("has forbidden trait(s) HW_CPU_X86_AVX2 (1 host)", str(exc))
        self.assertIn("lacks required trait(s) CUSTOM_SLOW (1 host)", str(exc))

    def test_a_build_lands_on_the_node_with_the_trait(self):
        result = api.build(self.store, trait_flavor(HW_CPU_X86_AVX2="required",
                                                    CUSTOM_SLOW="forbidden"), 2,
                           settings=self.conf)
        self.assertEqual({"host1"}, {i.host for i in result.instances})

    def test_moves_are_scheduled_with_the_flavors_traits(self):
        (inst,) = api.build(self.store, trait_flavor(HW_CPU_X86_AVX2="required",
                                                     CUSTOM_SLOW="forbidden"),
                            settings=self.conf).instances
        self.assertEqual("host1", inst.host)
        Worker(self.trackers["host1"]).run_pending()   # host1 spawns it
        # Its own flavor's traits: only host1 has them, and it is its host.
        exc = self.assertRaises(NoValidHost, moves.migrate, self.store, inst,
                                settings=self.conf)
        self.assertIn("Traits removed 2 of 2 hosts", str(exc))
        # The new flavor's: forbids AVX2, so only host3.
        task = moves.resize(self.store, inst, trait_flavor(
            name="plain", HW_CPU_X86_AVX2="forbidden"), settings=self.conf)
        self.assertEqual("host3", task.host)

    def test_a_trait_added_by_the_driver_is_seen_after_the_next_audit(self):
        flavor = trait_flavor(CUSTOM_NEW="required")
        manager = self.manager()
        self.assertRaises(NoValidHost, manager.select_destinations, flavor)
        self.trackers["host3"].driver.set_node_traits("host3", ["CUSTOM_NEW"])
        self.trackers["host3"].update_available_resource()
        self.assertEqual("host3", manager.select_destinations(flavor)[0].host)


class TraitSchedulingPostgreSQL(TraitScheduling):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store
