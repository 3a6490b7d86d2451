"""Schema migrations with alembic: new databases, 0.1.0 databases, refusals.

The 0.1.0 databases under tests/fixtures were written by nova-lite 0.1.0
itself (the numbered-step schema, before alembic): three instances, one
resize in progress and a disabled service on two fake nodes.
"""

import os
import re
import sqlite3
import subprocess
import sys

import fixtures
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from nova_lite import holds
from nova_lite.db import COMPUTE_BINARY, Store, migrations, models
from nova_lite.db.node_changes import ChangeReader
from nova_lite.exception import SchemaOutdated, StoreError
from nova_lite.testing import databases
from tests import base

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
DATA_TABLES = ("services", "compute_nodes", "inventories", "instances", "migrations",
               "allocations")


def _snapshot(engine):
    """Every row of every record table, in a stable order, each a tuple of
    ``(column, value)`` pairs (a column a later revision adds is left out of
    the comparison by :func:`_as_before`)."""
    with engine.connect() as conn:
        return {table: sorted(tuple(sorted(r._mapping.items()))
                              for r in conn.execute(sa.text(f"SELECT * FROM {table}")))
                for table in DATA_TABLES}


#: Columns an upgrade fills in the rows that were there (0010: the change
#: sequence; 0012: where each node's description last changed; 0013: the
#: heartbeat's floor, computed by the database).
FILLED = {("compute_nodes", "change_seq"), ("services", "change_seq"),
          ("compute_nodes", "described_seq"), ("services", "updated_floor")}


def _as_before(before, after):
    """``after`` with only the columns each table had in ``before``; a column
    added since must be empty (NULL) in every row that was there, unless
    the upgrade fills it (:data:`FILLED`: then it must hold a value)."""
    out = {}
    for table, rows in after.items():
        known = {c for row in before.get(table, ()) for c, _ in row}
        kept = []
        for row in rows:
            filled = {c: v for c, v in row if (table, c) in FILLED}
            if known and any(v is None or v < 1 for v in filled.values()):
                raise AssertionError(f"{table}: the upgrade left {filled} unfilled")
            added = {c: v for c, v in row if c not in known and (table, c) not in FILLED}
            if known and any(v is not None for v in added.values()):
                raise AssertionError(f"{table}: a column added by an upgrade holds a "
                                     f"value: {added}")
            kept.append(tuple((c, v) for c, v in row if c in known or not known))
        out[table] = sorted(kept)
    return out


def _tables(engine):
    return set(sa.inspect(engine).get_table_names())


class MigrationTests:
    """Run against ``self.new_url()``, an empty database of the backend."""

    def cli(self, url, *args):
        """Run the real ``nova-lite`` command on ``url``; returns (exit code, output)."""
        env = dict(os.environ, NOVA_LITE_STATE_PATH=self.useFixture(fixtures.TempDir()).path)
        proc = subprocess.run(
            [sys.executable, "-m", "nova_lite.cli.main", "--database-url", url, *args],
            capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout + proc.stderr

    def engine(self, url):
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.addCleanup(engine.dispose)
        return engine

    def test_models_match_the_migrated_schema(self):
        store = Store(self.new_url())
        self.addCleanup(store.close)
        with store.db.engine.connect() as conn:
            diffs = compare_metadata(MigrationContext.configure(conn), models.metadata)
        self.assertEqual([], diffs)

    def test_the_partial_indexes_hold_the_moves_the_statements_name(self):
        # A revision keeps its own copy of the statuses of a move in progress;
        # the statements name the model's (models.in_progress_statuses).  If
        # they ever differ, no statement can use the indexes any more.
        store = Store(self.new_url())
        self.addCleanup(store.close)
        with store.db.engine.connect() as conn:
            for end in ("source", "dest"):
                name = f"migrations_{end}_in_progress_idx"
                if conn.dialect.name == "postgresql":
                    sql = conn.execute(sa.text("SELECT indexdef FROM pg_indexes WHERE "
                                               "indexname = :n AND schemaname = current_schema()"),
                                       {"n": name}).scalar_one()
                else:
                    sql = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE "
                                               "name = :n"), {"n": name}).scalar_one()
                self.assertEqual(sorted(holds.MIGRATION_IN_PROGRESS),
                                 sorted(re.findall(r"'([a-z-]+)'", sql)), sql)

    def test_a_new_database_gets_the_head_revision(self):
        url = self.new_url()
        code, out = self.cli(url, "db", "sync", "-f", "value")
        self.assertEqual(0, code, out)
        self.assertIn("empty (no schema)", out)
        code, out = self.cli(url, "db", "version", "-f", "json")
        self.assertEqual(0, code, out)
        self.assertIn('"Current": true', out)
        self.assertIn(f'"Revision": "{migrations.head()}"', out)

    def test_a_release_0_1_0_database_upgrades_and_keeps_every_record(self):
        url = self.new_url()
        engine = self.engine(url)
        self.load_release_0_1_0(engine)
        before = _snapshot(engine)
        self.assertEqual(3, len(before["instances"]))

        code, out = self.cli(url, "db", "version", "-f", "json")
        self.assertEqual(0, code, out)
        self.assertIn("legacy step 3", out)
        self.assertIn('"Current": false', out)

        # A read-only command refuses, and changes nothing.
        code, out = self.cli(url, "node", "list")
        self.assertNotEqual(0, code)
        self.assertIn("nova-lite db sync", out)
        self.assertIn("schema_version", _tables(engine))

        code, out = self.cli(url, "db", "sync", "-f", "json")
        self.assertEqual(0, code, out)
        self.assertIn("legacy step 3", out)
        self.assertEqual(before, _as_before(before, _snapshot(engine)))
        self.assertNotIn("schema_version", _tables(engine))
        # 0005: the moves into and out of a node are indexed; the shadow tables exist.
        indexes = {i["name"]: i["column_names"]
                   for i in sa.inspect(engine).get_indexes("migrations")}
        self.assertEqual(["dest_compute", "dest_node", "status"],
                         indexes.get("migrations_dest_status_idx"))
        self.assertEqual(["source_compute", "source_node", "status"],
                         indexes.get("migrations_source_status_idx"))
        # 0014: and the moves in progress by indexes of their own.
        self.assertEqual(["source_compute", "source_node"],
                         indexes.get("migrations_source_in_progress_idx"))
        self.assertEqual(["dest_compute", "dest_node"],
                         indexes.get("migrations_dest_in_progress_idx"))
        # 0011, then 0013: the services that look down are found by their
        # heartbeat's floor.
        indexes = {i["name"]: i["column_names"]
                   for i in sa.inspect(engine).get_indexes("services")}
        self.assertEqual(["binary", "updated_floor"],
                         indexes.get("services_binary_updated_floor_idx"))
        self.assertNotIn("services_binary_updated_at_idx", indexes)
        self.assertLessEqual({"shadow_instances", "shadow_migrations"}, _tables(engine))
        # 0008: instances record their availability zone and moves the PCI
        # requests they claim (also in the shadow tables); the rows written
        # before have none (_as_before checks they are NULL).
        for table, column in (("instances", "availability_zone"),
                              ("shadow_instances", "availability_zone"),
                              ("migrations", "new_pci_requests"),
                              ("shadow_migrations", "new_pci_requests")):
            self.assertIn(column, {c["name"] for c in sa.inspect(engine).get_columns(table)})
        store = Store(url, readonly=True)
        self.addCleanup(store.close)
        self.assertTrue(store.schema.current)
        node = store.get_compute_node("host1", "host1-node0")
        self.assertEqual(3, len(store.list_instances(node="host1-node0")))
        self.assertEqual({None}, {i.availability_zone for i in store.list_instances()})
        self.assertEqual([None], [m.new_pci_requests for m in store.list_migrations()])
        self.assertEqual({"VCPU": 5, "MEMORY_MB": 2560, "DISK_GB": 5}, dict(node.usage))
        code, out = self.cli(url, "service", "list", "-f", "value")
        self.assertEqual(0, code, out)
        self.assertIn("disabled", out)
        self.assertIn("kernel upgrade", out)
        # The instances written before 0008 show their host's zone.
        code, out = self.cli(url, "server", "list", "-f", "json", "-c", "Availability Zone")
        self.assertEqual(0, code, out)
        self.assertEqual(3, out.count('"Availability Zone": "nova"'), out)

        # 0010: a reader follows the change sequence of the upgraded rows.
        writer = Store(url)
        self.addCleanup(writer.close)
        reader = ChangeReader(writer, binary=COMPUTE_BINARY)
        held = {n.uuid: n for n in reader.read({}).nodes}
        self.assertEqual(["host1-node0", "host1-node1"],
                         sorted(n.nodename for n in held.values()))
        writer.set_service_disabled("host1", False)
        writer.delete_compute_node("host1", "host1-node1")
        changes = reader.read(held)
        self.assertEqual({writer.get_compute_node("host1", "host1-node0").uuid},
                         set(held) - changes.gone_nodes)
        self.assertEqual([("host1", False)], [(s.host, s.disabled) for s in changes.services
                                              if s.host == "host1"])

        code, out = self.cli(url, "db", "sync", "-f", "json")
        self.assertEqual(0, code, out)
        self.assertIn('"Applied": []', out)   # already current

    def test_a_step_1_database_is_adopted(self):
        url = self.new_url()
        engine = self.engine(url)
        self.load_release_0_1_0(engine)
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM schema_version WHERE version > 1"))
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("ALTER TABLE compute_nodes DROP COLUMN reported"))
                conn.execute(sa.text("ALTER TABLE services DROP COLUMN disabled_reason"))
        store = Store(url, initialise=True)
        self.addCleanup(store.close)
        self.assertEqual(1, store.schema_before_open.legacy_version)
        self.assertTrue(store.schema.current)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("compute_nodes")}
        self.assertIn("reported", columns)
        self.assertTrue(all(n.reported for n in store.get_compute_nodes()))

    def test_a_newer_revision_is_refused_and_left_alone(self):
        url = self.new_url()
        Store(url).close()
        engine = self.engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
        error = self.assertRaises(SchemaOutdated, Store, url, initialise=True)
        self.assertIn("newer", str(error))
        code, out = self.cli(url, "db", "sync")
        self.assertNotEqual(0, code)
        self.assertIn("9999", out)
        with engine.connect() as conn:
            self.assertEqual("9999", conn.execute(
                sa.text("SELECT version_num FROM alembic_version")).scalar())

    def test_tables_without_a_revision_are_refused(self):
        url = self.new_url()
        Store(url).close()
        engine = self.engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE alembic_version"))
        error = self.assertRaises(StoreError, Store, url)
        self.assertIn("no recorded schema revision", str(error))
        self.assertNotIn("alembic_version", _tables(engine))

    def test_a_read_only_open_never_migrates(self):
        url = self.new_url()
        engine = self.engine(url)
        self.load_release_0_1_0(engine)
        error = self.assertRaises(SchemaOutdated, Store, url, readonly=True)
        self.assertIn("db sync", str(error))
        self.assertIn("schema_version", _tables(engine))
        self.assertNotIn("alembic_version", _tables(engine))


class TestSQLiteMigrations(MigrationTests, base.TestCase):
    def new_url(self):
        return self.useFixture(databases.SQLiteFile()).url

    def load_release_0_1_0(self, engine):
        path = engine.url.database
        with open(os.path.join(FIXTURES, "release-0.1.0-sqlite.sql"), encoding="utf-8") as f:
            script = f.read()
        conn = sqlite3.connect(path)
        try:
            conn.executescript(script)
        finally:
            conn.close()


class TestPostgreSQLMigrations(MigrationTests, base.TestCase):
    def new_url(self):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLSchema()).url

    def load_release_0_1_0(self, engine):
        with open(os.path.join(FIXTURES, "release-0.1.0-postgresql.sql"),
                  encoding="utf-8") as f:
            script = f.read()
        with engine.begin() as conn:
            conn.exec_driver_sql(script)
