"""The ResourceTracker: claim lifecycle, moves, and the periodic audit.

After every step an audit must leave the usage exactly as the step left it,
and a fresh tracker reading the same records must agree.
"""

import logging
import threading
import time

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite.compute.claims import ComputeResourcesUnavailable, MoveClaim
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import models
from nova_lite.exception import InstanceNotFound, InvalidInput, NodeNotFound
from tests import base
from tests.base import flavor, instance

SMALL = flavor(name="small", vcpus=1, memory_mb=512, root_gb=10)
BIG = flavor(name="big", vcpus=4, memory_mb=2048, root_gb=20)


def use(flv):
    return {"VCPU": flv.vcpus, "MEMORY_MB": flv.memory_mb, "DISK_GB": flv.root_gb}


def plus(*usages):
    total = {}
    for u in usages:
        for rc, n in u.items():
            total[rc] = total.get(rc, 0) + n
    return total


class TrackerTestCase(base.TestCase):

    def multinode(self, nodes=("a", "b"), **kw):
        kw.setdefault("vcpus", 8)
        kw.setdefault("memory_mb", 8192)
        kw.setdefault("local_gb", 100)
        return self.make_tracker("fake.multinode", nodes=list(nodes), **kw)

    def check(self, rt, expected):
        """Usage per node now, after an audit, and as a fresh tracker reads it."""
        for nodename, usage in expected.items():
            self.assertUsage(rt, nodename, usage)
        result = rt.update_available_resource()
        self.assertEqual({}, dict(result.failed))
        for nodename, usage in expected.items():
            self.assertUsage(rt, nodename, usage)
        fresh = ResourceTracker(rt.host, rt.driver, store=rt.store, settings=rt.settings)
        for nodename, usage in expected.items():
            self.assertEqual(usage, dict(fresh.get_node(nodename).usage))


class TestInstanceLifecycle(TrackerTestCase):

    def test_build_delete(self):
        driver, rt = self.multinode()
        claim = rt.instance_claim(instance(SMALL), "a")
        driver.spawn(claim.instance)
        self.check(rt, {"a": use(SMALL), "b": {}})
        inst = attrs.evolve(claim.instance, vm_state="active")
        rt.update_usage(inst)
        self.check(rt, {"a": use(SMALL), "b": {}})
        rt.update_usage(attrs.evolve(inst, vm_state="deleted"))
        # freed at once, before any audit
        self.assertUsage(rt, "a", {})
        self.assertEqual("deleted", rt.store.get_instance(inst.uuid).vm_state)
        driver.destroy(inst)
        self.check(rt, {"a": {}, "b": {}})

    def test_shelve_offload_frees_at_once(self):
        _, rt = self.multinode()
        keep = rt.instance_claim(instance(BIG), "a").instance
        inst = rt.instance_claim(instance(SMALL), "a").instance
        rt.update_usage(attrs.evolve(inst, vm_state="shelved"))
        self.check(rt, {"a": plus(use(BIG), use(SMALL))})
        rt.update_usage(attrs.evolve(inst, vm_state="shelved_offloaded"))
        self.assertUsage(rt, "a", use(BIG))
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual(("shelved_offloaded", None, None),
                         (stored.vm_state, stored.host, stored.node))
        self.check(rt, {"a": use(BIG)})
        # unshelve: a new claim
        rt.instance_claim(attrs.evolve(inst, vm_state="shelved_offloaded"), "b")
        self.check(rt, {"a": use(BIG), "b": use(SMALL)})
        self.assertEqual(keep.uuid, rt.store.list_instances(node="a")[0].uuid)

    def test_state_change_keeps_the_claim(self):
        _, rt = self.multinode()
        inst = rt.instance_claim(instance(SMALL), "a").instance
        for state in ("active", "stopped", "paused", "error"):
            rt.update_usage(attrs.evolve(inst, vm_state=state))
            self.check(rt, {"a": use(SMALL)})

    def test_per_node_state(self):
        _, rt = self.multinode(nodes=("a", "b", "c"))
        rt.instance_claim(instance(BIG), "b")
        self.check(rt, {"a": {}, "b": use(BIG), "c": {}})
        nodes = {n.nodename: n for n in rt.store.get_compute_nodes(self.host)}
        self.assertEqual({"a", "b", "c"}, set(nodes))
        self.assertEqual(3, len({n.uuid for n in nodes.values()}))


class TestClaimArguments(TrackerTestCase):

    def test_a_claim_without_a_node_name_is_refused_and_writes_nothing(self):
        _, rt = self.multinode()
        for nodename in (None, "", 7):
            exc = self.assertRaises(InvalidInput, rt.instance_claim, instance(SMALL), nodename)
            self.assertIn("nodename", str(exc))
        self.assertEqual([], rt.store.list_instances(live_only=False))
        self.assertEqual([], rt.store.list_allocations())

    def test_several_instances_are_claimed_all_or_none(self):
        _, rt = self.multinode()
        room = rt.get_node("a").capacity("MEMORY_MB")
        half = flavor(name="half", vcpus=1, memory_mb=(room - 1024) // 2, root_gb=1)
        first, second, third = (instance(half) for _ in range(3))
        claims = rt.instance_claims([first, second], "a")
        self.assertEqual([first.uuid, second.uuid], [c.instance.uuid for c in claims])
        self.assertEqual(claims[0].generation, claims[1].generation)
        self.assertEqual(2, rt.get_node("a").used("VCPU"))
        before = rt.store.list_allocations()
        # The first fits the room left on its own; with the second it does not.
        small = instance(SMALL)
        self.assertRaises(ComputeResourcesUnavailable, rt.instance_claims, [small, third], "a")
        self.assertEqual(before, rt.store.list_allocations())
        self.assertEqual([], [i for i in rt.store.list_instances(live_only=False)
                              if i.uuid in (small.uuid, third.uuid)])
        rt.instance_claims([small], "a")   # on its own it fits
        self.assertRaises(InvalidInput, rt.instance_claims, [third, third], "a")


class TestResize(TrackerTestCase):

    def start(self, nodes=("a", "b"), **kw):
        _, rt = self.multinode(nodes=nodes, **kw)
        inst = attrs.evolve(rt.instance_claim(instance(SMALL), "a").instance,
                            vm_state="active")
        rt.update_usage(inst)
        return rt, inst

    def test_resize_then_confirm(self):
        rt, inst = self.start()
        claim = rt.resize_claim(inst, BIG, "b")
        self.assertIsInstance(claim, MoveClaim)
        self.assertEqual(("a", "b", "resize"), (claim.migration.source_node,
                                                claim.migration.dest_node,
                                                claim.migration.migration_type))
        self.assertEqual(use(BIG), claim.claimed)
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})
        rt.drop_move_claim(inst, "a", SMALL)      # confirm: old flavor at the source
        self.check(rt, {"a": {}, "b": use(BIG)})
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual(("b", BIG), (stored.node, stored.flavor))
        self.assertEqual("confirmed", rt.store.list_migrations(inst.uuid)[0].status)
        rt.update_usage(attrs.evolve(stored, vm_state="deleted"))
        self.check(rt, {"a": {}, "b": {}})

    def test_resize_then_revert(self):
        rt, inst = self.start()
        rt.resize_claim(inst, BIG, "b")
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})
        rt.drop_move_claim(inst, "b", BIG)        # revert: new flavor at the destination
        self.check(rt, {"a": use(SMALL), "b": {}})
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual(("a", SMALL), (stored.node, stored.flavor))
        self.assertEqual("reverted", rt.store.list_migrations(inst.uuid)[0].status)

    def test_same_node_resize_counts_both_until_confirm(self):
        rt, inst = self.start()
        rt.resize_claim(inst, BIG, "a")
        self.check(rt, {"a": plus(use(SMALL), use(BIG)), "b": {}})
        rt.drop_move_claim(inst, "a", SMALL)
        self.check(rt, {"a": use(BIG), "b": {}})
        self.assertEqual(BIG, rt.store.get_instance(inst.uuid).flavor)

    def test_same_node_resize_counts_both_until_revert(self):
        rt, inst = self.start()
        rt.resize_claim(inst, BIG, "a")
        self.check(rt, {"a": plus(use(SMALL), use(BIG))})
        rt.drop_move_claim(inst, "a", BIG)
        self.check(rt, {"a": use(SMALL)})
        self.assertEqual(SMALL, rt.store.get_instance(inst.uuid).flavor)

    def test_a_move_starts_from_the_recorded_flavor_not_a_stale_copy(self):
        rt, inst = self.start()
        rt.resize_claim(inst, BIG, "a")
        rt.drop_move_claim(inst, "a", SMALL)       # confirmed: the record is BIG now
        stale = inst                                 # the caller still holds SMALL
        again = rt.resize_claim(stale, SMALL, "a").migration
        self.assertEqual(BIG, again.old_flavor)
        self.assertEqual(BIG, rt.store.list_migrations(inst.uuid)[-1].old_flavor)
        rt.drop_move_claim(stale, "a", BIG)          # confirm, by the old flavor
        self.assertEqual("confirmed", rt.store.list_migrations(inst.uuid)[-1].status)
        self.assertEqual(SMALL, rt.store.get_instance(inst.uuid).flavor)
        self.check(rt, {"a": use(SMALL), "b": {}})

    def test_same_node_resize_must_fit_beside_the_old_flavor(self):
        rt, inst = self.start(nodes=("a",), vcpus=4,
                              settings=self.settings(cpu_allocation_ratio=1.0,
                                                     reserved_host_memory_mb=0))
        exc = self.assertRaises(ComputeResourcesUnavailable, rt.resize_claim, inst, BIG, "a")
        self.assertEqual(["Free vcpu 3.00 VCPU < requested 4 VCPU"], exc.reasons)
        self.check(rt, {"a": use(SMALL)})
        self.assertEqual([], rt.store.list_migrations(inst.uuid))

    def test_failed_resize_aborts_in_the_context_manager(self):
        rt, inst = self.start()

        def migrate():
            with rt.resize_claim(inst, BIG, "b"):
                raise OSError("disk copy failed")
        self.assertRaises(OSError, migrate)
        self.check(rt, {"a": use(SMALL), "b": {}})
        self.assertEqual("error", rt.store.list_migrations(inst.uuid)[0].status)

    def test_delete_during_resize_frees_both(self):
        rt, inst = self.start()
        rt.resize_claim(inst, BIG, "b")
        rt.update_usage(attrs.evolve(inst, vm_state="deleted"))
        self.assertUsage(rt, "a", {})
        self.assertUsage(rt, "b", {})
        self.check(rt, {"a": {}, "b": {}})

    def test_drop_without_a_migration(self):
        rt, inst = self.start()
        self.assertRaises(InstanceNotFound, rt.drop_move_claim, inst, "a", SMALL)
        rt.resize_claim(inst, BIG, "b")
        self.assertRaises(InstanceNotFound, rt.drop_move_claim, inst, "b", SMALL)
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})

    def test_resize_across_hosts(self):
        store = self.sqlite_store()
        _, rt1 = self.make_tracker("fake", host="host1", store=store)
        _, rt2 = self.make_tracker("fake", host="host2", store=store)
        inst = rt1.instance_claim(instance(SMALL), "host1").instance
        rt2.resize_claim(inst, BIG, "host2")
        self.check(rt1, {"host1": use(SMALL)})
        self.check(rt2, {"host2": use(BIG)})
        rt1.drop_move_claim(inst, "host1", SMALL)     # confirm on the source host
        self.check(rt1, {"host1": {}})
        self.check(rt2, {"host2": use(BIG)})
        stored = store.get_instance(inst.uuid)
        self.assertEqual(("host2", "host2", BIG), (stored.host, stored.node, stored.flavor))


class TestAuditFailures(TrackerTestCase):

    def test_bad_report_leaves_the_other_nodes_audited(self):
        driver, rt = self.multinode(nodes=("a", "b", "c"))
        rt.instance_claim(instance(SMALL), "a")
        driver.set_node_size("a", vcpus=16)
        driver.set_node_size("c", vcpus=32)
        driver.inject_fault("b", report={"vcpus": "lots", "memory_mb": -1})
        result = rt.update_available_resource()
        self.assertEqual(("a", "c"), result.audited)
        self.assertEqual({"b"}, set(result.failed))
        for word in ("'vcpus'", "'memory_mb'", "'local_gb'", "b"):
            self.assertIn(word, result.failed["b"])
        self.assertEqual(16, rt.get_node("a").inventory("VCPU").total)
        self.assertEqual(32, rt.get_node("c").inventory("VCPU").total)
        node_b = rt.get_node("b")
        self.assertIn("'vcpus'", node_b.last_error)
        self.assertEqual(8, node_b.inventory("VCPU").total)   # the last good report
        self.assertIn("'vcpus'", rt.store.get_compute_node(self.host, "b").last_error)
        self.assertIsNone(rt.get_node("a").last_error)
        self.assertUsage(rt, "a", use(SMALL))
        # claims on the other nodes go on
        rt.instance_claim(instance(SMALL), "c")
        # the node recovers: its mark is cleared
        driver.clear_faults()
        self.assertEqual({}, dict(rt.update_available_resource().failed))
        self.assertIsNone(rt.get_node("b").last_error)
        self.assertIsNone(rt.store.get_compute_node(self.host, "b").last_error)

    def test_driver_exception_on_one_node(self):
        driver, rt = self.multinode(nodes=("a", "b"))
        driver.inject_fault("a", exception=RuntimeError("hypervisor on fire"))
        driver.set_node_size("b", vcpus=2)
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        result = rt.update_available_resource()
        self.assertEqual(("b",), result.audited)
        self.assertIn("RuntimeError: hypervisor on fire", result.failed["a"])
        self.assertIn("hypervisor on fire", rt.get_node("a").last_error)
        self.assertEqual(2, rt.get_node("b").inventory("VCPU").total)
        self.assertIn("hypervisor on fire", log.output)

    def test_wrong_type_and_impossible_reserved(self):
        driver, rt = self.multinode(nodes=("a", "b"), settings=self.settings())
        driver.inject_fault("a", report=42)
        driver.set_node_size("b", memory_mb=256)   # below reserved_host_memory_mb=512
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        result = rt.update_available_resource()
        # A node whose reserved amount exceeds its total is still recorded,
        # with its current inventory: all of it reserved, so it admits nothing.
        self.assertEqual(("b",), result.audited)
        self.assertIn("int", result.failed["a"])
        self.assertIn("reserved_host_memory_mb = 512", log.output)
        node = rt.get_node("b")
        self.assertEqual((256, 256, 0, 0), (
            node.inventory("MEMORY_MB").total, node.inventory("MEMORY_MB").reserved,
            node.capacity("MEMORY_MB"), node.free("MEMORY_MB")))

    def test_failure_on_the_first_audit_of_a_fresh_tracker(self):
        driver, rt = self.multinode(nodes=("a", "b"))
        driver.inject_fault("a", exception=RuntimeError("gone"))
        fresh = ResourceTracker(self.host, driver, store=rt.store, settings=rt.settings)
        result = fresh.update_available_resource()
        self.assertEqual(("b",), result.audited)
        self.assertIn("gone", fresh.store.get_compute_node(self.host, "a").last_error)
        self.assertIn("gone", fresh.get_node("a").last_error)

    def test_a_hang_is_timed_out(self):
        settings = self.settings(driver_timeout=0.2, reserved_host_memory_mb=0)
        driver, rt = self.multinode(nodes=("a", "b", "c"), settings=settings)
        driver.inject_fault("b", hang_seconds=3)
        driver.set_node_size("c", vcpus=3)
        started = time.monotonic()
        result = rt.update_available_resource()
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertEqual(("a", "c"), result.audited)
        self.assertIn("did not return within 0.2 s", result.failed["b"])
        self.assertIn("0.2", rt.get_node("b").last_error)
        self.assertEqual(3, rt.get_node("c").inventory("VCPU").total)

    def test_audit_of_one_node(self):
        driver, rt = self.multinode(nodes=("a", "b"))
        driver.set_node_size("a", vcpus=1)
        driver.set_node_size("b", vcpus=2)
        self.assertEqual(("b",), rt.update_available_resource(nodename="b").audited)
        self.assertEqual(8, rt.get_node("a").inventory("VCPU").total)
        self.assertEqual(2, rt.get_node("b").inventory("VCPU").total)


class TestAuditRebuildsFromRecords(TrackerTestCase):

    def execute(self, store, statement):
        with store.db.engine.begin() as conn:
            return conn.execute(statement).rowcount

    def test_stale_allocation_of_a_deleted_instance_is_removed(self):
        _, rt = self.multinode()
        gone = rt.instance_claim(instance(BIG), "a").instance
        rt.instance_claim(instance(SMALL), "a")
        self.assertEqual(1, self.execute(rt.store, models.instances.delete().where(
            models.instances.c.uuid == gone.uuid)))
        self.assertUsage(rt, "a", plus(use(BIG), use(SMALL)))   # not yet audited
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        rt.update_available_resource()
        self.assertUsage(rt, "a", use(SMALL))
        self.assertIn(gone.uuid, log.output)
        self.assertEqual([], rt.store.list_allocations(instance_uuid=gone.uuid))

    def test_instance_deleted_in_the_records_is_freed(self):
        _, rt = self.multinode()
        inst = rt.instance_claim(instance(BIG), "a").instance
        self.execute(rt.store, models.instances.update().where(
            models.instances.c.uuid == inst.uuid).values(vm_state="deleted"))
        rt.update_available_resource()
        self.check(rt, {"a": {}})

    def test_missing_allocation_is_rebuilt(self):
        _, rt = self.multinode(overhead=None)
        inst = rt.instance_claim(instance(BIG), "a").instance
        self.assertEqual(1, self.execute(rt.store, models.allocations.delete().where(
            models.allocations.c.consumer_uuid == inst.uuid)))
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        rt.update_available_resource()
        self.assertUsage(rt, "a", use(BIG))
        self.assertIn(inst.uuid, log.output)
        self.check(rt, {"a": use(BIG), "b": {}})

    def statements(self, store):
        """The SQL statements run on ``store`` from now on (a list that grows)."""
        seen = []

        def count(conn, cursor, statement, *args):
            seen.append(statement)
        sa.event.listen(store.db.engine, "before_cursor_execute", count)
        self.addCleanup(sa.event.remove, store.db.engine, "before_cursor_execute", count)
        return seen

    def test_a_steady_pass_reads_the_missing_allocations_once(self):
        _, rt = self.multinode()
        rt.instance_claim(instance(SMALL), "a")
        inst = rt.instance_claim(instance(SMALL), "b").instance
        rt.resize_claim(inst, BIG, "a")
        rt.update_available_resource()
        seen = self.statements(rt.store)
        rt.update_available_resource()
        # The missing-migrations read: migrations outer-joined to allocations.
        missing_reads = [s for s in seen if "FROM migrations LEFT OUTER JOIN" in s]
        self.assertEqual(1, len(missing_reads), missing_reads)
        self.check(rt, {"a": plus(use(SMALL), use(BIG)), "b": use(SMALL)})

    def lose_after_the_first_read(self, rt, statement):
        """Run ``statement`` (its own transaction) between the pass's first read
        of the missing allocations and its transaction."""
        first_read = rt._rebuild_missing

        def then_change(*args, **kwargs):
            rebuilt = first_read(*args, **kwargs)
            self.execute(rt.store, statement)
            return rebuilt
        rt._rebuild_missing = then_change   # ``del rt._rebuild_missing`` ends it

    def test_an_allocation_lost_during_a_steady_pass_is_restored_by_the_next(self):
        _, rt = self.multinode(overhead=None)
        inst = rt.instance_claim(instance(BIG), "a").instance
        rt.update_available_resource()
        self.lose_after_the_first_read(rt, models.allocations.delete().where(
            models.allocations.c.consumer_uuid == inst.uuid))
        self.assertEqual({}, dict(rt.update_available_resource().failed))
        self.assertEqual([], rt.store.list_allocations(instance_uuid=inst.uuid))
        del rt._rebuild_missing
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        rt.update_available_resource()
        self.assertIn(inst.uuid, log.output)
        self.check(rt, {"a": use(BIG), "b": {}})

    def test_an_allocation_back_before_the_transaction_is_not_restored_twice(self):
        _, rt = self.multinode(overhead=None)
        inst = rt.instance_claim(instance(BIG), "a").instance
        with rt.store.db.engine.connect() as conn:
            row, = conn.execute(models.allocations.select().where(
                models.allocations.c.consumer_uuid == inst.uuid)).mappings().all()
        self.execute(rt.store, models.allocations.delete().where(
            models.allocations.c.consumer_uuid == inst.uuid))
        # Found missing by the first read, back before the transaction.
        self.lose_after_the_first_read(rt, models.allocations.insert().values(**row))
        self.assertEqual({}, dict(rt.update_available_resource().failed))
        self.assertEqual(1, len(rt.store.list_allocations(instance_uuid=inst.uuid)))
        del rt._rebuild_missing
        self.check(rt, {"a": use(BIG), "b": {}})

    def test_missing_migration_allocation_is_rebuilt(self):
        _, rt = self.multinode()
        inst = rt.instance_claim(instance(SMALL), "a").instance
        claim = rt.resize_claim(inst, BIG, "b")
        self.execute(rt.store, models.allocations.delete().where(
            models.allocations.c.consumer_uuid == claim.migration.uuid))
        rt.update_available_resource()
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})

    def test_rebuilt_migration_allocation_of_a_pinned_instance_counts_pcpu(self):
        _, rt = self.make_pinning_tracker()
        inst = rt.instance_claim(instance(SMALL, numa_topology=base.dedicated_request()),
                                 self.host).instance
        claim = rt.resize_claim(inst, flavor(name="mid", vcpus=2, memory_mb=1024), self.host)
        self.assertEqual(2, claim.allocation.resources["PCPU"])
        before = rt.get_node(self.host).usage
        self.execute(rt.store, models.allocations.delete().where(
            models.allocations.c.consumer_uuid == claim.migration.uuid))
        rt.update_available_resource()
        self.assertEqual(before, rt.get_node(self.host).usage)
        self.assertNotIn("VCPU", rt.get_node(self.host).usage)

    def test_rebuilt_allocation_counts_overhead(self):
        from nova_lite.objects import Overhead
        _, rt = self.multinode(overhead=Overhead(memory_mb=100, disk_gb=1, vcpus=1))
        inst = rt.instance_claim(instance(SMALL), "a").instance
        held = plus(use(SMALL), {"VCPU": 1, "MEMORY_MB": 100, "DISK_GB": 1})
        self.assertUsage(rt, "a", held)
        self.execute(rt.store, models.allocations.delete())
        rt.update_available_resource()
        self.check(rt, {"a": held})
        self.assertEqual(inst.uuid, rt.store.list_allocations()[0].consumer_uuid)

    def test_instance_moved_in_the_records(self):
        _, rt = self.multinode()
        inst = rt.instance_claim(instance(BIG), "a").instance
        self.execute(rt.store, models.instances.update().where(
            models.instances.c.uuid == inst.uuid).values(node="b"))
        rt.update_available_resource()
        self.check(rt, {"a": {}, "b": use(BIG)})

    def test_usage_ignores_the_hypervisor_used_figures(self):
        driver, rt = self.multinode()
        inst = rt.instance_claim(instance(SMALL), "a").instance
        driver.spawn(instance(BIG, node="a"))     # a guest nobody claimed
        driver.spawn(inst)
        self.check(rt, {"a": use(SMALL)})
        self.assertEqual(5, rt.get_node("a").resources.vcpus_used)


class TestAuditPersistsOnlyOnChange(TrackerTestCase):

    def test_generation_unchanged_by_a_no_op_audit(self):
        driver, rt = self.multinode()
        rt.instance_claim(instance(SMALL), "a")
        rt.update_available_resource()
        before = {n.nodename: (n.generation, n.uuid) for n in rt.store.get_compute_nodes()}
        with rt.store.db.engine.connect() as conn:
            stamps = dict(conn.execute(sa.select(models.compute_nodes.c.nodename,
                                                 models.compute_nodes.c.updated_at)).all())
        for _ in range(3):
            rt.update_available_resource()
        after = {n.nodename: (n.generation, n.uuid) for n in rt.store.get_compute_nodes()}
        self.assertEqual(before, after)
        self.assertEqual(before["a"][0], rt.get_node("a").generation)
        with rt.store.db.engine.connect() as conn:
            self.assertEqual(stamps, dict(conn.execute(sa.select(
                models.compute_nodes.c.nodename, models.compute_nodes.c.updated_at)).all()))

    def test_inventory_change_is_persisted(self):
        driver, rt = self.multinode()
        generation = rt.get_node("a").generation
        driver.set_node_size("a", vcpus=2)
        rt.update_available_resource()
        self.assertGreater(rt.get_node("a").generation, generation)
        self.assertEqual(2, rt.store.get_compute_node(self.host, "a").inventory("VCPU").total)
        self.assertEqual(rt.get_node("b").generation,
                         rt.store.get_compute_node(self.host, "b").generation)

    def test_a_report_that_comes_back_the_same_is_recorded_as_before(self):
        # A steady node's audit entry is kept from one audit to the next; a
        # change of the report, of the settings or of the driver's
        # capabilities still makes a new one.
        driver, rt = self.multinode()
        rt.update_available_resource()
        self.assertEqual(8, rt.store.get_compute_node(self.host, "a").inventory("VCPU").total)
        driver.set_node_size("a", vcpus=6)
        rt.update_available_resource()
        self.assertEqual(6, rt.store.get_compute_node(self.host, "a").inventory("VCPU").total)
        rt.settings = attrs.evolve(rt.settings, cpu_allocation_ratio=2.0)
        rt.update_available_resource()
        self.assertEqual(2.0, rt.store.get_compute_node(self.host, "a").inventory(
            "VCPU").allocation_ratio)
        self.assertNotIn("COMPUTE_TRUSTED_CERTS", rt.get_node("a").resources.traits)
        driver.capabilities = attrs.evolve(driver.capabilities, supports_trusted_certs=True)
        rt.update_available_resource()
        self.assertIn("COMPUTE_TRUSTED_CERTS",
                      rt.store.get_compute_node(self.host, "a").resources.traits)

    def test_claims_bump_the_generation(self):
        _, rt = self.multinode()
        g0 = rt.get_node("a").generation
        claim = rt.instance_claim(instance(SMALL), "a")
        g1 = rt.get_node("a").generation
        self.assertGreater(g1, g0)
        self.assertEqual(g1, rt.store.get_compute_node(self.host, "a").generation)
        claim.abort()
        self.assertGreater(rt.get_node("a").generation, g1)

    def test_shrunken_inventory_lets_free_go_negative(self):
        driver, rt = self.multinode(settings=self.settings(cpu_allocation_ratio=1.0,
                                                           reserved_host_memory_mb=0))
        rt.instance_claim(instance(BIG), "a")
        rt.instance_claim(instance(BIG), "a")
        driver.set_node_size("a", vcpus=4)
        rt.update_available_resource()
        node = rt.get_node("a")
        self.assertEqual(0, node.free("VCPU"))
        self.assertEqual(4, node.over("VCPU"))
        # changes that make it no worse are still accepted
        rt.instance_claim(instance(flavor(vcpus=1, memory_mb=1, root_gb=0,
                                          extra_specs={"resources:VCPU": "0"})), "a")
        self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                          instance(SMALL), "a")


class TestAuditLogs(TrackerTestCase):

    def test_hypervisor_view_and_final_view_are_logged(self):
        driver, rt = self.multinode(nodes=("a",))
        inst = rt.instance_claim(instance(SMALL), "a").instance
        driver.spawn(inst)
        driver.spawn(instance(BIG, node="a"))   # leaked guest: hypervisor sees 5 vCPUs used
        log = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        rt.update_available_resource()
        lines = log.output.splitlines()
        hyper = [line for line in lines if "hypervisor view" in line]
        final = [line for line in lines if "final view" in line]
        self.assertEqual(1, len(hyper), log.output)
        self.assertEqual(1, len(final), log.output)
        self.assertIn("used=5", hyper[0])
        self.assertIn("VCPU: capacity=32 used=1 free=31", final[0])
        self.assertIn(f"{self.host}/a", final[0])


class TestNodes(TrackerTestCase):

    def test_get_node_unknown(self):
        _, rt = self.multinode()
        exc = self.assertRaises(NodeNotFound, rt.get_node, "zzz")
        self.assertIn("zzz", str(exc))

    def test_nodenames(self):
        driver, rt = self.multinode(nodes=("a", "b"))
        self.assertEqual(["a", "b"], rt.nodenames())
        driver.set_nodes(["b"])
        rt.update_available_resource()
        self.assertEqual(["b"], rt.nodenames())

    def test_node_uuid_from_the_driver_is_kept(self):
        from nova_lite.objects import NodeResources
        driver, rt = self.multinode(nodes=("a",))
        report = driver.get_available_resource("a")
        wanted = "8c5b4b6e-4a6e-4f3e-9b59-7d0c7e0d0a11"
        driver.inject_fault("a", report=attrs.evolve(report, uuid=wanted))
        fresh_store_rt = ResourceTracker(self.host, driver, store=self.sqlite_store(),
                                         settings=rt.settings)
        fresh_store_rt.update_available_resource()
        self.assertEqual(wanted, fresh_store_rt.get_node("a").uuid)
        self.assertIsInstance(fresh_store_rt.get_node("a").resources, NodeResources)

    def test_one_uuid_for_two_nodes_fails_both_clearly(self):
        driver, rt = self.multinode(nodes=("a", "b", "c"))
        rt.update_available_resource()
        before = {n: rt.get_node(n) for n in ("a", "b")}
        shared = "8c5b4b6e-4a6e-4f3e-9b59-7d0c7e0d0a11"
        for name in ("a", "b"):
            driver.inject_fault(name, report=attrs.evolve(
                driver.get_available_resource(name), uuid=shared))
        result = rt.update_available_resource()
        self.assertEqual(("c",), result.audited)
        self.assertEqual({"a", "b"}, set(result.failed))
        self.assertIn(f"uuid {shared} for nodes 'a', 'b'", result.failed["a"])
        for name in ("a", "b"):
            node = rt.store.get_compute_node(self.host, name)
            self.assertEqual(before[name].uuid, node.uuid)
            self.assertIn(shared, node.last_error)


class TestClaimLocking(TrackerTestCase):

    def test_a_slow_overhead_estimate_holds_up_no_other_claim(self):
        # The driver's estimate runs before the node's lock is taken: while
        # one claim waits on it, another claim on the same node goes through.
        driver, rt = self.multinode(nodes=("a",))
        slow, waiting = threading.Event(), threading.Event()
        plain = driver.estimate_instance_overhead

        def estimate(subject):
            if getattr(subject, "display_name", "") == "slow":
                waiting.set()
                slow.wait(10)
            return plain(subject)

        driver.estimate_instance_overhead = estimate
        first = threading.Thread(target=rt.instance_claim,
                                 args=(instance(display_name="slow"), "a"))
        first.start()
        self.addCleanup(first.join, 10)
        self.addCleanup(slow.set)
        self.assertTrue(waiting.wait(10))
        second = threading.Thread(target=rt.instance_claim, args=(instance(), "a"))
        second.start()
        second.join(5)
        self.assertFalse(second.is_alive(), "the claim waited for another's estimate")
        self.assertTrue(first.is_alive())
        slow.set()
        first.join(10)
        self.assertEqual(2, len(rt.store.list_allocations()))


class TestWithTheCallersInstance(TrackerTestCase):
    """The caller may keep using the Instance it built, never placed by a claim."""

    def test_resize_confirm_and_revert(self):
        _, rt = self.multinode()
        inst = instance(SMALL)
        rt.instance_claim(inst, "a")
        claim = rt.resize_claim(inst, BIG, "b")
        self.assertEqual(("host1", "a"), (claim.migration.source_compute,
                                          claim.migration.source_node))
        self.assertFalse(claim.migration.same_node)
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})
        rt.drop_move_claim(inst, "a", SMALL)
        self.check(rt, {"a": {}, "b": use(BIG)})
        inst2 = instance(SMALL)
        rt.instance_claim(inst2, "a")
        rt.resize_claim(inst2, BIG, "b")
        rt.drop_move_claim(inst2, "b", BIG)
        self.check(rt, {"a": use(SMALL), "b": use(BIG)})
        rt.update_usage(attrs.evolve(inst, vm_state="deleted"))
        rt.update_usage(attrs.evolve(inst2, vm_state="deleted"))
        self.check(rt, {"a": {}, "b": {}})

    def test_rebuild_on_its_node_is_a_nop(self):
        from nova_lite.compute.claims import NopClaim
        _, rt = self.multinode()
        inst = instance(SMALL)
        rt.instance_claim(inst, "a")
        self.assertIsInstance(rt.rebuild_claim(inst, "a"), NopClaim)
        self.check(rt, {"a": use(SMALL), "b": {}})
