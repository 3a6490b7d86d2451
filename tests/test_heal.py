"""The leak audit and its repair, on SQLite files and PostgreSQL.

The classic leak, end to end through the real ``nova-lite`` entry point:
instances are deleted while their compute service is down (the API marks
the record deleted; no tracker frees the claim), leaving stale
allocations.  ``node explain`` names them, ``audit`` lists them,
``audit --dry-run`` changes nothing, ``audit --heal`` frees them and the
freed capacity shows.  Stuck migrations, a claim racing a heal step, and
bad input are covered too.
"""

import json
import os
import re
import textwrap
import time

import attrs
import sqlalchemy as sa

from nova_lite import conf, leaks
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.exception import InvalidConfig, InvalidInput, MigrationNotFound, NodeNotFound
from nova_lite.objects import DELETED
from nova_lite.testing import databases
from nova_lite.virt import loader
from tests import base
from tests.test_cli import CliTestCase


def api_delete(store, uuid):
    """Mark an instance deleted the way an API does while its compute service is down."""
    base.write_instance_row(store, attrs.evolve(store.get_instance(uuid), vm_state=DELETED))


def snapshot(store):
    """Every row a heal could change, for "nothing changed" checks."""
    out = {}
    with store.db.engine.connect() as conn:
        for table in (models.compute_nodes, models.allocations, models.instances,
                      models.migrations):
            key = list(table.primary_key.columns)
            out[table.name] = [tuple(r) for r in conn.execute(table.select().order_by(*key))]
    return out


def beat(store, host, ago):
    """Make ``host``'s compute service look as if its last heartbeat was ``ago`` s ago."""
    with store.db.engine.begin() as conn:
        conn.execute(models.services.update().where(models.services.c.host == host).values(
            updated_at=time.time() - ago))


def age_migration(store, migration_uuid, seconds):
    """Make a migration look unchanged for ``seconds`` (as if it stalled that long ago)."""
    with store.db.engine.begin() as conn:
        conn.execute(models.migrations.update().where(
            models.migrations.c.uuid == migration_uuid).values(
            updated_at=time.time() - seconds))


class HealTests:
    """Library-level: find_leaks, plan, heal.  Mixed into a TestCase with make_store()."""

    def tracker(self, settings=None, **driver_kwargs):
        settings = settings or self.settings(reserved_host_memory_mb=0,
                                             migration_stuck_age=600)
        driver = loader.load_driver("fake.multinode", settings=settings, **driver_kwargs)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=self.make_store(), settings=settings)
        rt.update_available_resource()
        return rt

    def claim(self, rt, node, memory_mb=512):
        return rt.instance_claim(base.instance(base.flavor(memory_mb=memory_mb)),
                                 node).instance

    def test_stale_allocations_found_dry_run_then_healed(self):
        rt = self.tracker(nodes=["n1"], memory_mb=4096)
        kept = self.claim(rt, "n1")
        gone = [self.claim(rt, "n1", 1024) for _ in range(2)]
        for inst in gone:
            api_delete(rt.store, inst.uuid)
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
        self.assertEqual(sorted((leaks.STALE_ALLOCATION, i.uuid) for i in gone),
                         [(f.kind, f.subject) for f in report.findings])
        before = snapshot(rt.store)
        planned = leaks.heal(rt.store, report, dry_run=True)
        self.assertEqual([leaks.PLANNED] * 2, [a.outcome for a in planned])
        self.assertEqual(before, snapshot(rt.store))
        done = leaks.heal(rt.store, report)
        self.assertEqual([leaks.APPLIED] * 2, [a.outcome for a in done])
        self.assertEqual({"MEMORY_MB": 1024, "VCPU": 1, "DISK_GB": 1}, done[0].resources)
        self.assertEqual([kept.uuid],
                         [a.consumer_uuid for a in rt.store.list_allocations()])
        node = rt.store.get_compute_node(self.host, "n1")
        self.assertEqual((512, 4096 - 512), (node.used("MEMORY_MB"), node.free("MEMORY_MB")))
        self.assertTrue(leaks.find_leaks(rt.store, rt.settings, host=self.host).clean)

    def test_claim_between_plan_and_apply_skips_the_step(self):
        rt = self.tracker(nodes=["n1"], memory_mb=4096)
        stale = self.claim(rt, "n1")
        api_delete(rt.store, stale.uuid)
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
        newcomer = self.claim(rt, "n1")   # bumps the node's generation
        (action,) = leaks.heal(rt.store, report)
        self.assertEqual(leaks.SKIPPED, action.outcome)
        self.assertIn("moved from generation", action.reason)
        held = {a.consumer_uuid for a in rt.store.list_allocations()}
        self.assertEqual({stale.uuid, newcomer.uuid}, held)   # nothing was applied
        generation = rt.store.get_compute_node(self.host, "n1").generation
        self.assertEqual(report.findings[0].generation + 1, generation)   # bump rolled back
        (again,) = leaks.heal(rt.store, leaks.find_leaks(rt.store, rt.settings,
                                                         host=self.host))
        self.assertEqual(leaks.APPLIED, again.outcome)
        self.assertEqual({newcomer.uuid}, {a.consumer_uuid
                                           for a in rt.store.list_allocations()})

    def test_an_unshelve_claim_is_never_healed(self):
        """Nova's unshelve: offloaded, then claimed again (with or without its task)."""
        rt = self.tracker(nodes=["n1"], memory_mb=1024)
        for task in (None, "unshelving", "spawning"):
            inst = self.claim(rt, "n1")
            rt.update_usage(attrs.evolve(inst, vm_state="shelved_offloaded", task_state=None))
            self.assertEqual([], rt.store.list_allocations())
            again = rt.instance_claim(attrs.evolve(
                rt.store.get_instance(inst.uuid), host=None, node=None, task_state=task),
                "n1").instance
            report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
            self.assertTrue(report.clean, report.findings)
            self.assertEqual((), leaks.heal(rt.store, report))
            rt.update_available_resource()   # the periodic pass agrees: nothing to change
            self.assertEqual([again.uuid], [a.consumer_uuid
                                            for a in rt.store.list_allocations()])
            # The node is full: nothing else fits beside the unshelved instance.
            self.assertRaises(ComputeResourcesUnavailable, self.claim, rt, "n1", 1024)
            rt.update_usage(attrs.evolve(again, vm_state="active", task_state=None))
            self.assertEqual(1, len(rt.store.list_allocations()))
            rt.update_usage(attrs.evolve(again, vm_state="deleted"))

    def _two_moves(self, rt):
        old_inst, young_inst = self.claim(rt, "n1"), self.claim(rt, "n1")
        old = rt.resize_claim(old_inst, base.flavor("m1.big", memory_mb=1024), "n2").migration
        young = rt.resize_claim(young_inst, base.flavor("m1.big", memory_mb=1024),
                                "n2").migration
        age_migration(rt.store, old.uuid, 601)
        age_migration(rt.store, young.uuid, 599)
        return old_inst, young_inst, old, young

    def test_stuck_migration_with_its_service_down_is_reverted(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        rt.store.heartbeat(self.host)
        beat(rt.store, self.host, ago=rt.settings.service_down_time + 5)
        old_inst, young_inst, old, young = self._two_moves(rt)
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
        self.assertEqual([(leaks.STUCK_MIGRATION, old.uuid)],
                         [(f.kind, f.subject) for f in report.findings])
        self.assertGreater(report.findings[0].age, 600)
        self.assertIn(f"the compute service of host {self.host} is down since",
                      report.findings[0].detail)
        (action,) = leaks.heal(rt.store, report)
        self.assertEqual((leaks.APPLIED, "finish_migration", {"MEMORY_MB": 1024, "VCPU": 1,
                                                              "DISK_GB": 1}),
                         (action.outcome, action.kind, action.resources))
        statuses = {m.uuid: m.status for m in rt.store.list_migrations()}
        self.assertEqual({old.uuid: leaks.STUCK_MIGRATION_STATUS, young.uuid: "pre-migrating"},
                         statuses)
        held = {(a.consumer_uuid, a.node_uuid) for a in rt.store.list_allocations()}
        n1, n2 = (rt.store.get_compute_node(self.host, n).uuid for n in ("n1", "n2"))
        self.assertEqual({(old_inst.uuid, n1), (young_inst.uuid, n1), (young.uuid, n2)}, held)

    def test_a_move_whose_services_are_up_is_reported_and_never_touched(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        rt.store.heartbeat(self.host)
        _, _, old, young = self._two_moves(rt)
        rt.update_migration_status(young, "finished")
        age_migration(rt.store, young.uuid, 10 ** 6)   # waiting for confirm for days
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
        self.assertEqual({old.uuid: leaks.MOVE_WAITING, young.uuid: leaks.MOVE_WAITING},
                         {f.subject: f.kind for f in report.findings})
        waiting = {f.subject: f.detail for f in report.findings}
        self.assertIn("move waiting for confirm or revert since", waiting[young.uuid])
        self.assertIn("waiting for confirm or revert for", waiting[young.uuid])
        self.assertIn("in progress (pre-migrating)", waiting[old.uuid])
        before = snapshot(rt.store)
        self.assertEqual((), leaks.heal(rt.store, report))
        self.assertEqual(before, snapshot(rt.store))

    def test_a_named_move_is_finished_though_its_services_are_up(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        rt.store.heartbeat(self.host)
        old_inst, _, old, young = self._two_moves(rt)
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host,
                                  migrations=[young.uuid])
        self.assertEqual({old.uuid: leaks.MOVE_WAITING, young.uuid: leaks.STUCK_MIGRATION},
                         {f.subject: f.kind for f in report.findings})
        (action,) = leaks.heal(rt.store, report)
        self.assertEqual((leaks.APPLIED, young.uuid), (action.outcome, action.subject))
        self.assertEqual({old.uuid: "pre-migrating", young.uuid: "error"},
                         {m.uuid: m.status for m in rt.store.list_migrations()})
        self.assertRaises(MigrationNotFound, leaks.find_leaks, rt.store, rt.settings,
                          host=self.host, migrations=[young.uuid])

    def test_a_finished_move_with_its_source_down_is_confirmed(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        inst = self.claim(rt, "n1")
        big = base.flavor("m1.big", memory_mb=1024)
        mig = rt.resize_claim(inst, big, "n2").migration
        for status in ("migrating", "post-migrating", "finished"):
            self.assertEqual(status, rt.update_migration_status(mig, status).status)
        age_migration(rt.store, mig.uuid, 601)
        (finding,) = leaks.find_leaks(rt.store, rt.settings, host=self.host).findings
        self.assertIn("has no compute service record", finding.detail)
        self.assertIn("heal marks it confirmed", finding.detail)
        (action,) = leaks.heal(rt.store, leaks.find_leaks(rt.store, rt.settings,
                                                          host=self.host))
        self.assertEqual(leaks.APPLIED, action.outcome)
        n2 = rt.store.get_compute_node(self.host, "n2").uuid
        self.assertEqual([(inst.uuid, "instance", n2, 1024)],
                         [(a.consumer_uuid, a.consumer_type, a.node_uuid,
                           a.resources["MEMORY_MB"]) for a in rt.store.list_allocations()])
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual(("n2", "m1.big"), (stored.node, stored.flavor.name))
        self.assertEqual("confirmed", rt.store.list_migrations()[0].status)
        self.assertTrue(leaks.find_leaks(rt.store, rt.settings, host=self.host).clean)

    def test_a_service_that_comes_back_keeps_its_move(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        rt.store.heartbeat(self.host)
        beat(rt.store, self.host, ago=rt.settings.service_down_time + 5)
        _, _, old, _ = self._two_moves(rt)
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host)
        rt.store.heartbeat(self.host)   # the service is back before heal applies
        before = snapshot(rt.store)
        (action,) = leaks.heal(rt.store, report)
        self.assertEqual(leaks.SKIPPED, action.outcome)
        self.assertIn("is up again", action.reason)
        self.assertEqual(before, snapshot(rt.store))

    def test_migration_steps_are_recorded_with_their_times_and_end_states_refused(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096)
        inst = self.claim(rt, "n1")
        mig = rt.resize_claim(inst, base.flavor("m1.big", memory_mb=1024), "n2").migration
        age_migration(rt.store, mig.uuid, 100)
        before = rt.store.records_snapshot(self.host).migration_times[mig.uuid][1]
        rt.update_migration_status(mig.uuid, "migrating")
        self.assertGreater(rt.store.records_snapshot(self.host).migration_times[mig.uuid][1],
                           before + 50)
        for bad in ("confirmed", "error", "bogus"):
            err = self.assertRaises(InvalidInput, rt.update_migration_status, mig, bad)
            self.assertIn(repr(bad), str(err))
        self.assertEqual("migrating", rt.store.list_migrations()[0].status)
        rt.drop_move_claim(inst, "n1", inst.flavor)   # confirm
        err = self.assertRaises(InvalidInput, rt.update_migration_status, mig, "finished")
        self.assertIn("is confirmed: it is over", str(err))

    def test_node_gone_unknown_guest_and_over_capacity_are_reported_not_healed(self):
        rt = self.tracker(nodes=["n1", "n2"], memory_mb=4096, local_gb=20)
        orphan = self.claim(rt, "n2")
        for _ in range(2):
            rt.instance_claim(base.instance(base.flavor(root_gb=5)), "n1")
        rt.driver.set_node_size("n1", local_gb=7)
        rt.update_available_resource()
        with rt.store.db.engine.begin() as conn:   # n2's record disappears
            node = models.compute_nodes
            uuid = conn.execute(sa.select(node.c.uuid).where(node.c.nodename == "n2")).scalar()
            conn.execute(models.allocations.delete().where(
                models.allocations.c.node_uuid == uuid))
            conn.execute(models.inventories.delete().where(
                models.inventories.c.node_uuid == uuid))
            conn.execute(node.delete().where(node.c.uuid == uuid))
        stray = "6d1b3c36-0000-4000-8000-00000000beef"
        report = leaks.find_leaks(rt.store, rt.settings, host=self.host,
                                  guests={orphan.uuid, stray})
        kinds = sorted((f.kind, f.subject) for f in report.findings)
        self.assertEqual(sorted([(leaks.UNKNOWN_GUEST, stray),
                                 (leaks.INSTANCE_NODE_GONE, orphan.uuid),
                                 (leaks.OVER_CAPACITY, "DISK_GB")]), kinds)
        before = snapshot(rt.store)
        self.assertEqual((), leaks.heal(rt.store, report))
        self.assertEqual(before, snapshot(rt.store))

    def test_unknown_node_is_an_error_and_changes_nothing(self):
        rt = self.tracker(nodes=["n1"])
        err = self.assertRaises(NodeNotFound, leaks.find_leaks, rt.store, rt.settings,
                                host=self.host, nodename="ghost")
        self.assertIn("ghost", str(err))


class TestHealSQLite(base.OnSQLiteFile, HealTests, base.TestCase):
    pass


class TestHealPostgreSQL(base.OnPostgreSQL, HealTests, base.TestCase):
    pass


class TestStuckAgeSetting(base.TestCase):

    def write(self, text):
        path = os.path.join(self.state_path, "nova-lite.conf")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(textwrap.dedent(text))
        return path

    def test_default_and_file_value(self):
        self.assertEqual(3600, conf.Settings().migration_stuck_age)
        path = self.write("[compute]\nmigration_stuck_age = 900\n")
        self.assertEqual(900, conf.load_settings(path).migration_stuck_age)

    def test_bad_values_name_the_option(self):
        for value, reason in (("soon", "must be a number"),
                              ("-5", "must be a number of seconds > 0"),
                              ("0.5", "must be at least 1 seconds")):
            path = self.write(f"[compute]\nmigration_stuck_age = {value}\n")
            err = self.assertRaises(InvalidConfig, conf.load_settings, path)
            self.assertIn("[compute] migration_stuck_age", str(err))
            self.assertIn(value, str(err))
            self.assertIn(reason, str(err))


class HealCommandTests:
    """Through the real ``nova-lite`` entry point; ``database_args()`` picks the store."""

    driver = "fake.small"

    def setUp(self):
        super().setUp()
        os.makedirs(self.state, exist_ok=True)
        self.db_args = self.database_args()

    def run_cli(self, *argv):
        return self.cli(*self.db_args, *argv)

    def run_ok(self, *argv):
        code, out, err = self.run_cli(*argv)
        self.assertEqual(0, code, f"{argv}: {out}\n{err}")
        return out

    def run_json(self, *argv, code=0):
        import json
        got, out, err = self.run_cli(*argv, "-f", "json")
        self.assertEqual(code, got, f"{argv}: {out}\n{err}")
        return json.loads(out)

    def open_store(self):
        store = Store(self.url())
        self.addCleanup(store.close)
        return store

    def leak_metrics(self):
        """``{(host, kind): value}`` of nova_lite_leak_findings, as ``metrics textfile`` writes."""
        path = os.path.join(self.state, "metrics.prom")
        self.run_ok("metrics", "textfile", path)
        with open(path, encoding="utf-8") as f:
            found = re.findall(r'^nova_lite_leak_findings\{host="([^"]+)",kind="([^"]+)"\} (\S+)$',
                               f.read(), re.MULTILINE)
        return {(host, kind): float(value) for host, kind, value in found}

    def audit(self, *extra, code=3):
        return self.run_json("audit", "--local", "--host", self.host, "--driver", self.driver,
                             *extra, code=code)

    def test_classic_leak_end_to_end(self):
        self.run_ok("compute", "--once", "--host", self.host, "--driver", self.driver)
        built = self.run_json("server", "create", "--flavor", "m1.small", "--count", "3")
        kept, *deleted = [b["ID"] for b in built]
        free = self.run_json("hypervisor", "show", self.host)["MEMORY_MB"]["free"]
        self.assertEqual(7680 - 3 * 2048, free)
        store = self.open_store()
        for uuid in deleted:   # the compute service is down: nobody frees the claims
            api_delete(store, uuid)
        beat(store, self.host, ago=3600)
        # A live peer records the findings of the host that is down: every
        # process that serves metrics shows them.
        self.assertEqual(0.0, self.leak_metrics()[(self.host, "stale_allocation")])
        self.run_ok("compute", "--once", "--host", "peer", "--driver", self.driver)
        self.assertEqual({(self.host, "stale_allocation"): 2.0, ("peer", "stale_allocation"): 0.0},
                         {k: v for k, v in self.leak_metrics().items()
                          if k[1] == "stale_allocation"})
        # explain names the culprits
        shown = self.run_json("node", "explain", self.host)
        self.assertEqual(sorted(deleted), sorted(c["subject"] for c in shown["culprits"]))
        self.assertEqual({"stale_allocation"}, {c["kind"] for c in shown["culprits"]})
        # Its compute service is down, so it cannot audit: the findings the
        # peer recorded for it are shown at once instead, and nothing waits.
        code, out, err = self.run_cli("audit", "--host", self.host, "--timeout", "600")
        self.assertEqual((1, ""), (code, out), err)
        self.assertIn(f"The compute service of host {self.host} is down", err)
        self.assertIn("recorded at", err)
        # Its two leaks, and the three builds that wait for it.
        self.assertIn("(by peer (a peer)): 3 finding(s)", err)
        for uuid in deleted:
            self.assertIn(uuid, err)
        self.assertIn(f"3 tasks waiting on host {self.host}, down since", err)
        self.assertEqual([], store.tasks.find(kinds=("audit",)))
        # audit --local (on the host itself, its service stopped) lists them
        data = self.audit()
        self.assertFalse(data["consistent"])
        self.assertEqual(sorted(("stale_allocation", u) for u in deleted),
                         sorted((f["kind"], f["subject"]) for f in data["leaks"]))
        self.assertNotIn("heal", data)
        # --dry-run changes nothing
        before = snapshot(store)
        dry = self.audit("--dry-run")
        self.assertTrue(dry["dry_run"])
        self.assertEqual(sorted(deleted), sorted(a["subject"] for a in dry["heal"]))
        self.assertEqual({"would apply"}, {a["outcome"] for a in dry["heal"]})
        self.assertEqual(before, snapshot(store))
        self.assertIn("Heal, dry run (nothing written)",
                      self.run_cli("audit", "--local", "--host", self.host, "--driver",
                                   self.driver, "--dry-run")[1])
        # --heal frees them, and says exactly what it changed
        healed = self.audit("--heal")   # 3: this process's fake driver has no guests
        self.assertEqual(sorted(("remove_allocation", u, "applied", 2048) for u in deleted),
                         sorted((a["kind"], a["subject"], a["outcome"],
                                 a["resources"]["MEMORY_MB"]) for a in healed["heal"]))
        self.assertEqual([], healed["leaks_after_heal"])
        self.assertEqual(0.0, self.leak_metrics()[(self.host, "stale_allocation")])
        self.assertFalse(healed["consistent_after_heal"])
        left = [d for n in healed["nodes"] for d in n["differences"]]
        self.assertIn(("missing_guest", kept), [(d["kind"], d["uuid"]) for d in left])
        self.assertEqual([kept], [a.consumer_uuid for a in store.list_allocations()])
        # the freed capacity shows
        self.assertEqual(7680 - 2048,
                         self.run_json("hypervisor", "show", self.host)["MEMORY_MB"]["free"])
        shown = self.run_json("node", "explain", self.host)
        self.assertEqual(("consistent", 7680 - 2048), (shown["verdict"], {
            r["resource_class"]: r for r in shown["resources"]}["MEMORY_MB"]["free"]))
        again = self.audit("--heal")
        self.assertEqual([], again["heal"])

    def test_a_bad_column_is_refused_before_heal_changes_anything(self):
        self.run_ok("compute", "--once", "--host", self.host, "--driver", self.driver)
        built = self.run_json("server", "create", "--flavor", "m1.tiny")
        store = self.open_store()
        api_delete(store, built[0]["ID"])
        before = snapshot(store)
        code, out, err = self.run_cli("audit", "--local", "--host", self.host, "--driver",
                                      self.driver, "--heal", "-c", "bogus")
        self.assertEqual((2, ""), (code, out), err)
        self.assertIn("no column 'bogus'", err)
        self.assertEqual(before, snapshot(store))
        # The fields it knows beforehand are the report's, with and without --heal.
        for extra in ((), ("--dry-run",), ("--heal",)):
            got, out, err = self.run_cli("audit", "--local", "--host", self.host, "--driver",
                                         self.driver, *extra, "-f", "json")
            self.assertIn(got, (0, 3), err)
            for column in json.loads(out):
                got, _, err = self.run_cli("audit", *extra, "--local", "--host", self.host,
                                           "--driver", self.driver, "-c", column, "-f",
                                           "value")
                self.assertIn(got, (0, 3), f"{extra} -c {column}: {err}")

    def test_stuck_migration_by_configured_age(self):
        config = os.path.join(self.state, "nova-lite.conf")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("[compute]\nmigration_stuck_age = 600\n")
        self.run_ok("compute", "--once", "--host", self.host, "--driver", "fake.multinode")
        settings = conf.Settings(host=self.host, state_path=self.state,
                                 database_url=self.url())
        driver = loader.load_driver("fake.multinode", settings=settings)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=self.open_store(), settings=settings)
        rt.update_available_resource()
        src, dest = f"{self.host}-node0", f"{self.host}-node1"
        insts = [rt.instance_claim(base.instance(), src).instance for _ in range(2)]
        old, young = (rt.resize_claim(i, base.flavor("m1.big", memory_mb=1024), dest).migration
                      for i in insts)
        age_migration(rt.store, old.uuid, 3600)
        args = ("--config-file", config, "audit", "--local", "--host", self.host, "--driver",
                "fake.multinode")
        before = snapshot(rt.store)
        waiting = self.run_json(*args, "--heal", code=3)   # its service is up: left alone
        self.assertEqual([], waiting["heal"])
        self.assertEqual([("move_waiting", old.uuid)],
                         [(f["kind"], f["subject"]) for f in waiting["leaks"]])
        self.assertEqual(before, snapshot(rt.store))
        beat(rt.store, self.host, ago=3600)
        dry = self.run_json(*args, "--dry-run", code=3)
        self.assertEqual([("finish_migration", old.uuid, "would apply")],
                         [(a["kind"], a["subject"], a["outcome"]) for a in dry["heal"]])
        self.assertEqual(600, dry["migration_stuck_age"])
        self.assertEqual(before, snapshot(rt.store))
        healed = self.run_json(*args, "--heal", code=3)
        self.assertEqual([("finish_migration", old.uuid, "applied")],
                         [(a["kind"], a["subject"], a["outcome"]) for a in healed["heal"]])
        self.assertEqual({old.uuid: "error", young.uuid: "pre-migrating"},
                         {m.uuid: m.status for m in rt.store.list_migrations()})
        incoming = self.run_json("node", "explain", dest)
        self.assertEqual([young.uuid], [c["consumer_uuid"] for r in incoming["resources"]
                                        if r["resource_class"] == "MEMORY_MB"
                                        for c in r["consumers"]])

    def test_bad_input_is_an_error_and_changes_nothing(self):
        self.run_ok("compute", "--once", "--host", self.host, "--driver", self.driver)
        built = self.run_json("server", "create", "--flavor", "m1.tiny")
        store = self.open_store()
        api_delete(store, built[0]["ID"])
        before = snapshot(store)
        code, _, err = self.run_cli("audit", "--local", "--host", self.host, "--driver",
                                    self.driver, "--heal", "--node", "ghost-node")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)
        code, _, err = self.run_cli("audit", "--local", "--host", self.host, "--driver",
                                    self.driver, "--heal", "--node", " ")
        self.assertEqual(2, code)
        self.assertIn("--node must not be empty", err)
        bad = os.path.join(self.state, "bad.conf")
        with open(bad, "w", encoding="utf-8") as handle:
            handle.write("[compute]\nmigration_stuck_age = soon\n")
        code, _, err = self.run_cli("--config-file", bad, "audit", "--local", "--host",
                                    self.host, "--driver", self.driver, "--heal")
        self.assertEqual(1, code)
        self.assertIn("[compute] migration_stuck_age", err)
        self.assertIn("soon", err)
        code, _, err = self.run_cli("node", "explain", "ghost-node")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)
        self.assertEqual(before, snapshot(store))


class TestHealCommandSQLite(HealCommandTests, CliTestCase):

    def database_args(self):
        return []

    def url(self):
        return conf.Settings(state_path=self.state).database_url


class TestHealCommandPostgreSQL(HealCommandTests, CliTestCase):

    def database_args(self):
        databases.use_postgresql(self)
        self._pg = self.useFixture(databases.PostgreSQLSchema()).url
        return ["--database-url", self._pg]

    def url(self):
        return self._pg
