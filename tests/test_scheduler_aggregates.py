"""Availability zones and aggregate metadata in the scheduler's choices."""

from nova_lite.exception import InvalidInput
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec
from nova_lite.scheduler.filters import AggregateInstanceExtraSpecsFilter, spec_matches
from tests import base
from tests import test_scheduler
from tests.test_scheduler import SchedulerScenario


class ZoneSchedulingTests(SchedulerScenario):
    """host1 in zone az1, host2 in az2 (two aggregates), host3 in no zone."""

    def setUp(self):
        super().setUp()
        aggs = self.store.aggregates
        aggs.create("rack1", "az1", {"ssd": "true", "cpu_gen": "5"})
        aggs.add_host("rack1", "host1")
        aggs.create("rack2", "az2")
        aggs.add_host("rack2", "host2")
        aggs.create("fast2", metadata={"ssd": "true, nvme", "cpu_gen": "3"})
        aggs.add_host("fast2", "host2")

    def picks(self, spec, manager=None, times=6):
        manager = manager or self.manager()
        return {manager.select_destinations(spec)[0].host for _ in range(times)}

    def test_a_zone_keeps_the_build_in_it(self):
        self.assertEqual({"host1"}, self.picks(RequestSpec(base.flavor(),
                                                           availability_zone="az1")))
        self.assertEqual({"host2"}, self.picks(RequestSpec(base.flavor(),
                                                           availability_zone="az2")))
        # The default zone: the hosts in no zoned aggregate.
        self.assertEqual({"host3"}, self.picks(RequestSpec(base.flavor(),
                                                           availability_zone="nova")))
        self.assertEqual({"host1", "host2", "host3"}, self.picks(RequestSpec(base.flavor())))

    def test_default_zone_follows_the_setting(self):
        manager = self.manager(default_availability_zone="zone0")
        self.assertEqual({"host3"}, self.picks(
            RequestSpec(base.flavor(), availability_zone="zone0"), manager))

    def test_unknown_zone_is_no_valid_host_with_the_reason(self):
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations,
                                RequestSpec(base.flavor(), availability_zone="az9"))
        self.assertIn("AvailabilityZone removed 3 of 3 hosts", str(exc))
        self.assertIn("not 'az9'", str(exc))

    def test_zone_and_indexing_choose_alike(self):
        spec = RequestSpec(base.flavor(), availability_zone="az2")
        self.assertEqual({"host2"}, self.picks(spec, HostManager(
            self.store, self.settings(reserved_host_memory_mb=0), indexed=False)))

    def test_a_zone_change_is_seen_with_the_services(self):
        manager = HostManager(self.store, self.settings(reserved_host_memory_mb=0),
                              services_max_age=0)
        spec = RequestSpec(base.flavor(), availability_zone="az3")
        self.assertRaises(NoValidHost, manager.select_destinations, spec)
        self.store.aggregates.create("new", "az3")
        self.store.aggregates.add_host("new", "host3")
        self.assertEqual({"host3"}, self.picks(spec, manager))

    def test_bad_zone_refused(self):
        self.assertRaises(InvalidInput, RequestSpec, base.flavor(), availability_zone="")

    def test_extra_specs_match_aggregate_metadata(self):
        # Enabled as [filter_scheduler] enabled_filters would (the entry point
        # may not be in the installed metadata yet).
        manager = self.manager(enabled_filters=["ComputeFilter"])
        manager.filters.append(AggregateInstanceExtraSpecsFilter(manager.settings))
        ssd = base.flavor(extra_specs={"ssd": "true"})
        self.assertEqual({"host1", "host2"}, self.picks(ssd, manager))
        scoped = base.flavor(extra_specs={"aggregate_instance_extra_specs:cpu_gen": ">= 4"})
        self.assertEqual({"host1"}, self.picks(scoped, manager))
        nvme = base.flavor(extra_specs={"ssd": "<in> nvm", "hw:cpu_policy": "shared"})
        self.assertEqual({"host2"}, self.picks(nvme, manager))
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                base.flavor(extra_specs={"gpu": "yes"}))
        self.assertIn("AggregateInstanceExtraSpecsFilter removed 3 of 3 hosts", str(exc))
        self.assertIn("extra spec gpu is in none of the host's aggregates", str(exc))
        # Without the filter enabled, the metadata does not matter.
        self.assertEqual({"host1", "host2", "host3"},
                         self.picks(base.flavor(extra_specs={"gpu": "yes"})))


class PostgreSQLZoneSchedulingTests(ZoneSchedulingTests):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


class SpecMatchTests(base.TestCase):
    """Nova's extra spec operators."""

    def test_operators(self):
        cases = [("true", "true", True), ("true", "True", False), ("4", "= 3", True),
                 ("2", "= 3", False), ("3", "== 3.0", True), ("3", "!= 3", False),
                 ("5", ">= 5", True), ("5", "<= 4", False), ("abc", "s== abc", True),
                 ("abc", "s!= abc", False), ("abc", "s< abd", True), ("b", "s>= c", False),
                 ("a,b", "<in> b", True), ("ab", "<all-in> a b", True),
                 ("ab", "<all-in> a c", False), ("y", "<or> x <or> y", True),
                 ("z", "<or> x <or> y", False), ("x", "= y", False), ("x", "=", False),
                 ("", "", True)]
        for value, requirement, expected in cases:
            self.assertEqual(expected, spec_matches(value, requirement),
                             f"{value!r} against {requirement!r}")
