"""Compute services: one record, one "up" rule, and every reader agreeing on it.

A service is up when its last heartbeat is within service_down_time;
enabled or disabled is a separate field.  The scheduler refuses a host
that is either disabled or down (a reason for each), the operator views
show both, the compute service's live hosts are the enabled and up ones,
and the heal statement's SQL form of the rule finds the same hosts as the
record's.  The same tests run on a SQLite file and on PostgreSQL.
"""

import time
import types

import attrs
import sqlalchemy as sa

from nova_lite import metrics, reports
from nova_lite.cluster import NodeCache
from nova_lite.compute.manager import ComputeService
from nova_lite.db import COMPUTE_BINARY, ServiceRecord, models, services
from nova_lite.db.node_changes import ChangeReader
from nova_lite.exception import InvalidInput, InvalidType
from nova_lite.scheduler import HostManager, filters, host_checks
from nova_lite.testing.db_cost import DatabaseCost
from tests import base

DOWN_TIME = 60
#: host -> (up, disabled reason or None)
FLEET = {"h-up": (True, None), "h-off": (True, "disk swap"),
         "h-dead": (False, None), "h-dead-off": (False, "gone")}


class ServiceRecordTests(base.TestCase):

    def test_up_is_the_heartbeat_alone(self):
        for disabled in (False, True):
            record = ServiceRecord("h", COMPUTE_BINARY, 0.0, 1000.0, 3, disabled)
            self.assertTrue(record.is_up(60, now=1000.0))
            self.assertTrue(record.is_up(60, now=1060.0))   # exactly service_down_time
            self.assertFalse(record.is_up(60, now=1060.5))
            self.assertFalse(record.is_up(0.25, now=1000.5))

    def test_is_up_defaults_to_now(self):
        fresh = ServiceRecord("h", COMPUTE_BINARY, 0.0, time.time(), 1, False)
        old = attrs.evolve(fresh, updated_at=time.time() - 3600)
        self.assertTrue(fresh.is_up(60))
        self.assertFalse(old.is_up(60))

    def test_service_state_reports_up_and_enabled_apart(self):
        record = ServiceRecord("h", COMPUTE_BINARY, 0.0, 1000.0, 3, True, "maint")
        self.assertEqual(("up", "disabled"), reports.service_state(record, 60, 1010.0))
        self.assertEqual(("down", "disabled"), reports.service_state(record, 60, 1100.0))
        self.assertEqual(("up", "enabled"), reports.service_state(
            attrs.evolve(record, disabled=False), 60, 1010.0))
        self.assertEqual(("down", "disabled"), reports.service_state(None, 60, 1010.0))


class ServiceStoreTests:
    """Run against ``self.make_store()`` (a SQLite file, or PostgreSQL)."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()

    def age(self, host, seconds):
        """Make ``host``'s last heartbeat ``seconds`` old (a fixture write)."""
        self.store.db.write("age heartbeat", lambda conn: conn.execute(
            models.services.update().where(models.services.c.host == host)
            .values(updated_at=time.time() - seconds)))

    def fleet(self):
        """One fake node per host of FLEET, its service up or down, enabled or not."""
        settings = self.settings(reserved_host_memory_mb=0, service_down_time=DOWN_TIME)
        drivers = {}
        for host, (up, reason) in FLEET.items():
            drivers[host], _ = self.make_tracker(host=host, store=self.store, settings=settings)
            self.store.heartbeat(host)
            if reason is not None:
                self.store.set_service_disabled(host, True, reason)
            if not up:
                self.age(host, 3600)
        return settings, drivers

    # -- the Store's methods --------------------------------------------------------
    def test_list_services_of_a_host_and_of_a_binary(self):
        self.store.heartbeat("h2")
        self.store.heartbeat("h1")
        self.store.heartbeat("h1", binary="other")
        self.assertEqual(["h1", "h2"], [s.host for s in self.store.list_services()])
        one, = self.store.list_services("h1")
        self.assertIsInstance(one, ServiceRecord)
        self.assertEqual(("h1", COMPUTE_BINARY, 1, False, None),
                         (one.host, one.binary, one.report_count, one.disabled,
                          one.disabled_reason))
        other, = self.store.list_services(binary="other")
        self.assertEqual(("h1", "other"), (other.host, other.binary))
        self.assertEqual([], self.store.list_services("nowhere"))
        self.assertEqual([], self.store.list_services("h2", binary="other"))

    def test_heartbeat_is_one_statement_counting_the_beats_and_keeping_the_rest(self):
        first = self.store.heartbeat("h1")
        self.assertEqual((1, first.updated_at), (first.report_count, first.created_at))
        self.assertEqual([first], self.store.list_services("h1"))
        self.store.set_service_disabled("h1", True, "disk swap")
        with DatabaseCost(self.store.db.engine) as cost:
            second = self.store.heartbeat("h1")
        self.assertEqual(1, cost.statements, cost.transactions)
        self.assertIn("services", cost.transactions[0].statements[0])
        self.assertEqual(("h1", COMPUTE_BINARY, first.created_at, 2, True, "disk swap"),
                         (second.host, second.binary, second.created_at,
                          second.report_count, second.disabled, second.disabled_reason))
        self.assertGreaterEqual(second.updated_at, first.updated_at)
        self.assertEqual([second], self.store.list_services("h1"))
        self.assertEqual(1, self.store.heartbeat("h1", binary="other").report_count)

    def test_set_service_disabled_returns_the_record_and_keeps_the_reason_while_disabled(self):
        beat = self.store.heartbeat("h1")
        off = self.store.set_service_disabled("h1", True, "disk swap")
        self.assertEqual((True, "disk swap"), (off.disabled, off.disabled_reason))
        self.assertEqual([off], self.store.list_services("h1"))
        self.assertEqual(beat.updated_at, off.updated_at)   # not a heartbeat
        on = self.store.set_service_disabled("h1", False)
        self.assertEqual((False, None), (on.disabled, on.disabled_reason))

    def test_set_service_disabled_of_no_service_or_with_bad_input_changes_nothing(self):
        self.store.heartbeat("h1")
        before = self.store.list_services()
        self.assertIsNone(self.store.set_service_disabled("nowhere", True, "why"))
        exc = self.assertRaises(InvalidInput, self.store.set_service_disabled, "h1", True,
                                "r" * 256)
        self.assertIn("disabled reason", str(exc))
        exc = self.assertRaises(InvalidType, self.store.set_service_disabled, "h1", "yes")
        self.assertIn("set_service_disabled disabled", str(exc))
        self.assertRaises(InvalidInput, self.store.list_services, "h\x001")
        self.assertEqual(before, self.store.list_services())

    def test_the_change_sequence_moves_with_the_services_not_their_heartbeats(self):
        _, rt = self.make_tracker(host="h1", store=self.store)
        self.store.heartbeat("h1")
        reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        view = {s.host: s for s in reader.read({}).services}

        def seq(host):
            return self.store.db.read("seq", lambda c: c.execute(
                sa.select(models.services.c.change_seq).where(
                    models.services.c.host == host)).scalar_one())

        def look():
            # A reader may be given a row it saw already (PostgreSQL): the
            # view takes the rows as they come.
            found = reader.read({})
            view.update((s.host, s) for s in found.services)
            return {h: (s.disabled, s.disabled_reason) for h, s in view.items()}

        before = seq("h1")
        self.store.heartbeat("h1")
        self.assertEqual(before, seq("h1"))
        self.store.set_service_disabled("h1", True, "a")
        self.assertLess(before, seq("h1"))
        self.assertEqual({"h1": (True, "a")}, look())
        self.store.set_service_disabled("h1", True, "a longer reason")
        self.assertEqual({"h1": (True, "a longer reason")}, look())
        before = seq("h1")
        self.store.set_service_disabled("h1", True, "a longer reason")   # no change
        self.assertEqual(before, seq("h1"))
        self.store.heartbeat("h2")
        self.store.heartbeat("h1", binary="other")
        self.assertEqual({"h1": (True, "a longer reason"), "h2": (False, None)}, look())
        rt.instance_claim(base.instance(), "h1")
        self.assertEqual(["h1"], [n.host for n in reader.read({}).nodes])

    def test_the_down_rule_in_sql_is_the_heartbeat_not_its_floor(self):
        # A deadline in the middle of a grain: a heartbeat just after it has
        # its floor (the indexed column) before it, and is still up.
        grain = models.HEARTBEAT_GRAIN_S
        deadline = (time.time() // grain) * grain - 10 * grain + grain / 2
        now = deadline + DOWN_TIME
        beats = {"gone": deadline - 3600, "just-before": deadline - 1,
                 "at": deadline, "just-after": deadline + 1, "fresh": now}
        for host, at in beats.items():
            self.store.heartbeat(host)
            self.store.db.write("set heartbeat", lambda conn, host=host, at=at: conn.execute(
                models.services.update().where(models.services.c.host == host)
                .values(updated_at=at)))
        floors = self.store.db.read("floors", lambda conn: {
            host: floor for host, floor in conn.execute(sa.select(
                models.services.c.host, models.services.c.updated_floor))})
        for host, at in beats.items():
            # The database computes the floor from each write of updated_at.
            self.assertEqual((at // grain) * grain, floors[host], host)
        self.assertLess(floors["just-after"], deadline)

        def hosts(condition):
            return self.store.db.read("hosts", lambda conn: set(conn.execute(
                sa.select(models.services.c.host).where(condition)).scalars()))

        self.assertEqual({"gone", "just-before"}, hosts(services.heartbeat_outside(DOWN_TIME, now)))
        self.assertEqual({"at", "just-after", "fresh"},
                         hosts(services.heartbeat_within(DOWN_TIME, now)))
        self.assertEqual(["gone", "just-before"], self.store.hosts_needing_findings(
            "fresh", DOWN_TIME, interval=60, now=now))

    # -- every reader, one rule --------------------------------------------------
    def test_every_reader_agrees_on_up_and_enabled(self):
        settings, drivers = self.fleet()
        now = time.time()
        by_host = {s.host: s for s in self.store.list_services()}
        self.assertEqual(set(FLEET), set(by_host))
        for host, (up, reason) in FLEET.items():
            expected = ("up" if up else "down", "disabled" if reason else "enabled")
            self.assertEqual(expected, reports.service_state(by_host[host], DOWN_TIME, now))
            self.assertEqual(up, by_host[host].is_up(DOWN_TIME, now), host)
            self.assertEqual(reason, by_host[host].disabled_reason)

        # The heal statement's SQL form of the rule finds the same hosts.
        sql_up = self.store.db.read("up in SQL", lambda conn: set(conn.execute(
            sa.select(models.services.c.host).where(
                services.heartbeat_within(DOWN_TIME, now))).scalars()))
        self.assertEqual({"h-up", "h-off"}, sql_up)

        # The scheduler: a reason for each of disabled and down; both paths agree.
        manager = HostManager(self.store, settings)
        states = {s.host: s for s in manager.get_host_states()}
        compute = filters.ComputeFilter(settings)
        spec = types.SimpleNamespace(requested={})
        self.assertEqual({
            "h-up": None,
            "h-off": "compute service disabled (disk swap)",
            "h-dead": "compute service down (no heartbeat within service_down_time 60 s)",
            "h-dead-off": "compute service disabled (gone)",
        }, {h: compute.host_reason(s, spec, now) for h, s in states.items()})
        passing, rejected = compute.filter_all(list(states.values()), spec, now)
        self.assertEqual(["h-up"], [s.host for s in passing])
        self.assertEqual(3, len(rejected))
        for other in ("h-off", "h-dead"):   # every host but one up, or but one enabled
            passing, rejected = compute.filter_all([states["h-up"], states[other]], spec, now)
            self.assertEqual((["h-up"], [other]), ([s.host for s in passing],
                                                   [s.host for s, _ in rejected]))
        passes, _ = host_checks.host_test([compute], spec, now)
        self.assertEqual({"h-up"}, {h for h, s in states.items() if passes(s)})
        self.assertEqual({"h-up"}, {manager.select_destinations(base.flavor())[0].host
                                    for _ in range(4)})

        # The compute service's live hosts (the bare-metal hash ring): enabled and up.
        service = ComputeService("h-up", drivers["h-up"], store=self.store, settings=settings)
        self.assertEqual(["h-up"], service.live_services())

        # The metrics: up and enabled, each on its own.
        collector = metrics.ServiceCollector(self.store, settings, NodeCache(self.store))
        found = {}
        for family in collector.collect():
            for sample in family.samples:
                if "host" in sample.labels:
                    found[(sample.name, sample.labels["host"])] = sample.value
        for host, (up, reason) in FLEET.items():
            self.assertEqual((1 if up else 0, 0 if reason else 1),
                             (found[("nova_lite_service_up", host)],
                              found[("nova_lite_service_enabled", host)]), host)


class TestServicesOnSQLite(ServiceStoreTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestServicesOnPostgreSQL(ServiceStoreTests, base.OnPostgreSQL, base.TestCase):

    def test_a_heartbeat_within_its_grain_is_a_hot_update(self):
        # HOT: no index entry is added, the new row version stays in its page.
        grain = models.HEARTBEAT_GRAIN_S
        start = (time.time() // grain) * grain
        counts = sa.text("SELECT pg_stat_get_xact_tuples_updated('services'::regclass), "
                         "pg_stat_get_xact_tuples_hot_updated('services'::regclass)")

        def beats(conn):
            services.beat(conn, "h1", COMPUTE_BINARY, start + 1)
            services.beat(conn, "h1", COMPUTE_BINARY, start + 11)
            services.beat(conn, "h1", COMPUTE_BINARY, start + 21)
            within = conn.execute(counts).one()
            services.beat(conn, "h1", COMPUTE_BINARY, start + grain + 1)   # the next grain
            return tuple(within), tuple(conn.execute(counts).one())

        within, across = self.store.db.write("beats", beats)
        self.assertEqual((2, 2), within)
        self.assertEqual((3, 2), across)
        options = self.store.db.read("options", lambda conn: conn.execute(sa.text(
            "SELECT reloptions FROM pg_class WHERE oid = 'services'::regclass")).scalar_one())
        self.assertIn("fillfactor=70", options)

    def test_heartbeat_transaction_alone_commits_without_waiting_for_the_wal(self):
        setting = sa.text("SELECT current_setting('synchronous_commit')")

        def beat_then_read(conn):
            services.beat(conn, "h1", COMPUTE_BINARY, time.time())
            return conn.execute(setting).scalar_one()

        self.assertEqual("off", self.store.db.write("beat", beat_then_read))
        # Only that transaction: the next one on the same pooled connection
        # waits for the flush again.
        self.assertEqual("on", self.store.db.write(
            "read", lambda conn: conn.execute(setting).scalar_one()))
