"""Fault injection: a driver that raises or hangs, a dropped database
connection, a process killed mid-claim, a read-only or full SQLite file.

Real SQLite files, a real PostgreSQL server, real processes and signals;
the only fakes are the fake hypervisor's own fault switches.

How the SQLite faults are made (we may run as root, and root ignores
permission bits):

- read-only: the database file is chmod 0400 (and its directory 0500) and
  given to ``nobody``; a child process drops to ``nobody`` after its
  imports, then opens the store.  If the tests are not root, the chmod
  alone does it.  A second test opens the file through SQLite's
  ``?mode=ro&uri=true`` URL in-process, which needs no privileges at all.
- disk full: ``PRAGMA max_page_count`` set on every connection of the
  store's engine (an SQLAlchemy connect listener added by the test), so
  the file cannot grow: SQLite answers exactly as on a full disk
  (SQLITE_FULL, "database or disk is full").  A second test bounds the
  file size of a child process with RLIMIT_FSIZE (SQLite then reports a
  write I/O error).
"""

import json
import os
import random
import resource
import select
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

import attrs
import fixtures
import psycopg
import sqlalchemy as sa

from nova_lite import conf, objects
from nova_lite.compute.driver_calls import DriverCallTimeout
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import StoreError
from nova_lite.virt import fake, loader
from tests.reliability import base

HOST = "fault-host"
TINY = objects.Flavor(name="tiny", vcpus=1, memory_mb=128, root_gb=1)


def _instance():
    return objects.Instance(uuid=str(uuid.uuid4()), flavor=TINY, project_id="faults")


class _Tracked:
    """A store, a fake multi-node driver and a tracker over them."""

    def make(self, url, nodes=("a", "b", "c"), driver_timeout=60.0, **sizes):
        self.settings = conf.Settings(host=HOST, state_path=self.useFixture(
            fixtures.TempDir()).path, reserved_host_memory_mb=0,
            driver_timeout=driver_timeout)
        self.store = Store(url)
        self.addCleanup(self.store.close)
        self.driver = loader.load_driver("fake.multinode", settings=self.settings,
                                         nodes=list(nodes), **sizes)
        self.driver.init_host(HOST)
        self.rt = ResourceTracker(HOST, self.driver, store=self.store, settings=self.settings)
        return self.rt


# -- a driver call that raises or hangs on one node -----------------------------------

class TestDriverFaults(base.SQLiteBackend, _Tracked, base.TestCase):

    def setUp(self):
        super().setUp()
        self.make(self.database_url(), driver_timeout=0.5)
        self.rt.update_available_resource()
        self.before = {n.nodename: n for n in self.store.get_compute_nodes(HOST)}
        # Every node reports new sizes: only an audited node records them.
        for name in ("a", "b", "c"):
            self.driver.set_node_size(name, vcpus=500)

    def _check_one_node_failed(self, result, reason_words):
        self.assertEqual(("a", "c"), result.audited)
        self.assertEqual(["b"], list(result.failed))
        for word in reason_words:
            self.assertIn(word, result.failed["b"])
        nodes = {n.nodename: n for n in self.store.get_compute_nodes(HOST)}
        for name in ("a", "c"):   # audited: new sizes recorded, no error
            self.assertEqual(500, nodes[name].inventory("VCPU").total)
            self.assertIsNone(nodes[name].last_error)
        # The failing node keeps its last good inventory and is marked with the reason.
        self.assertEqual(self.before["b"].inventories, nodes["b"].inventories)
        self.assertEqual(result.failed["b"], nodes["b"].last_error)
        self.assertEqual(result.failed["b"], self.rt.get_node("b").last_error)
        # Once the fault is gone, the next audit records it and clears the mark.
        self.driver.clear_faults()
        self.assertEqual(("a", "b", "c"), self.rt.update_available_resource().audited)
        self.assertIsNone(self.store.get_compute_node(HOST, "b").last_error)

    def test_driver_raises_on_one_node(self):
        self.driver.inject_fault("b", exception=RuntimeError("IPMI says no"))
        result = self.rt.update_available_resource()
        self._check_one_node_failed(result, ["RuntimeError", "IPMI says no"])

    def test_driver_hangs_on_one_node(self):
        self.driver.inject_fault("b", hang_seconds=5)
        started = time.monotonic()
        result = self.rt.update_available_resource()
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, 3.0, "the audit waited for the hung node")
        self._check_one_node_failed(
            result, [DriverCallTimeout.__name__, "'b'", "did not return within 0.5 s"])

    def test_every_node_hangs(self):
        for name in ("a", "b", "c"):
            self.driver.inject_fault(name, hang_seconds=10)
        started = time.monotonic()
        result = self.rt.update_available_resource()
        self.assertLess(time.monotonic() - started, 6)
        self.assertEqual((), result.audited)
        self.assertEqual(["a", "b", "c"], sorted(result.failed))

    def test_node_list_hangs(self):
        # A driver whose node listing hangs: the audit gives up after the
        # timeout, naming the call; the service loop survives it.
        hanging = _HangingNodeList(settings=self.settings, nodes=["a", "b", "c"])
        hanging.init_host(HOST)
        service = ComputeService(HOST, hanging, store=self.store, settings=self.settings)
        started = time.monotonic()
        exc = self.assertRaises(DriverCallTimeout, service.run_once)
        self.assertLess(time.monotonic() - started, 3)
        self.assertIn("get_available_nodes", str(exc))
        self.assertEqual(1, service.run(max_passes=1, handle_signals=False))
        self.assertIn("Compute service pass of host fault-host failed", self.logs.output)
        self.assertEqual(self.before, {n.nodename: n for n in
                                       self.store.get_compute_nodes(HOST)})

    def test_failing_node_is_marked_after_a_restart(self):
        # A new process (a new tracker) whose first audit fails on a node
        # it has never loaded still marks that node's record.
        self.driver.inject_fault("b", exception=OSError("BMC unreachable"))
        restarted = ResourceTracker(HOST, self.driver, store=self.store,
                                    settings=self.settings)
        result = restarted.update_available_resource()
        self.assertIn("BMC unreachable", result.failed["b"])
        self.assertEqual(result.failed["b"],
                         self.store.get_compute_node(HOST, "b").last_error)

    def test_failing_node_is_not_an_orphan(self):
        service = ComputeService(HOST, self.driver, store=self.store, settings=self.settings)
        self.driver.inject_fault("b", exception=RuntimeError("boom"))
        passed = service.run_once()
        self.assertEqual((), passed.orphans_deleted + passed.orphans_kept)
        self.assertIn("b", passed.failed)
        self.assertEqual(["a", "b", "c"],
                         [n.nodename for n in self.store.get_compute_nodes(HOST)])


class _HangingNodeList(fake.FakeMultiNodeDriver):
    """A fake whose get_available_nodes never answers in time."""

    def get_available_nodes(self, refresh=False):
        time.sleep(5)
        return super().get_available_nodes(refresh)


# -- the PostgreSQL connection dropped in the middle of a claim -------------------------

class TestConnectionDroppedMidClaim(base.PostgreSQLBackend, _Tracked, base.TestCase):
    """Another session holds a lock the claim needs, so the claim's
    transaction stops at a known statement; then that backend is killed
    with pg_terminate_backend.  No mock: the store's real code path."""

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.make(self.url)
        self.rt.update_available_resource()
        self.admin = psycopg.connect(_libpq(self.url))
        self.addCleanup(self.admin.close)
        # Polls pg_stat_activity outside the lock's transaction (a transaction
        # sees one snapshot of it).
        self.watcher = psycopg.connect(_libpq(self.url), autocommit=True)
        self.addCleanup(self.watcher.close)

    def _claim_while(self, lock_sql, claim, lost="terminating connection"):
        """Run ``claim`` in a thread while ``lock_sql`` holds; kill its backend.

        ``lost``: how the error says the connection went.  While statements
        sent together wait (psycopg's pipeline), psycopg reports the closed
        connection without the server's last words.
        """
        before = base.dump(self.store)
        usage_before = self.rt.get_node("a")
        outcome = {}

        def run():
            try:
                outcome["value"] = claim()
            except Exception as exc:   # noqa: BLE001 - checked below
                outcome["error"] = exc

        with self.admin.transaction():
            self.admin.execute(lock_sql)
            thread = threading.Thread(target=run)
            thread.start()
            victim = _wait_for_blocked_backend(self, self.watcher)
            self.watcher.execute("SELECT pg_terminate_backend(%s)", (victim,))
            thread.join(30)
        self.assertFalse(thread.is_alive())
        error = outcome.get("error")
        self.assertIsInstance(error, StoreError, f"claim gave {outcome}")
        self.assertIn("claim on node", str(error))
        self.assertIn(lost, str(error))
        self.assertIn("nothing was written", str(error))
        self.assertEqual(before, base.dump(self.store), "the failed claim left rows behind")
        self.assertEqual(usage_before, self.rt.get_node("a"))
        self.assertNoRecordProblems(self.store)

    def _retry_succeeds(self, inst):
        claim = self.rt.instance_claim(inst, "a")
        self.assertEqual("a", claim.instance.node)
        node = self.store.get_compute_node(HOST, "a")
        self.assertEqual(base.requested(TINY), dict(node.usage))
        self.assertEqual(node.generation, self.rt.get_node("a").generation)
        self.assertNoRecordProblems(self.store)

    def test_dropped_before_the_first_write(self):
        # The node row is locked: the claim's generation bump waits.
        inst = _instance()
        self._claim_while(
            "SELECT 1 FROM compute_nodes WHERE nodename = 'a' FOR UPDATE",
            lambda: self.rt.instance_claim(inst, "a"))
        self._retry_succeeds(inst)

    def test_dropped_after_some_writes(self):
        # Generation bumped and instance row written; the allocation insert waits.
        inst = _instance()
        self._claim_while("LOCK TABLE allocations IN SHARE MODE",
                          lambda: self.rt.instance_claim(inst, "a"))
        self._retry_succeeds(inst)

    def _stale_after_a_lost_race(self):
        """Another tracker claims on node a behind this one's back, this one's
        next claim loses its race (decided under the node's lock), and the
        other claims again: this tracker's record of node a is stale, with
        a usage row the database checks claims against (see
        ``tests.test_claim_checked``)."""
        other = ResourceTracker(HOST, self.driver, store=self.store, settings=self.settings)
        other.instance_claim(_instance(), "a")
        self.rt.instance_claim(_instance(), "a")
        self.assertEqual(self.store.get_compute_node(HOST, "a").generation,
                         self.rt.get_node("a").generation)
        other.instance_claim(_instance(), "a")

    def test_dropped_while_the_bump_and_its_reread_wait(self):
        # Two instances at once: the bump and the node's re-read are sent
        # together (psycopg's pipeline) and wait on the node row.
        self._stale_after_a_lost_race()
        inst = _instance()
        self._claim_while(
            "SELECT 1 FROM compute_nodes WHERE nodename = 'a' FOR UPDATE",
            lambda: self.rt.instance_claims([inst, _instance()], "a"),
            lost="server closed the connection unexpectedly")
        self._retry_succeeds_with(inst, 4)

    def test_dropped_while_the_locked_claim_writes(self):
        self._stale_after_a_lost_race()
        inst = _instance()
        self._claim_while("LOCK TABLE allocations IN SHARE MODE",
                          lambda: self.rt.instance_claims([inst, _instance()], "a"))
        self._retry_succeeds_with(inst, 4)

    def test_dropped_while_the_database_checks_a_stale_claim(self):
        # One instance on a stale record: the one statement that bumps, checks
        # the usage row and writes waits to insert the allocation.
        self._stale_after_a_lost_race()
        inst = _instance()
        self._claim_while("LOCK TABLE allocations IN SHARE MODE",
                          lambda: self.rt.instance_claim(inst, "a"))
        self._retry_succeeds_with(inst, 4)

    def _retry_succeeds_with(self, inst, instances):
        self.rt.instance_claim(inst, "a")
        node = self.store.get_compute_node(HOST, "a")
        self.assertEqual(instances, node.used("VCPU"))
        self.assertEqual(node.generation, self.rt.get_node("a").generation)
        self.assertNoRecordProblems(self.store)

    def test_dropped_in_a_resize_claim(self):
        first = self.rt.instance_claim(_instance(), "a").instance
        bigger = attrs.evolve(TINY, name="tiny2", vcpus=2)
        self._claim_while("LOCK TABLE migrations IN SHARE MODE",
                          lambda: self.rt.resize_claim(first, bigger, "a"))
        self.rt.resize_claim(first, bigger, "a")
        self.assertEqual(1 + 2, self.store.get_compute_node(HOST, "a").used("VCPU"))
        self.assertNoRecordProblems(self.store)


def _wait_for_blocked_backend(test, watcher, timeout=30):
    """The pid of the backend waiting for a lock in this database."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = watcher.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'").fetchone()
        if row:
            return row[0]
        time.sleep(0.01)
    test.fail("nothing ever blocked on the lock")


def _libpq(url):
    """A SQLAlchemy URL as a libpq connection string."""
    return sa.engine.make_url(url).set(drivername="postgresql").render_as_string(
        hide_password=False)


# -- a process killed with SIGKILL in the middle of claims --------------------------------

class _SigkillTests(_Tracked):
    rounds = 6

    def _child(self, url, nodes, busy_timeout=None):
        env = None if busy_timeout is None else \
            dict(os.environ, NOVA_LITE_CHILD_BUSY_TIMEOUT=str(busy_timeout))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.children", "claim-loop", url, HOST,
             *nodes], cwd=base.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        self.addCleanup(_reap, proc)
        return proc

    def _check_after_kill(self):
        # No partial rows: every allocation has its consumer row and vice versa.
        self.assertNoRecordProblems(self.store)
        allocations = self.store.list_allocations()
        # The audit of the restarted service reconciles: nothing to repair.
        service = ComputeService(HOST, self.driver, store=self.store, settings=self.settings)
        service.run_once()
        self.assertEqual(allocations, self.store.list_allocations())
        self.assertNoRecordProblems(self.store)
        for node in self.store.get_compute_nodes(HOST):
            for rc, inv in node.inventories.items():
                self.assertLessEqual(node.used(rc), inv.capacity)

    def test_killed_at_random_points(self):
        url = self.database_url()
        self.make(url, nodes=("a", "b"), vcpus=64, memory_mb=16384, local_gb=200)
        self.rt.update_available_resource()
        rng = random.Random()
        for _ in range(self.rounds):
            proc = self._child(url, ["a", "b"])
            readable, _, _ = select.select([proc.stdout], [], [], 60)
            self.assertTrue(readable, "the child never made its first change")
            self.assertEqual("ready", proc.stdout.readline().strip(),
                             proc.stderr.read() if proc.poll() is not None else "")
            time.sleep(rng.uniform(0.01, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            # Still running when killed: a child that died of an error of its
            # own would make this a test of nothing.
            self.assertEqual(-signal.SIGKILL, proc.returncode, proc.stderr.read())
            self._check_after_kill()
        self.assertTrue(self.store.list_allocations(), "the children never claimed")


class TestSigkillSQLite(base.SQLiteBackend, _SigkillTests, base.TestCase):

    def _check_after_kill(self):
        super()._check_after_kill()
        path = sa.engine.make_url(self.store.url).database
        with sqlite3.connect(path) as conn:
            self.assertEqual([("ok",)], conn.execute("PRAGMA integrity_check").fetchall())


class TestSigkillPostgreSQL(base.PostgreSQLBackend, _SigkillTests, base.TestCase):

    def _check_after_kill(self):
        # The killed child's backend may still be finishing its last
        # transaction on the server (commit or rollback): wait until no other
        # session of this database is busy before reading the records.
        deadline = time.monotonic() + 30
        while self.store.db.read("busy sessions", lambda conn: conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state <> 'idle'").scalar()):
            self.assertLess(time.monotonic(), deadline, "the killed child's session lingers")
            time.sleep(0.02)   # poll interval; the condition decides
        super()._check_after_kill()

    def test_killed_inside_the_claim_statement(self):
        """Deterministic: the child is killed while its claim's one statement
        (autocommit) has locked the node and waits to insert the allocation.
        Its backend notices the dead client while the statement still waits
        (``client_connection_check_interval``) and ends it: nothing written."""
        url = self.database_url()
        self.make(url, nodes=("a",), vcpus=64, memory_mb=16384, local_gb=200)
        self.rt.update_available_resource()
        admin = psycopg.connect(_libpq(url))
        self.addCleanup(admin.close)
        watcher = psycopg.connect(_libpq(url), autocommit=True)
        self.addCleanup(watcher.close)
        with admin.transaction():
            admin.execute("LOCK TABLE allocations IN SHARE MODE")
            # The child's lock waits are bounded by an hour: only the check
            # can end this one.
            proc = self._child(url, ["a"], busy_timeout=3600)
            victim = _wait_for_blocked_backend(self, watcher)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            # The lock is held until the backend is gone: without the check,
            # the statement would wait for it and then commit the claim.
            deadline = time.monotonic() + 30
            while watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s",
                                  (victim,)).fetchone():
                self.assertLess(time.monotonic(), deadline, "the backend outlived its client")
                time.sleep(0.02)   # poll interval; the condition decides
        self.assertEqual([], self.store.list_instances(live_only=False))
        self.assertEqual([], self.store.list_allocations())
        self.assertEqual(0, self.store.get_compute_node(HOST, "a").generation -
                         self.rt.get_node("a").generation)
        self._check_after_kill()


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


# -- a read-only SQLite file --------------------------------------------------------------

NOBODY = (65534, 65534)


class TestReadOnlySQLite(_Tracked, base.TestCase):

    def setUp(self):
        super().setUp()
        parent = self.useFixture(fixtures.TempDir()).path
        os.chmod(parent, 0o755)   # the child may run as nobody
        self.dir = os.path.join(parent, "state")
        self.path = os.path.join(self.dir, "nova-lite.db")
        self.url = "sqlite:///" + self.path
        self.make(self.url, nodes=("a",))
        self.rt.update_available_resource()
        self.rt.instance_claim(_instance(), "a")
        self.before = base.dump(self.store)
        self.store.close()   # checkpoint: only the database file remains

    def _probe(self, dir_mode):
        """Run the probe child with the file 0400 and its directory ``dir_mode``."""
        as_user = []
        if os.geteuid() == 0:
            for p in [self.dir] + [os.path.join(self.dir, f) for f in os.listdir(self.dir)]:
                os.chown(p, *NOBODY)
            as_user = ["--as-user", "%d:%d" % NOBODY]
        os.chmod(self.path, 0o400)
        os.chmod(self.dir, dir_mode)
        self.addCleanup(os.chmod, self.dir, 0o700)
        out = subprocess.run(
            [sys.executable, "-m", "tests.reliability.children", "probe", self.url, HOST,
             "a", *as_user], cwd=base.REPO_ROOT, capture_output=True, text=True, timeout=60)
        self.assertEqual(0, out.returncode, out.stderr)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        if as_user and result["uid"] != NOBODY[0]:
            self.skipTest("cannot drop privileges to test file permissions: "
                          f"{result.get('drop_failed')}")
        os.chmod(self.dir, 0o700)
        os.chmod(self.path, 0o600)
        return result

    def _check_unchanged(self):
        store = Store(self.url)
        self.addCleanup(store.close)
        self.assertEqual(self.before, base.dump(store))
        with sqlite3.connect(self.path) as conn:
            self.assertEqual([("ok",)], conn.execute("PRAGMA integrity_check").fetchall())

    def _assert_clear(self, outcome, words):
        self.assertFalse(outcome["ok"], outcome)
        self.assertTrue(outcome["nova_lite_error"], outcome)
        for word in words:
            self.assertIn(word, outcome["error"])

    def test_read_only_file(self):
        result = self._probe(dir_mode=0o700)
        self.assertTrue(result["open"]["ok"], result)
        self.assertTrue(result["read"]["ok"], result)   # reading still works
        self._assert_clear(result["claim"], ["claim on node", self.path,
                                             "readonly database", "nothing was written"])
        self._assert_clear(result["audit"], ["record audit", self.path, "readonly database"])
        self.assertEqual(result["read"]["value"], result["usage_after"]["value"])
        self._check_unchanged()

    def test_read_only_directory_and_file(self):
        result = self._probe(dir_mode=0o500)
        self._assert_clear(result["open"], ["Cannot open database", self.path, "readonly"])
        self._check_unchanged()

    def test_opened_read_only_by_url(self):
        self.make(f"sqlite:///file:{self.path}?mode=ro&uri=true", nodes=("a",), vcpus=7)
        self.assertEqual(self.before, base.dump(self.store))
        with self.assertRaisesRegex(StoreError, "claim on node .* readonly database"):
            self.rt.instance_claim(_instance(), "a")
        with self.assertRaisesRegex(StoreError, "record audit .* readonly database"):
            self.rt.update_available_resource()
        self.store.close()
        self._check_unchanged()
        self.assertFalse(os.path.exists(os.path.join(base.REPO_ROOT, "file:")))


# -- a full disk --------------------------------------------------------------------------

class TestDiskFullSQLite(base.SQLiteBackend, _Tracked, base.TestCase):

    def test_database_cannot_grow(self):
        url = self.database_url()
        self.make(url, nodes=("a",))
        self.rt.update_available_resource()
        for _ in range(3):
            self.rt.instance_claim(_instance(), "a")
        path = sa.engine.make_url(url).database
        with sqlite3.connect(path) as conn:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]

        @sa.event.listens_for(self.store.db.engine, "connect")
        def _cap(dbapi_conn, record):
            dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")
        self.store.db.engine.dispose()   # every new connection gets the cap

        error = None
        for _ in range(500):
            before, view = base.dump(self.store), self.rt.get_node("a")
            try:
                self.rt.instance_claim(
                    attrs.evolve(_instance(), display_name="x" * 4000), "a")
            except StoreError as exc:
                error = exc
                break
        self.assertIsNotNone(error, "the capped database never filled up")
        self.assertIn("claim on node", str(error))
        self.assertIn(path, str(error))
        self.assertIn("database or disk is full", str(error))
        self.assertEqual(before, base.dump(self.store))
        self.assertEqual(view, self.rt.get_node("a"))
        self.assertNoRecordProblems(self.store)
        self.store.close()
        with sqlite3.connect(path) as conn:
            self.assertEqual([("ok",)], conn.execute("PRAGMA integrity_check").fetchall())
        # Room again (a new store without the cap): previous data intact, claims work.
        store = Store(url)
        self.addCleanup(store.close)
        self.assertEqual(before, base.dump(store))
        rt = ResourceTracker(HOST, self.driver, store=store, settings=self.settings)
        rt.instance_claim(_instance(), "a")
        self.assertNoRecordProblems(store)

    def test_file_size_limit(self):
        url = self.database_url()
        self.make(url, nodes=("a",))
        self.rt.update_available_resource()
        self.rt.instance_claim(_instance(), "a")
        before = base.dump(self.store)
        self.store.close()
        path = sa.engine.make_url(url).database
        limit = os.path.getsize(path) + 64 * 1024

        def cap():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        out = subprocess.run(
            [sys.executable, "-m", "tests.reliability.children", "fill", url, HOST, "a"],
            cwd=base.REPO_ROOT, capture_output=True, text=True, timeout=120, preexec_fn=cap)
        self.assertEqual(0, out.returncode, out.stderr)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        failure = result["failure"]
        self.assertTrue(failure["nova_lite_error"], failure)
        self.assertIn("claim on node", failure["error"])
        self.assertIn(path, failure["error"])
        self.assertIn("nothing was written", failure["error"])
        with sqlite3.connect(path) as conn:
            self.assertEqual([("ok",)], conn.execute("PRAGMA integrity_check").fetchall())
        store = Store(url)
        self.addCleanup(store.close)
        # What the child admitted is there, whole; what failed left nothing.
        node = store.get_compute_node(HOST, "a")
        self.assertEqual(result["usage"], dict(node.usage))
        self.assertEqual(1 + result["admitted"], len(store.list_allocations()))
        self.assertNoRecordProblems(store)
        kept = base.dump(store)
        for table in ("services", "compute_nodes", "inventories"):
            self.assertEqual(len(before[table]), len(kept[table]))
