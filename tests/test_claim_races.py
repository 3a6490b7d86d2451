"""Claims stay right when the world changes underneath them.

Two trackers, each with its own Store (its own connections) on one
database, play two processes; every case runs on a SQLite file and on
PostgreSQL.  Each test is one of the ways a claim used to go wrong: a stale
inventory, a move checked outside its transaction, a stale state change, a
node no longer owned, a busy database, bad node names.
"""

import os
import subprocess
import sys
import uuid

import attrs
import sqlalchemy as sa

from nova_lite import conf, objects
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.exception import (
    DatabaseBusy, InstanceStateConflict, InvalidInput, StoreError)
from nova_lite.virt import loader
from nova_lite.virt.fake import FakeMultiNodeDriver
from tests.reliability import base

HOST = "race-host"
GB = dict(vcpus=8, memory_mb=8192, local_gb=100)


def flavor(name="m1", vcpus=1, memory_mb=1024, root_gb=1, **extra):
    return objects.Flavor(name=name, vcpus=vcpus, memory_mb=memory_mb, root_gb=root_gb,
                          extra_specs=extra)


def instance(fl=None, **kw):
    return objects.Instance(uuid=str(uuid.uuid4()), flavor=fl or flavor(), project_id="p", **kw)


def settings(host=HOST):
    return conf.Settings(host=host, state_path="/nonexistent", reserved_host_memory_mb=0,
                         cpu_allocation_ratio=1.0, ram_allocation_ratio=1.0,
                         disk_allocation_ratio=1.0)


class SharedNodesDriver(FakeMultiNodeDriver):
    """A node's uuid is its own whatever host lists it (as a bare-metal node's is)."""

    def node_uuid(self, nodename):
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"nova-lite-race/{nodename}"))


class RaceMixin:

    def tracker(self, host=HOST, nodes=("a",), store=None, driver_class=None, **sizes):
        """A tracker of ``host`` with its own Store on the test's database, audited."""
        store = store or Store(self.url)
        self.addCleanup(store.close)
        sizes = dict(GB, **sizes)
        if driver_class is None:
            driver = loader.load_driver("fake.multinode", settings=settings(host),
                                        nodes=list(nodes), **sizes)
        else:
            driver = driver_class(settings=settings(host), nodes=list(nodes), **sizes)
        driver.init_host(host)
        rt = ResourceTracker(host, driver, store=store, settings=settings(host))
        self.assertEqual({}, dict(rt.update_available_resource().failed))
        return rt

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    # 1 -----------------------------------------------------------------------------
    def test_a_claim_decides_on_the_inventory_another_process_recorded(self):
        a = self.tracker()
        a.get_node("a")                     # A has the node as 8192 MB
        b = self.tracker(memory_mb=2048)    # B audits it smaller
        self.assertEqual(2048, a.get_node("a").capacity("MEMORY_MB"))
        a.instance_claim(instance(flavor(memory_mb=1024)), "a")
        a.instance_claim(instance(flavor(memory_mb=1024)), "a")
        exc = self.assertRaises(ComputeResourcesUnavailable, a.instance_claim,
                                instance(flavor(memory_mb=1024)), "a")
        self.assertIn("Free memory 0.00 MB < requested 1024 MB", str(exc))
        self.assertEqual(2048, b.get_node("a").used("MEMORY_MB"))

    def test_a_claim_decided_on_a_stale_node_is_decided_again(self):
        a = self.tracker()
        stale = a.get_node("a")
        self.tracker(memory_mb=1024)
        # A still holds the 8192 MB record: the claim fits it, not the records.
        self.assertEqual(8192, stale.capacity("MEMORY_MB"))
        exc = self.assertRaises(ComputeResourcesUnavailable, a.instance_claim,
                                instance(flavor(memory_mb=4096)), "a")
        self.assertIn("requested 4096 MB", str(exc))
        self.assertEqual(stale.generation + 1, exc.generation)
        self.assertEqual([], a.store.list_allocations())

    # 2 -----------------------------------------------------------------------------
    def test_a_resize_of_an_instance_deleted_meanwhile_is_refused(self):
        a = self.tracker(nodes=("a", "b"))
        b = self.tracker(nodes=("a", "b"))
        claim = a.instance_claim(instance(), "a")
        stale = a.store.get_instance(claim.instance.uuid)     # A reads it: live
        b.update_usage(attrs.evolve(stale, vm_state=objects.DELETED))
        before = base.dump(a.store)
        exc = self.assertRaises(InvalidInput, a.resize_claim, stale, flavor("m2", vcpus=2),
                                "b")
        self.assertIn("deleted", str(exc))
        self.assertEqual(before, base.dump(a.store))
        self.assertEqual([], a.store.list_migrations())

    def test_a_second_move_of_one_instance_is_refused(self):
        a = self.tracker(nodes=("a", "b"))
        b = self.tracker(nodes=("a", "b"))
        claim = a.instance_claim(instance(), "a")
        stored = a.store.get_instance(claim.instance.uuid)
        first = a.resize_claim(stored, flavor("m2", vcpus=2), "b")
        exc = self.assertRaises(InvalidInput, b.resize_claim, stored, flavor("m3", vcpus=3),
                                "b")
        self.assertIn(first.migration.uuid, str(exc))
        self.assertEqual(1, len(a.store.list_migrations(in_progress_only=True)))
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 1},
                         dict(a.get_node("b").usage))

    # 3 -----------------------------------------------------------------------------
    def test_a_stale_update_never_brings_a_deleted_instance_back(self):
        a = self.tracker()
        b = self.tracker()
        claim = a.instance_claim(instance(), "a")
        old = attrs.evolve(claim.instance, vm_state=objects.ACTIVE)
        b.update_usage(attrs.evolve(old, vm_state=objects.DELETED))
        exc = self.assertRaises(InstanceStateConflict, a.update_usage, old)
        self.assertIn("is deleted in the records", str(exc))
        self.assertIn("as active", str(exc))
        self.assertEqual(objects.DELETED, a.store.get_instance(old.uuid).vm_state)
        a.update_available_resource()
        self.assertEqual([], a.store.list_allocations())
        self.assertEqual({}, dict(a.get_node("a").usage))

    def test_an_offloaded_instance_becomes_live_only_through_a_claim(self):
        a = self.tracker()
        claim = a.instance_claim(instance(), "a")
        live = attrs.evolve(claim.instance, vm_state=objects.ACTIVE)
        a.update_usage(attrs.evolve(live, vm_state=objects.SHELVED_OFFLOADED))
        exc = self.assertRaises(InstanceStateConflict, a.update_usage, live)
        self.assertIn("shelved_offloaded", str(exc))
        self.assertEqual(objects.SHELVED_OFFLOADED, a.store.get_instance(live.uuid).vm_state)

    # 4 -----------------------------------------------------------------------------
    def test_a_node_its_driver_stops_listing_admits_no_claim(self):
        a = self.tracker(nodes=("a", "b"))
        a.driver.set_nodes(["b"])
        a.update_available_resource()
        record = a.store.get_compute_node(HOST, "a")
        self.assertFalse(record.reported)
        exc = self.assertRaises(ComputeResourcesUnavailable, a.instance_claim, instance(),
                                "a")
        self.assertIn("Node a is no longer reported by the virt driver", str(exc))
        a.driver.set_nodes(["a", "b"])
        a.update_available_resource()
        self.assertTrue(a.get_node("a").reported)
        a.instance_claim(instance(), "a")

    def test_a_node_that_moved_to_another_host_is_booked_once(self):
        baremetal = flavor("bm", vcpus=1, memory_mb=1, root_gb=1,
                           **{"resources:CUSTOM_BAREMETAL": "1", "resources:VCPU": "0",
                              "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"})
        one = dict(vcpus=1, memory_mb=1, local_gb=1)
        host1 = self.tracker("host1", nodes=("bm0",), driver_class=_BareMetal, **one)
        first = host1.instance_claim(instance(baremetal), "bm0")
        host2 = self.tracker("host2", nodes=("bm0",), driver_class=_BareMetal, **one)
        node = host2.get_node("bm0")
        self.assertEqual("host2", node.host)
        self.assertEqual(1, node.used("CUSTOM_BAREMETAL"))     # carried across, not a leak
        self.assertEqual("host2", host2.store.get_instance(first.instance.uuid).host)
        exc = self.assertRaises(ComputeResourcesUnavailable, host1.instance_claim,
                                instance(baremetal), "bm0")
        self.assertIn("owned by host host2, not host1", str(exc))
        self.assertRaises(ComputeResourcesUnavailable, host2.instance_claim,
                          instance(baremetal), "bm0")
        host2.update_available_resource()
        self.assertEqual(1, len(host2.store.list_allocations()))

    # 5 -----------------------------------------------------------------------------
    def test_the_audit_calls_the_driver_outside_every_write_transaction(self):
        a = self.tracker(driver_class=_WritesFromOverhead)
        claim = a.instance_claim(instance(), "a")
        a.store.db.write("lose an allocation", lambda conn: conn.execute(
            models.allocations.delete()))
        a.driver.probe = Store(self.url, busy_timeout=0.2)
        self.addCleanup(a.driver.probe.close)
        a.update_available_resource()
        self.assertEqual(["written"], a.driver.outcomes)
        self.assertEqual([claim.instance.uuid],
                         [x.consumer_uuid for x in a.store.list_allocations()])

    # 6 -----------------------------------------------------------------------------
    def test_an_instance_being_unshelved_keeps_its_claim(self):
        a = self.tracker()
        claim = a.instance_claim(instance(), "a")
        spawning = attrs.evolve(claim.instance, vm_state=objects.SHELVED_OFFLOADED,
                                task_state="spawning")
        a.update_usage(spawning)
        self.assertEqual({"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 1},
                         dict(a.get_node("a").usage))
        a.update_available_resource()
        self.assertEqual(1, len(a.store.list_allocations()))

    # 10 ----------------------------------------------------------------------------
    def test_amounts_no_database_can_sum_are_refused(self):
        huge = dict(vcpus=8, memory_mb=2 ** 40, local_gb=100)
        a = self.tracker(**huge)
        big = flavor("huge", memory_mb=2 ** 40)
        a.instance_claim(instance(big), "a")
        self.assertRaises(ComputeResourcesUnavailable, a.instance_claim,
                          instance(flavor("more", memory_mb=2 ** 53)), "a")
        a.update_available_resource()
        self.assertEqual(2 ** 40, a.get_node("a").used("MEMORY_MB"))


class _BareMetal(SharedNodesDriver):
    """One unit of CUSTOM_BAREMETAL per node, as Ironic reports a node."""

    def get_available_resource(self, nodename):
        return attrs.evolve(super().get_available_resource(nodename),
                            resource_class="CUSTOM_BAREMETAL")


class _Listing(FakeMultiNodeDriver):
    """Lists whatever the test says, malformed or not."""

    listing = ()

    def get_available_nodes(self, refresh=False):
        return self.listing if self.listing != () else super().get_available_nodes(refresh)

    def get_available_resource(self, nodename):
        return super().get_available_resource("good")


class _WritesFromOverhead(FakeMultiNodeDriver):
    """Its overhead estimate writes through another store with a short busy bound:
    it fails with "database busy" if the caller holds a write transaction."""

    probe = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def estimate_instance_overhead(self, instance_or_flavor):
        if self.probe is not None:
            try:
                self.probe.heartbeat("probe-host")
                self.outcomes.append("written")
            except DatabaseBusy as exc:
                self.outcomes.append(f"busy: {exc}")
        return super().estimate_instance_overhead(instance_or_flavor)


class TestRacesSQLite(RaceMixin, base.SQLiteBackend, base.TestCase):

    def test_a_busy_database_fails_the_claim_within_its_bound(self):
        a = self.tracker()
        path = sa.engine.make_url(self.url).database
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait)
        self.addCleanup(holder.stdin.close)
        self.assertEqual("locked", holder.stdout.readline().strip())
        busy = Store(self.url, busy_timeout=0.3)       # opening takes no write lock
        self.addCleanup(busy.close)
        before = base.dump(busy)
        rt = ResourceTracker(HOST, a.driver, store=busy, settings=settings())
        exc = self.assertRaises(DatabaseBusy, rt.instance_claim, instance(), "a")
        self.assertIn("database busy", str(exc))
        self.assertIn("nothing was written", str(exc))
        reader = Store(self.url, readonly=True)
        self.addCleanup(reader.close)
        self.assertEqual(["a"], [n.nodename for n in reader.get_compute_nodes()])
        holder.stdin.write("release\n")
        holder.stdin.flush()
        self.assertEqual(0, holder.wait(timeout=60))
        self.assertEqual(before, base.dump(busy))

    def test_an_empty_existing_file_is_not_taken_for_a_new_database(self):
        path = os.path.join(self.useFixture(base.fixtures.TempDir()).path, "empty.db")
        open(path, "w").close()
        exc = self.assertRaises(StoreError, Store, f"sqlite:///{path}")
        self.assertIn(path, str(exc))
        self.assertIn("empty", str(exc))
        self.assertEqual(0, os.path.getsize(path))
        store = Store(f"sqlite:///{path}", initialise=True)
        self.addCleanup(store.close)
        self.assertEqual([], store.get_compute_nodes())

    def test_processes_creating_one_database_at_once_all_open_it(self):
        path = os.path.join(self.useFixture(base.fixtures.TempDir()).path, "new", "n.db")
        opener = ("import sys; from nova_lite.db import Store; s = Store(sys.argv[1]); "
                  "s.heartbeat(sys.argv[2]); print(s.schema.revision)")
        procs = [subprocess.Popen([sys.executable, "-c", opener, f"sqlite:///{path}", f"h{n}"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(6)]
        outcomes = [p.communicate(timeout=120) for p in procs]
        self.assertEqual([0] * 6, [p.returncode for p in procs], outcomes)
        store = Store(f"sqlite:///{path}", readonly=True)
        self.addCleanup(store.close)
        self.assertEqual(6, len(store.list_services()))
        self.assertEqual([], [f for f in os.listdir(os.path.dirname(path)) if ".new" in f])

    def test_bad_node_names_fail_alone(self):
        a = self.tracker(nodes=("good",), driver_class=_Listing)
        a.driver.listing = ["good", "x" * 300, "nul\x00name", "good"]
        result = a.update_available_resource()
        self.assertEqual(("good",), result.audited)
        reasons = " | ".join(result.failed.values())
        self.assertIn("300 characters long", reasons)
        self.assertIn("NUL", reasons)
        for listing, word in ((None, "NoneType"), ("abc", "str"), ([123], "int")):
            a.driver.listing = listing
            result = a.update_available_resource()
            if listing == [123]:
                self.assertIn("123", " ".join(result.failed))
            else:
                self.assertIn(word, result.skipped)
            self.assertEqual(["good"], [n.nodename for n in a.store.get_compute_nodes()])


class TestRacesPostgreSQL(RaceMixin, base.PostgreSQLBackend, base.TestCase):

    def test_a_password_in_the_query_never_shows(self):
        url = "postgresql://nova@127.0.0.1:1/nova?password=s3cret&connect_timeout=2"
        exc = self.assertRaises(StoreError, Store, url)
        self.assertNotIn("s3cret", str(exc))
        self.assertIn("127.0.0.1:1", str(exc))


_HOLD_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""
