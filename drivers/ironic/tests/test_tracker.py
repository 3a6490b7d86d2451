"""The driver under the core's tracker and compute service (fake fleet, real Store)."""

import logging
import time

import fixtures

from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store
from nova_lite.testing import databases

from nova_lite_ironic import node as nodes
from nova_lite_ironic.driver import IronicDriver
from nova_lite_ironic.sources.proxy import ProxySource

from tests import base


class ServiceTestCase(base.TestCase):
    """Compute services over one fake fleet and one SQLite store."""

    def setUp(self):
        super().setUp()
        db = self.useFixture(databases.SQLiteFile())
        self.store = Store(db.url)
        self.addCleanup(self.store.close)

    def service(self, fake, host, **settings_kw):
        settings = self.settings(host=host, **settings_kw)
        driver = IronicDriver(settings=settings, source=ProxySource(fake))
        return ComputeService(host, driver, store=self.store, settings=settings)

    def records(self, host=None):
        return {n.nodename: n for n in self.store.get_compute_nodes(host)}


class TestTracking(ServiceTestCase):

    def test_records_are_node_uuids_with_one_unit(self):
        fake = self.fake_fleet(3, resource_class="iron-nfv")
        svc = self.service(fake, "h1")
        result = svc.run_once()
        self.assertEqual(sorted(n.uuid for n in fake.all()), sorted(result.audited))
        for name, record in self.records("h1").items():
            self.assertEqual(name, record.uuid)
            self.assertEqual(["CUSTOM_IRON_NFV"], list(record.inventories))
            inv = record.inventories["CUSTOM_IRON_NFV"]
            self.assertEqual((1, 0, 1), (inv.total, inv.reserved, inv.capacity))

    def test_claim_takes_the_whole_node_or_nothing(self):
        fake = self.fake_fleet(1)
        svc = self.service(fake, "h1")
        svc.run_once()
        (name,) = self.records("h1")
        flavor = base.baremetal_flavor()
        with svc.tracker.instance_claim(base.instance(flavor=flavor), name) as claim:
            self.assertEqual({"CUSTOM_BAREMETAL": 1}, dict(claim.allocation.resources))
        self.assertEqual(0, svc.tracker.get_node(name).free("CUSTOM_BAREMETAL"))
        err = self.assertRaises(ComputeResourcesUnavailable, svc.tracker.instance_claim,
                                base.instance(flavor=flavor), name)
        self.assertIn("CUSTOM_BAREMETAL", str(err))

    def test_unavailable_nodes_cannot_be_claimed(self):
        fake = self.fake_fleet(4)
        a, b, c, d = (n.uuid for n in fake.all())
        fake.set(b, maintenance=True)
        fake.set(c, provision_state=nodes.MANAGEABLE)
        fake.set(d, power_state=None)
        svc = self.service(fake, "h1")
        svc.run_once()
        flavor = base.baremetal_flavor()
        with svc.tracker.instance_claim(base.instance(flavor=flavor), a):
            pass
        for name in (b, c, d):
            self.assertRaises(ComputeResourcesUnavailable, svc.tracker.instance_claim,
                              base.instance(flavor=flavor), name)
        fake.set(b, maintenance=False)
        svc.run_once()
        with svc.tracker.instance_claim(base.instance(flavor=flavor), b):
            pass

    def test_spawned_instance_keeps_its_node_across_audits(self):
        fake = self.fake_fleet(6)
        svc = self.service(fake, "h1")
        svc.run_once()
        name = sorted(self.records("h1"))[0]
        claim = svc.tracker.instance_claim(base.instance(flavor=base.baremetal_flavor()), name)
        svc.driver.spawn(claim.instance)
        svc.driver._local.by_host.clear()   # forget: the store must be enough
        result = svc.run_once()
        self.assertIn(name, result.audited)
        self.assertEqual([claim.instance.uuid], svc.driver.list_instances())

    def test_deleted_node_record_goes_at_next_audit(self):
        fake = self.fake_fleet(3)
        svc = self.service(fake, "h1")
        svc.run_once()
        gone = fake.all()[0].uuid
        fake.remove(gone)
        result = svc.run_once()
        self.assertEqual((gone,), result.orphans_deleted)
        self.assertNotIn(gone, self.records())

    def test_listing_error_skips_the_audit_and_keeps_records(self):
        from openstack import exceptions as sdk_exc
        fake = self.fake_fleet(3)
        svc = self.service(fake, "h1")
        svc.run_once()
        before = {n.nodename: n for n in svc.store.get_compute_nodes("h1")}
        fake.list_error = sdk_exc.HttpException("503 Service Unavailable")
        core_log = self.useFixture(fixtures.FakeLogger(level=logging.INFO, name="nova_lite"))
        result = svc.run_once()
        self.assertIn("503", result.skipped)
        self.assertEqual((), result.audited)
        self.assertEqual(((), ()), (result.orphans_deleted, result.orphans_kept))
        after = {n.nodename: n for n in svc.store.get_compute_nodes("h1")}
        self.assertEqual(before, after)
        warnings = [line for line in (core_log.output + self.log.output).splitlines()
                    if "not ready" in line]
        self.assertEqual(1, len(warnings), core_log.output + self.log.output)
        self.assertIn("skipping this audit", warnings[0])
        fake.list_error = None
        self.assertEqual(3, len(svc.run_once().audited))


class TestSharedFleet(ServiceTestCase):

    def test_two_services_split_the_fleet_with_no_node_counted_twice(self):
        fake = self.fake_fleet(40)
        one, two = self.service(fake, "h1"), self.service(fake, "h2")
        for _ in range(2):   # both heartbeat, then both see each other
            one.run_once()
            two.run_once()
        mine = {h: set(self.records(h)) for h in ("h1", "h2")}
        self.assertFalse(mine["h1"] & mine["h2"])
        self.assertEqual({n.uuid for n in fake.all()}, mine["h1"] | mine["h2"])
        self.assertTrue(mine["h1"] and mine["h2"])
        self.assertEqual(40, len(self.records()))

    def test_dead_service_nodes_are_adopted_with_the_same_uuid(self):
        fake = self.fake_fleet(40)
        one = self.service(fake, "h1", service_down_time=1)
        two = self.service(fake, "h2", service_down_time=1)
        for _ in range(2):
            one.run_once()
            two.run_once()
        theirs = {n.nodename: n.uuid for n in self.store.get_compute_nodes("h2")}
        self.assertTrue(theirs)
        time.sleep(1.2)            # h2 stops heartbeating and is considered down
        one.run_once()
        adopted = {n.nodename: n.uuid for n in self.store.get_compute_nodes("h1")}
        for name, node_uuid in theirs.items():
            self.assertEqual(node_uuid, adopted[name])
        self.assertEqual(40, len(adopted))
        self.assertEqual({}, {n.nodename: n for n in self.store.get_compute_nodes("h2")})

    def test_old_owner_keeps_a_moved_record_until_the_node_is_gone(self):
        fake = self.fake_fleet(40)
        one = self.service(fake, "h1")
        one.run_once()
        self.assertEqual(40, len(self.records("h1")))
        # h2 joins; until it adopts them, h1's records of its nodes are orphans
        # that still exist in the source: they are kept, with a WARNING.
        self.store.heartbeat("h2")
        result = one.run_once()
        self.assertTrue(result.orphans_kept)
        self.assertEqual((), result.orphans_deleted)
        self.assertEqual(40, len(self.records()))
        two = self.service(fake, "h2")
        two.run_once()
        one.run_once()
        self.assertEqual(40, len(self.records()))
        self.assertEqual(set(), set(self.records("h1")) & set(self.records("h2")))

    def test_instance_of_another_service_keeps_its_node_there(self):
        fake = self.fake_fleet(20)
        one, two = self.service(fake, "h1"), self.service(fake, "h2")
        for _ in range(2):
            one.run_once()
            two.run_once()
        name = sorted(self.records("h2"))[0]
        claim = two.tracker.instance_claim(base.instance(flavor=base.baremetal_flavor()), name)
        two.driver.spawn(claim.instance)
        # h2 dies but its instance still sits on the node: h1 never takes it
        self.store.heartbeat("h2")
        one.driver.attach_service_view(lambda: ["h1"])
        self.assertNotIn(name, one.driver.get_available_nodes())
        self.assertIn(name, two.driver.get_available_nodes())


class TestTrackerWithoutService(base.TestCase):
    """Bare ResourceTrackers: the driver reads the services of the configured database."""

    def test_two_trackers_split_the_fleet(self):
        from nova_lite.compute.resource_tracker import ResourceTracker
        db = self.useFixture(databases.SQLiteFile())
        store = Store(db.url)
        self.addCleanup(store.close)
        store.heartbeat("h1")
        store.heartbeat("h2")
        fake = self.fake_fleet(30)
        seen = {}
        for host in ("h1", "h2"):
            settings = self.settings(host=host, database_url=db.url)
            driver = IronicDriver(settings=settings, source=ProxySource(fake))
            driver.init_host(host)
            self.addCleanup(lambda d=driver: d.store and d.store.close())
            tracker = ResourceTracker(host, driver, store=store, settings=settings)
            seen[host] = set(tracker.update_available_resource().audited)
        self.assertFalse(seen["h1"] & seen["h2"])
        self.assertEqual(30, len(seen["h1"] | seen["h2"]))

    def test_in_memory_database_is_not_opened(self):
        settings = self.settings(host="h1", database_url="sqlite://")
        driver = IronicDriver(settings=settings, source=ProxySource(self.fake_fleet(3)))
        driver.init_host("h1")
        self.assertEqual(3, len(driver.get_available_nodes()))
        self.assertIsNone(driver.store)
