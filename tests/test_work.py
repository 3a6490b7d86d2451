"""Work addressed to hosts through the records: builds and deletes done by the owning host.

Each host runs its own ComputeService with its own fake driver; the test
plays the operator through nova_lite.compute.api and drives the services
with do_work()/run_once() (or a running service for the wake-up tests).
"""

import collections
import logging
import os
import subprocess
import sys
import threading
import time

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite import objects, work
from nova_lite.compute import api
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.worker_identity import WorkerIdentity, is_gone
from nova_lite.db import Store
from nova_lite.db import task_writes, tasks as queue
from nova_lite.db.listen import WorkListener
from nova_lite.exception import InstanceStateConflict, InvalidInput
from nova_lite.scheduler import NoValidHost
from nova_lite.testing import databases
from nova_lite.virt.fake import FakeDriver
from nova_lite.work import WorkRequest
from tests import base


def flavor(vcpus=1, memory_mb=512):
    return base.flavor(vcpus=vcpus, memory_mb=memory_mb)


class WorkCase(base.TestCase):

    _store = None

    @property
    def store(self):
        if self._store is None:
            self._store = self.make_store()
        return self._store

    def service(self, host, **settings):
        settings.setdefault("reserved_host_memory_mb", 0)
        settings.setdefault("work_poll_interval", 0.05)
        s = self.settings(host=host, **settings)
        driver = FakeDriver(settings=s, vcpus=16, memory_mb=4096, local_gb=100)
        svc = ComputeService(host, driver, store=self.store, settings=s)
        self.addCleanup(svc.stop)
        svc.run_once()
        return svc

    def active(self, uuid):
        return self.store.get_instance(uuid).vm_state == objects.ACTIVE

    def held(self, uuid):
        return self.store.list_allocations(instance_uuid=uuid)

    def wait_for(self, condition, what, timeout=30.0):
        """Poll ``condition`` until true, at most ``timeout`` s (a condition, not a delay)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.01)


class BuildAndDelete:

    def test_a_build_is_spawned_by_its_host_not_by_the_caller(self):
        h1 = self.service("h1")
        result = api.build(self.store, flavor(), 2, settings=self.settings())
        self.assertEqual([objects.BUILDING] * 2, [i.vm_state for i in result.instances])
        self.assertEqual(["build waiting"] * 2, [t.describe() for t in result.tasks])
        self.assertEqual([], h1.driver.list_instances())
        self.assertEqual(2, h1.do_work())
        uuids = sorted(i.uuid for i in result.instances)
        self.assertEqual(uuids, h1.driver.list_instances())
        self.assertTrue(all(self.active(u) for u in uuids))
        done = api.wait(self.store, result.tasks, timeout=5)
        self.assertEqual([work.DONE] * 2, [t.state for t in done])
        self.assertEqual([1, 1], [t.attempts for t in done])

    def test_each_host_builds_only_its_own_instances(self):
        h1, h2 = self.service("h1"), self.service("h2")
        result = api.build(self.store, flavor(vcpus=40), 2, settings=self.settings())
        by_host = {i.host: i.uuid for i in result.instances}
        self.assertEqual({"h1", "h2"}, set(by_host))
        h1.do_work()
        self.assertEqual([by_host["h1"]], h1.driver.list_instances())
        self.assertEqual([], h2.driver.list_instances())
        self.assertFalse(self.active(by_host["h2"]))
        h2.do_work()
        self.assertEqual([by_host["h2"]], h2.driver.list_instances())

    def test_a_failed_spawn_records_error_with_the_reason_and_gives_the_claim_back(self):
        h1 = self.service("h1")
        result = api.build(self.store, flavor(), settings=self.settings())
        (inst,) = result.instances
        h1.driver.set_nodes(["elsewhere"])   # the node is gone when the host spawns
        h1.do_work()
        stored = self.store.get_instance(inst.uuid)
        self.assertEqual((objects.ERROR, None, None), (stored.vm_state, stored.host,
                                                       stored.node))
        self.assertEqual([], self.held(inst.uuid))
        fault = self.store.tasks.last_failure(inst.uuid)
        self.assertIn("spawn failed: LookupError", fault.detail)
        self.assertIn("h1", fault.detail)

    def test_a_delete_is_done_by_the_host_and_frees_the_claim(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        h1.do_work()
        result = api.delete(self.store, self.store.get_instance(inst.uuid))
        self.assertFalse(result.local)
        self.assertEqual("deleting", self.store.get_instance(inst.uuid).task_state)
        self.assertTrue(self.held(inst.uuid), "held until the host deletes")
        again = api.delete(self.store, self.store.get_instance(inst.uuid))
        self.assertEqual(result.task.id, again.task.id, "one open delete, not two")
        h1.do_work()
        self.assertEqual(objects.DELETED, self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], self.held(inst.uuid))
        self.assertEqual([], h1.driver.list_instances())

    def test_delete_of_a_building_server_waits_for_its_build(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        api.delete(self.store, self.store.get_instance(inst.uuid))
        # The build comes first: the delete is taken only after it.
        outcomes = h1.worker.run_pending(max_rounds=1)
        self.assertEqual([work.BUILD], [o.task.kind for o in outcomes])
        h1.do_work()
        self.assertEqual(objects.DELETED, self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], h1.driver.list_instances())

    def test_the_hosts_overhead_is_claimed_before_the_spawn(self):
        s = self.settings(host="h1", reserved_host_memory_mb=0)
        driver = FakeDriver(settings=s, vcpus=16, memory_mb=4096, local_gb=100,
                            overhead=objects.Overhead(memory_mb=100))
        h1 = ComputeService("h1", driver, store=self.store, settings=s)
        h1.run_once()
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        self.assertEqual(512, self.held(inst.uuid)[0].resources["MEMORY_MB"])
        h1.do_work()
        self.assertEqual(612, self.held(inst.uuid)[0].resources["MEMORY_MB"])
        self.assertTrue(self.active(inst.uuid))
        self.assertEqual((), h1.run_once().findings)

    def test_a_build_left_without_its_claim_mid_overhead_is_claimed_again(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        # As an attempt that gave the claim back to add the overhead, then died.
        h1.tracker.abort_instance_claim(inst, inst.node)
        self.assertEqual((None, []), (self.store.get_instance(inst.uuid).host,
                                      self.held(inst.uuid)))
        h1.do_work()
        stored = self.store.get_instance(inst.uuid)
        self.assertEqual((objects.ACTIVE, "h1", "h1"), (stored.vm_state, stored.host,
                                                         stored.node))
        self.assertEqual(1, len(self.held(inst.uuid)))
        self.assertEqual([inst.uuid], h1.driver.list_instances())

    def test_the_host_audits_clean_after_builds_and_deletes(self):
        h1, h2 = self.service("h1"), self.service("h2")
        built = api.build(self.store, flavor(), 6, settings=self.settings()).instances
        for svc in (h1, h2):
            svc.do_work()
        api.delete(self.store, self.store.get_instance(built[0].uuid))
        api.delete(self.store, self.store.get_instance(built[1].uuid))
        for svc in (h1, h2):
            self.assertEqual((), svc.run_once().findings)
        live = self.store.list_instances(live_only=True)
        self.assertEqual(4, len(live))
        self.assertEqual(sorted(i.uuid for i in live),
                         sorted(h1.driver.list_instances() + h2.driver.list_instances()))


class DownHosts:

    def test_work_for_a_down_host_waits_and_its_capacity_stays_held(self):
        self.service("h1")
        (inst,) = api.build(self.store, flavor(vcpus=40), settings=self.settings()).instances
        open_work = self.store.tasks.open_by_instance([inst.uuid])
        self.assertEqual("build waiting", open_work[inst.uuid].describe())
        # The node is full (4 vCPUs, ratio 1 is not the default: ask for all of it).
        self.assertTrue(self.held(inst.uuid))

    def test_force_deletes_locally_only_when_the_host_is_down(self):
        h1 = self.service("h1", service_down_time=60)
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        h1.do_work()
        up = api.delete(self.store, self.store.get_instance(inst.uuid), force=True,
                        settings=self.settings(service_down_time=60))
        self.assertFalse(up.local, "the host is up: it deletes")
        self.store.tasks.cancel_open(inst.uuid, "test: take the delete back")
        self.store.record_instance_state(attrs.evolve(self.store.get_instance(inst.uuid),
                                                      task_state=None))
        down = self.settings(service_down_time=1e-3)
        result = api.delete(self.store, self.store.get_instance(inst.uuid), force=True,
                            settings=down)
        self.assertTrue(result.local)
        self.assertEqual(objects.DELETED, self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], self.held(inst.uuid))
        self.assertRaises(InstanceStateConflict, api.delete, self.store,
                          self.store.get_instance(inst.uuid), force=True, settings=down)
        # The host comes back with the guest still running: it reaps it.
        self.assertEqual([inst.uuid], h1.driver.list_instances())
        h1.run_once()
        self.assertEqual([], h1.driver.list_instances())

    def test_running_deleted_instance_action_log_keeps_the_guest(self):
        h1 = self.service("h1", running_deleted_instance_action="log")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        h1.do_work()
        api.delete(self.store, self.store.get_instance(inst.uuid), force=True,
                   settings=self.settings(service_down_time=1e-3))
        logs = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        h1.run_once()
        self.assertEqual([inst.uuid], h1.driver.list_instances())
        self.assertIn(f"guest of instance {inst.uuid} still runs", logs.output)

    def test_a_local_delete_cancels_the_waiting_build(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        api.delete(self.store, self.store.get_instance(inst.uuid), force=True,
                   settings=self.settings(service_down_time=1e-3))
        (task,) = self.store.tasks.find(instance_uuid=inst.uuid)
        self.assertEqual(work.CANCELLED, task.state)
        h1.do_work()
        self.assertEqual([], h1.driver.list_instances())


class Recovery:

    def test_a_task_left_by_a_dead_process_is_taken_again_and_done_once(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        me = WorkerIdentity.of_this_process("h1")
        ghost = str(attrs.evolve(me, pid=int(dead.stdout), start="1", token="ghost"))
        self.assertTrue(is_gone(ghost))
        (taken,) = self.store.tasks.take("h1", ghost, limit=5, lease=3600)
        self.assertEqual([], self.store.tasks.take("h1", "other", limit=5, lease=3600),
                         "a running task under a live lease is nobody else's")
        h1._recovered = False
        self.assertEqual(1, h1.do_work())
        (task,) = self.store.tasks.find(ids=[taken.id])
        self.assertEqual((work.DONE, 2), (task.state, task.attempts))
        self.assertTrue(self.active(inst.uuid))
        self.assertEqual([inst.uuid], h1.driver.list_instances())

    def test_a_retaken_build_whose_guest_exists_is_not_spawned_twice(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        (taken,) = self.store.tasks.take("h1", "h1@elsewhere:1:1:x", limit=1, lease=0.0)
        h1.driver.spawn(self.store.get_instance(inst.uuid))   # it spawned, then died
        spawned = []
        real_spawn = h1.driver.spawn
        h1.driver.spawn = lambda i: (spawned.append(i.uuid), real_spawn(i))
        self.assertEqual(1, h1.do_work(), "its lease ran out: taken again")
        self.assertEqual([], spawned)
        self.assertTrue(self.active(inst.uuid))

    def test_an_outcome_is_not_recorded_by_a_worker_that_lost_the_task(self):
        self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        (first,) = self.store.tasks.take("h1", "w1", limit=1, lease=0.0)
        (second,) = self.store.tasks.take("h1", "w2", limit=1, lease=60)
        self.assertEqual(first.id, second.id)
        self.assertEqual(queue.NOT_TAKEN, self.store.tasks.finish(first, "w1", work.DONE))
        self.assertEqual(queue.FINISHED, self.store.tasks.finish(second, "w2", work.DONE))

    def test_two_services_for_one_host_do_each_task_once(self):
        a = self.service("h1")
        s = self.settings(host="h1", reserved_host_memory_mb=0, work_poll_interval=0.05)
        b = ComputeService("h1", FakeDriver(settings=s, vcpus=16, memory_mb=4096,
                                            local_gb=100), store=self.store, settings=s)
        result = api.build(self.store, flavor(memory_mb=64), 40, settings=self.settings())
        start = threading.Barrier(2)

        def drain(svc):
            start.wait()
            svc.do_work()
        threads = [threading.Thread(target=drain, args=(svc,)) for svc in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done = self.store.tasks.find(ids=[t.id for t in result.tasks])
        self.assertEqual({work.DONE}, {t.state for t in done})
        self.assertEqual({1}, {t.attempts for t in done})
        # One host, one hypervisor: both drivers see the same guests, each spawned once.
        expected = sorted(i.uuid for i in result.instances)
        self.assertEqual(expected, a.driver.list_instances())
        self.assertEqual(expected, b.driver.list_instances())

    def test_a_build_past_instance_build_timeout_goes_to_error_and_frees(self):
        h1 = self.service("h1", instance_build_timeout=30)
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        self.assertEqual([], h1.worker.check_builds())
        h1.worker.clock = lambda: time.time() + 31
        self.assertEqual([inst.uuid], h1.worker.check_builds())
        self.assertEqual(objects.ERROR, self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], self.held(inst.uuid))
        self.assertIn("build timed out", self.store.tasks.last_failure(inst.uuid).detail)
        h1.worker.clock = time.time
        h1.do_work()
        self.assertEqual([], h1.driver.list_instances(), "nothing left to build")

    def test_a_build_taken_after_instance_build_timeout_is_not_spawned(self):
        h1 = self.service("h1", instance_build_timeout=0.01)
        result = api.build(self.store, flavor(), settings=self.settings())
        self.wait_for(lambda: time.time() > result.tasks[0].created_at + 0.02,
                      "the build to be older than the timeout")
        (outcome,) = h1.worker.run_pending()   # as a host back from being down
        self.assertEqual(queue.FINISHED, outcome.outcome)
        (inst,) = result.instances
        self.assertEqual([], h1.driver.list_instances())
        self.assertEqual(objects.ERROR, self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], self.held(inst.uuid))
        self.assertIn("build timed out", self.store.tasks.last_failure(inst.uuid).detail)

    def test_a_build_nobody_recorded_work_for_is_given_up_after_the_grace(self):
        h1 = self.service("h1")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        self.store.tasks.cancel_open(inst.uuid, "test: as if the asker died before it")
        self.assertEqual([], h1.worker.check_builds(), "within the grace")
        h1.worker.clock = lambda: time.time() + 61
        self.assertEqual([inst.uuid], h1.worker.check_builds())
        self.assertEqual([], self.held(inst.uuid))


class WakeUp:

    def test_a_running_service_takes_work_without_a_pass(self):
        h1 = self.service("h1", update_resources_interval=3600)
        runner = threading.Thread(target=h1.run, kwargs={"handle_signals": False})
        runner.start()
        self.addCleanup(runner.join)
        self.addCleanup(h1.stop)
        result = api.build(self.store, flavor(), 3, settings=self.settings())
        done = api.wait(self.store, result.tasks, timeout=30)
        self.assertEqual([work.DONE] * 3, [t.state for t in done])


class Queue:

    def test_a_take_reads_each_tasks_instance_in_its_transaction(self):
        self.service("h1")
        result = api.build(self.store, flavor(), 2, settings=self.settings())
        (audit,) = self.store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT)])
        taken = self.store.tasks.take_with_instances("h1", "w1", limit=5, lease=60)
        self.assertEqual([t.id for t in result.tasks] + [audit.id], [t.id for t, _ in taken])
        self.assertEqual([self.store.get_instance(i.uuid) for i in result.instances] + [None],
                         [inst for _, inst in taken])
        self.assertEqual({work.RUNNING}, {t.state for t, _ in taken})
        self.assertEqual([], self.store.tasks.take_with_instances("h1", "w2", limit=5,
                                                                  lease=60))

    def test_a_take_skips_a_task_whose_instance_has_an_earlier_open_one(self):
        self.service("h1")
        self.service("h2")
        (inst,) = api.build(self.store, flavor(), settings=self.settings()).instances
        other = "h2" if inst.host == "h1" else "h1"
        (later,) = self.store.tasks.record(
            [WorkRequest(host=other, kind=work.AUDIT, instance_uuid=inst.uuid)])
        self.assertEqual([], self.store.tasks.take(other, "w2", limit=5, lease=60),
                         "the build of the same instance is still open")
        (build,) = self.store.tasks.take(inst.host, "w1", limit=5, lease=60)
        self.assertEqual(queue.FINISHED, self.store.tasks.finish(build, "w1", work.DONE))
        self.assertEqual([later.id],
                         [t.id for t in self.store.tasks.take(other, "w2", limit=5, lease=60)])

    def test_quick_builds_of_one_take_are_recorded_in_one_transaction(self):
        h1 = self.service("h1")
        h1.worker.outcome_batch_wait = 3600   # however slow this machine is
        result = api.build(self.store, flavor(memory_mb=64), 5, settings=self.settings())
        done = h1.worker.run_pending()
        self.assertEqual([queue.FINISHED] * 5, [d.outcome for d in done])
        tasks = self.store.tasks.find(ids=[t.id for t in result.tasks])
        self.assertEqual({work.DONE}, {t.state for t in tasks})
        self.assertEqual(1, len({t.finished_at for t in tasks}), "one transaction's stamp")
        self.assertEqual({objects.ACTIVE}, {self.store.get_instance(i.uuid).vm_state
                                            for i in result.instances})
        h1.worker.outcome_batch_wait = 0   # each alone
        result = api.build(self.store, flavor(memory_mb=64), 3, settings=self.settings())
        h1.worker.run_pending()
        tasks = self.store.tasks.find(ids=[t.id for t in result.tasks])
        self.assertEqual(3, len({t.finished_at for t in tasks}))

    def test_outcomes_recorded_together_keep_each_tasks_own_conditions(self):
        self.service("h1")
        result = api.build(self.store, flavor(memory_mb=64), 3, settings=self.settings())
        a, b, c = self.store.tasks.take("h1", "w1", limit=3, lease=0.0)
        (lost,) = self.store.tasks.take("h1", "w2", limit=1, lease=60)   # a, taken over
        self.assertEqual(a.id, lost.id)
        self.store.record_instance_state(attrs.evolve(   # c's instance deleted meanwhile
            self.store.get_instance(c.instance_uuid), vm_state=objects.DELETED))

        def active(task):
            return queue.Outcome(task, work.DONE, instance_change=queue.InstanceChange(
                task.instance_uuid, "h1", (objects.BUILDING,), objects.ACTIVE))
        self.assertEqual([queue.NOT_TAKEN, queue.FINISHED, queue.INSTANCE_MOVED_ON],
                         self.store.tasks.finish_many("w1", [active(t) for t in (a, b, c)]))
        states = {i.uuid: self.store.get_instance(i.uuid).vm_state for i in result.instances}
        self.assertEqual([objects.BUILDING, objects.ACTIVE, objects.DELETED],
                         [states[t.instance_uuid] for t in (a, b, c)],
                         "the instance of a task not the worker's any more is left as it is")
        self.assertEqual([work.RUNNING, work.DONE, work.CANCELLED],
                         [t.state for t in self.store.tasks.find(ids=[a.id, b.id, c.id])])

    def test_many_tasks_are_recorded_in_order_in_one_transaction(self):
        count = task_writes.INSERT_ROWS + 7   # more than one INSERT
        asked = [WorkRequest(host=f"h{i % 3}", kind=work.AUDIT, params={"i": i})
                 for i in range(count)]
        made = self.store.tasks.record(asked)
        self.assertEqual([(r.host, r.params) for r in asked], [(t.host, t.params) for t in made])
        self.assertEqual(sorted(t.id for t in made), [t.id for t in made])
        self.assertEqual(made, self.store.tasks.find())


class TestWorkSQLite(BuildAndDelete, DownHosts, Recovery, WakeUp, Queue, base.OnSQLiteFile,
                     WorkCase):
    pass


class TestWorkPostgreSQL(BuildAndDelete, DownHosts, Recovery, WakeUp, Queue, base.OnPostgreSQL,
                         WorkCase):

    def test_notify_wakes_the_service_long_before_its_poll(self):
        h1 = self.service("h1", update_resources_interval=3600, work_poll_interval=3600,
                          report_interval=3600, service_down_time=7200)
        runner = threading.Thread(target=h1.run, kwargs={"handle_signals": False})
        runner.start()
        self.addCleanup(runner.join)
        self.addCleanup(h1.stop)
        self.wait_for(lambda: h1.worker.listener.listening, "the service to listen")
        result = api.build(self.store, flavor(), settings=self.settings())
        done = api.wait(self.store, result.tasks, timeout=60)
        self.assertEqual(work.DONE, done[0].state)

    def test_a_connection_dropped_mid_task_leaves_the_build_done_once(self):
        import sqlalchemy as sa

        from nova_lite.db import Store
        own = Store(self.url)   # the service's own connections, to cut them
        self.addCleanup(own.close)
        pids = []
        sa.event.listen(own.db.engine, "connect",
                        lambda dbapi_conn, _: pids.append(dbapi_conn.info.backend_pid))
        s = self.settings(host="h1", reserved_host_memory_mb=0, work_poll_interval=0.05,
                          service_down_time=2, report_interval=0.5,
                          update_resources_interval=3600)
        h1 = ComputeService("h1", FakeDriver(settings=s), store=own, settings=s)
        runner = threading.Thread(target=h1.run, kwargs={"handle_signals": False})
        runner.start()
        self.addCleanup(runner.join)
        self.addCleanup(h1.stop)
        self.wait_for(lambda: self.store.get_compute_nodes("h1"), "h1's node recorded")
        slow = attrs.evolve(flavor(), extra_specs={"fake:spawn_seconds": "1"})
        (task,) = api.build(self.store, slow, settings=self.settings()).tasks
        self.wait_for(lambda: self.store.tasks.get(task.id).state == work.RUNNING,
                      "the host to take the build")
        cut = self.store.db.read("cut the service's connections", lambda conn: conn.execute(
            sa.text("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM "
                    "pg_stat_activity WHERE pid = ANY(:pids)) t"),
            {"pids": list(pids)}).scalar_one())
        self.assertGreater(cut, 0)
        (done,) = api.wait(self.store, [task], timeout=60)
        self.assertEqual(work.DONE, done.state)
        inst = self.store.get_instance(done.instance_uuid)
        self.assertEqual(objects.ACTIVE, inst.vm_state)
        self.assertEqual([inst.uuid], h1.driver.list_instances())
        self.assertEqual(1, len(self.held(inst.uuid)))

    def test_a_listener_ignores_other_hosts_and_polls_without_postgresql(self):
        listener = WorkListener(self.url, "h1")
        self.addCleanup(listener.close)
        self.assertTrue(listener.wait(0.01), "a new listener first wakes its caller to look")
        self.assertTrue(listener.listening)
        self.assertFalse(listener.wait(0.01))
        self.store.tasks.record([WorkRequest(host="h2", kind=work.AUDIT)])
        self.assertFalse(listener.wait(0.2), "a notification for h2 does not wake h1")
        # Work for a host of the same name in another schema of the database
        # (another deployment, or another test) does not wake it either.
        other = Store(self.useFixture(databases.PostgreSQLSchema()).url)
        self.addCleanup(other.close)
        other.tasks.record([WorkRequest(host="h1", kind=work.AUDIT)])
        self.assertFalse(listener.wait(0.2), "work for h1 of another schema does not wake h1")
        self.store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT)])
        self.assertTrue(listener.wait(30))
        self.assertFalse(WorkListener("sqlite:///x.db", "h1").listening)

    def test_a_burst_of_work_wakes_the_listener_once(self):
        listener = WorkListener(self.url, "h1")
        self.addCleanup(listener.close)
        self.assertTrue(listener.wait(0.01), "a new listener first wakes its caller to look")
        for _ in range(5):   # five transactions, five notifications
            self.store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT)])
        self.assertTrue(listener.wait(30))
        self.assertFalse(listener.wait(0.2), "the rest of the burst came with the first")

    def test_work_is_notified_on_its_hosts_own_channel(self):
        import psycopg
        (schema,) = self.store.db.read("schema", lambda conn: conn.execute(
            sa.text("SELECT current_schema()")).one())
        url = self.url.replace("postgresql+psycopg://", "postgresql://", 1)
        conn = psycopg.connect(url, autocommit=True)
        self.addCleanup(conn.close)
        for host in ("h1", "h2"):
            conn.execute(f"LISTEN {queue.notify_channel(schema, host)}")
        conn.execute(f"LISTEN {queue.NOTIFY_CHANNEL}")
        self.store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT),
                                 WorkRequest(host="h1", kind=work.AUDIT)])
        notes = list(conn.notifies(timeout=5, stop_after=1))
        notes += list(conn.notifies(timeout=0.2))
        self.assertEqual([(queue.notify_channel(schema, "h1"), f"{schema}/h1")],
                         [(n.channel, n.payload) for n in notes],
                         "one notification, on h1's channel alone")


class TestBuildErrors(base.OnSQLiteFile, WorkCase):

    def test_no_host_records_nothing(self):
        self.assertRaises(NoValidHost, api.build, self.store, flavor(),
                          settings=self.settings())
        self.assertEqual([], self.store.tasks.find())

    def test_a_bad_count_is_refused(self):
        self.service("h1")
        for bad in (0, -1, True, "2"):
            self.assertRaises(InvalidInput, api.build, self.store, flavor(), bad)
        self.assertEqual([], self.store.list_instances(live_only=False))

    def test_worker_identity_round_trips(self):
        me = WorkerIdentity.of_this_process("host@with@ats")
        self.assertEqual(me, WorkerIdentity.parse(str(me)))
        self.assertFalse(is_gone(str(me)))
        self.assertIsNone(WorkerIdentity.parse("w1"))
        self.assertFalse(is_gone("w1"))
        self.assertEqual(os.getpid(), me.pid)


class TestTaskRows(base.TestCase):
    """A task's row read back as a Task: every column to its own field."""

    COLUMNS = [c.name for c in task_writes.T_TASK.columns]
    RECORDED = {"id": 7, "host": "h1", "kind": work.PREP_RESIZE, "instance_uuid": "i-1",
                "migration_uuid": "m-1", "params": '{"node": "n1"}', "state": work.RUNNING,
                "attempts": 2, "taken_by": "w1", "lease_until": 40.5, "detail": "half way",
                "result": '{"spawned": true}', "created_at": 10.0, "started_at": 20.0,
                "finished_at": 30.0}

    def expected(self):
        return work.Task(id=7, host="h1", kind=work.PREP_RESIZE, instance_uuid="i-1",
                         migration_uuid="m-1", params={"node": "n1"}, state=work.RUNNING,
                         attempts=2, taken_by="w1", lease_until=40.5, detail="half way",
                         result={"spawned": True}, created_at=10.0, started_at=20.0,
                         finished_at=30.0)

    def test_every_column_is_read_into_its_field(self):
        self.assertEqual(sorted(self.COLUMNS), sorted(self.RECORDED))
        row = collections.namedtuple("Row", self.COLUMNS)(**self.RECORDED)
        self.assertEqual(self.expected(), task_writes.task_from_row(row))

    def test_a_row_that_prefixes_the_columns_is_read_the_same(self):
        # The claim's one statement names the task's columns t_<column>,
        # beside columns of its own.
        names = ["generation", *(f"t_{c}" for c in reversed(self.COLUMNS)), "vcpu"]
        values = {f"t_{c}": v for c, v in self.RECORDED.items()}
        row = collections.namedtuple("Row", names)(generation=3, vcpu=1, **values)
        self.assertEqual(self.expected(), task_writes.task_from_row(row, prefix="t_"))
