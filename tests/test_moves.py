"""Resize, cold migration, confirm and revert, done by the hosts through the records.

Each test runs two or three hosts in-process, each a real ComputeService
with its own fake driver, on one real store (an SQLite file, or a
PostgreSQL schema).  The asker (``nova_lite.compute.moves`` or the
``nova-lite server ...`` commands) records a move; the work is driven by
``do_work()`` on each service until none is left, so no test sleeps.
After every flow each host's audit (hypervisor, tracked and records views)
is consistent, the leak finder finds nothing with the host's guests, and
the hypervisor's usage equals the records'.
"""

import contextlib
import importlib.metadata
import io
import json
import threading

import attrs
import testtools

from nova_lite import audit, conf, leaks, work
from nova_lite.cli.main import main as cli_main
from nova_lite.compute import api, moves
from nova_lite.compute.manager import ComputeService
from nova_lite.exception import HostNotFound, InvalidInput
from nova_lite.objects import Flavor, Overhead
from nova_lite.scheduler import RequestSpec
from nova_lite.virt import loader
from tests import base
from tests.entry_points import ThrowawayDistributions
from tests.reliability.base import dump

SMALL = Flavor(name="m1.tiny", vcpus=1, memory_mb=512, root_gb=1)   # as built in
BIG = Flavor(name="m1.big", vcpus=2, memory_mb=1536, root_gb=2)
FILLER = Flavor(name="filler", vcpus=1, memory_mb=1024, root_gb=1)

#: The move commands, as setup.cfg declares them.
MOVE_COMMANDS = {
    "server_resize": "nova_lite.cli.server_moves:ResizeServer",
    "server_resize_confirm": "nova_lite.cli.server_moves:ConfirmServerResize",
    "server_resize_revert": "nova_lite.cli.server_moves:RevertServerResize",
    "server_migrate": "nova_lite.cli.server_moves:MigrateServer",
}


def use_move_commands(test):
    """Make the move commands findable by ``nova-lite`` while the installed
    metadata predates them (an editable install made before they were
    declared): a throwaway distribution declares the missing ones."""
    installed = {ep.name for ep in importlib.metadata.entry_points(group="nova_lite.cli")}
    missing = {name: target for name, target in MOVE_COMMANDS.items() if name not in installed}
    if missing:
        test.useFixture(ThrowawayDistributions()).add(
            "nltest-server-moves", entry_points={"nova_lite.cli": missing})


class Hosts:
    """Two (or more) hosts on one store; the mixins give ``make_store()``."""

    hosts = ("h1", "h2")

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.settings_ = self.settings(reserved_host_memory_mb=0, work_poll_interval=0.02)
        self.services = {h: self.add_host(h) for h in self.hosts}

    def add_host(self, host, settings=None, **driver_kwargs):
        settings = settings or self.settings_
        driver = loader.load_driver("fake", settings=settings, **driver_kwargs)
        service = ComputeService(host, driver, store=self.store, settings=settings)
        service.run_once()
        return service

    # -- driving and looking --------------------------------------------------
    def drive(self):
        """Do the hosts' work until none is left; returns how many tasks ran."""
        total = 0
        for _ in range(20):
            done = sum(s.do_work() for s in self.services.values())
            total += done
            if not done:
                return total
        self.fail("the hosts kept finding work")

    def build(self, flavor=SMALL, host="h1"):
        result = api.build(self.store, RequestSpec(flavor, project_id="demo",
                                                   force_hosts=(host,)),
                           settings=self.settings_)
        self.drive()
        inst = self.store.get_instance(result.instances[0].uuid)
        self.assertEqual(("active", host), (inst.vm_state, inst.host))
        return inst

    def guests(self, uuid):
        """The hosts whose driver runs a guest of ``uuid``."""
        return sorted(h for h, s in self.services.items()
                      if uuid in s.driver.list_instances())

    def migration(self, uuid):
        return self.store.list_migrations(uuid)[-1]

    def usage(self, host):
        return dict(self.services[host].tracker.get_node(host).usage)

    def assertClean(self):
        """Every host: a pass, then a consistent audit, no leak, and the
        hypervisor's usage equal to what the tracker and the records hold."""
        for host, service in self.services.items():
            service.run_once()
            report = audit.audit_host(service.tracker)
            self.assertTrue(report.consistent, (host, report.all_differences()))
            for node in report.nodes:
                for row in node.resources:
                    self.assertEqual((row.hypervisor, row.hypervisor), (row.tracked, row.records),
                                     (host, row))
            found = leaks.find_leaks(self.store, self.settings_, host=host,
                                     guests=service.driver.list_instances())
            self.assertTrue(found.clean, (host, found.findings))

    def kinds(self, first):
        return [(t.kind, t.host, t.state) for t in moves.chain(self.store, first)]

    def drive_confirm(self, inst):
        task = moves.confirm(self.store, inst)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))

    @contextlib.contextmanager
    def running(self):
        """The hosts' compute services running in threads meanwhile."""
        threads = []
        for service in self.services.values():
            thread = threading.Thread(target=service.run, kwargs={"handle_signals": False},
                                      daemon=True)
            thread.start()
            threads.append((service, thread))
        try:
            yield
        finally:
            for service, thread in threads:
                service.stop()
                thread.join()


class MoveTests(Hosts):
    """The flows."""

    # -- resize ---------------------------------------------------------------
    def resize_to_h2(self):
        inst = self.build()
        task = moves.resize(self.store, inst, BIG, settings=self.settings_)
        self.assertEqual(("h2", work.PREP_RESIZE), (task.host, task.kind))
        self.assertEqual("resize_prep", self.store.get_instance(inst.uuid).task_state)
        self.drive()
        self.assertEqual([(work.PREP_RESIZE, "h2", "done"), (work.RESIZE_INSTANCE, "h1", "done"),
                          (work.FINISH_RESIZE, "h2", "done")], self.kinds(task))
        self.assertTrue(moves.outcome(self.store, task).ok)
        return inst

    def test_resize_to_another_host_then_confirm(self):
        inst = self.resize_to_h2()
        # Waiting for confirm: the record and the old flavor stay on the source,
        # the destination's claim is the migration's, both guests run.
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("resized", None, "h1", SMALL), (now.vm_state, now.task_state,
                                                         now.host, now.flavor))
        mig = self.migration(inst.uuid)
        self.assertEqual(("finished", "resize", "h1", "h2"),
                         (mig.status, mig.migration_type, mig.source_compute, mig.dest_compute))
        self.assertEqual(["h1", "h2"], self.guests(inst.uuid))
        self.assertEqual({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, self.usage("h1"))
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 1536, "DISK_GB": 2}, self.usage("h2"))
        self.assertClean()

        task = moves.confirm(self.store, inst)
        self.assertEqual(("h1", work.CONFIRM_RESIZE), (task.host, task.kind))
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", None, "h2", "h2", BIG),
                         (now.vm_state, now.task_state, now.host, now.node, now.flavor))
        self.assertEqual("confirmed", self.migration(inst.uuid).status)
        self.assertEqual(["h2"], self.guests(inst.uuid))
        self.assertEqual({}, {rc: n for rc, n in self.usage("h1").items() if n})
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 1536, "DISK_GB": 2}, self.usage("h2"))
        self.assertClean()

    def test_resize_then_revert(self):
        inst = self.resize_to_h2()
        task = moves.revert(self.store, inst)
        self.assertEqual(("h2", work.REVERT_RESIZE), (task.host, task.kind))
        self.drive()
        self.assertEqual([(work.REVERT_RESIZE, "h2", "done"),
                          (work.FINISH_REVERT_RESIZE, "h1", "done")], self.kinds(task))
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", None, "h1", SMALL),
                         (now.vm_state, now.task_state, now.host, now.flavor))
        self.assertEqual("reverted", self.migration(inst.uuid).status)
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertEqual({}, {rc: n for rc, n in self.usage("h2").items() if n})
        self.assertClean()

    def test_no_room_on_the_destination(self):
        self.services["h2"].driver.set_node_size("h2", memory_mb=2048)
        self.services["h2"].run_once()
        inst = self.build()
        before_h2 = self.usage("h2")
        task = moves.resize(self.store, inst, BIG, settings=self.settings_)
        self.assertEqual("h2", task.host)
        # Another build takes the room before h2 does the resize's work.
        api.build(self.store, RequestSpec(FILLER, force_hosts=("h2",)), settings=self.settings_)
        self.drive()
        prep = self.store.tasks.get(task.id)
        self.assertEqual("failed", prep.state)
        self.assertIn("Insufficient compute resources: Free memory", prep.detail)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", None, "h1", SMALL),
                         (now.vm_state, now.task_state, now.host, now.flavor))
        self.assertEqual([], self.store.list_migrations(inst.uuid))
        self.assertEqual(["h1"], self.guests(inst.uuid))
        held = {a.consumer_uuid for a in self.store.list_allocations(
            node_uuid=self.services["h2"].tracker.get_node("h2").uuid)}
        self.assertNotIn(inst.uuid, held)
        self.assertEqual(1, len(held))   # the filler's
        self.assertNotEqual(before_h2, self.usage("h2"))
        self.assertEqual(prep.detail, self.store.tasks.last_failure(inst.uuid).detail)
        self.assertFalse(moves.outcome(self.store, task).ok)
        self.assertClean()

    def test_same_flavor_is_refused(self):
        inst = self.build()
        before = dump(self.store)
        exc = self.assertRaises(InvalidInput, moves.resize, self.store, inst, SMALL)
        self.assertIn("same flavor", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_one_move_at_a_time(self):
        inst = self.build()
        moves.resize(self.store, inst, BIG, settings=self.settings_)
        before = dump(self.store)
        exc = self.assertRaises(moves.MoveNotAllowed, moves.migrate, self.store, inst)
        self.assertIn("busy", str(exc))
        self.assertRaises(moves.MoveNotAllowed, moves.confirm, self.store, inst)
        self.assertEqual(before, dump(self.store))
        self.drive()
        exc = self.assertRaises(moves.MoveNotAllowed, moves.resize, self.store, inst,
                                FILLER, settings=self.settings_)
        self.assertIn("resized, not active", str(exc))

    def test_confirm_or_revert_of_a_server_not_resized_is_refused(self):
        inst = self.build()
        before = dump(self.store)
        for ask in (moves.confirm, moves.revert):
            exc = self.assertRaises(moves.MoveNotAllowed, ask, self.store, inst)
            self.assertIn("it is active, not resized", str(exc))
        self.assertEqual(before, dump(self.store))

    # -- cold migration -----------------------------------------------------------
    def test_migrate_goes_to_another_host(self):
        inst = self.build()
        task = moves.migrate(self.store, inst, settings=self.settings_)
        self.assertEqual("h2", task.host)
        self.drive()
        mig = self.migration(inst.uuid)
        self.assertEqual(("finished", "migration", SMALL, SMALL),
                         (mig.status, mig.migration_type, mig.old_flavor, mig.new_flavor))
        self.assertEqual("resized", self.store.get_instance(inst.uuid).vm_state)
        self.assertClean()
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", "h2", SMALL), (now.vm_state, now.host, now.flavor))
        self.assertEqual(["h2"], self.guests(inst.uuid))
        self.assertClean()

    def test_migrate_to_a_named_host(self):
        self.services["h3"] = self.add_host("h3")
        inst = self.build()
        for _ in range(3):   # whatever the weighers prefer
            task = moves.migrate(self.store, inst, "h3", settings=self.settings_)
            self.assertEqual("h3", task.host)
            self.drive()
            self.assertEqual("h3", self.migration(inst.uuid).dest_compute)
            task = moves.revert(self.store, inst)
            self.drive()
            self.assertTrue(moves.outcome(self.store, task).ok)
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertClean()

    def test_migrate_to_an_unknown_or_its_own_host_changes_nothing(self):
        inst = self.build()
        before = dump(self.store)
        exc = self.assertRaises(HostNotFound, moves.migrate, self.store, inst, "nowhere")
        self.assertIn("'nowhere' not found", str(exc))
        exc = self.assertRaises(InvalidInput, moves.migrate, self.store, inst, "h1")
        self.assertIn("another host", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_no_room_moves_on_to_an_alternate(self):
        self.services["h3"] = self.add_host("h3")
        for host in ("h2", "h3"):
            self.services[host].driver.set_node_size(host, memory_mb=2048)
            self.services[host].run_once()
        inst = self.build()
        task = moves.resize(self.store, inst, BIG, settings=self.settings_)
        first = task.host
        other = ({"h2", "h3"} - {first}).pop()
        self.assertEqual([other], [a["host"] for a in task.params["alternates"]])
        api.build(self.store, RequestSpec(FILLER, force_hosts=(first,)), settings=self.settings_)
        self.drive()
        self.assertEqual([(work.PREP_RESIZE, first, "done"), (work.PREP_RESIZE, other, "done"),
                          (work.RESIZE_INSTANCE, "h1", "done"),
                          (work.FINISH_RESIZE, other, "done")],
                         [k for k in self.kinds(task) if k[0] != work.BUILD])
        self.assertEqual(other, self.migration(inst.uuid).dest_compute)
        self.assertClean()

    # -- failures and crashes -----------------------------------------------------------
    def test_a_spawn_that_fails_on_the_destination_fails_the_move(self):
        inst = self.build()
        task = moves.resize(self.store, inst, BIG, settings=self.settings_)
        h2 = self.services["h2"]
        h2.do_work()                      # prep_resize: the claim
        self.services["h1"].do_work()     # resize_instance
        h2.driver.set_nodes([])           # its node is gone: the spawn fails
        h2.do_work()
        h2.driver.set_nodes(["h2"])
        finish = [t for t in moves.chain(self.store, task) if t.kind == work.FINISH_RESIZE][0]
        self.assertEqual("failed", finish.state)
        self.assertIn("spawn on h2/h2 failed", finish.detail)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", None, "h1", SMALL),
                         (now.vm_state, now.task_state, now.host, now.flavor))
        self.assertEqual("error", self.migration(inst.uuid).status)
        self.assertEqual({}, {rc: n for rc, n in self.usage("h2").items() if n})
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertClean()

    def take_as_dead(self, host, kind):
        """Take ``host``'s waiting task of ``kind`` for a worker that then dies."""
        (task,) = self.store.tasks.take(host, "dead-worker", limit=1, lease=300)
        self.assertEqual(kind, task.kind)
        return task

    def hand_back(self, host):
        back = self.store.tasks.release_dead(host, lambda worker: worker == "dead-worker")
        self.assertEqual(1, len(back))

    def test_prep_resize_taken_again_after_its_claim(self):
        inst = self.build()
        moves.resize(self.store, inst, BIG, settings=self.settings_)
        self.take_as_dead("h2", work.PREP_RESIZE)
        # The dead attempt claimed, then died before recording its outcome.
        self.services["h2"].tracker.resize_claim(self.store.get_instance(inst.uuid), BIG, "h2")
        self.hand_back("h2")
        self.drive()
        (mig,) = self.store.list_migrations(inst.uuid)
        self.assertEqual("finished", mig.status)
        self.assertEqual("resized", self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 1536, "DISK_GB": 2}, self.usage("h2"))
        self.assertClean()
        self.drive_confirm(inst)
        self.assertClean()

    def test_finish_resize_taken_again_after_its_spawn(self):
        inst = self.build()
        first = moves.resize(self.store, inst, BIG, settings=self.settings_)
        self.services["h2"].do_work()
        self.services["h1"].do_work()
        task = self.take_as_dead("h2", work.FINISH_RESIZE)
        h2 = self.services["h2"]
        h2.driver.spawn(attrs.evolve(inst, flavor=BIG, host="h2", node="h2"))
        # Its lease runs out: the next take hands it over.
        self.store.tasks.renew("dead-worker", [task.id], lease=-1)
        self.drive()
        self.assertEqual(2, self.store.tasks.get(task.id).attempts)
        self.assertTrue(moves.outcome(self.store, first).ok)
        self.assertEqual(["h1", "h2"], self.guests(inst.uuid))
        self.assertEqual(1, h2.driver.list_instances().count(inst.uuid))
        self.assertEqual("finished", self.migration(inst.uuid).status)
        self.assertClean()

    def test_confirm_taken_again_after_its_accounting(self):
        inst = self.resize_to_h2()
        task = moves.confirm(self.store, inst)
        self.take_as_dead("h1", work.CONFIRM_RESIZE)
        h1 = self.services["h1"]
        now = self.store.get_instance(inst.uuid)
        h1.driver.destroy(now)
        h1.tracker.drop_move_claim(attrs.evolve(now, vm_state="active", task_state=None),
                                   "h1", SMALL)
        self.hand_back("h1")
        self.drive()
        done = self.store.tasks.get(task.id)
        self.assertEqual(("done", "confirmed already"), (done.state, done.detail))
        self.assertEqual(["h2"], self.guests(inst.uuid))
        self.assertEqual("active", self.store.get_instance(inst.uuid).vm_state)
        self.assertClean()

    def test_revert_taken_again_after_its_accounting(self):
        inst = self.resize_to_h2()
        task = moves.revert(self.store, inst)
        self.take_as_dead("h2", work.REVERT_RESIZE)
        h2 = self.services["h2"]
        now = self.store.get_instance(inst.uuid)
        h2.tracker.drop_move_claim(now, "h2", BIG)   # the guest left running
        self.hand_back("h2")
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertEqual(("active", "h1"), (self.store.get_instance(inst.uuid).vm_state,
                                            self.store.get_instance(inst.uuid).host))
        self.assertClean()

    def test_delete_while_resized_frees_both_hosts(self):
        inst = self.resize_to_h2()
        result = api.delete(self.store, self.store.get_instance(inst.uuid))
        self.drive()
        self.assertEqual("done", self.store.tasks.get(result.task.id).state)
        self.assertEqual("error", self.migration(inst.uuid).status)
        for host in self.hosts:
            self.assertEqual({}, {rc: n for rc, n in self.usage(host).items() if n})
        self.assertClean()   # the destination's pass reaps the guest left there
        self.assertEqual([], self.guests(inst.uuid))


class TestMovesSQLite(MoveTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestMovesPostgreSQL(MoveTests, base.OnPostgreSQL, base.TestCase):
    pass


class TestSameHostResize(Hosts, base.OnSQLiteFile, base.TestCase):
    """allow_resize_to_same_host: one host, one guest, both flavors held until
    confirm or revert."""

    hosts = ("h1",)

    def setUp(self):
        super().setUp()
        self.settings_ = attrs.evolve(self.settings_, allow_resize_to_same_host=True)

    def resize_here(self):
        inst = self.build()
        task = moves.resize(self.store, inst, BIG, settings=self.settings_)
        self.assertEqual("h1", task.host)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        self.assertEqual({"VCPU": 3, "MEMORY_MB": 2048, "DISK_GB": 3}, self.usage("h1"))
        return inst

    def test_confirm(self):
        inst = self.resize_here()
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("active", "h1", BIG), (now.vm_state, now.host, now.flavor))
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertEqual({"VCPU": 2, "MEMORY_MB": 1536, "DISK_GB": 2}, self.usage("h1"))
        self.assertClean()

    def test_revert(self):
        inst = self.resize_here()
        task = moves.revert(self.store, inst)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertEqual({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, self.usage("h1"))
        self.assertClean()

    def test_without_the_option_there_is_no_valid_host(self):
        from nova_lite.scheduler import NoValidHost
        inst = self.build()
        self.assertRaises(NoValidHost, moves.resize, self.store, inst, BIG,
                          settings=attrs.evolve(self.settings_,
                                                allow_resize_to_same_host=False))

    def test_the_option_reads_from_a_file(self):
        path = self.useFixture(base.fixtures.TempDir()).join("n.conf")
        for text, value in (("True", True), ("no", False), ("", False)):
            with open(path, "w") as handle:
                handle.write(f"[DEFAULT]\nallow_resize_to_same_host = {text}\n")
            self.assertIs(value, conf.load_settings(path).allow_resize_to_same_host)
        with open(path, "w") as handle:
            handle.write("[DEFAULT]\nallow_resize_to_same_host = maybe\n")
        exc = self.assertRaises(InvalidInput, conf.load_settings, path)
        self.assertIn("[DEFAULT] allow_resize_to_same_host", str(exc))


# -- the commands -----------------------------------------------------------------
class CommandTests(Hosts):
    """``nova-lite server resize|migrate`` and ``server resize confirm|revert``."""

    def setUp(self):
        super().setUp()
        use_move_commands(self)

    def cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["--database-url", self.store.url, *argv])
        return code, out.getvalue(), err.getvalue()

    def refused(self, code, words, *argv):
        before = dump(self.store)
        got, out, err = self.cli(*argv)
        self.assertEqual(code, got, (argv, out, err))
        self.assertEqual("", out)
        for word in words:
            self.assertIn(word, err, argv)
        self.assertEqual(before, dump(self.store), f"{argv} changed something")

    def test_resize_confirm_and_revert_without_waiting(self):
        inst = self.build()
        code, out, err = self.cli("server", "resize", inst.uuid, "--vcpus", "2", "--ram",
                                  "1536", "--disk", "2")
        self.assertEqual(0, code, err)
        self.assertIn(f"Resize of server {inst.uuid} to custom-2-1536-2 recorded for host h2",
                      out)
        self.drive()
        self.assertEqual("resized", self.store.get_instance(inst.uuid).vm_state)
        code, out, err = self.cli("server", "resize", "revert", inst.uuid)
        self.assertEqual((0, ""), (code, err))
        self.assertIn("Revert of server", out)
        self.drive()
        self.assertEqual(("active", "h1"), (self.store.get_instance(inst.uuid).vm_state,
                                            self.store.get_instance(inst.uuid).host))
        code, out, err = self.cli("server", "migrate", inst.uuid, "--host", "h2")
        self.assertEqual(0, code, err)
        self.assertIn("recorded for host h2", out)
        self.drive()
        code, out, err = self.cli("server", "resize", "confirm", inst.uuid)
        self.assertEqual(0, code, err)
        self.drive()
        shown = json.loads(self.cli("server", "show", inst.uuid, "-f", "json")[1])
        self.assertEqual(("active", "h2", None), (shown["status"], shown["host"],
                                                  shown["task_state"]))
        self.assertClean()

    def test_wait_while_the_services_run(self):
        with self.running():
            result = api.build(self.store, RequestSpec(SMALL, force_hosts=("h1",)),
                               settings=self.settings_)
            api.wait(self.store, result.tasks, timeout=30)
            uuid = result.instances[0].uuid
            code, out, err = self.cli("server", "resize", uuid, "--vcpus", "2", "--ram",
                                      "1024", "--wait", "--timeout", "30")
            self.assertEqual(0, code, err)
            self.assertIn(f"Resized server {uuid} to custom-2-1024-0 on h2", out)
            code, out, err = self.cli("server", "resize", "confirm", uuid, "--wait",
                                      "--timeout", "30")
            self.assertEqual(0, code, err)
            self.assertEqual(f"Confirmed server {uuid}: active on h2/h2 with custom-2-1024-0\n",
                             out)
        self.assertClean()

    def test_no_room_for_the_destination_overhead(self):
        # The scheduler cannot know h2's driver overhead: its own claim counts it.
        self.services["h2"] = self.add_host("h2", memory_mb=2048,
                                            overhead=Overhead(memory_mb=1024))
        inst = self.build()
        with self.running():
            code, out, err = self.cli("server", "resize", inst.uuid, "--vcpus", "2", "--ram",
                                      "1536", "--disk", "2", "--wait", "--timeout", "30")
        self.assertEqual(1, code, out)
        self.assertEqual("", out)
        self.assertIn(f"Server {inst.uuid}: prep_resize failed on host h2: cannot claim on "
                      "h2/h2: Insufficient compute resources: Free memory", err)
        shown = json.loads(self.cli("server", "show", inst.uuid, "-f", "json")[1])
        self.assertEqual(("active", "h1", None), (shown["status"], shown["host"],
                                                  shown["task_state"]))
        self.assertIn("Insufficient compute resources", shown["fault"])
        self.assertEqual([], self.store.list_migrations(inst.uuid))
        self.assertEqual(["h1"], self.guests(inst.uuid))
        self.assertClean()

    def test_wait_past_its_deadline_exits_1(self):
        inst = self.build()
        code, out, err = self.cli("server", "migrate", inst.uuid, "--wait", "--timeout", "0.1")
        self.assertEqual(1, code)
        self.assertIn("1 task(s) not finished after 0.1 s: prep_resize", err)
        self.drive()    # the move is recorded all the same, and goes on
        self.assertEqual("resized", self.store.get_instance(inst.uuid).vm_state)

    def test_refusals_change_nothing(self):
        inst = self.build()
        self.refused(2, ["already has flavor 'm1.tiny'", "same flavor"],
                     "server", "resize", inst.uuid, "--flavor", "m1.tiny", "--wait",
                     "--timeout", "5")
        self.refused(1, ["unknown flavor 'm9'"], "server", "resize", inst.uuid, "--flavor",
                     "m9")
        self.refused(2, ["a flavor is required"], "server", "resize", inst.uuid)
        self.refused(1, ["No server 'ghost'"], "server", "resize", "ghost", "--flavor",
                     "m1.tiny")
        self.refused(1, ["it is active, not resized"], "server", "resize", "confirm",
                     inst.uuid)
        self.refused(1, ["it is active, not resized"], "server", "resize", "revert",
                     inst.uuid, "--wait", "--timeout", "5")
        self.refused(1, ["Host 'nowhere' not found", "h1, h2"], "server", "migrate",
                     inst.uuid, "--host", "nowhere")
        self.refused(2, ["on host 'h1' already"], "server", "migrate", inst.uuid,
                     "--host", "h1")
        self.refused(2, ["--host must not be empty"], "server", "migrate", inst.uuid,
                     "--host", " ")
        self.refused(2, ["--timeout"], "server", "migrate", inst.uuid, "--timeout", "0")
        self.refused(1, ["No valid host"], "server", "resize", inst.uuid, "--vcpus",
                     "100000", "--ram", "1")

    def test_help(self):
        for argv in (["server", "resize"], ["server", "resize", "confirm"],
                     ["server", "resize", "revert"], ["server", "migrate"]):
            code, out, _ = self.cli(*argv, "--help")
            self.assertEqual(0, code, argv)
            self.assertIn("--wait", out)
            self.assertIn("SERVER", out)
        self.assertIn("--flavors-file", self.cli("server", "resize", "--help")[1])
        self.assertIn("--host HOST", self.cli("server", "migrate", "--help")[1])


class TestCommandsSQLite(CommandTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestCommandsPostgreSQL(CommandTests, base.OnPostgreSQL, base.TestCase):
    pass


class TestLastStep(testtools.TestCase):

    def test_each_first_kind_has_its_last_step(self):
        self.assertEqual({work.PREP_RESIZE, work.CONFIRM_RESIZE, work.REVERT_RESIZE},
                         set(moves.LAST_STEP))
