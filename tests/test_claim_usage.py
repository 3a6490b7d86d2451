"""A claim that lost its race decides on usage recorded at the generation it holds.

A claim whose compare-and-swap fails re-reads the node under the node row's
lock.  Instead of summing every allocation of the node there, it reads the
``node_usage`` row the previous such claim recorded, but only if that row
is of exactly the generation the claim moved the node from; any other
change since (a release, an audit, a heal) moved the generation, and the
allocations are summed again.  Every case runs on a SQLite file and on
PostgreSQL; the PostgreSQL cases also show that competing claims queue on
the node row's lock, within the busy bound.
"""

import threading
import time
import uuid

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.db import Store, models
from nova_lite.db.store import ClaimPlan, ClaimRequest
from nova_lite.exception import DatabaseBusy
from nova_lite.objects import Allocation
from tests import test_claim_races as races
from tests.reliability import base

T_USAGE, T_NODES, T_ALLOC = models.node_usage, models.compute_nodes, models.allocations
T_INV = models.inventories


def usage_row(store, node_uuid):
    def op(conn):
        return conn.execute(sa.select(T_USAGE).where(T_USAGE.c.node_uuid == node_uuid)).first()
    return store.db.read("read node_usage", op)


class UsageRowMixin:

    tracker = races.RaceMixin.tracker   # the race tests' trackers, not their tests

    def setUp(self):
        super().setUp()
        self.url = self.database_url()

    def stale_claim(self, stale, fresh, fl=None):
        """``fresh`` claims first, so ``stale``'s next claim loses its compare-and-swap."""
        fresh.instance_claim(races.instance(fl), "a")
        return stale.instance_claim(races.instance(fl), "a")

    def test_a_claim_that_lost_its_race_records_the_usage_it_committed(self):
        a, b = self.tracker(), self.tracker()
        self.stale_claim(a, b, races.flavor(vcpus=2, memory_mb=512, root_gb=3))
        node = a.get_node("a")
        row = usage_row(a.store, node.uuid)
        self.assertIsNotNone(row)
        self.assertEqual(node.generation, row.generation)
        self.assertEqual((4, 0, 1024, 6, 0),
                         (row.vcpu, row.pcpu, row.memory_mb, row.disk_gb, row.extras))
        self.assertEqual([], base.usage_row_problems(a.store))
        # The next stale claim decides on that row, and records the next one.
        self.stale_claim(b, a, races.flavor(vcpus=2, memory_mb=512, root_gb=3))
        row = usage_row(a.store, node.uuid)
        self.assertEqual(node.generation + 2, row.generation)
        self.assertEqual((8, 2048, 12), (row.vcpu, row.memory_mb, row.disk_gb))
        self.assertEqual(8, b.get_node("a").used("VCPU"))
        self.assertNoRecordProblems(a.store)

    def test_the_usage_row_is_used_while_its_generation_is_the_nodes(self):
        a, b = self.tracker(), self.tracker()
        self.stale_claim(a, b)
        node = a.get_node("a")
        # Pretend the node is full at its current generation: B's stale claim
        # decides on the row (proof that the row, not a sum, is read) ...
        self._set_row(a.store, node.uuid, vcpu=8)
        exc = self.assertRaises(ComputeResourcesUnavailable, b.instance_claim,
                                races.instance(), "a")
        self.assertIn("Free vcpu 0.00 VCPU < requested 1 VCPU", str(exc))
        self.assertEqual(node.generation, exc.generation)
        self.assertEqual(2, len(a.store.list_allocations()))
        # The true figure again: the next claim is admitted.
        self._set_row(a.store, node.uuid, vcpu=2)
        b.instance_claim(races.instance(), "a")
        self.assertEqual(3, b.get_node("a").used("VCPU"))
        self.assertNoRecordProblems(a.store)

    def test_a_usage_row_of_an_older_generation_is_never_used(self):
        a, b = self.tracker(), self.tracker()
        first = self.stale_claim(a, b)
        node = a.get_node("a")
        self.assertEqual(node.generation, usage_row(a.store, node.uuid).generation)
        # A release moves the generation; the row left behind says "full".
        b.abort_instance_claim(first.instance, "a")
        self._set_row(a.store, node.uuid, vcpu=8)
        b.instance_claim(races.instance(), "a")
        a.instance_claim(races.instance(), "a")     # stale: decided on the sums
        self.assertEqual(3, a.get_node("a").used("VCPU"))
        # An audit that changes the inventory moves it too.
        self._set_row(a.store, node.uuid, vcpu=0)
        self.tracker(vcpus=3)                        # the node shrinks to 3 vCPUs
        exc = self.assertRaises(ComputeResourcesUnavailable, a.instance_claim,
                                races.instance(), "a")
        self.assertIn("Free vcpu 0.00 VCPU < requested 1 VCPU", str(exc))
        self.assertEqual(3, len(a.store.list_allocations()))

    def test_a_deleted_and_recreated_node_starts_without_a_usage_row(self):
        a, b = self.tracker(), self.tracker()
        self.stale_claim(a, b)
        node = a.get_node("a")
        self.assertIsNotNone(usage_row(a.store, node.uuid))
        a.store.delete_compute_node(races.HOST, "a")
        self.assertIsNone(usage_row(a.store, node.uuid))

    def test_a_claim_not_optimistic_decides_once_on_the_records_under_the_lock(self):
        a, b = self.tracker(), self.tracker()
        current = a.get_node("a")
        seen = []

        def decide(node):
            seen.append(node.generation)
            plan = ClaimPlan(allocation=Allocation(
                consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
                node_uuid=node.uuid, flavor=inst.flavor, resources=base.requested(inst.flavor)),
                instance=attrs.evolve(inst, host=races.HOST, node="a"))
            return (plan,)

        inst = races.instance()
        after, _ = a.store.claim(current, [ClaimRequest(inst.uuid)], decide, optimistic=False)
        # Not decided on the caller's record: once, on the re-read one.
        self.assertEqual([current.generation], seen)
        self.assertEqual(current.generation + 1, after.generation)
        self.assertEqual(1, after.used("VCPU"))
        b.instance_claim(races.instance(), "a")
        seen.clear()
        inst = races.instance()
        after, _ = a.store.claim(after, [ClaimRequest(inst.uuid)], decide, optimistic=False)
        self.assertEqual([current.generation + 2], seen)
        self.assertEqual(3, after.used("VCPU"))
        self.assertNoRecordProblems(a.store)

    def test_trackers_that_keep_losing_races_admit_exactly_the_capacity(self):
        a, b = self.tracker(), self.tracker()
        admitted, refused = 0, 0
        for turn in range(12):   # alternate: each claim of one follows one of the other
            try:
                (a if turn % 2 else b).instance_claim(races.instance(), "a")
                admitted += 1
            except ComputeResourcesUnavailable:
                refused += 1
            if turn == 5:         # a release between: the usage row is left behind
                first = a.store.list_instances(node="a")[0]
                b.abort_instance_claim(first, "a")
        self.assertEqual((9, 3), (admitted, refused))
        self.assertEqual(8, a.get_node("a").used("VCPU"))
        self.assertEqual(8, b.get_node("a").used("VCPU"))
        self.assertNoRecordProblems(a.store)

    def _set_row(self, store, node_uuid, **values):
        def op(conn):
            conn.execute(T_USAGE.update().where(T_USAGE.c.node_uuid == node_uuid)
                         .values(**values))
        store.db.write("tamper with node_usage", op)


class TestUsageRowsSQLite(UsageRowMixin, base.SQLiteBackend, base.TestCase):

    def test_a_swap_records_the_usage_row_only_for_a_while_after_a_lost_race(self):
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.store.USAGE_ROW_CLAIMS_AFTER_RACE", 2))
        a, b = self.tracker(), self.tracker()
        node = a.get_node("a")
        # No claim of A's store lost a race on the node: its swaps record no row
        # (nobody else writes the node, so nobody would read it).
        a.instance_claim(races.instance(), "a")
        self.assertEqual(node.generation + 1, a.get_node("a").generation)
        self.assertIsNone(usage_row(a.store, node.uuid))
        # B's claim loses its race: it re-reads the node under the lock, sums
        # the allocations (A's swap left no row) and records the row.  A's
        # claim then loses its race too, reads B's row and records the next.
        self.stale_claim(a, b)
        node = a.get_node("a")
        self.assertEqual((node.generation, 3), (usage_row(a.store, node.uuid).generation,
                                                usage_row(a.store, node.uuid).vcpu))
        # A's next claim decides under the lock (its tracker expects to lose
        # again) and the next swap, of two claims, records the row as well:
        # the two claims the count allows after the lost race.
        a.instance_claim(races.instance(), "a")
        a.build_claims([races.instance(), races.instance()], "a")
        node = a.get_node("a")
        row = usage_row(a.store, node.uuid)
        self.assertEqual((node.generation, 6, 6144, 6),
                         (row.generation, row.vcpu, row.memory_mb, row.disk_gb))
        # The count has run out: the next swap leaves the row behind, at an
        # older generation than the node's, so it is never read.
        a.instance_claim(races.instance(), "a")
        self.assertEqual(node.generation + 1, a.get_node("a").generation)
        self.assertEqual(node.generation, usage_row(a.store, node.uuid).generation)
        # Another race sets the count again; B decides on the sums, as ever.
        b.instance_claim(races.instance(), "a")
        self.assertEqual(8, b.get_node("a").used("VCPU"))
        self.assertEqual(b.get_node("a").generation, usage_row(a.store, node.uuid).generation)
        self.assertEqual([], base.usage_row_problems(a.store))
        self.assertNoRecordProblems(a.store)


class TestUsageRowsPostgreSQL(UsageRowMixin, base.PostgreSQLBackend, base.TestCase):

    def test_a_claim_that_wins_its_compare_and_swap_records_the_usage_of_its_record(self):
        a, b = self.tracker(), self.tracker()
        fresh = a.get_node("a")
        self.assertIsNone(usage_row(a.store, fresh.uuid))
        a.instance_claim(races.instance(races.flavor(vcpus=2, memory_mb=512, root_gb=3)), "a")
        node = a.get_node("a")
        self.assertEqual(fresh.generation + 1, node.generation)
        row = usage_row(a.store, node.uuid)
        self.assertEqual((node.generation, 2, 0, 512, 3, 0, fresh.generation),
                         (row.generation, row.vcpu, row.pcpu, row.memory_mb, row.disk_gb,
                          row.extras, row.since))
        # Several claims at once (the transaction's steps, not one statement).
        a.build_claims([races.instance(), races.instance()], "a")
        node = a.get_node("a")
        row = usage_row(a.store, node.uuid)
        self.assertEqual((node.generation, 4, 2560, 5),
                         (row.generation, row.vcpu, row.memory_mb, row.disk_gb))
        # A claim that loses its race decides on that row.
        self._set_row(a.store, node.uuid, vcpu=8)
        exc = self.assertRaises(ComputeResourcesUnavailable, b.instance_claim,
                                races.instance(), "a")
        self.assertIn("Free vcpu 0.00 VCPU < requested 1 VCPU", str(exc))
        self._set_row(a.store, node.uuid, vcpu=4)
        b.instance_claim(races.instance(), "a")
        self.assertEqual([], base.usage_row_problems(a.store))
        self.assertNoRecordProblems(a.store)


    def hold_node_row(self, node_uuid):
        """Another session takes the node row's lock; returns (connection, engine)."""
        engine = sa.create_engine(Store(self.url).db.url, poolclass=sa.pool.NullPool)
        self.addCleanup(engine.dispose)
        conn = engine.connect()
        self.addCleanup(conn.close)
        conn.begin()
        conn.execute(sa.select(T_NODES.c.generation).where(T_NODES.c.uuid == node_uuid)
                     .with_for_update())
        return conn

    def wait_for_lock_waiter(self, count=1, timeout=30):
        """Until ``count`` sessions of this test's schema wait on a lock (a
        condition, not a sleep); sessions of other tests sharing the database
        do not count."""
        engine = sa.create_engine(Store(self.url).db.url, poolclass=sa.pool.NullPool)
        self.addCleanup(engine.dispose)
        deadline = time.monotonic() + timeout
        with engine.connect() as conn:
            while time.monotonic() < deadline:
                waiting = conn.execute(sa.text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name = current_setting('application_name')"
                    " AND wait_event_type = 'Lock'")).scalar()
                conn.rollback()
                if waiting >= count:
                    return
                time.sleep(0.01)
        self.fail(f"fewer than {count} claim(s) waited on the node row's lock")

    def _fill(self, holder, node, vcpus):
        """The holder's change: an allocation of ``vcpus``."""
        holder.execute(T_ALLOC.insert().values(
            consumer_uuid=str(uuid.uuid4()), node_uuid=node.uuid, consumer_type="instance",
            instance_uuid=str(uuid.uuid4()), vcpu=vcpus, pcpu=0, memory_mb=0, disk_gb=0,
            flavor='{"name": "x"}', created_at=0.0))

    def test_a_claim_queues_on_the_node_row_and_decides_on_what_the_holder_wrote(self):
        a, b = self.tracker(), self.tracker()
        # The holder fills the node up to 6 of its 8 vCPUs.
        self._queue_and_decide_on_the_holders_rows(
            a, b, lambda holder, node: self._fill(holder, node, 6), used=6)

    def _lose_a_race(self, a, b):
        """``a``'s next claim goes straight to the bump, with the re-read sent
        behind it (one round trip): b claims 1 vCPU, then a's claim of 1 loses."""
        b.instance_claim(races.instance(races.flavor(vcpus=1)), "a")
        a.instance_claim(races.instance(races.flavor(vcpus=1)), "a")
        self.assertEqual(b.store.get_compute_node(races.HOST, "a").generation,
                         a.get_node("a").generation)

    def test_a_claim_that_lost_its_race_rereads_the_usage_committed_while_it_waited(self):
        a, b = self.tracker(), self.tracker()
        self._lose_a_race(a, b)
        self._queue_and_decide_on_the_holders_rows(
            a, b, lambda holder, node: self._fill(holder, node, 4), used=6)

    def test_a_claim_that_lost_its_race_rereads_the_inventory_committed_while_it_waited(self):
        # The re-read must run after the bump got the lock, not when it was
        # sent: the holder shrinks the node to 4 vCPUs, 2 of them used.
        a, b = self.tracker(), self.tracker()
        self._lose_a_race(a, b)

        def shrink(holder, node):
            holder.execute(T_INV.update().where(T_INV.c.node_uuid == node.uuid,
                                                T_INV.c.resource_class == "VCPU")
                           .values(total=4))
        self._queue_and_decide_on_the_holders_rows(a, b, shrink, used=2)

    def test_a_move_that_waits_on_the_node_rereads_the_inventory_the_holder_committed(self):
        # A move's claim is not the one statement: its bump and re-read are
        # sent together, and the re-read must still run once the bump has
        # the lock.  Two 1-vCPU instances, then a resize of one to 4 vCPUs
        # while the holder shrinks the node to 4.
        a, b = self.tracker(), self.tracker()
        moved = b.instance_claim(races.instance(races.flavor(vcpus=1)), "a").instance
        b.instance_claim(races.instance(races.flavor(vcpus=1)), "a")

        def shrink(holder, node):
            holder.execute(T_INV.update().where(T_INV.c.node_uuid == node.uuid,
                                                T_INV.c.resource_class == "VCPU")
                           .values(total=4))
        self._queue_and_decide_on_the_holders_rows(
            a, b, shrink, used=2,
            claim=lambda: a.resize_claim(moved, races.flavor(name="m4", vcpus=4), "a"))

    def _queue_and_decide_on_the_holders_rows(self, a, b, change, used, claim=None):
        """``a`` claims 4 vCPUs (a new instance's claim, or ``claim()``)
        while another session holds the node row; the holder makes
        ``change(holder, node)``, moves the generation as a claim would, and
        commits; ``a`` must decide on that and find 2 vCPUs free."""
        node = a.get_node("a")
        holder = self.hold_node_row(node.uuid)
        outcome = {}
        if claim is None:
            def claim():
                return a.instance_claim(races.instance(races.flavor(vcpus=4)), "a")

        def claim_and_keep_the_outcome():
            try:
                outcome["claim"] = claim()
            except Exception as exc:   # noqa: BLE001 - checked below
                outcome["error"] = exc

        thread = threading.Thread(target=claim_and_keep_the_outcome)
        thread.start()
        self.addCleanup(thread.join, 30)
        self.wait_for_lock_waiter()
        holder.execute(T_NODES.update().where(T_NODES.c.uuid == node.uuid).values(
            generation=T_NODES.c.generation + 1))
        change(holder, node)
        holder.commit()
        thread.join(30)
        self.assertFalse(thread.is_alive())
        # Waited, then decided on the holder's records: 2 free, 4 asked.
        self.assertIsInstance(outcome.get("error"), ComputeResourcesUnavailable)
        self.assertIn("Free vcpu 2.00 VCPU < requested 4 VCPU", str(outcome["error"]))
        self.assertEqual(node.generation + 1, outcome["error"].generation)
        self.assertEqual(used, b.get_node("a").used("VCPU"))

    def test_a_raced_claim_waiting_on_a_stuck_node_row_fails_busy_within_its_bound(self):
        # The bump and its re-read are sent together: the lock wait's bound
        # still ends the claim with "database busy", and nothing is written.
        rt, other = self.tracker(store=Store(self.url, busy_timeout=0.3)), self.tracker()
        self._lose_a_race(rt, other)
        self._claim_fails_busy_then_succeeds(rt, used_after=3)

    def test_a_claim_waiting_on_a_stuck_node_row_fails_busy_within_its_bound(self):
        rt = self.tracker(store=Store(self.url, busy_timeout=0.3))
        self._claim_fails_busy_then_succeeds(rt, used_after=1)

    def _claim_fails_busy_then_succeeds(self, rt, used_after):
        """``rt`` (busy bound 0.3 s) claims on node a while another session
        holds its row: "database busy", nothing written; then, the lock
        free, the claim goes through and node a uses ``used_after`` vCPUs."""
        node = rt.get_node("a")
        before = base.dump(rt.store)
        holder = self.hold_node_row(node.uuid)
        started = time.monotonic()
        exc = self.assertRaises(DatabaseBusy, rt.instance_claim, races.instance(), "a")
        self.assertLess(time.monotonic() - started, 10)
        self.assertIn("database busy", str(exc))
        self.assertIn("nothing was written", str(exc))
        holder.rollback()
        self.assertDumpEqual(before, base.dump(rt.store))
        rt.instance_claim(races.instance(), "a")
        self.assertEqual(used_after, rt.store.get_compute_node(races.HOST, "a").used("VCPU"))
