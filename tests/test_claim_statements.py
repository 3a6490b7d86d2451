"""The claim's statements on the DBAPI cursor, and PostgreSQL's one-statement claim.

A claim's transaction runs SQLAlchemy Core statements straight on the
driver's cursor (:mod:`nova_lite.db.direct`).  On PostgreSQL a claim of a
new instance is one statement: the bump of the node's generation, the new
instance's row and its allocation.  These tests show what that statement
writes on a current record and, above all, what a claim does not write:
nothing of a plan decided on a record the node moved on from, nor of a
known instance, until the transaction has decided again on fresh records
(the database's own check of a stale plan is in
``tests.test_claim_checked``).
"""

import attrs
import sqlalchemy as sa

from nova_lite import work
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.db import models
from nova_lite.db.direct import DirectConnection
from nova_lite.db.store import ClaimPlan, ClaimRequest
from nova_lite.exception import InstanceStateConflict, InvalidInput
from nova_lite.objects import DELETED, Allocation
from nova_lite.work import WorkRequest
from tests import test_claim_races as races
from tests.base import write_instance_row
from tests.pg_trace import client_messages, round_trips
from tests.reliability import base

T_NODES, T_INST, T_ALLOC = models.compute_nodes, models.instances, models.allocations
T_USAGE = models.node_usage


def _plan_for(inst, node_uuid, nodename="a"):
    return ClaimPlan(allocation=Allocation(
        consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
        node_uuid=node_uuid, flavor=inst.flavor, resources=base.requested(inst.flavor)),
        instance=attrs.evolve(inst, host=races.HOST, node=nodename))


class DirectConnectionMixin:
    """Core statements run on the cursor give what SQLAlchemy's Connection gives."""

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.rt = races.RaceMixin.tracker(self)

    def test_rows_are_named_and_fetched_at_once(self):
        node = self.rt.get_node("a")
        query = sa.select(T_NODES.c.uuid, T_NODES.c.generation.label("gen")).where(
            T_NODES.c.nodename == sa.bindparam("name"))

        def op(conn):
            self.assertIsInstance(conn, DirectConnection)
            found = conn.execute(query, {"name": "a"})
            missing = conn.execute(query, {"name": "nope"})
            return found.one(), found.first(), found.scalar(), missing.first(), missing.all()

        one, first, scalar, none, empty = self.rt.store.db.write_direct("read", op)
        self.assertEqual((node.uuid, node.generation), (one.uuid, one.gen))
        self.assertEqual(one, first)
        self.assertEqual(node.uuid, scalar)
        self.assertIsNone(none)
        self.assertEqual([], empty)

    def test_a_list_of_values_writes_a_row_each_and_counts_them(self):
        node = self.rt.get_node("a")
        bump = T_NODES.update().where(T_NODES.c.uuid == sa.bindparam("node")).values(
            generation=T_NODES.c.generation + 1)
        count = self.rt.store.db.write_direct(
            "bump", lambda conn: conn.execute(bump, [{"node": node.uuid}] * 3).rowcount)
        self.assertEqual(3, count)
        self.assertEqual(node.generation + 3,
                         self.rt.store.get_compute_node(races.HOST, "a").generation)

    def test_an_exception_rolls_back_everything_the_transaction_wrote(self):
        node = self.rt.get_node("a")
        bump = T_NODES.update().where(T_NODES.c.uuid == sa.bindparam("node")).values(
            generation=T_NODES.c.generation + 1)

        def op(conn):
            conn.execute(bump, {"node": node.uuid})
            raise InvalidInput("refused on purpose")

        self.assertRaises(InvalidInput, self.rt.store.db.write_direct, "bump", op)
        self.assertEqual(node.generation,
                         self.rt.store.get_compute_node(races.HOST, "a").generation)


class TestDirectConnectionSQLite(DirectConnectionMixin, base.SQLiteBackend, base.TestCase):
    pass


class TestDirectConnectionPostgreSQL(DirectConnectionMixin, base.PostgreSQLBackend,
                                     base.TestCase):
    pass


class StaleAndKnownMixin:
    """A claim decided on a record the node moved on from is decided again on
    fresh records, and a claim of a known instance is guarded, whichever
    path the backend's claim takes first: ``a`` and ``b`` are trackers of
    one node ``a`` on stores of their own, ``store`` is ``a``'s; a class
    gives ``claim(node, inst, decided=None)``."""

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.a = races.RaceMixin.tracker(self)
        self.b = races.RaceMixin.tracker(self)
        self.store = self.a.store

    def assert_plain_rows(self, written):
        """The backend's check of what its plain path wrote (see
        :class:`TestPlainRowsSQLite`): ``written``, one bool per time it
        ran since the last :meth:`forget_plain_rows`."""

    def forget_plain_rows(self):
        """Forget what the plain path wrote so far (another store's claims)."""

    def test_a_stale_record_writes_nothing_and_the_transaction_decides_on_fresh_ones(self):
        stale = self.a.get_node("a")
        self.b.instance_claim(races.instance(races.flavor(vcpus=8)), "a")   # now full
        self.forget_plain_rows()
        inst = races.instance()
        _assert_refused_on_fresh_records(self, stale, inst)
        self.assert_plain_rows([])
        self.assertNotIn(inst.uuid, [i.uuid for i in self.store.list_instances(live_only=False)])

    def test_a_stale_record_with_room_left_is_admitted_at_the_next_generation(self):
        stale = self.a.get_node("a")
        self.b.instance_claim(races.instance(), "a")
        self.forget_plain_rows()
        inst = races.instance()
        decided = []
        after, _ = self.claim(stale, inst, decided)
        self.assertEqual([stale.generation, stale.generation + 1], decided)
        self.assertEqual(stale.generation + 2, after.generation)
        self.assertEqual(2, self.store.get_compute_node(races.HOST, "a").used("VCPU"))
        self.assertEqual(2, after.used("VCPU"))
        self.assertEqual(after.usage, self.store.get_compute_node(races.HOST, "a").usage)
        self.assert_plain_rows([])
        self.assertNoRecordProblems(self.store)

    def test_a_known_instance_is_guarded_by_the_transaction(self):
        node = self.a.get_node("a")
        inst = races.instance()
        write_instance_row(self.store, attrs.evolve(inst, vm_state=DELETED))
        before = base.dump(self.store)
        exc = self.assertRaises(InstanceStateConflict, self.claim, node, inst)
        self.assertIn("deleted is final", str(exc))
        self.assert_plain_rows([False])
        self.assertEqual(before, base.dump(self.store))

    def test_a_known_live_instance_is_claimed_by_the_transaction(self):
        node = self.a.get_node("a")
        inst = races.instance()
        write_instance_row(self.store, inst)
        after, _ = self.claim(node, inst)
        self.assert_plain_rows([False])
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual("a", self.store.get_instance(inst.uuid).node)
        self.assertEqual(1, self.store.get_compute_node(races.HOST, "a").used("VCPU"))
        self.assertNoRecordProblems(self.store)


class TestOneStatementClaim(StaleAndKnownMixin, base.PostgreSQLBackend, base.TestCase):
    """PostgreSQL: the claim decided on a current record is one statement."""

    @staticmethod
    def decider(inst, decided):
        """A decision of ``inst`` on any record, noting each generation it
        decided at in ``decided`` (a list, if given)."""
        decided = [] if decided is None else decided

        def decide(seen):
            decided.append(seen.generation)
            if seen.free("VCPU") < inst.flavor.vcpus:
                _refuse(seen)
            return (_plan_for(inst, seen.uuid),)
        return decide

    def claim(self, node, inst, decided=None):
        return self.store.claim(node, [ClaimRequest(inst.uuid)], self.decider(inst, decided))

    def test_a_current_record_claims_in_one_statement_and_records_its_usage_row(self):
        node = self.a.get_node("a")
        inst = races.instance()
        decided = []
        after, plans = self.claim(node, inst, decided)
        self.assertEqual([node.generation], decided)
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual(1, after.used("VCPU"))
        recorded = self.store.get_compute_node(races.HOST, "a")
        self.assertEqual(after.generation, recorded.generation)
        self.assertEqual(after.usage, recorded.usage)
        self.assertEqual([inst.uuid], [i.uuid for i in self.store.list_instances()])
        self.assertEqual("a", self.store.get_instance(inst.uuid).node)
        # The statement recorded the usage the claim committed at, from the
        # record it was decided on: nothing but this claim changed since it.
        row = _usage_row(self.store, node.uuid)
        self.assertEqual((after.generation, 1, 0, 1024, 1, 0, node.generation),
                         (row.generation, row.vcpu, row.pcpu, row.memory_mb, row.disk_gb,
                          row.extras, row.since))
        self.assertEqual([], base.usage_row_problems(self.store))
        self.assertNoRecordProblems(self.store)

    # -- the tasks recorded with the claim travel with the one statement ----
    def claim_with_task(self, node, inst, decided=None, count=1):
        decide = self.decider(inst, decided)
        tasks = [WorkRequest(host=races.HOST, kind=work.BUILD, instance_uuid=inst.uuid,
                             params={"node": "a", "n": n}) for n in range(count)]
        return self.store.claim_with_tasks(node, [ClaimRequest(inst.uuid)], decide,
                                           tasks=tasks)

    def recorded_tasks(self):
        return self.store.tasks.find(kinds=(work.BUILD,))

    def test_a_claim_with_its_tasks_begins_in_the_round_trip_of_its_statements(self):
        # Several tasks: BEGIN, the claim, the tasks' INSERTs and their
        # NOTIFY go at once; the COMMIT in a round trip of its own, as every
        # claim's does.  Two round trips where psycopg's own BEGIN, answered
        # before anything else is sent, made three.
        node = self.a.get_node("a")
        inst = races.instance()
        messages = client_messages(self.store,
                                   lambda: self.claim_with_task(node, inst, count=2))
        self.assertEqual(2, round_trips(messages), messages)
        self.assertEqual("Parse", messages[0][0], messages)
        self.assertIn('"BEGIN ', messages[0][1])
        self.assertEqual([("Query", '"COMMIT"')],
                         [(k, d.strip()) for k, d in messages if '"COMMIT"' in d])
        self.assertEqual([inst.uuid] * 2, [t.instance_uuid for t in self.recorded_tasks()])

    def assert_one_round_trip(self, claim):
        """``claim()`` is one statement sent alone, in autocommit mode: no
        BEGIN, no COMMIT, one round trip."""
        messages = client_messages(self.store, claim)
        self.assertEqual(1, round_trips(messages), messages)
        self.assertEqual("Parse", messages[0][0], messages)
        self.assertIn("WITH node_lock AS", messages[0][1])
        self.assertEqual([], [d for _, d in messages if "BEGIN" in d or "COMMIT" in d])

    def test_a_claim_with_one_task_is_one_round_trip(self):
        node = self.a.get_node("a")
        inst = races.instance()
        self.assert_one_round_trip(lambda: self.claim_with_task(node, inst))
        self.assertEqual([inst.uuid], [t.instance_uuid for t in self.recorded_tasks()])

    def test_a_claim_is_one_round_trip(self):
        node = self.a.get_node("a")
        inst = races.instance()
        self.assert_one_round_trip(lambda: self.claim(node, inst))
        self.assertEqual(inst.uuid, self.store.get_instance(inst.uuid).uuid)

    def test_a_task_is_recorded_once_with_a_claim_of_the_one_statement(self):
        node = self.a.get_node("a")
        inst = races.instance()
        after, _, made = self.claim_with_task(node, inst)
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual([inst.uuid], [t.instance_uuid for t in made])
        self.assertEqual([(made[0].id, inst.uuid, work.WAITING)],
                         [(t.id, t.instance_uuid, t.state) for t in self.recorded_tasks()])

    def test_a_task_is_recorded_once_with_a_claim_decided_under_the_lock(self):
        stale = self.a.get_node("a")
        self.b.instance_claim(races.instance(), "a")
        inst = races.instance()
        decided = []
        after, _, made = self.claim_with_task(stale, inst, decided)
        self.assertEqual([stale.generation, stale.generation + 1], decided)
        self.assertEqual([inst.uuid], [t.instance_uuid for t in self.recorded_tasks()])
        self.assertEqual([t.id for t in made], [t.id for t in self.recorded_tasks()])
        self.assertNoRecordProblems(self.store)

    def test_a_task_is_recorded_once_with_a_known_instance_claimed_by_the_transaction(self):
        node = self.a.get_node("a")
        inst = races.instance()
        write_instance_row(self.store, inst)
        self.claim_with_task(node, inst)
        self.assertEqual([inst.uuid], [t.instance_uuid for t in self.recorded_tasks()])
        self.assertEqual(1, self.store.get_compute_node(races.HOST, "a").used("VCPU"))

    def test_no_task_is_recorded_when_the_decision_under_the_lock_refuses(self):
        stale = self.a.get_node("a")
        self.b.instance_claim(races.instance(races.flavor(vcpus=8)), "a")   # now full
        before = base.dump(self.store)
        self.assertRaises(ComputeResourcesUnavailable, self.claim_with_task, stale,
                          races.instance())
        self.assertEqual([], self.recorded_tasks())
        self.assertEqual(before, base.dump(self.store))

    def test_no_task_is_recorded_when_a_known_instance_is_refused(self):
        node = self.a.get_node("a")
        inst = races.instance()
        write_instance_row(self.store, attrs.evolve(inst, vm_state=DELETED))
        before = base.dump(self.store)
        self.assertRaises(InstanceStateConflict, self.claim_with_task, node, inst)
        self.assertEqual([], self.recorded_tasks())
        self.assertEqual(before, base.dump(self.store))

    # -- a build's claim and its one task: one statement, on RawCursor --------

    def seen(self):
        from nova_lite.db.direct import observe, unobserve
        seen = _SeenStatements()
        observe(self.store.db.engine, seen)
        self.addCleanup(unobserve, self.store.db.engine, seen)
        return seen

    def one_build_claim(self):
        """A build's claim with its one task, checked as recorded; returns
        the one statement it ran and its cursor's class name."""
        node = self.a.get_node("a")
        inst = races.instance()
        seen = self.seen()
        after, _, made = self.claim_with_task(node, inst)
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual([(made[0].id, inst.uuid)],
                         [(t.id, t.instance_uuid) for t in self.recorded_tasks()])
        self.assertEqual(1, len(seen.ran), seen.ran)
        return seen.ran[0]

    def test_a_claim_and_its_one_task_are_one_statement(self):
        sql, cursor = self.one_build_claim()
        self.assertIn("task_row", sql)
        self.assertIn("bump", sql)
        self.assertEqual("RawCursor", cursor)

    def test_a_psycopg_without_raw_cursor_runs_them_on_its_own_cursor(self):
        # psycopg 3.1 (Debian bookworm's) has no RawCursor: the statements are
        # compiled with named parameters for its plain cursor instead.
        import fixtures
        self.useFixture(fixtures.MonkeyPatch("nova_lite.db.direct._raw_cursor",
                                             lambda dialect: None))
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.direct.DirectConnection._compiled", {}))
        sql, cursor = self.one_build_claim()
        self.assertEqual("Cursor", cursor)
        self.assertIn("%(i_uuid)s", sql)

    def test_two_tasks_go_with_the_claim_in_statements_of_their_own(self):
        node = self.a.get_node("a")
        inst = races.instance()
        seen = self.seen()
        after, _, made = self.claim_with_task(node, inst, count=2)
        self.assertEqual(2, len(seen.ran), seen.ran)
        self.assertEqual([0, 1], [t.params["n"] for t in made])
        self.assertEqual(sorted(t.id for t in made),
                         sorted(t.id for t in self.recorded_tasks()))
        self.assertEqual(node.generation + 1, after.generation)


class TestPlainClaim(base.PostgreSQLBackend, base.TestCase):
    """PostgreSQL: a store that alone writes a node of late claims there
    without the node's usage row, and goes back to it after a lost race."""

    def setUp(self):
        super().setUp()
        import fixtures
        self.useFixture(fixtures.MonkeyPatch("nova_lite.db.store.PLAIN_CLAIM_AFTER_SWAPS", 2))
        self.url = self.database_url()
        self.a = races.RaceMixin.tracker(self)
        self.b = races.RaceMixin.tracker(self)
        self.store = self.a.store

    def claim(self, node, inst=None, decided=None, tasks=()):
        """``inst`` (a new one of 1 vCPU if None) claimed on ``node``, a
        record of node ``a``; returns ``(node after, statements run)``."""
        inst = inst or races.instance()
        seen = TestOneStatementClaim.seen(self)
        after, _, _ = self.store.claim_with_tasks(
            node, [ClaimRequest(inst.uuid)], TestOneStatementClaim.decider(inst, decided),
            tasks=tasks)
        return after, [sql for sql, _ in seen.ran]

    def swapped_twice(self):
        """Node ``a`` after two claims of this store whose compare-and-swap held."""
        node = self.a.get_node("a")
        for _ in range(2):
            node, ran = self.claim(node)
            self.assertIn("node_usage", ran[0])
        return node

    def test_after_its_swaps_a_claim_is_one_statement_without_the_usage_row(self):
        node = self.swapped_twice()
        row = _usage_row(self.store, node.uuid)
        self.assertEqual(node.generation, row.generation)
        inst = races.instance()
        messages = client_messages(self.store, lambda: self.claim(node, inst))
        self.assertEqual(1, round_trips(messages), messages)
        self.assertEqual([], [d for _, d in messages if "BEGIN" in d or "COMMIT" in d])
        self.assertNotIn("node_usage", messages[0][1])
        self.assertIn("WITH bump AS", messages[0][1])
        recorded = self.store.get_compute_node(races.HOST, "a")
        self.assertEqual((node.generation + 1, 3), (recorded.generation, recorded.used("VCPU")))
        self.assertEqual("a", self.store.get_instance(inst.uuid).node)
        # The usage row is left behind at the generation it was last written at.
        self.assertEqual(row, _usage_row(self.store, node.uuid))
        self.assertEqual([], base.usage_row_problems(self.store))
        self.assertNoRecordProblems(self.store)

    def test_a_claim_with_its_task_drops_the_usage_row_too(self):
        node = self.swapped_twice()
        inst = races.instance()
        task = WorkRequest(host=races.HOST, kind=work.BUILD, instance_uuid=inst.uuid,
                           params={"node": "a"})
        after, ran = self.claim(node, inst, tasks=[task])
        self.assertEqual(1, len(ran), ran)
        self.assertIn("task_row", ran[0])
        self.assertNotIn("node_usage", ran[0])
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual([inst.uuid], [t.instance_uuid for t in
                                       self.store.tasks.find(kinds=(work.BUILD,))])
        self.assertNoRecordProblems(self.store)

    def test_its_values_go_as_a_row_or_by_name_and_write_the_general_steps_rows(self):
        from nova_lite.db import claim_writes
        from nova_lite.db.direct import DirectConnection as Direct
        node = self.swapped_twice()
        taken, by_name_only = [], []
        real = Direct.takes_row

        def noted(conn, statement, names):
            taken.append(real(conn, statement, names))
            return taken[-1] and not by_name_only
        import fixtures
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.direct.DirectConnection.takes_row", noted))
        # A zone and a task state: columns a plain row of SQLite's leaves NULL.
        rich = races.instance(task_state="spawning", availability_zone="az1")
        node, ran = self.claim(node, rich)
        self.assertNotIn("node_usage", ran[0])
        self.assertEqual([True], taken)
        # The same plan's rows written by the general steps, for a twin.
        twin = attrs.evolve(rich, uuid=races.instance().uuid)
        self.store.db.write_direct("general", lambda conn: claim_writes.write_plans(
            conn, (_plan_for(twin, node.uuid),), 0.0))
        self.assertEqual(_rows_of(self.store, twin), _rows_of(self.store, rich))
        # Named parameters (a psycopg with no RawCursor): the same row, by name.
        by_name_only.append(True)
        by_name = attrs.evolve(rich, uuid=races.instance().uuid)
        after, ran = self.claim(node, by_name)
        self.assertNotIn("node_usage", ran[0])
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual(_rows_of(self.store, twin), _rows_of(self.store, by_name))
        self.assertNoRecordProblems(self.store)

    def test_a_stale_record_writes_nothing_and_the_transaction_refuses(self):
        stale = self.swapped_twice()
        self.b.instance_claim(races.instance(races.flavor(vcpus=5)), "a")   # 1 vCPU left
        _assert_refused_on_fresh_records(self, stale, races.instance(races.flavor(vcpus=2)))
        # The race lost, the next claim records the usage row again.
        fresh = self.store.get_compute_node(races.HOST, "a")
        after, ran = self.claim(fresh)
        self.assertIn("node_usage", ran[0])
        self.assertEqual(8, after.used("VCPU"))
        self.assertEqual([], base.usage_row_problems(self.store))
        self.assertNoRecordProblems(self.store)

    def test_a_stale_record_with_room_left_is_admitted_at_the_next_generation(self):
        stale = self.swapped_twice()
        self.b.instance_claim(races.instance(), "a")
        after, ran = self.claim(stale)
        self.assertNotIn("node_usage", ran[0])
        self.assertEqual(stale.generation + 2, after.generation)
        self.assertEqual(4, after.used("VCPU"))
        self.assertEqual(4, self.store.get_compute_node(races.HOST, "a").used("VCPU"))
        self.assertEqual([], base.usage_row_problems(self.store))
        self.assertNoRecordProblems(self.store)
        # And the next claim records the usage row again.
        after, ran = self.claim(after)
        self.assertIn("node_usage", ran[0])
        self.assertEqual([], base.usage_row_problems(self.store))


def _assert_refused_on_fresh_records(test, stale, inst):
    """``test.claim(stale, inst, decided)`` is decided on the stale record
    (admitted), then on the fresh one (refused), and writes nothing."""
    before = base.dump(test.store)
    decided = []
    exc = test.assertRaises(ComputeResourcesUnavailable, test.claim, stale, inst, decided)
    test.assertEqual([stale.generation, stale.generation + 1], decided)
    test.assertEqual(stale.generation + 1, exc.generation)
    test.assertEqual(before, base.dump(test.store), "the refused claim wrote rows")


def _refuse(node):
    raise ComputeResourcesUnavailable([f"node {node.nodename} has no vCPU left"])


def _rows_of(store, inst):
    """``inst``'s instance and allocation rows as recorded, its uuid and the
    times left out (the rows of two instances then compare)."""
    with store.db.engine.connect() as conn:
        instance_row = conn.execute(
            sa.select(T_INST).where(T_INST.c.uuid == inst.uuid)).one()._asdict()
        allocation_row = conn.execute(
            sa.select(T_ALLOC).where(T_ALLOC.c.consumer_uuid == inst.uuid)).one()._asdict()
    for row in (instance_row, allocation_row):
        for column in ("uuid", "consumer_uuid", "instance_uuid", "created_at", "updated_at"):
            row.pop(column, None)
    return instance_row, allocation_row


def _usage_row(store, node_uuid):
    return store.db.read("read node_usage", lambda conn: conn.execute(
        sa.select(T_USAGE).where(T_USAGE.c.node_uuid == node_uuid)).first())


class TestStatementsSentAsTheyAre(base.TestCase):
    """PostgreSQL: the direct statements are compiled with numbered
    parameters for psycopg's RawCursor, which sends them as they are.
    psycopg's own cursor parses a query's named placeholders and keeps that
    only for a query of at most 4 kB: a build's claim with its task is
    longer, and would be parsed again on every build."""

    def test_the_claim_statements_are_compiled_with_numbered_parameters(self):
        from psycopg import _queries
        from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

        from nova_lite.db import claim_writes
        from nova_lite.db.direct import _Compiled
        dialect = pg_psycopg.dialect()
        for statement in (claim_writes.PG_SINGLE_CLAIM, claim_writes.PG_SINGLE_CLAIM_WITH_TASK):
            compiled = _Compiled(statement, dialect)
            self.assertIn("$1", compiled.sql)
            self.assertNotIn("%(", compiled.sql)
            # Each name once, however often the statement uses it.
            self.assertEqual(len(set(compiled.order)), len(compiled.order))
        self.assertGreater(len(_Compiled(claim_writes.PG_SINGLE_CLAIM_WITH_TASK,
                                         dialect).sql.encode()),
                           _queries.MAX_CACHED_STATEMENT_LENGTH)

    def test_the_plain_claims_take_their_values_in_the_order_their_rows_are_built(self):
        from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

        from nova_lite.db import claim_writes
        from nova_lite.db.direct import _Compiled
        dialect = pg_psycopg.dialect()
        for statement, names in (
                (claim_writes.PG_PLAIN_CLAIM, claim_writes.PG_PLAIN_NAMES),
                (claim_writes.PG_PLAIN_CLAIM_WITH_TASK, claim_writes.PG_PLAIN_WITH_TASK_NAMES)):
            compiled = _Compiled(statement, dialect)
            self.assertEqual(names, compiled.order)
            self.assertEqual({}, compiled.defaults)


class _SeenStatements:
    """A direct observer noting each statement and the cursor it ran on."""

    def __init__(self):
        self.ran = []

    def direct_begin(self):
        pass

    def direct_statement(self, sql):
        pass

    def direct_done(self, sql, cursor):
        self.ran.append((sql, type(cursor).__name__))

    def direct_ending(self, dbapi_connection, autocommit):
        pass


class TestLeanInsertsSQLite(base.SQLiteBackend, base.TestCase):
    """SQLite: a claim's INSERTs leave out the columns its rows hold NULL in
    (sqlite3 binds each None through a failed adapter lookup); a row with a
    value in any of them is written with every column."""

    NULLABLE_INSTANCE = ("task_state", "numa_topology", "pci_requests", "pci_devices",
                         "availability_zone")
    NULLABLE_ALLOCATION = ("other", "numa_topology", "pci_devices", "providers")

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.rt = races.RaceMixin.tracker(self)
        self.store = self.rt.store

    def inserts(self, inst):
        """The INSERT statements of ``inst``'s claim, and its rows as recorded."""
        from nova_lite.db.direct import observe, unobserve
        seen = _SeenStatements()
        observe(self.store.db.engine, seen)
        try:
            self.rt.instance_claim(inst, "a")
        finally:
            unobserve(self.store.db.engine, seen)
        inserts = {sql.split()[2]: sql for sql, _ in seen.ran if sql.startswith("INSERT")}
        with self.store.db.engine.connect() as conn:
            instance_row = conn.execute(
                sa.select(T_INST).where(T_INST.c.uuid == inst.uuid)).one()._asdict()
            allocation_row = conn.execute(
                sa.select(T_ALLOC).where(T_ALLOC.c.consumer_uuid == inst.uuid)).one()._asdict()
        return inserts, instance_row, allocation_row

    def test_a_plain_claim_binds_none_of_the_null_columns(self):
        inserts, instance_row, allocation_row = self.inserts(races.instance())
        for column in self.NULLABLE_INSTANCE:
            self.assertNotIn(column, inserts["instances"])
            self.assertIsNone(instance_row[column], column)
        for column in self.NULLABLE_ALLOCATION:
            self.assertNotIn(column, inserts["allocations"])
            self.assertIsNone(allocation_row[column], column)
        self.assertEqual("building", instance_row["vm_state"])
        self.assertEqual(1, allocation_row["vcpu"])

    def test_the_general_steps_bind_none_of_the_null_columns_of_a_plain_row(self):
        # A plain claim's rows go as tuples (TestPlainRowsSQLite); the general
        # steps write the same rows with the same lean statements.
        from nova_lite.db import claim_writes
        from nova_lite.db.direct import observe, unobserve
        inst = races.instance()
        plan = _plan_for(inst, self.rt.get_node("a").uuid)
        seen = _SeenStatements()
        observe(self.store.db.engine, seen)
        try:
            self.store.db.write_direct("general", lambda conn: claim_writes.write_plans(
                conn, (plan,), 0.0))
        finally:
            unobserve(self.store.db.engine, seen)
        inserts = {sql.split()[2]: sql for sql, _ in seen.ran if sql.startswith("INSERT")}
        self.assertEqual({"instances", "allocations"}, set(inserts))
        for column in self.NULLABLE_INSTANCE:
            self.assertNotIn(column, inserts["instances"])
        for column in self.NULLABLE_ALLOCATION:
            self.assertNotIn(column, inserts["allocations"])

    def test_a_value_in_any_of_them_writes_every_column(self):
        inst = races.instance(availability_zone="az1")
        inserts, instance_row, allocation_row = self.inserts(inst)
        for column in self.NULLABLE_INSTANCE:
            self.assertIn(column, inserts["instances"])
        self.assertEqual("az1", instance_row["availability_zone"])
        self.assertNotIn("numa_topology", inserts["allocations"])   # that row's are NULL


class TestPlainRowsSQLite(StaleAndKnownMixin, base.SQLiteBackend, base.TestCase):
    """SQLite: a plain claim decided on the current record writes its rows as
    tuples (:func:`~nova_lite.db.claim_writes.write_plain_rows`): the rows
    the general steps write, in the same three statements; a record the
    node moved on from, or a known instance, takes the general steps."""

    def setUp(self):
        super().setUp()
        self.plain = []
        from nova_lite.db import claim_writes
        real = claim_writes.write_plain_rows

        def noted(conn, plan, now):
            written = real(conn, plan, now)
            self.plain.append(written)
            return written
        import fixtures
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.claim_writes.write_plain_rows", noted))

    def claim(self, node, inst, decided=None):
        return self.store.claim(node, [ClaimRequest(inst.uuid)],
                                TestOneStatementClaim.decider(inst, decided))

    def test_a_current_record_writes_the_rows_of_the_general_steps(self):
        from nova_lite.db import claim_writes
        node = self.a.get_node("a")
        inst = races.instance()
        seen = TestOneStatementClaim.seen(self)
        after, _ = self.claim(node, inst)
        self.assertEqual([True], self.plain)
        self.assertEqual(["UPDATE compute_nodes", "INSERT INTO instances",
                          "INSERT INTO allocations"],
                         [" ".join(sql.split()[:3]) if sql.startswith("INSERT")
                          else " ".join(sql.split()[:2]) for sql, _ in seen.ran])
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual(after.usage, self.store.get_compute_node(races.HOST, "a").usage)
        self.assertIsNone(_usage_row(self.store, node.uuid))
        # The same plan's rows written by the general steps, for a twin.
        twin = races.instance()
        plan = _plan_for(twin, node.uuid)
        self.assertTrue(claim_writes.plain_rows(plan))
        self.store.db.write_direct("general", lambda conn: claim_writes.write_plans(
            conn, (plan,), 0.0))
        self.assertEqual(_rows_of(self.store, twin), _rows_of(self.store, inst))
        self.assertEqual(races.HOST, self.store.get_instance(inst.uuid).host)
        self.assertEqual("a", self.store.get_instance(inst.uuid).node)

    def assert_plain_rows(self, written):
        self.assertEqual(written, self.plain)

    def forget_plain_rows(self):
        del self.plain[:]   # the noted writer is every store's

    def test_only_a_plain_plan_takes_the_tuples(self):
        from nova_lite.db import claim_writes
        node = self.a.get_node("a")
        plain = _plan_for(races.instance(), node.uuid)
        self.assertTrue(claim_writes.plain_rows(plain))
        others = {
            "zone": attrs.evolve(plain, instance=attrs.evolve(plain.instance,
                                                              availability_zone="az1")),
            "task state": attrs.evolve(plain, instance=attrs.evolve(plain.instance,
                                                                    task_state="spawning")),
            "other class": attrs.evolve(plain, allocation=attrs.evolve(
                plain.allocation, resources=dict(plain.allocation.resources, VGPU=1))),
            "no instance": attrs.evolve(plain, instance=None),
        }
        for name, plan in others.items():
            with self.subTest(name):
                self.assertFalse(claim_writes.plain_rows(plan))

    def test_rows_out_of_their_statement_s_order_are_refused_before_they_run(self):
        from nova_lite.db import claim_writes
        statement = claim_writes._LEAN_INSERT_ALLOCATION.lean
        names = claim_writes._PLAIN_ALLOCATION_NAMES
        swapped = (names[1], names[0], *names[2:])
        before = base.dump(self.store)
        exc = self.assertRaises(ValueError, self.store.db.write_direct, "rows", lambda conn:
                                conn.execute_row(statement, swapped, (None,) * len(names)))
        self.assertIn("in their order", str(exc))
        self.assertEqual(before, base.dump(self.store))
