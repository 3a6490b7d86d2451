"""The fake hypervisor's guests outlive the process: one file per host beside the records.

Real SQLite files in temporary directories, a real PostgreSQL database, and
real processes: two driver objects (or processes) for one host see one set
of guests, a new driver object (a restarted service) sees what the old one
spawned, and hosts stay apart.
"""

import hashlib
import json
import logging
import os
import time
import uuid

import fixtures
import sqlalchemy as sa
import testtools

from nova_lite import conf, objects
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import InvalidInput
from nova_lite.testing import DriverConformanceTests
from nova_lite.testing.databases import PostgreSQLDatabase, SQLiteFile, use_postgresql
from nova_lite.virt import fake, fake_guests
from tests import processes
from tests.base import flavor, instance

#: How many guests each of the two processes spawns in the concurrency test.
SPAWNS_PER_PROCESS = 100


def _spawn_many(url, state_path, host, count, barrier, results):
    """Child process: a fake driver for ``host`` on ``url`` spawns ``count`` guests.

    Both children wait at ``barrier`` so that their spawns overlap; each puts
    the uuids it spawned (or the error) on ``results``.
    """
    try:
        store = Store(url)
        drv = fake.FakeDriver(settings=conf.Settings(state_path=state_path))
        drv.init_host(host)
        drv.attach_store(store)
        uuids = [str(uuid.uuid4()) for _ in range(count)]
        barrier.wait(timeout=120)
        for instance_uuid in uuids:
            drv.spawn(objects.Instance(uuid=instance_uuid, flavor=flavor(vcpus=1),
                                       project_id="demo", node=host))
        store.close()
        results.put(("ok", uuids))
    except BaseException as exc:   # noqa: BLE001 - reported to the parent
        results.put(("error", f"{type(exc).__name__}: {exc}"))


class FileStoreMixin:
    """Helpers: a SQLite file store, and fake drivers attached to it."""

    def setUp(self):
        super().setUp()
        self.state_path = self.useFixture(fixtures.TempDir()).path
        self.settings = conf.Settings(state_path=self.state_path)
        self.db = self.useFixture(SQLiteFile())
        self.store = self.open_store()

    def open_store(self, url=None):
        store = Store(url or self.db.url)
        self.addCleanup(store.close)
        return store

    def driver(self, host="h1", store=None, cls=fake.FakeDriver, **kw):
        drv = cls(settings=self.settings, **kw)
        drv.init_host(host)
        drv.attach_store(store or self.store)
        return drv


class TestWhereGuestsLive(FileStoreMixin, testtools.TestCase):

    def test_sqlite_file_keeps_them_beside_the_database(self):
        drv = self.driver("h1")
        expected = self.db.path + ".fake-guests/h1.json"
        self.assertEqual(expected, drv.guests_path)
        inst = instance(flavor(vcpus=2, memory_mb=256, root_gb=3, ephemeral_gb=1), node="h1")
        drv.spawn(inst)
        with open(expected) as f:
            doc = json.load(f)
        self.assertEqual({"format": 1, "host": "h1", "guests": {inst.uuid: {
            "node": "h1", "vcpus": 2, "memory_mb": 256, "disk_gb": 4}}}, doc)
        self.assertTrue(os.path.exists(expected + ".lock"))
        self.assertEqual([], os.listdir(self.state_path))

    def test_in_memory_store_keeps_nothing_on_disk(self):
        drv = self.driver("h1", store=self.open_store("sqlite://"))
        self.assertIsNone(drv.guests_path)
        inst = instance(node="h1")
        drv.spawn(inst)
        self.assertEqual([inst.uuid], drv.list_instances())
        self.assertEqual(1, drv.get_available_resource("h1").vcpus_used)
        self.assertEqual([], os.listdir(self.state_path))
        self.assertEqual([], [name for name in os.listdir(os.path.dirname(self.db.path))
                              if not name.startswith("nova-lite.db")])
        # another driver of the host sees nothing: memory is per object
        self.assertEqual([], self.driver("h1", store=self.open_store("sqlite://"))
                         .list_instances())

    def test_no_store_keeps_them_in_memory(self):
        drv = fake.FakeDriver(settings=self.settings)
        drv.init_host("h1")
        self.assertIsNone(drv.guests_path)
        drv.spawn(instance(node="h1"))
        self.assertEqual(1, len(drv.list_instances()))
        self.assertEqual([], os.listdir(self.state_path))

    def test_tracker_attaches_the_store(self):
        drv = fake.FakeDriver(settings=self.settings)
        drv.init_host("h1")
        ResourceTracker("h1", drv, store=self.store, settings=self.settings)
        self.assertEqual(self.db.path + ".fake-guests/h1.json", drv.guests_path)

    def test_guests_spawned_before_the_store_go_into_the_file(self):
        drv = fake.FakeDriver(settings=self.settings)
        drv.init_host("h1")
        early = instance(node="h1")
        drv.spawn(early)
        drv.attach_store(self.store)
        self.assertEqual([early.uuid], self.driver("h1").list_instances())

    def test_attach_before_init_host(self):
        drv = fake.FakeDriver(settings=self.settings)
        drv.attach_store(self.store)
        self.assertIsNone(drv.guests_path)
        drv.init_host("h1")
        self.assertEqual(self.db.path + ".fake-guests/h1.json", drv.guests_path)

    def test_an_in_memory_store_after_a_file_keeps_the_guests_seen(self):
        drv = self.driver("h1")
        inst = instance(node="h1")
        drv.spawn(inst)
        drv.attach_store(self.open_store("sqlite://"))
        self.assertIsNone(drv.guests_path)
        self.assertEqual([inst.uuid], drv.list_instances())
        drv.destroy(inst)   # in memory now: the file keeps it
        self.assertEqual([inst.uuid], self.driver("h1").list_instances())

    def test_host_names_that_would_leave_the_directory_are_refused(self):
        drv = self.driver("h1")
        inst = instance(node="h1")
        drv.spawn(inst)
        for bad in ("../h2", "a/b", "..", "."):
            exc = self.assertRaises(InvalidInput, drv.init_host, bad)
            self.assertIn(repr(bad), str(exc))
            self.assertIn("cannot name a guests file", str(exc))
        # nothing changed
        self.assertEqual("h1", drv.host)
        self.assertEqual([inst.uuid], drv.list_instances())
        self.assertEqual(["h1.json", "h1.json.lock"],
                         sorted(os.listdir(self.db.path + ".fake-guests")))
        # in memory first, then attached
        loose = fake.FakeDriver(settings=self.settings)
        loose.init_host("..")
        self.assertRaises(InvalidInput, loose.attach_store, self.store)
        self.assertIsNone(loose.guests_path)

    def test_url_without_password(self):
        self.assertEqual(
            "postgresql+psycopg://nova@db.example:5432/nova?sslmode=require",
            fake_guests.url_without_password(
                "postgresql://nova:s3cret@db.example:5432/nova?password=x&sslmode=require"))


class TestPostgreSQLGuests(testtools.TestCase):

    def setUp(self):
        super().setUp()
        use_postgresql(self)
        self.db = self.useFixture(PostgreSQLDatabase())
        self.state_path = self.useFixture(fixtures.TempDir()).path
        self.settings = conf.Settings(state_path=self.state_path)

    def _driver(self, host):
        store = Store(self.db.url)
        self.addCleanup(store.close)
        drv = fake.FakeDriver(settings=self.settings)
        drv.init_host(host)
        drv.attach_store(store)
        return drv

    def test_digest_directory_under_state_path(self):
        self.assertIsNone(sa.engine.make_url(self.db.url).password)   # trust auth
        url = "postgresql+psycopg://" + self.db.url.split("://", 1)[1]
        digest = hashlib.sha256(url.encode()).hexdigest()[:16]
        one, two = self._driver("h1"), self._driver("h1")
        self.assertEqual(os.path.join(self.state_path, "fake-guests", digest, "h1.json"),
                         one.guests_path)
        inst = instance(node="h1")
        one.spawn(inst)
        self.assertEqual([inst.uuid], two.list_instances())
        self.assertEqual([], self._driver("h2").list_instances())
        two.destroy(inst)
        self.assertEqual([], one.list_instances())

    def test_other_databases_get_other_directories(self):
        other = self.useFixture(PostgreSQLDatabase())
        store = Store(other.url)
        self.addCleanup(store.close)
        here = self._driver("h1")
        there = fake.FakeDriver(settings=self.settings)
        there.init_host("h1")
        there.attach_store(store)
        self.assertNotEqual(os.path.dirname(here.guests_path),
                            os.path.dirname(there.guests_path))
        here.spawn(instance(node="h1"))
        self.assertEqual([], there.list_instances())


class TestSharedGuests(FileStoreMixin, testtools.TestCase):

    def test_two_drivers_of_one_host_see_each_others_spawns_and_destroys(self):
        one, two = self.driver("h1"), self.driver("h1", store=self.open_store())
        a = instance(flavor(vcpus=2, memory_mb=1024, root_gb=10, ephemeral_gb=5), node="h1")
        b = instance(flavor(vcpus=3), node="h1")
        one.spawn(a)
        two.spawn(b)
        for drv in (one, two):
            self.assertEqual(sorted([a.uuid, b.uuid]), drv.list_instances())
            res = drv.get_available_resource("h1")
            self.assertEqual((5, 1024 + 512, 16, 600000 - 16),
                             (res.vcpus_used, res.memory_mb_used, res.local_gb_used,
                              res.disk_available_least))
        two.destroy(a)
        one.destroy(b)
        for drv in (one, two):
            self.assertEqual([], drv.list_instances())
            self.assertEqual(0, drv.get_available_resource("h1").vcpus_used)

    def test_a_restarted_service_sees_its_guests(self):
        before = self.driver("h1", cls=fake.FakeMultiNodeDriver, nodes=["n1", "n2"])
        on_n2 = instance(flavor(vcpus=4), node="n2")
        before.spawn(on_n2)
        before.spawn(instance(flavor(vcpus=1), node="n1"))
        del before
        # a new process: a new store object and a new driver, through the tracker
        store = self.open_store()
        after = fake.FakeMultiNodeDriver(settings=self.settings, nodes=["n1", "n2"])
        after.init_host("h1")
        rt = ResourceTracker("h1", after, store=store, settings=self.settings)
        self.assertEqual(2, len(after.list_instances()))
        self.assertEqual(4, after.get_available_resource("n2").vcpus_used)
        self.assertEqual(1, after.get_available_resource("n1").vcpus_used)
        self.assertEqual(("n1", "n2"), rt.update_available_resource().audited)

    def test_hosts_do_not_see_each_others_guests(self):
        h1, h2 = self.driver("h1"), self.driver("h2")
        g1, g2 = instance(node="h1"), instance(node="h2")
        h1.spawn(g1)
        h2.spawn(g2)
        self.assertEqual([g1.uuid], h1.list_instances())
        self.assertEqual([g2.uuid], h2.list_instances())
        h1.destroy(g2)   # not h1's: nothing happens
        self.assertEqual([g2.uuid], h2.list_instances())
        h1.destroy_all()
        self.assertEqual([], h1.list_instances())
        self.assertEqual([g2.uuid], h2.list_instances())

    def test_databases_do_not_share_guests(self):
        other = self.useFixture(SQLiteFile())
        here, there = self.driver("h1"), self.driver("h1", store=self.open_store(other.url))
        here.spawn(instance(node="h1"))
        self.assertEqual([], there.list_instances())

    def test_reads_and_destroys_make_nothing_on_disk(self):
        drv = self.driver("h1")
        self.assertEqual([], drv.list_instances())
        self.assertEqual(0, drv.get_available_resource("h1").vcpus_used)
        drv.destroy(instance(node="h1"))
        drv.destroy_all()
        self.assertFalse(os.path.exists(self.db.path + ".fake-guests"))
        # nor for a host without guests beside one that has some
        self.driver("h2").spawn(instance(node="h2"))
        self.assertEqual([], drv.list_instances())
        self.assertEqual(0, drv.get_available_resource("h1").vcpus_used)
        drv.destroy(instance(node="h1"))
        drv.destroy_all()
        self.assertEqual(["h2.json", "h2.json.lock"],
                         sorted(os.listdir(self.db.path + ".fake-guests")))

    def test_changes_by_another_driver_are_seen_at_once(self):
        """The cache of a parsed file never hides a change, even one of the same size
        within one tick of the clock."""
        reader, writer = self.driver("h1"), self.driver("h1", store=self.open_store())
        old = instance(node="h1")
        writer.spawn(old)
        self.assertEqual([old.uuid], reader.list_instances())   # parsed and cached
        for _ in range(20):
            new = instance(node="h1")
            writer.destroy(old)
            writer.spawn(new)   # the same size as before, at once
            self.assertEqual([new.uuid], reader.list_instances())
            old = new

    def test_every_write_moves_the_mtime_forward(self):
        """A write's mtime is above the one of the file it replaces, even when the
        clock is behind it (or too coarse to tell two writes apart), so the cache
        key always moves."""
        drv = self.driver("h1")
        drv.spawn(instance(node="h1"))
        ahead = time.time_ns() + 3600 * 10**9
        os.utime(drv.guests_path, ns=(ahead, ahead))
        drv.spawn(instance(node="h1"))
        self.assertGreater(os.stat(drv.guests_path).st_mtime_ns, ahead)
        self.assertEqual(2, len(self.driver("h1").list_instances()))

    def test_an_unchanged_file_is_parsed_once_for_many_reports(self):
        nodes = [f"n{i}" for i in range(50)]
        reader = self.driver("h1", cls=fake.FakeMultiNodeDriver, nodes=nodes)
        writer = self.driver("h1", cls=fake.FakeMultiNodeDriver, nodes=nodes,
                             store=self.open_store())
        for node in nodes:
            writer.spawn(instance(node=node))
        log = self.useFixture(fixtures.FakeLogger(name=fake_guests.__name__,
                                                  level=logging.DEBUG))
        for node in nodes:
            self.assertEqual(1, reader.get_available_resource(node).vcpus_used)
        self.assertEqual(1, log.output.count("Reading fake guests file"))
        writer.spawn(instance(node="n7"))
        self.assertEqual(2, reader.get_available_resource("n7").vcpus_used)
        self.assertEqual(2, log.output.count("Reading fake guests file"))
        # the writer knows what it wrote: it never reads its own file back
        writer.get_available_resource("n7")
        self.assertEqual(2, log.output.count("Reading fake guests file"))

    def test_two_processes_lose_no_spawn(self):
        outcomes = processes.run_together(
            self, _spawn_many, [(self.db.url, self.state_path, "h1", SPAWNS_PER_PROCESS)] * 2)
        spawned = []
        for kind, value in outcomes:
            self.assertEqual("ok", kind, value)
            spawned.extend(value)
        self.assertEqual(2 * SPAWNS_PER_PROCESS, len(set(spawned)))
        drv = self.driver("h1", store=self.open_store())
        lost = set(spawned) - set(drv.list_instances())
        self.assertEqual(set(), lost, f"{len(lost)} of {len(spawned)} spawns were lost")
        self.assertEqual(sorted(spawned), drv.list_instances())
        self.assertEqual(2 * SPAWNS_PER_PROCESS, drv.get_available_resource("h1").vcpus_used)


class TestCorruptGuestsFile(FileStoreMixin, testtools.TestCase):

    def _write(self, text):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as f:
            f.write(text)

    def setUp(self):
        super().setUp()
        self.drv = self.driver("h1")
        self.path = self.drv.guests_path

    def assertClearError(self, fn, *args, words="is corrupt"):
        exc = self.assertRaises(fake_guests.FakeGuestsError, fn, *args)
        self.assertIn(self.path, str(exc))
        self.assertIn(words, str(exc))
        return exc

    def test_not_json(self):
        self._write("{not json")
        self.assertClearError(self.drv.list_instances)
        self.assertClearError(self.drv.get_available_resource, "h1")
        self.assertClearError(self.drv.destroy_all)
        exc = self.assertClearError(self.drv.spawn, instance(node="h1"))
        self.assertIn("not JSON", str(exc))
        with open(self.path) as f:
            self.assertEqual("{not json", f.read())   # left as it was

    def test_empty_file(self):
        self._write("")
        self.assertClearError(self.drv.list_instances)

    def test_bad_entries(self):
        good = {"node": "h1", "vcpus": 1, "memory_mb": 512, "disk_gb": 1}
        for doc, words in [
                ([], "expected an object"),
                ({"format": 2, "host": "h1", "guests": {}}, '"format": 1'),
                ({"format": 1, "host": "h2", "guests": {}}, "host 'h2', not 'h1'"),
                ({"format": 1, "host": "h1", "guests": {"u1": dict(good, vcpus=-1)}},
                 "guest 'u1': 'vcpus' must be an integer >= 0"),
                ({"format": 1, "host": "h1", "guests": {"u1": dict(good, node=3)}},
                 "guest 'u1': \"node\" must be a string"),
                ({"format": 1, "host": "h1", "guests": {"u1": "x"}},
                 "guest 'u1': expected an object")]:
            self._write(json.dumps(doc))
            self.assertClearError(self.drv.list_instances, words=words)

    def test_the_audit_names_the_file_for_the_node(self):
        rt = ResourceTracker("h1", self.drv, store=self.store, settings=self.settings)
        self._write("garbage")
        result = rt.update_available_resource()
        self.assertEqual((), result.audited)
        self.assertIn("FakeGuestsError", result.failed["h1"])
        self.assertIn(self.path, result.failed["h1"])

    def test_a_repaired_file_is_read_again(self):
        self._write("garbage")
        self.assertClearError(self.drv.list_instances)
        os.unlink(self.path)
        self.assertEqual([], self.drv.list_instances())


class TestFakeOnFileConformance(DriverConformanceTests, testtools.TestCase):
    """The fake conforms with its guests in a file (attached before init_host)."""

    driver_name = "fake.multinode"

    def make_driver(self):
        drv = super().make_driver()
        store = Store(self.useFixture(SQLiteFile()).url)
        self.addCleanup(store.close)
        drv.attach_store(store)
        return drv

    def test_lifecycle_uses_the_file(self):
        self.assertTrue(self.driver.guests_path.endswith(".fake-guests/conformance-host.json"))
        self.test_lifecycle()
