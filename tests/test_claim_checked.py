"""PostgreSQL checks a claim decided on a stale record, when only usage moved.

A claim of a new instance is one statement on PostgreSQL
(``claim_writes.PG_SINGLE_CLAIM``).  When the node moved on since the
record it was decided on, the statement still admits it if the node's
``node_usage`` row is current, nothing but usage changed since that record
(the row's ``since``), and the plan's bounds hold on the usage the database
has now; otherwise the claim decides again under the node's lock, in the
same transaction.  Each test pins one of those conditions: a claim that
fits, one that no longer fits, an inventory changed meanwhile, a NUMA
claim meanwhile, a claim checked on what the holder of the node's lock
committed while it waited, and an instance recorded by another request
while the statement ran.
"""

import threading

import attrs
import sqlalchemy as sa
from testtools import content

from nova_lite import objects, work
from nova_lite.compute import placement
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.node_usage import synced
from nova_lite.db import models, rows
from nova_lite.db.store import ClaimRequest
from nova_lite.objects import NUMACell, NUMATopology
from nova_lite.work import WorkRequest
from tests import test_claim_races as races, test_claim_usage as usage
from tests.reliability import base

T_USAGE, T_INST, T_NODES = models.node_usage, models.instances, models.compute_nodes


def usage_row(store, node_uuid):
    return store.db.read("read node_usage", lambda conn: conn.execute(
        sa.select(T_USAGE).where(T_USAGE.c.node_uuid == node_uuid)).first())


def claim(rt, node, inst, decided):
    """``rt``'s store claims ``inst`` on ``node`` with the tracker's own
    decision, noting in ``decided`` the generation of every record it
    decides on."""
    ask = placement.ClaimAsk.build(inst, inst.flavor, objects.ZERO_OVERHEAD)

    def decide(seen):
        decided.append(seen.generation)
        return placement.decide_claims(seen, races.HOST, "a", [ask], None)

    return rt.store.claim(node, [ClaimRequest(inst.uuid)], decide)


class TestDatabaseCheckedClaims(base.PostgreSQLBackend, base.TestCase):

    tracker = races.RaceMixin.tracker
    wait_for_lock_waiter = usage.TestUsageRowsPostgreSQL.wait_for_lock_waiter
    hold_node_row = usage.TestUsageRowsPostgreSQL.hold_node_row

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    def current_usage_row(self, a, b):
        """Claims until node a's usage row is current, kept by the claims since
        a generation ``b``'s record is at least as new as; returns b's record."""
        b.get_node("a")
        a.instance_claim(races.instance(), "a")   # its swap records the row; b is stale
        b.instance_claim(races.instance(), "a")   # checked by the database on the row
        a.instance_claim(races.instance(), "a")   # checked by the database
        node = b.get_node("a")
        row = usage_row(b.store, node.uuid)
        self.assertIsNotNone(row)
        self.assertLessEqual(row.since, node.generation)
        return node

    def assertTrackedIsRecorded(self, rt):
        """``rt``'s record of node a is the store's, usage and all."""
        tracked = rt._nodes["a"]
        recorded = rt.store.load_node(tracked.uuid)
        self.assertEqual(recorded.generation, tracked.generation)
        self.assertEqual(synced(recorded), synced(tracked))

    def test_a_stale_record_is_admitted_by_the_database_when_only_usage_moved(self):
        a, b = self.tracker(), self.tracker()
        stale = self.current_usage_row(a, b)
        a.instance_claim(races.instance(races.flavor(vcpus=2)), "a")
        decided = []
        inst = races.instance(races.flavor(vcpus=3))
        after, _ = claim(b, stale, inst, decided)
        # Decided once, on the stale record: the database admitted it.
        self.assertEqual([stale.generation], decided)
        self.assertEqual(stale.generation + 2, after.generation)
        self.assertEqual(8, after.used("VCPU"))
        self.assertEqual(synced(b.store.load_node(stale.uuid)), synced(after))
        row = usage_row(b.store, stale.uuid)
        self.assertEqual((after.generation, 8, 5 * 1024, 5),
                         (row.generation, row.vcpu, row.memory_mb, row.disk_gb))
        self.assertNoRecordProblems(b.store)
        self.assertEqual([], base.usage_row_problems(b.store))

    def test_a_stale_plan_that_no_longer_fits_is_decided_again_and_refused(self):
        a, b = self.tracker(), self.tracker()
        stale = self.current_usage_row(a, b)          # 3 of 8 vCPUs used
        a.instance_claim(races.instance(races.flavor(vcpus=4)), "a")
        before = base.dump(b.store)
        decided = []
        exc = self.assertRaises(ComputeResourcesUnavailable, claim, b, stale,
                                races.instance(races.flavor(vcpus=2)), decided)
        # Admitted on the stale record, refused by the database's check, then
        # decided under the lock on the records, with Nova's words.
        self.assertEqual([stale.generation, stale.generation + 1], decided)
        self.assertIn("Free vcpu 1.00 VCPU < requested 2 VCPU", str(exc))
        self.assertDumpEqual(before, base.dump(b.store))

    def test_a_record_older_than_an_inventory_change_is_decided_again(self):
        a, b = self.tracker(), self.tracker()
        stale = self.current_usage_row(a, b)          # 3 of 8 vCPUs used
        self.tracker(vcpus=4)                          # an audit: the node has 4 vCPUs
        a.instance_claim(races.instance(), "a")        # under the lock: the row again
        self.assertGreater(usage_row(a.store, stale.uuid).since, stale.generation)
        decided = []
        exc = self.assertRaises(ComputeResourcesUnavailable, claim, b, stale,
                                races.instance(), decided)
        # b's record says 8 vCPUs and the row has room for 1 more of those;
        # the row says nothing but usage changed only since after b's record.
        self.assertEqual([stale.generation, stale.generation + 2], decided)
        self.assertIn("Free vcpu 0.00 VCPU < requested 1 VCPU", str(exc))
        self.assertEqual(4, b.get_node("a").used("VCPU"))

    def test_a_claim_with_extras_under_the_lock_ends_what_the_row_vouches_for(self):
        numa = NUMATopology(cells=[NUMACell(id=0, cpuset={0, 1, 2, 3, 4, 5, 6, 7},
                                            memory_mb=8192)])
        a, b = self.tracker(numa_topology=numa), self.tracker(numa_topology=numa)
        c = self.tracker(numa_topology=numa)
        stale = self.current_usage_row(a, b)
        c.get_node("a")
        a.instance_claim(races.instance(), "a")
        # c is stale: its NUMA claim is decided under the lock and places a cell.
        c.instance_claim(races.instance(races.flavor(**{"hw:numa_nodes": "1"})), "a")
        self.assertEqual(1, len(a.store.load_node(stale.uuid).numa_placements))
        b.instance_claim(races.instance(), "a")
        # b's record had no NUMA placement: it must not be taken as current.
        self.assertEqual(1, len(b.get_node("a").numa_placements))
        self.assertTrackedIsRecorded(b)
        self.assertNoRecordProblems(b.store)

    def test_trackers_on_one_node_keep_records_equal_to_the_stores(self):
        a, b = self.tracker(), self.tracker()
        self.current_usage_row(a, b)
        for turn in range(4):
            (a if turn % 2 else b).instance_claim(races.instance(), "a")
            self.assertTrackedIsRecorded(a if turn % 2 else b)
        self.assertEqual(7, a.get_node("a").used("VCPU"))
        self.assertNoRecordProblems(a.store)
        self.assertEqual([], base.usage_row_problems(a.store))

    def test_a_claim_that_waits_on_the_node_is_checked_on_what_the_holder_wrote(self):
        # 3 + 3 + 2 <= 8: admitted by the database, on the holder's usage row.
        decided, outcome = self._claim_behind_a_holder(vcpus=3)
        node = outcome["after"]
        self.assertEqual([node.generation - 2], decided)
        self.assertEqual(8, node.used("VCPU"))
        self.assertEqual(synced(self.b.store.load_node(node.uuid)), synced(node))

    def test_a_claim_that_waits_on_the_node_is_refused_on_what_the_holder_wrote(self):
        # 3 + 4 + 2 > 8: the database's check fails, the decision under the
        # lock refuses.
        decided, outcome = self._claim_behind_a_holder(vcpus=4)
        exc = outcome["error"]
        self.assertIsInstance(exc, ComputeResourcesUnavailable)
        self.assertIn("Free vcpu 1.00 VCPU < requested 2 VCPU", str(exc))
        self.assertEqual(decided[0] + 1, decided[1])
        self.assertEqual(7, self.b.store.get_compute_node(races.HOST, "a").used("VCPU"))

    def claim_behind_a_lock(self, rt, node, inst, decided):
        """Start ``claim(rt, node, inst, decided)`` in a thread and return once
        it waits on a lock: ``(outcome, join)``, ``outcome`` gets its "after"
        node or its "error", ``join()`` waits for it to end."""
        outcome = {}

        def run():
            try:
                outcome["after"] = claim(rt, node, inst, decided)[0]
            except Exception as exc:   # noqa: BLE001 - checked by the callers
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        self.addCleanup(thread.join, 30)
        self.addOnException(lambda exc_info: self.addDetail(
            "outcome", content.text_content(repr(outcome))))
        self.wait_for_lock_waiter()

        def join():
            thread.join(30)
            self.assertFalse(thread.is_alive())
        return outcome, join

    def _claim_behind_a_holder(self, vcpus):
        """b claims 2 vCPUs on its stale record while another session holds
        the node row and commits what a claim of ``vcpus`` writes: the row's
        usage moves on with the node.  Returns (decided, outcome)."""
        a, self.b = self.tracker(), self.tracker()
        stale = self.current_usage_row(a, self.b)      # 3 of 8 vCPUs used
        holder = self.hold_node_row(stale.uuid)
        decided = []
        outcome, join = self.claim_behind_a_lock(
            self.b, stale, races.instance(races.flavor(vcpus=2)), decided)
        holder.execute(T_NODES.update().where(T_NODES.c.uuid == stale.uuid).values(
            generation=T_NODES.c.generation + 1))
        _write_claim_rows(holder, stale, races.instance(races.flavor(vcpus=vcpus)))
        holder.execute(T_USAGE.update().where(T_USAGE.c.node_uuid == stale.uuid).values(
            generation=T_USAGE.c.generation + 1, vcpu=T_USAGE.c.vcpu + vcpus,
            memory_mb=T_USAGE.c.memory_mb + 1024, disk_gb=T_USAGE.c.disk_gb + 1))
        holder.commit()
        join()
        self.assertEqual([], base.usage_row_problems(self.b.store))
        self.assertNoRecordProblems(self.b.store)
        return decided, outcome

    def hold_new_instance_row(self, tracker, inst):
        """Another session records ``inst`` and holds its row's key, in a
        transaction left open: commit the connection returned to let go."""
        engine = sa.create_engine(tracker.store.db.url, poolclass=sa.pool.NullPool)
        self.addCleanup(engine.dispose)
        holder = engine.connect()
        self.addCleanup(holder.close)
        holder.begin()
        holder.execute(T_INST.insert().values(
            uuid=inst.uuid, vm_state="building", project_id="p", user_id="",
            flavor='{"name": "m1", "vcpus": 1, "memory_mb": 1024, "root_gb": 1}',
            created_at=0.0, updated_at=0.0))
        return holder

    def test_an_instance_recorded_while_the_statement_runs_is_claimed_by_the_transaction(self):
        a = self.tracker()
        node = a.get_node("a")
        inst = races.instance()
        # Another session records the instance and holds its row's key: the
        # statement's insert waits on it, then breaks the key.
        holder = self.hold_new_instance_row(a, inst)
        outcome, join = self.claim_behind_a_lock(a, node, inst, [])
        holder.commit()
        join()
        self.assertNotIn("error", outcome)
        # The key broke, nothing of the statement stayed; the transaction
        # then found the instance known and claimed it.
        self.assertEqual(node.generation + 1, outcome["after"].generation)
        self.assertEqual("a", a.store.get_instance(inst.uuid).node)
        self.assertEqual(1, len(a.store.list_allocations()))
        self.assertEqual(1, a.store.get_compute_node(races.HOST, "a").used("VCPU"))
        self.assertNoRecordProblems(a.store)

    def test_an_instance_recorded_while_the_statement_runs_gets_its_task_once(self):
        a = self.tracker()
        node = a.get_node("a")
        inst = races.instance()
        holder = self.hold_new_instance_row(a, inst)
        ask = placement.ClaimAsk.build(inst, inst.flavor, objects.ZERO_OVERHEAD)
        task = WorkRequest(host=races.HOST, kind=work.BUILD, instance_uuid=inst.uuid)
        outcome = {}

        def run():
            try:
                outcome["made"] = a.store.claim_with_tasks(
                    node, [ClaimRequest(inst.uuid)],
                    lambda seen: placement.decide_claims(seen, races.HOST, "a", [ask], None),
                    tasks=[task])[2]
            except Exception as exc:   # noqa: BLE001 - checked below
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        self.addCleanup(thread.join, 30)
        self.wait_for_lock_waiter()
        holder.commit()
        thread.join(30)
        self.assertNotIn("error", outcome)
        # The statement and the task sent with it broke on the key and were
        # rolled back; the transaction that claimed the known instance
        # recorded the task once.
        recorded = a.store.tasks.find(kinds=(work.BUILD,))
        self.assertEqual([inst.uuid], [t.instance_uuid for t in recorded])
        self.assertEqual([t.id for t in outcome["made"]], [t.id for t in recorded])
        self.assertEqual(1, a.store.get_compute_node(races.HOST, "a").used("VCPU"))
        self.assertNoRecordProblems(a.store)


def _write_claim_rows(conn, node, inst):
    """The instance and allocation rows a claim of ``inst`` on ``node`` writes."""
    placed = attrs.evolve(inst, host=races.HOST, node=node.nodename)
    allocation = objects.Allocation(
        consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
        node_uuid=node.uuid, flavor=inst.flavor, resources=base.requested(inst.flavor))
    conn.execute(T_INST.insert().values(rows.new_instance_values(placed, 0.0)))
    conn.execute(models.allocations.insert().values(rows.allocation_values(allocation, 0.0)))


class TestStaleClaimsOnSQLite(base.SQLiteBackend, base.TestCase):
    """SQLite's claim holds the whole file: a stale record is decided again."""

    tracker = races.RaceMixin.tracker

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    def test_sqlite_does_not_check_stale_claims_in_the_database(self):
        a, b = self.tracker(), self.tracker()
        self.assertFalse(a.store.checks_stale_claims)
        stale = b.get_node("a")
        a.instance_claim(races.instance(), "a")
        decided = []
        after, _ = claim(b, stale, races.instance(), decided)
        self.assertEqual([stale.generation, stale.generation + 1], decided)
        self.assertEqual(2, after.used("VCPU"))
        self.assertEqual(synced(b.store.load_node(stale.uuid)), synced(after))


class TestClaimsRacingOnAFreshNode(base.PostgreSQLBackend, base.TestCase):
    """Claims decided on one record of a node that has no usage row yet.

    The compare-and-swap's winner records the node's usage row from the
    record it was decided on (the node at exactly the generation it moved
    from); the claims that queued behind it, whose statements began before
    that row existed, find it and are checked on it by the database.
    """

    tracker = races.RaceMixin.tracker
    hold_node_row = usage.TestUsageRowsPostgreSQL.hold_node_row

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    wait_for_lock_waiter = usage.TestUsageRowsPostgreSQL.wait_for_lock_waiter

    def race(self, vcpus, claimers=4):
        """``claimers`` trackers (each with its own Store) claim ``vcpus`` each
        on one record of the fresh node, all queued on its row's lock before
        the first goes: ``(record, outcomes)``, each ``(decided, after or
        error)``."""
        trackers = [self.tracker() for _ in range(claimers)]
        record = trackers[0].get_node("a")
        self.assertIsNone(usage_row(trackers[0].store, record.uuid))
        holder = self.hold_node_row(record.uuid)
        outcomes = [([], None) for _ in trackers]

        def run(index):
            decided = outcomes[index][0]
            try:
                after = claim(trackers[index], record,
                              races.instance(races.flavor(vcpus=vcpus)), decided)[0]
            except Exception as exc:   # noqa: BLE001 - checked by the callers
                outcomes[index] = (decided, exc)
            else:
                outcomes[index] = (decided, after)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(claimers)]
        for thread in threads:
            thread.start()
            self.addCleanup(thread.join, 30)
        self.wait_for_lock_waiter(claimers)
        holder.rollback()   # nothing changed: the claims go one by one
        for thread in threads:
            thread.join(30)
            self.assertFalse(thread.is_alive())
        self.addDetail("outcomes", content.text_content(repr(outcomes)))
        return record, outcomes

    def test_claims_that_fit_are_all_admitted_by_the_database(self):
        record, outcomes = self.race(vcpus=2)
        # Each decided once, on the one record: no decision under the lock.
        self.assertEqual([[record.generation]] * 4, [decided for decided, _ in outcomes])
        afters = sorted(after.generation for _, after in outcomes)
        self.assertEqual(list(range(record.generation + 1, record.generation + 5)), afters)
        store = self.tracker().store
        recorded = store.load_node(record.uuid)
        self.assertEqual(8, recorded.used("VCPU"))
        self.assertEqual(record.generation + 4, recorded.generation)
        self.assertEqual(4, len(store.list_allocations(node_uuid=record.uuid)))
        last = max((after for _, after in outcomes), key=lambda n: n.generation)
        self.assertEqual(synced(recorded), synced(last))
        row = usage_row(store, record.uuid)
        self.assertEqual((record.generation + 4, 8, 4 * 1024, 4, 0, record.generation),
                         (row.generation, row.vcpu, row.memory_mb, row.disk_gb, row.extras,
                          row.since))
        self.assertEqual([], base.usage_row_problems(store))
        self.assertNoRecordProblems(store)

    def test_claims_past_the_capacity_are_refused_and_the_records_stay_exact(self):
        # 8 vCPUs: two claims of 3 fit, the third and fourth do not.
        record, outcomes = self.race(vcpus=3)
        admitted = [after for _, after in outcomes if isinstance(after, objects.ComputeNode)]
        refused = [exc for _, exc in outcomes if isinstance(exc, ComputeResourcesUnavailable)]
        self.assertEqual((2, 2), (len(admitted), len(refused)), outcomes)
        for exc in refused:
            self.assertIn("Free vcpu 2.00 VCPU < requested 3 VCPU", str(exc))
        # The admitted decided once; the refused were checked by the
        # database, then decided again under the lock on the records.
        self.assertEqual([1, 1, 2, 2], sorted(len(decided) for decided, _ in outcomes))
        store = self.tracker().store
        recorded = store.load_node(record.uuid)
        self.assertEqual(6, recorded.used("VCPU"))
        self.assertEqual(2, len(store.list_allocations(node_uuid=record.uuid)))
        self.assertEqual(2, len(store.list_instances()))
        self.assertEqual([], base.usage_row_problems(store))
        self.assertNoRecordProblems(store)


class TestUsageRowOfTheSwap(base.PostgreSQLBackend, base.TestCase):
    """What the one statement's compare-and-swap leaves in ``node_usage``."""

    tracker = races.RaceMixin.tracker

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    def test_a_row_left_behind_by_a_release_is_replaced_from_the_record(self):
        a = self.tracker()
        first = a.instance_claim(races.instance(races.flavor(vcpus=3)), "a")
        a.instance_claim(races.instance(), "a")
        a.abort_instance_claim(first.instance, "a")    # moves the generation: row stale
        node = a.get_node("a")
        self.assertLess(usage_row(a.store, node.uuid).generation, node.generation)
        decided = []
        after, _ = claim(a, node, races.instance(races.flavor(vcpus=2)), decided)
        self.assertEqual([node.generation], decided)
        row = usage_row(a.store, node.uuid)
        self.assertEqual((after.generation, 3, node.generation),
                         (row.generation, row.vcpu, row.since))
        self.assertEqual([], base.usage_row_problems(a.store))

    def test_a_current_row_keeps_its_since(self):
        a, b = self.tracker(), self.tracker()
        stale = b.get_node("a")
        a.instance_claim(races.instance(), "a")
        a.instance_claim(races.instance(), "a")
        node = a.get_node("a")
        self.assertEqual(stale.generation, usage_row(a.store, node.uuid).since)
        after, _ = claim(a, node, races.instance(), [])
        row = usage_row(a.store, node.uuid)
        # The claims since b's record changed usage only: b's record is still
        # vouched for, and its plan is checked by the database.
        self.assertEqual((after.generation, 3, stale.generation),
                         (row.generation, row.vcpu, row.since))
        decided = []
        claim(b, stale, races.instance(), decided)
        self.assertEqual([stale.generation], decided)
        self.assertEqual([], base.usage_row_problems(a.store))
        self.assertNoRecordProblems(a.store)

    def test_a_record_with_extras_is_recorded_only_through_a_current_row(self):
        numa = NUMATopology(cells=[NUMACell(id=0, cpuset={0, 1, 2, 3, 4, 5, 6, 7},
                                            memory_mb=8192)])
        a = self.tracker(numa_topology=numa)
        a.instance_claim(races.instance(races.flavor(**{"hw:numa_nodes": "1"})), "a")
        node = a.get_node("a")
        # A NUMA plan: the row counts it among the extras, and vouches for no
        # record older than the claim.
        row = usage_row(a.store, node.uuid)
        self.assertEqual((node.generation, 1, 1, node.generation),
                         (row.generation, row.vcpu, row.extras, row.since))
        # A record with a NUMA cell placed, and the row current: the row
        # takes the next claim, its count of extras and its since kept.
        plain, _ = claim(a, node, races.instance(), [])
        row = usage_row(a.store, node.uuid)
        self.assertEqual((plain.generation, 2, 1, node.generation),
                         (row.generation, row.vcpu, row.extras, row.since))
        # A release moves the node on: the row is stale, and the record's
        # usage (a NUMA cell placed) is not one the statement records.
        a.abort_instance_claim(a.store.get_instance(
            [i.uuid for i in a.store.list_instances() if i.numa_topology is None][0]), "a")
        node = a.get_node("a")
        before = usage_row(a.store, node.uuid)
        self.assertLess(before.generation, node.generation)
        after, _ = claim(a, node, races.instance(), [])
        self.assertEqual(node.generation + 1, after.generation)
        self.assertEqual(before, usage_row(a.store, node.uuid))
        self.assertEqual(2, a.store.load_node(node.uuid).used("VCPU"))
        self.assertEqual([], base.usage_row_problems(a.store))
        self.assertNoRecordProblems(a.store)
