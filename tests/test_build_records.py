"""A build's records: its claims and its build tasks committed together, or nothing.

:func:`nova_lite.compute.api.build` records the build tasks in the
transaction of its (last) claim; a claim that loses its race moves to an
alternate with its task; the scheduler's view decides the claim and takes
the node as the claim left it.  On SQLite and PostgreSQL.
"""

import fixtures

from nova_lite import work
from nova_lite.compute import api
from nova_lite.db import node_changes, rows, task_writes
from nova_lite.exception import StoreError
from nova_lite.scheduler import HostManager
from tests import base
from tests.test_work import WorkCase, flavor


class Injected(Exception):
    """The failure a test injects."""


class BuildRecords:

    def hosts(self, *names):
        # One instance of memory_mb=4096 fills a node: no overcommit of RAM.
        return [self.service(h, ram_allocation_ratio=1.0) for h in names]

    def fail_recording_tasks(self):
        # Once the tasks' statements have run in the claim's transaction
        # (with the claim's own statement or after it): the transaction
        # must roll back all of it.
        def broken(requests, results, prefix=""):
            raise Injected("recording the build task failed")
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.task_writes.inserted", broken))

    def assert_no_claim_and_no_task(self):
        self.assertEqual([], self.store.list_allocations())
        self.assertEqual([], self.store.tasks.find())
        for node in self.store.get_compute_nodes():
            self.assertEqual({}, {rc: n for rc, n in node.usage.items() if n})

    def test_a_build_records_its_task_on_its_instances_host(self):
        self.hosts("h1")
        result = api.build(self.store, flavor(), settings=self.settings())
        (inst,), (task,) = result.instances, result.tasks
        self.assertEqual((inst.host, inst.uuid, {"node": inst.node}, work.BUILD),
                         (task.host, task.instance_uuid, task.params, task.kind))
        self.assertEqual([task], self.store.tasks.find())
        self.assertEqual(1, len(self.held(inst.uuid)))

    def refuse_task_rows(self):
        # The database itself refuses the task's row (no host), in the
        # claim's own statement or transaction: nothing of the claim may stay.
        real = task_writes._row_values

        def hostless(i, request, now):
            return dict(real(i, request, now), **{task_writes._row_names(i)[0]: None})
        self.useFixture(fixtures.MonkeyPatch("nova_lite.db.task_writes._row_values", hostless))

    def assert_one_build_leaves_nothing(self, inject, error):
        """A build of one instance that fails with ``error`` once ``inject()``
        broke it leaves nothing of the build at all."""
        self.hosts("h1")
        inject()
        self.assertRaises(error, api.build, self.store, flavor(), settings=self.settings())
        self.assert_no_claim_and_no_task()
        self.assertEqual([], self.store.list_instances(live_only=False))

    def test_a_task_the_database_refuses_leaves_neither_claim_nor_task(self):
        self.assert_one_build_leaves_nothing(self.refuse_task_rows, StoreError)

    def assert_two_node_build_leaves_no_claim(self, inject, error):
        """A build of two instances on two nodes that fails with ``error``
        once ``inject()`` broke it leaves no claim and no task."""
        self.hosts("h1", "h2")
        inject()
        self.assertRaises(error, api.build, self.store, flavor(memory_mb=4096), 2,
                          settings=self.settings())
        self.assert_no_claim_and_no_task()

    def test_a_task_the_database_refuses_on_several_nodes_leaves_no_claim(self):
        self.assert_two_node_build_leaves_no_claim(self.refuse_task_rows, StoreError)

    def test_a_failure_recording_the_tasks_of_several_nodes_leaves_no_claim(self):
        self.assert_two_node_build_leaves_no_claim(self.fail_recording_tasks, Injected)

    def test_several_nodes_record_every_task_in_request_order(self):
        self.hosts("h1", "h2")
        result = api.build(self.store, flavor(memory_mb=4096), 2, settings=self.settings())
        self.assertEqual({"h1", "h2"}, {i.host for i in result.instances})
        self.assertEqual([(i.uuid, i.host, i.node) for i in result.instances],
                         [(t.instance_uuid, t.host, t.params["node"]) for t in result.tasks])
        self.assertEqual(sorted(t.id for t in result.tasks),
                         sorted(t.id for t in self.store.tasks.find()))

    def test_a_lost_claim_takes_its_task_to_the_alternate(self):
        self.hosts("h1", "h2")
        stale = HostManager(self.store, self.settings(), nodes_max_age=3600)
        stale.refresh()
        first = api.build(self.store, flavor(memory_mb=4096), settings=self.settings())
        # The stale view picks the node the first build filled (both were
        # empty, and ties go the same way), loses, and moves on.
        second = api.build(self.store, flavor(memory_mb=4096), host_manager=stale,
                           settings=self.settings())
        (lost,) = second.attempts
        self.assertEqual(first.instances[0].host, lost[0])
        (inst,), (task,) = second.instances, second.tasks
        self.assertNotEqual(first.instances[0].host, inst.host)
        self.assertEqual((inst.host, {"node": inst.node}), (task.host, task.params))
        recorded = {t.instance_uuid: t.host for t in self.store.tasks.find()}
        self.assertEqual({i.uuid: i.host for i in (*first.instances, *second.instances)},
                         recorded)
        for i in (*first.instances, *second.instances):
            self.assertEqual([i.node], [self.store.get_compute_node(i.host, i.node).nodename
                                        for _ in self.held(i.uuid)])

    def test_the_claim_decides_on_the_schedulers_record_of_the_node(self):
        self.hosts("h1")
        manager = HostManager(self.store, self.settings())
        manager.refresh()
        reads = []
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.store.Store.get_compute_node",
            lambda store, host, nodename: reads.append((host, nodename))))
        result = api.build(self.store, flavor(), host_manager=manager,
                           settings=self.settings())
        self.assertEqual([], reads, "the tracker read the node the scheduler had read")
        self.assertEqual(1, len(self.held(result.instances[0].uuid)))

    def test_the_view_takes_the_node_its_claim_left_and_does_not_read_it_again(self):
        self.hosts("h1")
        manager = HostManager(self.store, self.settings())
        result = api.build(self.store, flavor(), host_manager=manager,
                           settings=self.settings())
        inst = result.instances[0]
        recorded = self.store.get_compute_node(inst.host, inst.node)
        read, renewed = [], []
        real_whole, real_usage = node_changes.load_nodes_by_uuid, rows.with_usage
        # the node read again whole, or renewed for its usage from the look
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.node_changes.load_nodes_by_uuid",
            lambda conn, uuids, described=None: read.extend(uuids) or real_whole(
                conn, uuids, described)))
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.rows.with_usage",
            lambda node, *args: renewed.append(node.uuid) or real_usage(node, *args)))
        (state,) = manager.get_host_states()
        self.assertEqual([], read)
        self.assertEqual([], renewed)
        self.assertEqual((recorded.generation, recorded.usage),
                         (state.generation, state.node.usage))


class TestBuildRecordsSQLite(BuildRecords, base.OnSQLiteFile, WorkCase):

    def test_a_failure_reading_the_recorded_task_leaves_neither_claim_nor_task(self):
        # The claim's transaction rolls back.
        self.assert_one_build_leaves_nothing(self.fail_recording_tasks, Injected)


class TestBuildRecordsPostgreSQL(BuildRecords, base.OnPostgreSQL, WorkCase):

    def test_an_answer_lost_after_the_one_statement_leaves_the_claim_with_its_task(self):
        # A build of one instance is one statement in autocommit mode: once
        # it has run, the claim and its task are committed together, as
        # after a COMMIT whose answer is lost.  The host builds it.
        self.hosts("h1")
        self.fail_recording_tasks()
        self.assertRaises(Injected, api.build, self.store, flavor(), settings=self.settings())
        (inst,) = self.store.list_instances(live_only=False)
        (task,) = self.store.tasks.find()
        self.assertEqual((inst.uuid, inst.host, work.BUILD, work.WAITING),
                         (task.instance_uuid, task.host, task.kind, task.state))
        self.assertEqual([inst.uuid], [a.consumer_uuid for a in self.store.list_allocations()])

