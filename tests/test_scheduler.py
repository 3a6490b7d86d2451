"""The scheduler chooses among real compute records, and explains a refusal."""

import time

import fixtures


from nova_lite import conf, objects
from nova_lite.compute import api
from nova_lite.compute.worker import Worker
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import models
from nova_lite.exception import InvalidConfig, InvalidInput
from nova_lite.objects import InstanceNUMACell, InstanceNUMATopology, PciRequest
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec, Selection
from nova_lite.testing import databases
from tests import base


class SchedulerScenario(base.TestCase):
    """Three compute hosts (8 vCPUs, 8192 MB, 100 GB each) on one store."""

    hosts = ("host1", "host2", "host3")

    def make_store(self):
        return self.sqlite_store()

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.conf = self.settings(reserved_host_memory_mb=0, cpu_allocation_ratio=1.0)
        self.trackers = {}
        for host in self.hosts:
            _, rt = self.make_tracker(settings=self.settings(
                host=host, reserved_host_memory_mb=0, cpu_allocation_ratio=1.0),
                store=self.store, host=host, vcpus=8, memory_mb=8192, local_gb=100)
            self.store.heartbeat(host)
            self.trackers[host] = rt

    def manager(self, **kw):
        return HostManager(self.store, self.settings(
            reserved_host_memory_mb=0, cpu_allocation_ratio=1.0, **kw))

    def fill(self, host, memory_mb=8192):
        """Claim ``memory_mb`` on ``host`` through its own tracker."""
        return self.trackers[host].instance_claim(
            base.instance(base.flavor(name="filler", vcpus=1, memory_mb=memory_mb)), host)


class SchedulerTests(SchedulerScenario):

    def test_back_to_back_requests_spread(self):
        manager = self.manager()
        picks = [manager.select_destinations(base.flavor(memory_mb=1024))[0].host
                 for _ in self.hosts]
        self.assertEqual(sorted(self.hosts), sorted(picks))

    def test_num_instances_spread_and_carry_alternates_and_limits(self):
        chosen = self.manager().select_destinations(RequestSpec(base.flavor()), 3)
        self.assertEqual(3, len({s.host for s in chosen}))
        self.assertIsInstance(chosen[0], Selection)
        self.assertEqual(2, len(chosen[0].alternates))   # max_attempts 3
        self.assertNotIn(chosen[0].host, [a.host for a in chosen[0].alternates])
        self.assertEqual({"memory_mb": 8192.0, "disk_gb": 100.0, "vcpu": 8.0},
                         chosen[0].limits)

    def test_full_host_is_filtered_out_with_its_reason(self):
        self.fill("host1", 8192 - 1024)
        flavor = base.flavor(memory_mb=4096)
        for _ in range(4):
            self.assertNotEqual("host1",
                                self.manager().select_destinations(flavor)[0].host)
        self.fill("host2", 8192)
        self.fill("host3", 8192 - 2048)
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations, flavor)
        self.assertIn("RamFilter removed 3 of 3 hosts: free memory ", str(exc))
        ram = [r for r in exc.report if r.filter == "RamFilter"][0]
        self.assertEqual((3, 3), (ram.considered, ram.removed))
        self.assertIn(ram.reason, {"free memory 1024 MB < 4096 MB",
                                   "free memory 0 MB < 4096 MB",
                                   "free memory 2048 MB < 4096 MB"})

    def test_no_valid_host_names_each_filter_that_removed_hosts(self):
        queries_disable(self.store, "host1", "maintenance")
        self.fill("host2", 8192)
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations,
                                base.flavor(vcpus=16))
        text = str(exc)
        self.assertIn("ComputeFilter removed 1 of 3 hosts: compute service disabled "
                      "(maintenance)", text)
        self.assertIn("RamFilter removed 1 of 2 hosts: free memory 0 MB < 512 MB", text)
        self.assertIn("CoreFilter removed 1 of 1 hosts: free vcpus 8 < 16", text)
        self.assertEqual(["ComputeFilter", "RamFilter", "CoreFilter", "DiskFilter"][:3],
                         [r.filter for r in exc.report])

    def test_disabled_service_host_never_picked_and_enable_restores(self):
        queries_disable(self.store, "host2")
        manager = self.manager()
        picks = {manager.select_destinations(base.flavor())[0].host for _ in range(6)}
        self.assertNotIn("host2", picks)
        self.store.set_service_disabled("host2", False)
        picks = {manager.select_destinations(base.flavor())[0].host for _ in range(6)}
        self.assertIn("host2", picks)

    def test_dead_service_host_never_picked(self):
        self.store.db.write("age heartbeat", lambda c: c.execute(
            models.services.update().where(models.services.c.host == "host3")
            .values(updated_at=time.time() - 3600)))
        manager = self.manager(service_down_time=60)
        picks = {manager.select_destinations(base.flavor())[0].host for _ in range(6)}
        self.assertEqual({"host1", "host2"}, picks)
        exc = self.assertRaises(NoValidHost, manager.select_destinations, RequestSpec(
            base.flavor(), force_hosts=("host3",)))
        self.assertIn("compute service down", str(exc))

    def test_a_view_notices_a_service_dying_and_never_a_live_one(self):
        # Heartbeats do not move the change sequence: the view reads a
        # service row again when its heartbeat as read is about to look down.
        settings = self.settings(reserved_host_memory_mb=0, service_down_time=1)
        manager = HostManager(self.store, settings, services_max_age=0.2)

        def up():
            return {s.host: s.service.is_up(1) for s in manager.refresh()}

        deadline = time.monotonic() + 30
        while True:   # host1 and host2 beat, host3 has stopped
            for host in ("host1", "host2"):
                self.store.heartbeat(host)
            seen = up()
            self.assertTrue(seen["host1"] and seen["host2"], seen)
            if not seen["host3"]:
                break
            self.assertLess(time.monotonic(), deadline, "host3 never looked down")
        exc = self.assertRaises(NoValidHost, manager.select_destinations, RequestSpec(
            base.flavor(), force_hosts=("host3",)))
        self.assertIn("compute service down", str(exc))
        self.store.heartbeat("host1")
        self.assertEqual("host1", manager.select_destinations(
            RequestSpec(base.flavor(), force_hosts=("host1",)))[0].host)
        self.store.heartbeat("host3")   # back: seen within services_max_age
        while not up()["host3"]:
            self.assertLess(time.monotonic(), deadline, "host3 never came back")
            self.store.heartbeat("host3")

    def test_a_reused_view_sees_a_service_disabled_at_once(self):
        settings = self.settings(reserved_host_memory_mb=0, service_down_time=60)
        slow = HostManager(self.store, settings, services_max_age=3600)
        slow.refresh()
        queries_disable(self.store, "host1")   # a disabled state is seen at once
        self.assertNotIn("host1", {slow.select_destinations(base.flavor())[0].host
                                   for _ in range(4)})
        self.store.set_service_disabled("host1", False)
        self.assertIn("host1", {slow.select_destinations(base.flavor())[0].host
                                for _ in range(6)})

    def test_ignore_and_force_hosts(self):
        manager = self.manager()
        spec = RequestSpec(base.flavor(), ignore_hosts=("host1", "host2"))
        self.assertEqual({"host3"}, {manager.select_destinations(spec)[0].host
                                     for _ in range(3)})
        spec = RequestSpec(base.flavor(), force_hosts="host2")
        self.assertEqual("host2", manager.select_destinations(spec)[0].host)

    def test_refresh_rereads_only_changed_nodes(self):
        manager = self.manager()
        before = {s.host: s.node for s in manager.get_host_states()}
        self.fill("host2", 1024)
        after = {s.host: s for s in manager.get_host_states()}
        self.assertIs(before["host1"], after["host1"].node)
        self.assertIs(before["host3"], after["host3"].node)
        self.assertIsNot(before["host2"], after["host2"].node)
        self.assertEqual(8192 - 1024, after["host2"].free_ram_mb)

    def test_refresh_drops_deleted_nodes_and_adds_new_ones(self):
        manager = self.manager()
        manager.get_host_states()
        self.store.delete_compute_node("host2", "host2")
        self.assertEqual(["host1", "host3"], [s.host for s in manager.get_host_states()])
        self.make_tracker(settings=self.settings(host="host4", reserved_host_memory_mb=0),
                          store=self.store, host="host4")
        self.store.heartbeat("host4")
        self.assertEqual(["host1", "host3", "host4"],
                         [s.host for s in manager.get_host_states()])

    def test_host_subset_size_picks_at_random_among_the_best(self):
        chosen = set()
        for _ in range(30):
            (pick,) = self.manager(host_subset_size=3).select_destinations(base.flavor())
            self.assertEqual(2, len(pick.alternates))
            self.assertNotIn(pick.host, {a.host for a in pick.alternates})
            chosen.add(pick.host)
        self.assertEqual({"host1", "host2", "host3"}, chosen)
        self.fill("host2", 8192)
        manager = self.manager(host_subset_size=5)
        for _ in range(5):
            (pick,) = manager.select_destinations(base.flavor())
            self.assertNotEqual("host2", pick.host)
            self.assertEqual(1, len(pick.alternates))   # only two hosts pass

    def test_pack_with_negative_multiplier(self):
        self.fill("host3", 2048)
        manager = self.manager(ram_weight_multiplier=-1.0, cpu_weight_multiplier=0.0,
                               disk_weight_multiplier=0.0)
        self.assertEqual("host3", manager.select_destinations(base.flavor())[0].host)
        spread = self.manager(cpu_weight_multiplier=0.0, disk_weight_multiplier=0.0)
        self.assertNotEqual("host3", spread.select_destinations(base.flavor())[0].host)

    def test_failed_multi_instance_request_counts_nothing(self):
        manager = self.manager()
        flavor = base.flavor(memory_mb=8192)
        self.assertRaises(NoValidHost, manager.select_destinations, flavor, 4)
        self.assertEqual(3, len(manager.select_destinations(flavor, 3)))

    def test_numa_and_pci_requests_are_filtered(self):
        numa = InstanceNUMATopology(cells=[InstanceNUMACell(
            id=0, cpuset={0}, memory_mb=512, cpu_policy="shared")])
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations,
                                RequestSpec(base.flavor(), numa_topology=numa))
        self.assertIn("NUMATopologyFilter removed 3 of 3 hosts", str(exc))
        exc = self.assertRaises(NoValidHost, self.manager().select_destinations, RequestSpec(
            base.flavor(), pci_requests=[PciRequest(count=1, vendor_id="8086",
                                                    product_id="1520")]))
        self.assertIn("PciPassthroughFilter removed 3 of 3 hosts", str(exc))

    def test_filters_and_weighers_come_from_settings(self):
        manager = self.manager(enabled_filters="RamFilter", weight_classes=["DiskWeigher"])
        # The traits and zone checks run first whatever is enabled, as Placement's
        # and Nova's request filter do.
        self.assertEqual(["MemberOf", "Traits", "AvailabilityZone", "RamFilter"],
                         [f.name for f in manager.filters])
        self.assertEqual(["DiskWeigher"], [w.name for w in manager.weighers])
        everything = self.manager(weight_classes="nova.scheduler.weights.all_weighers")
        self.assertEqual(["CPUWeigher", "DiskWeigher", "RAMWeigher"],
                         [w.name for w in everything.weighers])
        exc = self.assertRaises(InvalidConfig, self.manager, enabled_filters="NoSuchFilter")
        self.assertIn("[filter_scheduler] enabled_filters", str(exc))
        self.assertIn("NoSuchFilter", str(exc))

    def test_bad_requests_are_refused(self):
        manager = self.manager()
        self.assertRaises(InvalidInput, manager.select_destinations, "m1.small")
        self.assertRaises(InvalidInput, manager.select_destinations, base.flavor(), 0)

    def test_ini_options(self):
        path = f"{self.state_path}/n.conf"
        with open(path, "w") as f:
            f.write("[filter_scheduler]\nenabled_filters = ComputeFilter, RamFilter\n"
                    "ram_weight_multiplier = -2\n[scheduler]\nmax_attempts = 5\n"
                    "nodes_max_age = 0.5\n")
        settings = conf.load_settings(path)
        self.assertEqual(("ComputeFilter", "RamFilter"), settings.enabled_filters)
        self.assertEqual((-2.0, 5), (settings.ram_weight_multiplier, settings.max_attempts))
        self.assertEqual(0.5, settings.nodes_max_age)
        self.assertEqual(0.5, HostManager(self.store, settings).nodes_max_age)
        self.assertEqual(0.0, self.manager().nodes_max_age)

    def test_bad_nodes_max_age_is_refused_with_its_name(self):
        for value in (-0.1, 10.5, float("nan"), "abc", True):
            exc = self.assertRaises(InvalidConfig, conf.Settings, nodes_max_age=value)
            self.assertIn("nodes_max_age", str(exc))
        path = f"{self.state_path}/bad.conf"
        with open(path, "w") as f:
            f.write("[scheduler]\nnodes_max_age = 1e300\n")
        exc = self.assertRaises(InvalidConfig, conf.load_settings, path)
        self.assertIn("nodes_max_age", str(exc))

    def test_nodes_max_age_reuses_the_view_until_it_is_that_old(self):
        clock = [1000.0]   # the manager's clock, moved by the test alone
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.scheduler.host_manager.time.monotonic", lambda: clock[0]))
        reusing = self.manager(nodes_max_age=0.5)
        asking = self.manager()
        for manager in (reusing, asking):
            manager.refresh()
        self.fill("host1", 8192)   # a claim the managers did not make fills host1
        to_host1 = RequestSpec(base.flavor(memory_mb=1024), force_hosts=("host1",))
        self.assertRaises(NoValidHost, asking.select_destinations, to_host1)
        clock[0] += 0.49
        self.assertEqual("host1", reusing.select_destinations(to_host1)[0].host)
        clock[0] += 0.01
        exc = self.assertRaises(NoValidHost, reusing.select_destinations, to_host1)
        self.assertIn("free memory 0 MB < 1024 MB", str(exc))


def queries_disable(store, host, reason=None):
    store.set_service_disabled(host, True, reason)


class BuildTests(SchedulerScenario):

    def test_builds_spread_and_are_recorded(self):
        manager = self.manager()
        built = [api.build(self.store, RequestSpec(base.flavor(), project_id="p1"),
                           trackers=self.trackers, host_manager=manager).instances[0]
                 for _ in self.hosts]
        self.assertEqual(sorted(self.hosts), sorted(i.host for i in built))
        self.assertEqual({"building"}, {i.vm_state for i in built})
        for host in self.hosts:   # each host's worker spawns its own
            Worker(self.trackers[host]).run_pending()
        for inst in built:
            stored = self.store.get_instance(inst.uuid)
            self.assertEqual(("active", "p1", inst.host), (stored.vm_state, stored.project_id,
                                                         stored.host))
            self.assertIn(inst.uuid, self.trackers[inst.host].driver.list_instances())

    def test_lost_race_retries_on_an_alternate(self):
        manager = self.manager()
        flavor = base.flavor(memory_mb=4096)
        raced = []

        def tracker_for(host):
            if not raced:   # another builder fills the chosen node first
                raced.append(host)
                self.fill(host, 8192)
            return self.trackers[host]

        result = api.build(self.store, flavor, trackers=tracker_for, host_manager=manager)
        self.assertNotEqual(raced[0], result.instances[0].host)
        self.assertEqual(raced[0], result.attempts[0][0])
        self.assertIn("Free memory", result.attempts[0][2])
        self.assertEqual(result.instances[0].host,
                         self.store.get_instance(result.instances[0].uuid).host)

    def test_every_alternate_lost_keeps_nothing(self):
        manager = self.manager()

        def tracker_for(host):
            self.fill(host, 8192)   # every node is taken just before its claim
            return self.trackers[host]

        exc = self.assertRaises(api.BuildFailed, api.build, self.store, base.flavor(),
                                trackers=tracker_for, host_manager=manager)
        self.assertEqual(3, len(exc.attempts))
        self.assertEqual([], [i for i in self.store.list_instances()
                              if i.flavor.name != "filler"])

    def test_failed_spawn_gives_the_claim_back_and_records_error(self):
        from nova_lite.virt.fake import FakeDriver

        class BrokenSpawn(FakeDriver):
            def spawn(self, instance):
                raise RuntimeError("hypervisor refused the guest")

        driver = BrokenSpawn(settings=self.conf)
        driver.init_host("host1")
        trackers = dict(self.trackers, host1=ResourceTracker(
            "host1", driver, store=self.store, settings=self.conf))
        spec = RequestSpec(base.flavor(), force_hosts=("host1",))
        api.build(self.store, spec, trackers=trackers)
        Worker(trackers["host1"]).run_pending()   # host1 spawns it, and fails
        [inst] = self.store.list_instances()
        self.assertIn("hypervisor refused the guest",
                      self.store.tasks.last_failure(inst.uuid).detail)
        self.assertEqual(("error", None), (inst.vm_state, inst.host))
        self.assertEqual(0, self.store.get_compute_node("host1", "host1").used("MEMORY_MB"))

    def test_no_valid_host_claims_nothing(self):
        self.assertRaises(NoValidHost, api.build, self.store, base.flavor(vcpus=9),
                          trackers=self.trackers)
        self.assertEqual([], self.store.list_instances())


class PostgreSQLSchedulerTests(SchedulerTests):

    def make_store(self):
        databases.use_postgresql(self)
        db = self.useFixture(databases.PostgreSQLDatabase())
        from nova_lite.db import Store
        store = Store(db.url)
        self.addCleanup(store.close)
        return store


class PostgreSQLBuildTests(BuildTests):
    make_store = PostgreSQLSchedulerTests.make_store




class BenchmarkRuns(base.TestCase):
    """The scheduler benchmark runs at a tiny size (no figure is asserted)."""

    def test_tiny_case(self):
        from bench import scheduler as bench_scheduler
        result = bench_scheduler.run_case({"store": "sqlite-file", "nodes": 4, "repeat": 2})
        self.assertEqual((4, 2), (result["hosts"], result["alternates"]))
        self.assertEqual(2, result["steady"]["runs"])

    def test_tiny_builds_case(self):
        from bench import builds as bench_builds
        result = bench_builds.run_case({"store": "sqlite-file", "nodes": 4, "processes": 2,
                                        "builds": 3})
        self.assertEqual((6, 6, 6), (result["total_builds"], result["stored_instances"],
                                     result["stored_allocations"]))

    def test_tiny_tuned_builds_case(self):
        from bench import builds as bench_builds
        result = bench_builds.run_case(dict(
            {"store": "sqlite-file", "nodes": 4, "processes": 2, "builds": 3},
            **bench_builds.TUNED))
        self.assertEqual((6, 6, 6), (result["total_builds"], result["stored_instances"],
                                     result["stored_allocations"]))
        self.assertGreater(result["worker_cpu_ms_per_build"], 0)


class AtomicGroupBuildTests(SchedulerScenario):
    """Several instances on one node are claimed in one transaction: all or none
    (``ResourceTracker.instance_claims``)."""

    def test_group_on_one_node_is_claimed_all_or_none(self):
        manager = self.manager()
        spec = RequestSpec(base.flavor(memory_mb=4096), force_hosts=("host1",))
        raced = []

        def tracker_for(host):
            if not raced:   # another build takes half of host1 before the group's claim
                raced.append(self.fill(host, 4096))
            return self.trackers[host]

        self.assertRaises(api.BuildFailed, api.build, self.store, spec, 2,
                          trackers=tracker_for, host_manager=manager)
        self.assertEqual(["filler"], [i.flavor.name for i in self.store.list_instances()])
        self.assertEqual(4096, self.store.get_compute_node("host1", "host1").used("MEMORY_MB"))

    def test_group_fits_and_lands_together(self):
        spec = RequestSpec(base.flavor(memory_mb=4096), force_hosts=("host2",))
        result = api.build(self.store, spec, 2, trackers=self.trackers)
        self.assertEqual({"host2"}, {i.host for i in result.instances})
        self.assertEqual(8192, self.store.get_compute_node("host2", "host2").used("MEMORY_MB"))


class NUMASchedulingTests(base.TestCase):
    """A pinned-CPU request goes to the node with dedicated CPUs, until they run out."""

    def test_dedicated_cpus_are_found_and_counted(self):
        store = self.sqlite_store()
        settings = self.settings(reserved_host_memory_mb=0)
        self.make_tracker(settings=settings, store=store, host="plain", vcpus=8,
                          memory_mb=8192, local_gb=100)
        topo = objects.NUMATopology(cells=[objects.NUMACell(
            id=0, cpuset={0, 1}, pcpuset={2, 3, 4, 5}, memory_mb=8192)])
        self.make_tracker(settings=settings, store=store, host="pinned", pcpus=4, vcpus=2,
                          memory_mb=8192, local_gb=100, numa_topology=topo)
        for host in ("plain", "pinned"):
            store.heartbeat(host)
        manager = HostManager(store, settings)
        flavor = base.flavor(extra_specs={"hw:cpu_policy": "dedicated"})
        picks = manager.select_destinations(flavor, 4)
        self.assertEqual(["pinned"] * 4, [s.host for s in picks])
        exc = self.assertRaises(NoValidHost, manager.select_destinations, flavor)
        self.assertIn("CoreFilter removed 2 of 2 hosts: free pcpus 0 < 1", str(exc))


class BareMetalSchedulingTests(base.TestCase):
    """A ``resources:CUSTOM_*`` flavor only goes to nodes with that class free."""

    def test_custom_class_in_use_is_filtered(self):
        import attrs

        from nova_lite.virt.fake import FakeDriver

        class GoldDriver(FakeDriver):
            def get_available_resource(self, nodename):
                return attrs.evolve(super().get_available_resource(nodename),
                                    resource_class="CUSTOM_GOLD")

        store = self.sqlite_store()
        settings = self.settings(reserved_host_memory_mb=0)
        trackers = {}
        for host in ("bm1", "bm2"):
            driver = GoldDriver(settings=settings)
            driver.init_host(host)
            trackers[host] = ResourceTracker(host, driver, store=store, settings=settings)
            trackers[host].update_available_resource()
            store.heartbeat(host)
        flavor = base.flavor(name="bm.gold", extra_specs={
            "resources:CUSTOM_GOLD": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
            "resources:DISK_GB": "0"})
        first = api.build(store, flavor, trackers=trackers).instances[0]
        second = api.build(store, flavor, trackers=trackers).instances[0]
        self.assertEqual({"bm1", "bm2"}, {first.host, second.host})
        exc = self.assertRaises(NoValidHost, HostManager(store, settings).select_destinations,
                                flavor)
        self.assertIn("ResourceClassFilter removed 2 of 2 hosts: free CUSTOM_GOLD 0 < 1",
                      str(exc))
