"""Required and forbidden aggregates (Placement's member_of) and Nova's
request filters that ask for them."""

import uuid

from nova_lite.exception import InvalidInput, InvalidType
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec
from nova_lite.scheduler import request_filters
from tests import base
from tests import test_scheduler
from tests.test_scheduler import SchedulerScenario


class MemberOfTests(SchedulerScenario):
    """host1 in rack1 and tenant-a (filter_tenant_id demo), host2 in rack2 and
    gpu (trait:CUSTOM_GPU=required), host3 in no aggregate."""

    def setUp(self):
        super().setUp()
        aggs = self.store.aggregates
        self.rack1 = aggs.create("rack1")
        aggs.add_host("rack1", "host1")
        self.rack2 = aggs.create("rack2")
        aggs.add_host("rack2", "host2")
        self.tenant = aggs.create("tenant-a", metadata={"filter_tenant_id": "demo"})
        aggs.add_host("tenant-a", "host1")
        self.gpu = aggs.create("gpu", metadata={"trait:CUSTOM_GPU": "required"})
        aggs.add_host("gpu", "host2")

    def picks(self, spec, manager=None, times=6, **settings):
        manager = manager or self.manager(**settings)
        return {manager.select_destinations(spec)[0].host for _ in range(times)}

    def test_required_sets_are_any_of_and_all_of(self):
        either = RequestSpec(base.flavor(), member_of=[[self.rack1.uuid, self.rack2.uuid]])
        self.assertEqual({"host1", "host2"}, self.picks(either))
        both = RequestSpec(base.flavor(), member_of=[[self.rack1.uuid, self.rack2.uuid],
                                                     [self.tenant.uuid]])
        self.assertEqual({"host1"}, self.picks(both))
        # Placement's text form of one set.
        text = RequestSpec(base.flavor(), member_of=[f"in:{self.rack2.uuid}"])
        self.assertEqual({"host2"}, self.picks(text))

    def test_forbidden_aggregates(self):
        spec = RequestSpec(base.flavor(), forbidden_aggregates=[self.rack1.uuid])
        self.assertEqual({"host2", "host3"}, self.picks(spec))
        text = RequestSpec(base.flavor(),
                           forbidden_aggregates=f"!in:{self.rack1.uuid},{self.rack2.uuid}")
        self.assertEqual({"host3"}, self.picks(text))

    def test_no_valid_host_names_the_aggregates_with_counts(self):
        spec = RequestSpec(base.flavor(), member_of=[[self.rack2.uuid]],
                           forbidden_aggregates=[self.gpu.uuid])
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations, spec)
        text = str(exc)
        self.assertIn("MemberOf removed 3 of 3 hosts", text)
        self.assertIn("host is in none of the aggregates rack2 (member_of) (2 hosts)", text)
        self.assertIn("host is in forbidden aggregate(s) gpu (forbidden by the request) "
                      "(1 host)", text)
        (report,) = [r for r in exc.report if r.filter == "MemberOf"]
        self.assertEqual(3, report.removed)

    def test_indexed_and_full_pass_choose_alike(self):
        spec = RequestSpec(base.flavor(), member_of=[[self.rack1.uuid, self.rack2.uuid]],
                           forbidden_aggregates=[self.rack2.uuid])
        full = HostManager(self.store, self.settings(reserved_host_memory_mb=0),
                           indexed=False)
        self.assertEqual({"host1"}, self.picks(spec, full))
        self.assertEqual({"host1"}, self.picks(spec))

    def test_bad_member_of_refused(self):
        self.assertRaises(InvalidInput, RequestSpec, base.flavor(), member_of=[["nope"]])
        self.assertRaises(InvalidInput, RequestSpec, base.flavor(), member_of=[[]])
        self.assertRaises(InvalidInput, RequestSpec, base.flavor(),
                          member_of=[f"!in:{self.rack1.uuid}"])
        self.assertRaises(InvalidType, RequestSpec, base.flavor(), member_of="in:x")
        self.assertRaises(InvalidType, RequestSpec, base.flavor(), member_of=[[3]])
        self.assertRaises(InvalidInput, RequestSpec, base.flavor(),
                          forbidden_aggregates="!in:")
        # Upper case is the same uuid.
        spec = RequestSpec(base.flavor(), member_of=[[self.rack1.uuid.upper()]])
        self.assertEqual((frozenset({self.rack1.uuid}),), spec.member_of)

    def test_an_unknown_aggregate_matches_no_host(self):
        spec = RequestSpec(base.flavor(), member_of=[[str(uuid.uuid4())]])
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations, spec)
        self.assertIn("MemberOf removed 3 of 3 hosts", str(exc))

    # -- Nova's request filters ---------------------------------------------
    def test_tenant_aggregate_limits_the_project(self):
        tenants = {"limit_tenants_to_placement_aggregate": True}
        self.assertEqual({"host1"}, self.picks(RequestSpec(base.flavor(), project_id="demo"),
                                               **tenants))
        # A project no aggregate names may use every host.
        self.assertEqual({"host1", "host2", "host3"},
                         self.picks(RequestSpec(base.flavor(), project_id="other"), **tenants))
        # Off: the metadata does not matter.
        self.assertEqual({"host1", "host2", "host3"},
                         self.picks(RequestSpec(base.flavor(), project_id="demo")))

    def test_tenant_aggregate_keys_with_a_suffix_count(self):
        self.store.aggregates.create("tenant-b", metadata={"filter_tenant_id2": "demo"})
        self.store.aggregates.add_host("tenant-b", "host3")
        self.assertEqual({"host1", "host3"},
                         self.picks(RequestSpec(base.flavor(), project_id="demo"),
                                    limit_tenants_to_placement_aggregate=True))

    def test_tenant_aggregate_required(self):
        manager = self.manager(limit_tenants_to_placement_aggregate=True,
                               placement_aggregate_required_for_tenants=True)
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                RequestSpec(base.flavor(), project_id="other"))
        self.assertIn("require_tenant_aggregate removed 3 of 3 hosts: no aggregate has "
                      "filter_tenant_id other", str(exc))
        self.assertEqual({"host1"}, self.picks(RequestSpec(base.flavor(), project_id="demo"),
                                               manager))
        # The tenant's hosts full: the report says why each host went.
        self.fill("host1")
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                RequestSpec(base.flavor(), project_id="demo"))
        self.assertIn("MemberOf removed 2 of 3 hosts: host is in none of the aggregates "
                      "tenant-a (filter_tenant_id of project demo); RamFilter removed 1 of 1 "
                      "hosts: free memory 0 MB < 512 MB", str(exc))

    def test_isolated_aggregates(self):
        manager = self.manager(enable_isolated_aggregate_filtering=True)
        self.assertEqual({"host1", "host3"}, self.picks(
            RequestSpec(base.flavor()), enable_isolated_aggregate_filtering=True))
        # Without the option, the gpu hosts take anything.
        self.assertEqual({"host1", "host2", "host3"}, self.picks(RequestSpec(base.flavor())))
        # A flavor requiring the trait may go there (if the host has it).
        gpu = base.flavor(extra_specs={"trait:CUSTOM_GPU": "required"})
        filtered = request_filters.process(RequestSpec(gpu), [self.gpu], manager.settings)
        self.assertEqual(frozenset(), filtered.spec.forbidden_aggregates)
        plain = request_filters.process(RequestSpec(base.flavor()), [self.gpu],
                                        manager.settings)
        self.assertEqual(frozenset({self.gpu.uuid}), plain.spec.forbidden_aggregates)
        self.fill("host1")
        self.fill("host3")
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                RequestSpec(base.flavor()))
        self.assertIn("host is in forbidden aggregate(s) gpu (it requires trait(s) "
                      "CUSTOM_GPU the flavor does not require)", str(exc))

    def test_request_filters_add_to_the_callers(self):
        manager = self.manager(limit_tenants_to_placement_aggregate=True)
        spec = RequestSpec(base.flavor(), project_id="demo", member_of=[[self.rack2.uuid]])
        exc = self.assertRaises(NoValidHost, manager.select_destinations, spec)
        self.assertIn("MemberOf removed 3 of 3 hosts", str(exc))

    def test_aggregate_changes_are_seen_with_the_services(self):
        manager = HostManager(self.store, self.settings(
            reserved_host_memory_mb=0, limit_tenants_to_placement_aggregate=True),
            services_max_age=0)
        spec = RequestSpec(base.flavor(), project_id="demo")
        self.assertEqual({"host1"}, self.picks(spec, manager))
        self.store.aggregates.set_metadata("tenant-a", {"filter_tenant_id": None})
        self.assertLessEqual({"host2", "host3"}, self.picks(spec, manager))


class PostgreSQLMemberOfTests(MemberOfTests):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


class AggregateByUuidTests(base.TestCase):
    """The store finds an aggregate by its name or its uuid."""

    def test_uuid_or_name(self):
        store = self.sqlite_store()
        store.heartbeat("host1")
        agg = store.aggregates.create("rack1")
        self.assertEqual("rack1", store.aggregates.get(agg.uuid).name)
        self.assertEqual("rack1", store.aggregates.get(agg.uuid.upper()).name)
        store.aggregates.add_host(agg.uuid, "host1")
        self.assertEqual({"host1"}, store.aggregates.get("rack1").hosts)
        store.aggregates.set_metadata(agg.uuid, {"k": "v"})
        store.aggregates.remove_host(agg.uuid, "host1")
        store.aggregates.delete(agg.uuid)
        self.assertEqual([], store.aggregates.list())
