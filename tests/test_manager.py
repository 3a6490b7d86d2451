"""ComputeService: heartbeat, audits, orphan node records, the run loop."""

import logging
import os
import signal
import threading
import time

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite.compute.manager import ComputeService
from nova_lite.db import COMPUTE_BINARY, Store, models
from nova_lite.exception import DriverNotReady
from nova_lite.virt import fake, loader
from tests import base
from tests.base import flavor, instance


class UndecidedMultiNodeDriver(fake.FakeMultiNodeDriver):
    """A multi-node fake that cannot tell whether a vanished node is gone.

    ``deleted`` names the nodes it does confirm as deleted; ``broken``
    makes is_node_deleted raise.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.deleted = set()
        self.broken = False

    def is_node_deleted(self, nodename):
        if self.broken:
            raise RuntimeError("hypervisor API unreachable")
        return nodename in self.deleted


class FlakyNodesDriver(fake.FakeDriver):
    """Fails get_available_nodes while ``failing`` is set."""

    failing = False

    def get_available_nodes(self, refresh=False):
        if self.failing:
            raise RuntimeError("node list unavailable")
        return super().get_available_nodes(refresh)


class NotReadyDriver(fake.FakeMultiNodeDriver):
    """A multi-node fake whose back end goes away while ``down`` is set.

    Records the store the tracker attached.
    """

    down = False
    attached = None

    def attach_store(self, store):
        self.attached = store

    def get_available_nodes(self, refresh=False):
        if self.down:
            raise DriverNotReady("node API unreachable")
        return super().get_available_nodes(refresh)

    def is_node_deleted(self, nodename):
        return True   # would delete every orphan, if asked


class ServiceTestCase(base.TestCase):

    def service(self, driver=None, store=None, **settings_kw):
        settings_kw.setdefault("reserved_host_memory_mb", 0)
        settings = self.settings(**settings_kw)
        driver = driver or loader.load_driver("fake.multinode", settings=settings,
                                              nodes=["a", "b", "c"])
        store = store if store is not None else self.sqlite_store()
        return ComputeService(self.host, driver, store=store, settings=settings)

    def service_rows(self, store):
        with store.db.engine.connect() as conn:
            return conn.execute(sa.select(models.services)).all()


class TestRunOnce(ServiceTestCase):

    def test_init_host_on_construction(self):
        svc = self.service()
        self.assertEqual(self.host, svc.driver.host)
        self.assertEqual(["a", "b", "c"], svc.driver.get_available_nodes())

    def test_heartbeat_one_row_per_host_and_binary(self):
        svc = self.service()
        svc.run_once()
        first, = self.service_rows(svc.store)
        self.assertEqual((self.host, COMPUTE_BINARY, 1),
                         (first.host, first.binary, first.report_count))
        time.sleep(0.01)
        svc.run_once()
        svc.run_once()
        row, = self.service_rows(svc.store)
        self.assertEqual(3, row.report_count)
        self.assertGreater(row.updated_at, first.updated_at)
        self.assertEqual([self.host], svc.live_services())

    def test_two_services_share_a_store(self):
        store = self.sqlite_store()
        svc1 = self.service(store=store)
        self.host = "host2"
        svc2 = self.service(store=store)
        svc1.run_once()
        svc2.run_once()
        svc1.run_once()
        self.assertEqual(["host1", "host2"], svc1.live_services())
        self.assertEqual(2, len(self.service_rows(store)))
        self.assertEqual(6, len(store.get_compute_nodes()))

    def test_pass_audits_every_node(self):
        svc = self.service()
        result = svc.run_once()
        self.assertEqual(("a", "b", "c"), result.audited)
        self.assertEqual({}, dict(result.failed))
        self.assertEqual(["a", "b", "c"],
                         [n.nodename for n in svc.store.get_compute_nodes(self.host)])

    def test_failing_node_is_reported_not_orphaned(self):
        svc = self.service()
        svc.run_once()
        svc.driver.inject_fault("b", exception=RuntimeError("flaky"))
        result = svc.run_once()
        self.assertEqual(("a", "c"), result.audited)
        self.assertIn("flaky", result.failed["b"])
        self.assertEqual((), result.orphans_deleted + result.orphans_kept)
        self.assertIn("flaky", svc.store.get_compute_node(self.host, "b").last_error)


class TestRecordedFindings(ServiceTestCase):

    def test_each_pass_records_the_hosts_findings_and_a_steady_one_writes_nothing(self):
        svc = self.service()
        self.assertEqual((), svc.run_once().findings)
        (first,) = svc.store.recorded_findings()
        self.assertEqual((self.host, (), self.host),
                         (first.host, first.findings, first.recorded_by))
        svc.run_once()
        self.assertEqual([first], svc.store.recorded_findings())   # not even its time moved
        # A leak (an API deleted the record; nobody freed the claim) is recorded.
        inst = svc.tracker.instance_claim(instance(flavor()), "a").instance
        base.write_instance_row(svc.store, attrs.evolve(inst, vm_state="deleted"))
        found = svc.record_findings()
        self.assertEqual([("stale_allocation", inst.uuid)],
                         [(f.kind, f.subject) for f in found])
        (now,) = svc.store.recorded_findings()
        self.assertEqual(found, now.findings)


class TestPeersRecordForDownHosts(ServiceTestCase):

    def test_one_peer_searches_a_down_host_once_an_interval(self):
        store = self.sqlite_store()
        down = self.service(store=store)
        down.run_once()   # it records its own findings, then goes down
        peer = ComputeService("peer", loader.load_driver("fake", settings=self.settings()),
                              store=store, settings=self.settings())
        peer.run_once()
        sdt, interval = peer.settings.service_down_time, peer.settings.update_resources_interval
        self.assertNotIn(self.host, store.hosts_needing_findings("other", sdt, interval))

        def due(at):   # is the first host's search due for another peer at ``at``?
            return self.host in store.hosts_needing_findings("other", sdt, interval, at)
        later = time.time() + sdt + 1   # the first host has not beaten since: down
        self.assertTrue(due(later))     # its last record is its own
        # A peer records for it: the others skip it for an interval, then it is due again.
        store.record_findings(self.host, (), recorded_by="peer", recorded_at=later)
        self.assertFalse(due(later + 1))
        self.assertTrue(due(later + interval))
        # Unchanged findings are written again once the interval is over.
        self.assertFalse(store.record_findings(self.host, (), recorded_by="peer",
                                               recorded_at=later + 1, refresh_after=interval))
        self.assertTrue(store.record_findings(self.host, (), recorded_by="peer",
                                              recorded_at=later + interval,
                                              refresh_after=interval))


class TestDriverNotReady(ServiceTestCase):

    def driver(self):
        settings = self.settings(reserved_host_memory_mb=0)
        return NotReadyDriver(settings=settings, nodes=["a", "b"])

    def test_the_tracker_attaches_its_store_to_the_driver(self):
        svc = self.service(driver=self.driver())
        self.assertIs(svc.store, svc.driver.attached)

    def test_pass_is_skipped_and_records_are_kept(self):
        svc = self.service(driver=self.driver())
        svc.run_once()
        before = svc.store.get_compute_nodes(self.host)
        svc.driver.down = True
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        result = svc.run_once()
        self.assertEqual("node API unreachable", result.skipped)
        self.assertEqual(((), (), ()), (result.audited, result.orphans_deleted,
                                        result.orphans_kept))
        self.assertEqual(before, svc.store.get_compute_nodes(self.host))
        warnings = [line for line in log.output.splitlines() if "not ready" in line]
        self.assertEqual(1, len(warnings), log.output)
        self.assertIn("node API unreachable", warnings[0])
        self.assertNotIn("orphan", log.output.lower())

    def test_next_pass_after_recovery_audits_again(self):
        svc = self.service(driver=self.driver())
        svc.run_once()
        svc.driver.down = True
        svc.run_once()
        svc.driver.down = False
        result = svc.run_once()
        self.assertIsNone(result.skipped)
        self.assertEqual(("a", "b"), result.audited)

    def test_the_loop_goes_on_without_an_error(self):
        svc = self.service(driver=self.driver(), update_resources_interval=0.01)
        svc.driver.down = True
        log = self.useFixture(fixtures.FakeLogger(level=logging.ERROR))
        self.assertEqual(2, svc.run(max_passes=2))
        self.assertEqual("", log.output)


class TestOrphans(ServiceTestCase):

    def undecided(self):
        settings = self.settings(reserved_host_memory_mb=0)
        return UndecidedMultiNodeDriver(settings=settings, nodes=["a", "b", "c"])

    def test_orphan_deleted_when_the_driver_says_it_is_gone(self):
        svc = self.service()   # the fake says a vanished node is deleted
        svc.run_once()
        uuid_c = svc.store.get_compute_node(self.host, "c").uuid
        svc.tracker.instance_claim(instance(flavor()), "c")
        svc.driver.set_nodes(["a", "b"])
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        result = svc.run_once()
        self.assertEqual(("c",), result.orphans_deleted)
        self.assertEqual((), result.orphans_kept)
        self.assertEqual(["a", "b"],
                         [n.nodename for n in svc.store.get_compute_nodes(self.host)])
        self.assertEqual([], svc.store.list_allocations(node_uuid=uuid_c))
        self.assertIn("c", log.output)
        self.assertEqual(["a", "b"], svc.tracker.nodenames())

    def test_orphan_kept_with_a_warning_when_the_driver_is_not_sure(self):
        svc = self.service(driver=self.undecided())
        svc.run_once()
        before = {n.nodename: n.uuid for n in svc.store.get_compute_nodes(self.host)}
        svc.driver.set_nodes(["a", "b"])
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        result = svc.run_once()
        self.assertEqual((), result.orphans_deleted)
        self.assertEqual(("c",), result.orphans_kept)
        self.assertEqual(before, {n.nodename: n.uuid
                                  for n in svc.store.get_compute_nodes(self.host)})
        warnings = [line for line in log.output.splitlines() if "c" in line and
                    "rphan" in line]
        self.assertTrue(warnings, log.output)
        # the WARNING level, precisely
        records = self.useFixture(fixtures.FakeLogger(level=logging.WARNING,
                                                      format="%(levelname)s %(message)s"))
        svc.run_once()
        self.assertIn("WARNING", records.output)
        self.assertIn("Orphan", records.output)

    def test_orphan_kept_when_the_check_fails(self):
        svc = self.service(driver=self.undecided())
        svc.run_once()
        svc.driver.set_nodes(["a"])
        svc.driver.deleted = {"b", "c"}
        svc.driver.broken = True
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        result = svc.run_once()
        self.assertEqual(("b", "c"), tuple(sorted(result.orphans_kept)))
        self.assertIn("hypervisor API unreachable", log.output)
        self.assertEqual(3, len(svc.store.get_compute_nodes(self.host)))

    def test_deleted_only_once_the_driver_confirms(self):
        svc = self.service(driver=self.undecided())
        svc.run_once()
        svc.driver.set_nodes(["a"])
        self.assertEqual(("b", "c"), tuple(sorted(svc.run_once().orphans_kept)))
        svc.driver.deleted = {"c"}
        result = svc.run_once()
        self.assertEqual(("c",), result.orphans_deleted)
        self.assertEqual(("b",), result.orphans_kept)
        self.assertEqual(["a", "b"],
                         [n.nodename for n in svc.store.get_compute_nodes(self.host)])

    def test_node_that_comes_back_keeps_its_uuid(self):
        svc = self.service(driver=self.undecided())
        svc.run_once()
        claim = svc.tracker.instance_claim(instance(flavor(vcpus=2)), "b")
        uuid_b = svc.store.get_compute_node(self.host, "b").uuid
        svc.driver.set_nodes(["a", "c"])
        svc.run_once()
        svc.driver.set_nodes(["a", "b", "c"])
        result = svc.run_once()
        self.assertIn("b", result.audited)
        node = svc.store.get_compute_node(self.host, "b")
        self.assertEqual(uuid_b, node.uuid)
        self.assertEqual(uuid_b, svc.tracker.get_node("b").uuid)
        self.assertEqual(claim.claimed, dict(node.usage))

    def test_deleted_node_that_comes_back_keeps_its_uuid(self):
        svc = self.service()   # the fake says a vanished node is deleted
        svc.run_once()
        uuid_c = svc.store.get_compute_node(self.host, "c").uuid
        svc.driver.set_nodes(["a", "b"])
        self.assertEqual(("c",), svc.run_once().orphans_deleted)
        svc.driver.set_nodes(["a", "b", "c"])
        self.assertIn("c", svc.run_once().audited)
        self.assertEqual(uuid_c, svc.store.get_compute_node(self.host, "c").uuid)
        self.assertEqual(uuid_c, svc.tracker.get_node("c").uuid)

    def test_orphans_of_other_hosts_are_not_touched(self):
        store = self.sqlite_store()
        svc1 = self.service(store=store)
        self.host = "host2"
        svc2 = self.service(store=store)
        svc1.run_once()
        svc2.run_once()
        svc2.driver.set_nodes([])
        svc1.run_once()
        self.assertEqual(3, len(store.get_compute_nodes("host2")))
        self.assertEqual(("a", "b", "c"), tuple(sorted(svc2.run_once().orphans_deleted)))
        self.assertEqual(3, len(store.get_compute_nodes("host1")))


class TestRunLoop(ServiceTestCase):

    def start(self, svc, passes):
        thread = threading.Thread(target=lambda: passes.append(svc.run()), daemon=True)
        thread.start()

        def stop():
            svc.stop()
            thread.join(5)
        self.addCleanup(stop)
        return thread

    def test_run_stops_on_stop(self):
        svc = self.service(update_resources_interval=0.05)
        passes = []
        thread = self.start(svc, passes)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = self.service_rows(svc.store)
            if rows and rows[0].report_count >= 3:
                break
            time.sleep(0.02)
        svc.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive())
        self.assertGreaterEqual(passes[0], 3)
        self.assertEqual(passes[0], self.service_rows(svc.store)[0].report_count)

    def test_first_pass_is_immediate(self):
        svc = self.service(update_resources_interval=3600)
        started = time.monotonic()
        thread = self.start(svc, [])
        deadline = started + 10
        while len(svc.store.get_compute_nodes(self.host)) < 3 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual(3, len(svc.store.get_compute_nodes(self.host)))
        self.assertEqual(1, self.service_rows(svc.store)[0].report_count)
        svc.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive())

    def test_heartbeat_every_report_interval_between_passes(self):
        # A pass every hour, a heartbeat every 50 ms: the service must stay
        # up for far longer than service_down_time.
        svc = self.service(update_resources_interval=3600, report_interval=0.05,
                           service_down_time=0.3)
        passes = []
        thread = self.start(svc, passes)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = self.service_rows(svc.store)
            if rows and rows[0].report_count >= 12:   # > 0.5 s of beats
                break
            time.sleep(0.02)
        self.assertEqual([self.host], svc.live_services())
        svc.stop()
        thread.join(5)
        self.assertEqual([1], passes)
        self.assertGreaterEqual(self.service_rows(svc.store)[0].report_count, 12)

    def test_a_beat_is_due_report_interval_after_the_last_one_of_a_pass_or_not(self):
        svc = self.service(update_resources_interval=3600, report_interval=10)
        now = [1000.0]
        svc.clock = lambda: now[0]
        svc.run_once()
        self.assertFalse(svc.beat())             # the pass just beat
        now[0] += 9.99
        self.assertFalse(svc.beat())
        self.assertEqual(1, self.service_rows(svc.store)[0].report_count)
        now[0] += 0.01
        self.assertTrue(svc.beat())
        self.assertFalse(svc.beat())
        svc.run_once()                           # a pass beats whenever it runs
        self.assertEqual(3, self.service_rows(svc.store)[0].report_count)
        now[0] += 10
        self.assertTrue(svc.beat())
        self.assertEqual(4, self.service_rows(svc.store)[0].report_count)

    def test_heartbeat_thread_skips_its_beat_after_a_pass_beat(self):
        # The clock stands still after the first pass: every wake of the
        # heartbeat thread finds the pass's beat less than report_interval
        # old and skips.
        svc = self.service(update_resources_interval=3600, report_interval=0.01)
        reads = []
        woke = threading.Condition()

        def clock():
            with woke:
                reads.append(None)
                woke.notify_all()
            return 1000.0
        svc.clock = clock
        thread = self.start(svc, [])
        with woke:
            self.assertTrue(woke.wait_for(lambda: len(reads) >= 20, timeout=10))
        svc.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive())
        self.assertEqual(1, self.service_rows(svc.store)[0].report_count)

    def test_heartbeat_stops_with_the_service(self):
        svc = self.service(update_resources_interval=3600, report_interval=0.02)
        thread = self.start(svc, [])
        time.sleep(0.2)
        svc.stop()
        thread.join(5)
        self.assertFalse(thread.is_alive())
        count = self.service_rows(svc.store)[0].report_count
        time.sleep(0.1)
        self.assertEqual(count, self.service_rows(svc.store)[0].report_count)
        self.assertNotIn(f"nova-lite heartbeat {self.host}",
                         [t.name for t in threading.enumerate()])

    def test_report_interval_not_below_service_down_time_warns(self):
        svc = self.service(update_resources_interval=0.01, report_interval=5,
                           service_down_time=5)
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        svc.run(max_passes=1)
        self.assertIn("report_interval (5 s) is not less than service_down_time (5 s)",
                      log.output)

    def test_max_passes(self):
        svc = self.service(update_resources_interval=0.01)
        self.assertEqual(2, svc.run(max_passes=2))
        self.assertEqual(2, self.service_rows(svc.store)[0].report_count)

    def test_a_failing_pass_does_not_stop_the_loop(self):
        settings = self.settings(reserved_host_memory_mb=0, update_resources_interval=0.01)
        driver = FlakyNodesDriver(settings=settings)
        svc = self.service(driver=driver, update_resources_interval=0.01)
        driver.failing = True
        log = self.useFixture(fixtures.FakeLogger(level=logging.ERROR))
        self.assertEqual(2, svc.run(max_passes=2))
        self.assertIn("node list unavailable", log.output)
        driver.failing = False
        svc.run(max_passes=1)
        self.assertEqual([self.host], [n.nodename for n in svc.store.get_compute_nodes()])

    def test_sigterm_stops_cleanly_and_restores_handlers(self):
        svc = self.service(update_resources_interval=0.05)
        before = signal.getsignal(signal.SIGTERM)
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
        timer.start()
        self.addCleanup(timer.cancel)
        started = time.monotonic()
        passes = svc.run()
        self.assertLess(time.monotonic() - started, 10)
        self.assertGreaterEqual(passes, 1)
        self.assertEqual(before, signal.getsignal(signal.SIGTERM))

    def test_default_store_from_settings(self):
        settings = self.settings(reserved_host_memory_mb=0)
        driver = loader.load_driver("fake", settings=settings)
        svc = ComputeService(self.host, driver, settings=settings)
        self.addCleanup(svc.store.close)
        svc.run_once()
        self.assertTrue(os.path.exists(os.path.join(self.state_path, "nova-lite.db")))
        again = Store(settings.database_url)
        self.addCleanup(again.close)
        self.assertEqual([self.host], [n.nodename for n in again.get_compute_nodes()])
