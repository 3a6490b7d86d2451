"""What a compute service's pass costs the database when nothing changed, and
that a change still gets written.

A steady pass (the driver reports what is recorded, nothing to repair,
no work, the same findings) is counted with SQLAlchemy's engine events
(:class:`nova_lite.testing.db_cost.DatabaseCost`): every statement on the
DBAPI cursor (``before_cursor_execute``) and every transaction
(``begin``/``commit``).  Besides its heartbeat (one upsert)
it must be ONE read-only transaction of at most six statements, none of
them locking a row.

On PostgreSQL "read-only" is checked where it is decided, inside the
transaction: at its commit ``txid_current_if_assigned()`` is NULL.  A
transaction gets a transaction id at its first write (a row changed or
locked); one that never gets one writes no WAL record of its own, and its
commit writes no commit record and waits for no WAL flush.  That is
deterministic, unlike the server-wide WAL position, which the other tests
sharing the server move at any time (the benchmark measures WAL bytes,
bench/steady_pass.py).
"""

import logging
import re
import time

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite import objects, work
from nova_lite.compute.down_hosts import down_hosts_share
from nova_lite.compute.manager import ComputeService
from nova_lite.db import models, services
from nova_lite.findings import UNKNOWN_GUEST
from nova_lite.testing import db_cost
from nova_lite.testing.db_cost import DatabaseCost
from nova_lite.virt import loader
from nova_lite.work import WorkRequest
from tests import base
from tests.pg_trace import client_messages, round_trips

NODES = ("a", "b", "c", "d")
#: Any of PostgreSQL's row-locking clauses.
ROW_LOCK = re.compile(r"\bFOR\s+(NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b", re.I)
SMALL = base.flavor("m1.small", vcpus=1, memory_mb=256, root_gb=1)
BIG = base.flavor("m1.big", vcpus=2, memory_mb=512, root_gb=2)


def count_transactions(test, store):
    """The :class:`~nova_lite.testing.db_cost.Transaction` list of ``store`` from
    now on (it grows until the test ends)."""
    cost = DatabaseCost(store.db.engine).__enter__()
    test.addCleanup(cost.__exit__)
    return cost.transactions


class SteadyPassMixin:
    """A host of several nodes with instances, a resize in progress and guests,
    passed over until steady."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.settings_ = self.settings(reserved_host_memory_mb=0)
        self.driver = loader.load_driver("fake.multinode", settings=self.settings_,
                                         nodes=list(NODES))
        self.addCleanup(self.driver.destroy_all)
        self.svc = ComputeService(self.host, self.driver, store=self.store,
                                  settings=self.settings_)
        self.svc.run_once()
        rt = self.svc.tracker
        self.instances = []
        for node in NODES:
            for _ in range(2):
                inst = rt.instance_claim(base.instance(SMALL), node).instance
                self.driver.spawn(inst)
                self.instances.append(inst)
        self.migration = rt.resize_claim(self.instances[0], BIG, "b").migration
        self.steady()

    def steady(self):
        """Pass until a pass writes nothing (at most three passes)."""
        for _ in range(3):
            with DatabaseCost(self.store.db.engine) as cost:
                self.svc.run_once()
            if not self.writes(cost.transactions):
                return
        self.fail("the passes never settle")

    def writes(self, transactions):
        """The statements of ``transactions`` that write, heartbeats aside."""
        return [s for t in transactions for s in t.writes if "INTO services" not in s]

    def generations(self):
        return {n.nodename: n.generation for n in self.store.get_compute_nodes(self.host)}

    def one_pass(self):
        """One pass; returns (its result, its transactions)."""
        seen = count_transactions(self, self.store)
        result = self.svc.run_once()
        return result, list(seen)

    # -- a steady pass --------------------------------------------------------
    def test_a_steady_pass_is_a_heartbeat_and_one_read_only_transaction(self):
        before = self.generations()
        findings = self.store.recorded_findings(self.host)
        result, seen = self.one_pass()
        self.assertEqual(2, len(seen), [t.statements for t in seen])
        beat, read = seen
        self.assertEqual(1, len(beat.statements), beat.statements)
        self.assertIn("INSERT INTO services", beat.statements[0])
        self.assertLessEqual(len(read.statements), 6, read.statements)
        for text in read.statements:
            self.assertTrue(text.lstrip().startswith("SELECT"), text)
            self.assertIsNone(ROW_LOCK.search(text), text)
            self.assertNotIn("pg_advisory", text)
        self.assertIsNone(read.xid)
        self.assertEqual(0, read.rows_written)
        # It did its whole job all the same.
        self.assertEqual(NODES, result.audited)
        self.assertEqual({}, result.failed)
        self.assertEqual(before, self.generations())
        self.assertEqual(findings, self.store.recorded_findings(self.host))
        self.assertEqual(findings[0].findings, result.findings)

    def test_a_steady_pass_without_its_heartbeat_is_one_transaction(self):
        with DatabaseCost(self.store.db.engine) as cost:
            self.svc.run_once(beat=False)
        self.assertEqual(1, len(cost.transactions))
        self.assertLessEqual(cost.statements, 6)
        self.assertEqual((0, 0), (cost.rows_written, cost.xids))

    def test_a_steady_audit_of_the_tracker_alone_is_one_read(self):
        seen = count_transactions(self, self.store)
        audit = self.svc.tracker.update_available_resource()
        self.assertFalse(audit.wrote)
        self.assertEqual(1, len(seen), [t.statements for t in seen])
        self.assertLessEqual(len(seen[0].statements), 5, seen[0].statements)
        self.assertIsNone(seen[0].xid)
        tracked = {n: self.svc.tracker.get_node(n) for n in NODES}
        for name, node in tracked.items():
            recorded = self.store.get_compute_node(self.host, name)
            self.assertEqual((recorded.generation, dict(recorded.usage)),
                             (node.generation, dict(node.usage)))

    def test_a_failing_node_is_marked_once(self):
        self.driver.inject_fault("c", RuntimeError("hypervisor gone"))
        first, seen = self.one_pass()
        self.assertIn("c", first.failed)
        self.assertTrue(self.writes(seen))
        second, seen = self.one_pass()
        self.assertIn("c", second.failed)
        self.assertEqual([], self.writes(seen))
        self.assertIn("hypervisor gone", self.store.get_compute_node(self.host, "c").last_error)

    # -- a change is written ------------------------------------------------
    def assertWritten(self, seen):
        written = self.writes(seen)
        self.assertTrue(written, [t.statements for t in seen])
        return written

    def test_an_inventory_change_is_written(self):
        before = self.generations()
        self.driver.set_node_size("a", memory_mb=4096)
        _, seen = self.one_pass()
        self.assertWritten(seen)
        after = self.generations()
        self.assertEqual(before["a"] + 1, after["a"])
        self.assertEqual({n: before[n] for n in "bcd"}, {n: after[n] for n in "bcd"})
        self.assertEqual(4096, self.store.get_compute_node(
            self.host, "a").inventories["MEMORY_MB"].total)
        self.steady()

    def test_an_inventory_change_with_the_same_report_is_written(self):
        # The operator reserves memory for the host (and restarts the service):
        # every report is the same, every inventory changes.
        before = self.generations()
        self.svc.tracker.settings = attrs.evolve(self.settings_, reserved_host_memory_mb=128)
        _, seen = self.one_pass()
        self.assertWritten(seen)
        self.assertEqual({n: g + 1 for n, g in before.items()}, self.generations())
        self.assertEqual(128, self.store.get_compute_node(
            self.host, "c").inventories["MEMORY_MB"].reserved)
        self.steady()

    def test_a_new_node_is_recorded(self):
        self.driver.set_nodes([*NODES, "e"])
        result, seen = self.one_pass()
        self.assertWritten(seen)
        self.assertIn("e", result.audited)
        self.assertEqual("e", self.store.get_compute_node(self.host, "e").nodename)
        self.steady()

    def test_a_vanished_node_is_marked_and_its_orphan_record_deleted(self):
        for inst in self.instances[6:]:
            self.svc.tracker.update_usage(attrs.evolve(inst, vm_state=objects.DELETED))
        self.driver.set_nodes(NODES[:3])
        result, seen = self.one_pass()
        self.assertWritten(seen)
        self.assertEqual(("d",), result.orphans_deleted)
        self.assertEqual(sorted(NODES[:3]),
                         [n.nodename for n in self.store.get_compute_nodes(self.host)])
        self.steady()

    def test_a_leaked_allocation_is_freed(self):
        gone = self.instances[2]
        base.write_instance_row(self.store, attrs.evolve(gone, vm_state=objects.DELETED))
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        _, seen = self.one_pass()
        self.assertWritten(seen)
        self.assertIn(gone.uuid, log.output)
        self.assertEqual([], self.store.list_allocations(instance_uuid=gone.uuid))
        self.steady()

    def test_a_missing_allocation_is_restored(self):
        lost = self.instances[4]
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete().where(
                models.allocations.c.consumer_uuid == lost.uuid))
        _, seen = self.one_pass()
        self.assertWritten(seen)
        self.assertEqual(1, len(self.store.list_allocations(instance_uuid=lost.uuid)))
        self.steady()

    def test_a_new_finding_is_recorded(self):
        stray = base.instance(SMALL, host=self.host, node="a")
        self.driver.spawn(stray)   # a guest no instance record backs
        result, seen = self.one_pass()
        self.assertTrue(any("host_findings" in s for s in self.writes(seen)), seen)
        self.assertIn((UNKNOWN_GUEST, stray.uuid),
                      [(f.kind, f.subject) for f in result.findings])
        recorded, = self.store.recorded_findings(self.host)
        self.assertEqual(result.findings, recorded.findings)
        self.steady()

    def test_work_waiting_is_done_in_the_pass(self):
        (task,) = self.store.tasks.record([WorkRequest(host=self.host, kind=work.AUDIT,
                                                       params={})])
        self.one_pass()
        self.assertEqual(work.DONE, self.store.tasks.get(task.id).state)

    # -- the read agrees with the other readers ----------------------------
    def test_the_records_agree_with_the_snapshot_and_the_queries(self):
        other = ComputeService("host2", loader.load_driver(
            "fake.multinode", settings=self.settings(host="host2",
                                                     reserved_host_memory_mb=0),
            nodes=["x", "y"]), store=self.store, settings=self.settings_)
        other.run_once()
        # A move to the other host, one from it, a stale and a missing allocation.
        away = other.tracker.resize_claim(self.instances[3], SMALL, "x").migration
        incoming = other.tracker.instance_claim(base.instance(SMALL), "y").instance
        here = self.svc.tracker.resize_claim(incoming, BIG, "c").migration
        base.write_instance_row(self.store, attrs.evolve(self.instances[5],
                                                         vm_state=objects.DELETED))
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete().where(
                models.allocations.c.consumer_uuid == self.instances[6].uuid))
            # A service that went down long ago.
            now = time.time()
            conn.execute(models.services.insert().values(
                host="gone", binary=services.COMPUTE_BINARY, created_at=now - 3600,
                updated_at=now - 3600, report_count=1, disabled=False))
        for host in (self.host, "host2"):
            records = self.store.pass_records(host, service=True)
            snapshot = self.store.records_snapshot(host)
            self.assertEqual(attrs.evolve(snapshot, read_at=0),
                             attrs.evolve(records.snapshot(), read_at=0))
            self.assertEqual(
                sorted(self.store.missing_allocations(host), key=_missing_key),
                sorted(records.missing_allocations(), key=_missing_key))
            self.assertEqual(
                self.store.hosts_needing_findings(host, 60, 60, now=records.read_at),
                records.hosts_needing_findings(60, 60, services.COMPUTE_BINARY))
            # A tracker's own read lets the database find them: the same.
            alone = self.store.pass_records(host)
            self.assertEqual(sorted(records.missing_allocations(), key=_missing_key),
                             sorted(alone.missing_allocations(), key=_missing_key))
            self.assertEqual(sorted(records.stale_allocations()),
                             sorted(alone.stale_allocations()))
            self.assertEqual(records.node_rows, alone.node_rows)
            self.assertEqual({u: records.inventories[u] for u in alone.inventories},
                             alone.inventories)
            self.assertEqual({u: records.usage[u] for u in alone.usage}, alone.usage)
            self.assertEqual([n for n in records.nodes if n.host == host], list(alone.nodes))
        records = self.store.pass_records(self.host, service=True)
        self.assertIn(away.uuid, records.migrations)
        self.assertIn(here.uuid, records.migrations)
        self.assertEqual([self.instances[5].uuid],
                         [a.consumer_uuid for a in records.stale_allocations()])
        self.assertEqual(["gone"], records.hosts_needing_findings(
            60, 60, services.COMPUTE_BINARY))

    # -- the services a pass reads ----------------------------------------
    def add_services(self, count, age=0.0):
        """``count`` compute service rows of other hosts, their last heartbeat
        ``age`` seconds ago; returns their hosts."""
        now = time.time()
        hosts = [f"peer-{age:g}-{i:04d}" for i in range(count)]
        with self.store.db.engine.begin() as conn:
            conn.execute(models.services.insert(), [dict(
                host=h, binary=services.COMPUTE_BINARY, created_at=now - age - 1,
                updated_at=now - age, report_count=1, disabled=False) for h in hosts])
        return hosts

    def test_a_pass_reads_one_service_row_when_every_service_is_up(self):
        self.add_services(300)
        read = []
        real = self.store.pass_records

        def pass_records(*args, **kwargs):
            read.append(real(*args, **kwargs))
            return read[-1]

        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.store.Store.pass_records", lambda _, *a, **k: pass_records(*a, **k)))
        _, seen = self.one_pass()
        self.assertEqual([], self.writes(seen))
        self.assertEqual([[self.host]], [sorted(r.services) for r in read])
        self.assertEqual([self.host], sorted(read[0].findings))
        # Asked for every service, the same read finds them all.
        self.assertEqual(301, len(real(self.host, service=True).services))

    def test_a_pass_reads_the_services_down_and_those_its_moves_name(self):
        other = ComputeService("host2", loader.load_driver(
            "fake.multinode", settings=self.settings(host="host2",
                                                     reserved_host_memory_mb=0),
            nodes=["x"]), store=self.store, settings=self.settings_)
        other.run_once()
        away = other.tracker.resize_claim(self.instances[3], SMALL, "x").migration
        up = self.add_services(50)
        down = self.add_services(2, age=3600)
        records = self.store.pass_records(self.host, service=True, service_down_time=60)
        self.assertEqual(sorted([self.host, "host2", *down]), sorted(records.services))
        self.assertEqual(down, records.hosts_needing_findings(60, 60, services.COMPUTE_BINARY))
        # The snapshot holds the services its rules ask about: the move's ends.
        self.assertEqual([self.host, "host2"], sorted(records.snapshot().services))
        self.assertIn(away.uuid, records.snapshot().migrations)
        # A down time shorter than the read's would take for down services not read.
        self.assertRaises(ValueError, records.hosts_needing_findings, 30, 60,
                          services.COMPUTE_BINARY)
        # The host2's pass reads its move's other end too.
        theirs = self.store.pass_records("host2", service=True, service_down_time=60)
        self.assertEqual(sorted([self.host, "host2", *down]), sorted(theirs.services))
        self.assertNotIn(up[0], theirs.services)
        # A down peer gets its findings recorded by a live one.
        self.one_pass()
        self.assertEqual(down, [r.host for r in self.store.recorded_findings()
                                if r.recorded_by == self.host and r.host != self.host])


    def test_a_pass_takes_on_at_most_down_hosts_per_pass_of_the_hosts_down(self):
        down = self.add_services(25, age=3600)
        limit = self.settings_.down_hosts_per_pass
        self.assertEqual(10, limit)
        taken = []
        for expected in (10, 10, 5, 0):
            self.one_pass()
            recorded = sorted(r.host for r in self.store.recorded_findings()
                              if r.recorded_by == self.host and r.host != self.host)
            new = sorted(set(recorded) - set(taken))
            self.assertEqual(expected, len(new), new)
            left = sorted(set(down) - set(taken))
            self.assertEqual(down_hosts_share(left, self.host, limit), new)
            taken.extend(new)
        self.assertEqual(down, sorted(taken))

def _missing_key(missing):
    return (missing.consumer.uuid, missing.node_uuid or "")


class TestSteadyPassSQLite(SteadyPassMixin, base.OnSQLiteFile, base.TestCase):

    def test_every_statement_of_a_pass_reads_through_indexes(self):
        # A pass of one service never reads every row of a table: at 100,000
        # nodes one such scan cost 0.4 s of server time a pass.  SQLite says
        # SCAN for a full read of a table (or of one of its indexes) and
        # SEARCH for an indexed one; a SCAN of a subquery's own rows is fine.
        from nova_lite.db import pass_records
        values = {"host": self.host, "binary": services.COMPUTE_BINARY, "now": time.time(),
                  "named": [self.host, "other"], "deadline": time.time() - 60}
        statements = (*pass_records._PASS, *pass_records._PASS_SERVICES[False],
                      *pass_records._PASS_SERVICES[True])
        tables = {t.name for t in models.metadata.sorted_tables}
        with self.store.db.engine.connect() as conn:
            for statement in statements:
                compiled = statement.params(**values).compile(
                    dialect=conn.dialect, compile_kwargs={"literal_binds": True})
                plan = [r[3] for r in conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + compiled.string).all()]
                scans = [p for p in plan if p.startswith("SCAN ")
                         and p.split()[1] in tables | {"move", "end_node", "held", "named",
                                                       "naming"}]
                searches = [p for p in plan if p.startswith("SEARCH ")]
                self.assertTrue(searches, plan)
                if statement is pass_records._PASS_SERVICES[True][0]:
                    continue   # every service of the binary, as asked
                self.assertEqual([], scans, plan)

    def test_a_pass_finds_the_moves_in_progress_by_their_own_indexes(self):
        # Run as it runs (its parameters bound, not written into the SQL): a
        # lookup of the moves in progress from or to the host reads the
        # partial indexes of those moves alone, which SQLite may use only if
        # the statement names their statuses as the index does.
        from nova_lite.db import pass_records
        values = {"host": self.host, "now": time.time()}
        with self.store.db.engine.connect() as conn:
            for statement in pass_records._PASS:
                compiled = statement.params(**values).compile(dialect=conn.dialect)
                args = tuple(compiled.params[name] for name in compiled.positiontup)
                plan = "\n".join(r[3] for r in conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + compiled.string, args).all())
                self.assertRegex(plan, r"migrations_(source|dest)_in_progress_idx", plan)
                self.assertNotRegex(plan, r"migrations_(source|dest)_status_idx", plan)


class TestSteadyPassPostgreSQL(SteadyPassMixin, base.OnPostgreSQL, base.TestCase):

    def test_a_pass_sends_its_six_reads_in_one_round_trip(self):
        # BEGIN, the six statements and COMMIT at once: one round trip, not eight.
        messages = client_messages(self.store, lambda: self.store.pass_records(
            self.host, service=True, service_down_time=60))
        self.assertIn("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", messages[0][1])
        executes = [i for i, (kind, _) in enumerate(messages) if kind == "Execute"]
        self.assertEqual(1 + 6 + 1, len(executes), messages)
        self.assertIn("COMMIT", " ".join(d for _, d in messages[executes[-2] + 1:]))
        self.assertEqual(1, round_trips(messages), messages)

    def test_every_statement_of_a_pass_reads_services_through_indexes_in_a_generic_plan(self):
        # psycopg prepares a statement after its fifth run, and PostgreSQL
        # may then plan it once for any parameters (a generic plan), guessing
        # how many rows a condition on a parameter keeps.  "updated_floor <
        # $1" alone is guessed at a third of the table: a full read of
        # services on every pass (2 to 3 ms of server time each at 10,000
        # services); and a join of services guessed many to their findings'
        # records would hash every record.
        from nova_lite.db import pass_records
        hosts = self.add_services(3000) + self.add_services(3, age=3600)
        now = time.time()
        with self.store.db.engine.begin() as conn:
            conn.execute(models.host_findings.insert(), [dict(
                host=h, recorded_at=now, recorded_by=h, findings="[]") for h in hosts])
        values = {"host": self.host, "binary": services.COMPUTE_BINARY, "now": now,
                  "deadline": now - 60}
        statements = (*pass_records._PASS, *pass_records._PASS_SERVICES[False])
        with self.store.db.engine.connect() as conn:
            analyze_own_tables(conn)
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            for i, statement in enumerate(statements):
                plan = generic_plan(conn, f"pass_{i}", statement, values)
                self.assertRegex(plan, r"\$\d")   # planned for any parameters
                self.assertNotRegex(plan, r"Seq Scan on (services|host_findings)\b", plan)

    def add_peers(self, first, count):
        """``count`` nodes of other hosts from number ``first`` on (one node
        each, with an inventory), two instances and allocations on each, and
        one finished move from each to the next."""
        bounds = {"a": first, "b": first + count - 1,
                  "a2": 2 * first, "b2": 2 * (first + count) - 1}
        with self.store.db.engine.begin() as conn:
            for sql in (
                    "INSERT INTO compute_nodes (uuid, host, nodename, generation, resources, "
                    "reported, created_at, updated_at) SELECT md5('n' || g)::uuid::text, "
                    "'peer-' || g, 'peer-' || g, 1, '{}', true, 0, 0 "
                    "FROM generate_series(%(a)s::int, %(b)s::int) g",
                    "INSERT INTO inventories (node_uuid, resource_class, total, reserved, "
                    "min_unit, max_unit, step_size, allocation_ratio) "
                    "SELECT md5('n' || g)::uuid::text, 'VCPU', 8, 0, 1, 8, 1, '16' "
                    "FROM generate_series(%(a)s::int, %(b)s::int) g",
                    "INSERT INTO instances (uuid, host, node, vm_state, project_id, user_id, "
                    "flavor, created_at, updated_at) SELECT md5('i' || g)::uuid::text, "
                    "'peer-' || g / 2, 'peer-' || g / 2, 'active', 'p', 'u', '{}', 0, 0 "
                    "FROM generate_series(%(a2)s::int, %(b2)s::int) g",
                    "INSERT INTO allocations (consumer_uuid, node_uuid, consumer_type, "
                    "instance_uuid, vcpu, pcpu, memory_mb, disk_gb, flavor, created_at) "
                    "SELECT md5('i' || g)::uuid::text, md5('n' || g / 2)::uuid::text, "
                    "'instance', md5('i' || g)::uuid::text, 1, 0, 512, 1, '{}', 0 "
                    "FROM generate_series(%(a2)s::int, %(b2)s::int) g",
                    "INSERT INTO migrations (uuid, instance_uuid, source_compute, source_node, "
                    "dest_compute, dest_node, old_flavor, new_flavor, status, migration_type, "
                    "created_at, updated_at) SELECT md5('m' || g)::uuid::text, "
                    "md5('i' || 2 * g)::uuid::text, 'peer-' || g, 'peer-' || g, "
                    "'peer-' || (g + 1), 'peer-' || (g + 1), '{}', '{}', 'confirmed', "
                    "'resize', 0, 0 FROM generate_series(%(a)s::int, %(b)s::int) g"):
                conn.exec_driver_sql(sql, bounds)

    def test_every_statement_of_a_pass_reads_the_host_s_records_through_indexes(self):
        # The same, for the node, consumer and move records: no full read of
        # the other hosts' rows, and no read that grows with them either (a
        # whole index read looks indexed in a plan): the pages each
        # statement reads stay about the same when the fleet grows fivefold.
        from nova_lite.db import pass_records
        now = time.time()
        values = {"host": self.host, "binary": services.COMPUTE_BINARY, "now": now,
                  "deadline": now - 60}
        tables = ("compute_nodes", "inventories", "instances", "allocations", "migrations")
        pages = []
        for first, count in ((1, 2000), (2001, 8000)):
            self.add_peers(first, count)
            with self.store.db.engine.connect() as conn:
                analyze_own_tables(conn)
                conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
                read = []
                for i, statement in enumerate(pass_records._PASS):
                    name = f"pass_{first}_{i}"
                    plan = generic_plan(conn, name, statement, values)
                    self.assertRegex(plan, r"\$\d")   # planned for any parameters
                    self.assertNotRegex(plan, rf"Seq Scan on ({'|'.join(tables)})\b", plan)
                    # The moves in progress by the indexes of those alone: the
                    # indexes of every move ever made take ten probes a host.
                    self.assertRegex(plan, r"migrations_(source|dest)_in_progress_idx", plan)
                    self.assertNotRegex(plan, r"migrations_(source|dest)_status_idx", plan)
                    read.append(pages_read(conn, name, statement, values))
                pages.append(read)
        small, large = pages
        for i, (before, after) in enumerate(zip(small, large)):
            # An index that gained a level costs each of its probes a page; a
            # read that grows with the fleet reads about five times its share.
            self.assertLessEqual(after, before * 1.2 + 2, (i, small, large))


def analyze_own_tables(conn):
    """ANALYZE the record tables of this test's schema alone: a bare ANALYZE
    reads every schema of the shared test database, and deadlocks with
    another test's DROP SCHEMA."""
    conn.exec_driver_sql("ANALYZE " + ", ".join(
        t.name for t in models.metadata.sorted_tables))


def _numbered(conn, statement, values):
    """``statement``'s SQL with its bound parameters as ``$n``, and the
    literals of ``values`` (over its own bound values) in that order."""
    from psycopg import sql
    compiled = statement.compile(dialect=conn.dialect)
    order = []

    def numbered(match):
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, compiled.string).replace("%%", "%")
    args = {**compiled.params, **values}
    dbapi = conn.connection.dbapi_connection
    return text, ", ".join(sql.Literal(args[k]).as_string(dbapi) for k in order)


def generic_plan(conn, name, statement, values):
    """The text of PostgreSQL's plan of ``statement`` prepared as ``name`` with
    its bound parameters as ``$n``, run with ``values`` (EXPLAIN EXECUTE)."""
    text, literals = _numbered(conn, statement, values)
    conn.exec_driver_sql(f"PREPARE {name} AS {text}".replace("%", "%%"))
    rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE {name}({literals})".replace("%", "%%"))
    return "\n".join(r[0] for r in rows)


def pages_read(conn, name, statement, values):
    """The shared buffers (hit or read) one run of the statement prepared as
    ``name`` by :func:`generic_plan` touches (EXPLAIN (ANALYZE, BUFFERS))."""
    _, literals = _numbered(conn, statement, values)
    (report,), = conn.exec_driver_sql(
        f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}({literals})"
        .replace("%", "%%")).all()
    plan = report[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


class HeartbeatMixin:

    def test_a_heartbeat_is_one_statement(self):
        store = self.make_store()
        store.heartbeat(self.host)
        seen = count_transactions(self, store)
        beat = store.heartbeat(self.host)
        self.assertEqual(2, beat.report_count)
        self.assertEqual(1, len(seen))
        self.assertEqual(1, len(seen[0].statements), seen[0].statements)
        # It writes, so it has a transaction id on PostgreSQL (sent alone in
        # autocommit mode there, it has committed before the id could be read).
        self.assertEqual(db_cost.AUTOCOMMIT_WRITE if store.db.dialect == "postgresql" else None,
                         seen[0].xid)

class TestHeartbeatSQLite(HeartbeatMixin, base.OnSQLiteFile, base.TestCase):
    pass


class TestHeartbeatPostgreSQL(HeartbeatMixin, base.OnPostgreSQL, base.TestCase):

    def test_a_heartbeat_is_sent_alone_in_autocommit_on_postgresql(self):
        # No BEGIN before it and no COMMIT after: one round trip.
        store = self.make_store()
        store.heartbeat(self.host)
        messages = client_messages(store, lambda: store.heartbeat(self.host))
        self.assertEqual(1, round_trips(messages), messages)
        self.assertFalse([m for m in messages if "BEGIN" in m[1] or "COMMIT" in m[1]],
                         messages)
        self.assertEqual(2, store.list_services(self.host)[0].report_count)
        # A write in a transaction is three.
        messages = client_messages(store, lambda: store.db.write_direct(
            "beat", lambda conn: services.beat(conn, self.host, services.COMPUTE_BINARY,
                                               time.time())))
        self.assertEqual(3, round_trips(messages), messages)

    def test_only_the_heartbeat_transaction_skips_the_wait_for_its_flush(self):
        store = self.make_store()

        def beat_then_show(conn):
            services.beat(conn, self.host, services.COMPUTE_BINARY, time.time())
            return conn.execute(sa.text("SHOW synchronous_commit")).scalar()

        self.assertEqual("off", store.db.write("beat", beat_then_show))
        self.assertEqual("on", store.db.read("show", lambda conn: conn.execute(
            sa.text("SHOW synchronous_commit")).scalar()))
