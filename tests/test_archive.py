"""``db archive`` and ``db purge``: history moved out of the way, and only history.

On a real SQLite file and a real PostgreSQL schema: which records move to
the shadow tables and which stay (a live instance, a deleted one whose
allocation leaked, one with a move in progress, finished moves), ``before``,
batches of ``max_rows``, dry runs that write nothing, the purge; and the
real ``nova-lite`` command on SQLite (json output, bad dates).
"""

import json
import time
import uuid

import fixtures
import sqlalchemy as sa

from nova_lite.db import models
from nova_lite.exception import InvalidInput
from tests import base
from tests.test_cli import CliTestCase

OLD = 1000.0          # 1970-01-01T00:16:40Z
NEWER = 5000.0        # 1970-01-01T01:23:20Z
TABLES = ("instances", "migrations", "allocations", "tasks", "shadow_instances",
          "shadow_migrations", "shadow_tasks")


def _instance(vm_state, updated_at=OLD):
    now = time.time()
    return {"uuid": str(uuid.uuid4()), "host": "h1", "node": "n1", "vm_state": vm_state,
            "task_state": None, "project_id": "p", "user_id": "u", "flavor": "{}",
            "created_at": OLD, "updated_at": updated_at if updated_at else now}


def _migration(instance_uuid, status, updated_at=OLD):
    return {"uuid": str(uuid.uuid4()), "instance_uuid": instance_uuid, "source_compute": "h1",
            "source_node": "n1", "dest_compute": "h2", "dest_node": "n2", "old_flavor": "{}",
            "new_flavor": "{}", "status": status, "migration_type": "resize",
            "created_at": OLD, "updated_at": updated_at}


class ArchiveTests:
    """Mixed into a backend's test case: ``make_store()`` gives a new store."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.node_uuid = str(uuid.uuid4())
        self.write(models.compute_nodes.insert().values(
            uuid=self.node_uuid, host="h1", nodename="n1", generation=0, created_at=OLD,
            updated_at=OLD))

    def write(self, *statements):
        def op(conn):
            for statement in statements:
                conn.execute(statement)
        self.store.db.write("test fixture", op)

    def add(self, table, row, allocated=False):
        """Insert ``row`` into ``table``; ``allocated``: an allocation for it too."""
        statements = [table.insert().values(**row)]
        if allocated:
            instance_uuid = row.get("instance_uuid", row["uuid"])
            statements.append(models.allocations.insert().values(
                consumer_uuid=row["uuid"], node_uuid=self.node_uuid,
                consumer_type="migration" if table is models.migrations else "instance",
                instance_uuid=instance_uuid, vcpu=1, flavor="{}", created_at=OLD))
        self.write(*statements)
        return row["uuid"]

    def uuids(self, table):
        return self.store.db.read("test read", lambda conn: sorted(
            conn.execute(sa.select(models.metadata.tables[table].c.uuid)).scalars()))

    def dump(self):
        def op(conn):
            return {t: sorted(tuple(r) for r in conn.execute(
                sa.select(models.metadata.tables[t]))) for t in TABLES}
        return self.store.db.read("test dump", op)

    def history(self):
        """The records of every kind of consumer: {name: uuid}."""
        T_INST, T_MIG = models.instances, models.migrations
        r = {}
        r["live"] = self.add(T_INST, _instance("active"), allocated=True)
        r["offloaded"] = self.add(T_INST, dict(_instance("shelved_offloaded"), host=None,
                                               node=None))
        r["gone"] = self.add(T_INST, _instance("deleted"))
        r["leaked"] = self.add(T_INST, _instance("deleted"), allocated=True)
        r["moving"] = self.add(T_INST, _instance("deleted"))
        r["gone_done"] = self.add(T_MIG, _migration(r["gone"], "confirmed"))
        r["moving_mig"] = self.add(T_MIG, _migration(r["moving"], "migrating"))
        r["live_done"] = self.add(T_MIG, _migration(r["live"], "reverted"))
        r["offloaded_done"] = self.add(T_MIG, _migration(r["offloaded"], "completed"))
        r["orphan_done"] = self.add(T_MIG, _migration(str(uuid.uuid4()), "error"))
        r["leaked_mig"] = self.add(T_MIG, _migration(r["leaked"], "failed"), allocated=True)
        return r

    def counts(self, result):
        """The counts of the instance and migration tables (tasks have their own test)."""
        return {c.table: c.rows for c in result if not c.table.endswith("tasks")}

    def test_tasks_that_are_over_move_unless_their_instance_is_live(self):
        live, gone = _instance("active"), _instance("deleted")
        self.add(models.instances, live, allocated=True)
        self.add(models.instances, gone)

        def task(instance_uuid, state, finished_at=OLD, kind="build"):
            return models.tasks.insert().values(
                host="h1", kind=kind, instance_uuid=instance_uuid, params="{}", state=state,
                attempts=1, created_at=OLD, finished_at=finished_at)
        self.write(task(live["uuid"], "done"), task(gone["uuid"], "done"),
                   task(gone["uuid"], "cancelled"), task(None, "done", kind="audit"),
                   task(None, "waiting", None, kind="audit"),
                   task(None, "failed", NEWER, kind="audit"))
        self.assertEqual(3, self.table_counts(self.store.archive_deleted_rows(
            before=OLD + 1))["tasks"])
        left = self.store.tasks.find()
        self.assertEqual([("done", live["uuid"]), ("waiting", None), ("failed", None)],
                         [(t.state, t.instance_uuid) for t in left])
        self.assertEqual(1, self.table_counts(self.store.archive_deleted_rows())["tasks"])
        self.assertEqual(4, self.table_counts(self.store.purge_archived_rows())["shadow_tasks"])

    def table_counts(self, result):
        return {c.table: c.rows for c in result}

    def test_what_moves_and_what_stays(self):
        r = self.history()
        result = self.store.archive_deleted_rows()
        self.assertEqual({"migrations": 2, "instances": 1}, self.counts(result))
        self.assertEqual([r["gone"]], self.uuids("shadow_instances"))
        self.assertEqual(sorted([r["gone_done"], r["orphan_done"]]),
                         self.uuids("shadow_migrations"))
        self.assertEqual(sorted([r["live"], r["offloaded"], r["leaked"], r["moving"]]),
                         self.uuids("instances"))
        self.assertEqual(sorted([r["moving_mig"], r["live_done"], r["offloaded_done"],
                                 r["leaked_mig"]]), self.uuids("migrations"))
        # The same columns, and when.
        shadow = self.store.db.read("read", lambda conn: conn.execute(
            sa.select(models.shadow_instances)).mappings().one())
        self.assertEqual("deleted", shadow["vm_state"])
        self.assertEqual(OLD, shadow["updated_at"])
        self.assertAlmostEqual(time.time(), shadow["archived_at"], delta=60)
        # Nothing left: a second run moves nothing.
        self.assertEqual({"migrations": 0, "instances": 0},
                         self.counts(self.store.archive_deleted_rows()))

    def test_before(self):
        T_INST = models.instances
        old = self.add(T_INST, _instance("deleted", updated_at=OLD))
        newer = self.add(T_INST, _instance("deleted", updated_at=NEWER))
        self.assertEqual({"migrations": 0, "instances": 1},
                         self.counts(self.store.archive_deleted_rows(before=OLD + 1)))
        self.assertEqual([old], self.uuids("shadow_instances"))
        self.assertEqual([newer], self.uuids("instances"))
        self.assertEqual({"migrations": 0, "instances": 0},
                         self.counts(self.store.archive_deleted_rows(before=OLD)))

    def test_max_rows_batches(self):
        gone = sorted(self.add(models.instances, _instance("deleted")) for _ in range(5))
        log = self.useFixture(fixtures.FakeLogger(name="nova_lite.db.store",
                                                  format="%(message)s", level="INFO"))
        result = self.store.archive_deleted_rows(max_rows=2)
        self.assertEqual({"migrations": 0, "instances": 5}, self.counts(result))
        self.assertEqual(gone, self.uuids("shadow_instances"))
        self.assertIn("Archived 5 instances row(s) in 3 batch(es)", log.output)
        self.assertRaises(InvalidInput, self.store.archive_deleted_rows, max_rows=0)

    def test_dry_run_writes_nothing(self):
        self.history()
        before = self.dump()
        result = self.store.archive_deleted_rows(dry_run=True)
        self.assertEqual(before, self.dump())
        self.assertEqual(self.counts(result), self.counts(self.store.archive_deleted_rows()))
        archived = self.dump()
        purged = self.store.purge_archived_rows(dry_run=True)
        self.assertEqual({"shadow_migrations": 2, "shadow_instances": 1}, self.counts(purged))
        self.assertEqual(archived, self.dump())

    def test_purge(self):
        self.history()
        self.store.archive_deleted_rows()
        self.assertEqual({"shadow_migrations": 0, "shadow_instances": 0}, self.counts(
            self.store.purge_archived_rows(before=time.time() - 3600)))
        self.assertEqual(1, len(self.uuids("shadow_instances")))
        self.assertEqual({"shadow_migrations": 2, "shadow_instances": 1}, self.counts(
            self.store.purge_archived_rows(before=time.time() + 1)))
        self.assertEqual([], self.uuids("shadow_instances") + self.uuids("shadow_migrations"))
        self.assertEqual(4, len(self.uuids("instances")))


class TestArchiveSQLite(ArchiveTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestArchivePostgreSQL(ArchiveTests, base.OnPostgreSQL, base.TestCase):
    pass


class TestArchiveCommands(CliTestCase):
    """The real ``nova-lite db archive|purge`` on a SQLite state."""

    def setUp(self):
        super().setUp()
        self.compute_once()
        self.gone = self.json("server", "create", "--flavor", "m1.tiny")[0]["ID"]
        self.live = self.json("server", "create", "--flavor", "m1.tiny")[0]["ID"]
        self.ok("server", "delete", self.gone, "--yes-i-really-mean-it")
        self.compute_once()   # the host builds and deletes

    def servers(self):
        return sorted(s["ID"] for s in self.json("server", "list", "--all"))

    def test_archive_and_purge_in_json(self):
        # The deleted server's build and delete move with it; the live one's build stays.
        self.assertEqual([{"Table": "tasks", "Rows": 2}, {"Table": "migrations", "Rows": 0},
                          {"Table": "instances", "Rows": 1}],
                         self.json("db", "archive", "--dry-run"))
        self.assertEqual(sorted([self.gone, self.live]), self.servers())
        # Deleted a moment ago: not before 2000.
        self.assertEqual([{"Table": "tasks", "Rows": 0}, {"Table": "migrations", "Rows": 0},
                          {"Table": "instances", "Rows": 0}],
                         self.json("db", "archive", "--before", "2000-01-01"))
        self.assertEqual([{"Table": "tasks", "Rows": 2}, {"Table": "migrations", "Rows": 0},
                          {"Table": "instances", "Rows": 1}],
                         self.json("db", "archive", "--max-rows", "1"))
        self.assertEqual([self.live], self.servers())
        self.assertEqual([{"Table": "shadow_tasks", "Rows": 0},
                          {"Table": "shadow_migrations", "Rows": 0},
                          {"Table": "shadow_instances", "Rows": 0}],
                         self.json("db", "purge", "--before", "2000-01-01T00:00:00Z",
                                   "--yes-i-really-mean-it"))
        self.assertEqual([{"Table": "shadow_tasks", "Rows": 2},
                          {"Table": "shadow_migrations", "Rows": 0},
                          {"Table": "shadow_instances", "Rows": 1}],
                         self.json("db", "purge", "--all", "--dry-run"))
        self.assertEqual([{"Table": "shadow_tasks", "Rows": 2},
                          {"Table": "shadow_migrations", "Rows": 0},
                          {"Table": "shadow_instances", "Rows": 1}],
                         self.json("db", "purge", "--all", "--yes-i-really-mean-it"))
        self.assertEqual(0, json.loads(self.ok("db", "purge", "--all", "--yes-i-really-mean-it",
                                               "-f", "json"))[2]["Rows"])

    def test_bad_arguments_change_nothing(self):
        with open(self.db_path(), "rb") as handle:
            before = handle.read()
        for argv, words in (
                (["db", "archive", "--before", "yesterday"], ["--before 'yesterday'",
                                                              "ISO 8601"]),
                (["db", "archive", "--before", "2026-13-01"], ["'2026-13-01'"]),
                (["db", "archive", "--max-rows", "0"], ["--max-rows '0'", ">= 1"]),
                (["db", "archive", "--max-rows", "many"], ["--max-rows 'many'"]),
                (["db", "purge"], ["--before DATE or --all"]),
                (["db", "purge", "--all", "--before", "2026-01-01"], ["not both"]),
                (["db", "purge", "--before", "2026-01-01T25:00"], ["'2026-01-01T25:00'"])):
            code, out, err = self.cli(*argv)
            self.assertEqual(2, code, (argv, err))
            self.assertEqual("", out, argv)
            for word in words:
                self.assertIn(word, err, argv)
        with open(self.db_path(), "rb") as handle:
            self.assertEqual(before, handle.read())
        self.assertEqual(sorted([self.gone, self.live]), self.servers())
