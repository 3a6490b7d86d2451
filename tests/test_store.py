"""The record store, the same tests on a SQLite file and on real PostgreSQL.

PostgreSQL tests use a fresh database per test (nova_lite.testing.databases);
without a server they skip, and with NOVA_LITE_REQUIRE_ALL=1 they fail.
"""

import os
import sqlite3
import stat
import time
from fractions import Fraction

import attrs
import fixtures
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import COMPUTE_BINARY, Store, migrations, models, rows
from nova_lite.exception import InstanceNotFound, NodeNotFound, StoreError
from nova_lite.objects import (
    Allocation, InstanceNUMACell, InstanceNUMATopology, NUMACell, NUMATopology, PciDevice,
    PciRequest)
from nova_lite.testing import databases
from tests import base
from tests.base import flavor, instance

TABLES = {"services", "compute_nodes", "inventories", "instances", "allocations",
          "migrations", "alembic_version"}


class StoreTests:
    """Run against ``self.url``, set by the backend's ``make_url``."""

    def make_url(self):
        raise NotImplementedError

    def setUp(self):
        super().setUp()
        self.url = self.make_url()
        self.store = self.open_store()

    def open_store(self, **kw):
        store = Store(self.url, **kw)
        self.addCleanup(store.close)
        return store

    def tracker(self, host="host1", store=None, **driver_kwargs):
        return self.make_tracker("fake.multinode", host=host, store=store or self.store,
                                 **driver_kwargs)

    def execute(self, statement):
        with self.store.db.engine.begin() as conn:
            return conn.execute(statement)

    # -- schema ------------------------------------------------------------------
    def test_schema_and_version(self):
        self.assertEqual(migrations.head(), self.store.schema.revision)
        self.assertTrue(self.store.schema.current)
        names = set(sa.inspect(self.store.db.engine).get_table_names())
        self.assertLessEqual(TABLES, names)
        self.assertNotIn("schema_version", names)

    def test_reopening_applies_nothing_twice(self):
        again = self.open_store()
        self.assertEqual(migrations.head(), again.schema.revision)
        self.assertEqual((), again.schema.pending)
        with again.db.engine.connect() as conn:
            count = conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar()
        self.assertEqual(1, count)

    # -- services ------------------------------------------------------------------
    def test_heartbeat(self):
        first = self.store.heartbeat("host1")
        self.assertEqual(("host1", COMPUTE_BINARY, 1), (first.host, first.binary,
                                                        first.report_count))
        time.sleep(0.01)
        second = self.store.heartbeat("host1")
        self.assertEqual(2, second.report_count)
        self.assertGreater(second.updated_at, first.updated_at)
        self.assertEqual(first.created_at, second.created_at)
        self.store.heartbeat("host0")
        self.store.heartbeat("host1", binary="other")
        self.assertEqual(["host0", "host1"],
                         [s.host for s in self.store.list_services()])
        self.assertTrue(second.is_up(60, now=second.updated_at + 59))
        self.assertFalse(second.is_up(60, now=second.updated_at + 61))

    def test_services_unique_on_host_and_binary(self):
        self.store.heartbeat("host1")
        now = time.time()
        row = dict(host="host1", binary=COMPUTE_BINARY, created_at=now, updated_at=now,
                   report_count=1, disabled=False)
        self.assertRaises(sa_exc.IntegrityError, self.execute,
                          models.services.insert().values(**row))
        self.execute(models.services.insert().values(**dict(row, binary="nova-lite-other")))

    # -- compute nodes ------------------------------------------------------------------
    def test_compute_nodes_unique_on_host_and_nodename(self):
        _, rt = self.tracker(nodes=["a"])
        now = time.time()
        row = dict(uuid="0b5a5c4e-0000-4000-8000-000000000001", host="host1", nodename="a",
                   generation=0, created_at=now, updated_at=now)
        self.assertRaises(sa_exc.IntegrityError, self.execute,
                          models.compute_nodes.insert().values(**row))
        self.execute(models.compute_nodes.insert().values(**dict(row, host="host2")))

    def test_get_compute_nodes(self):
        self.tracker(host="host2", nodes=["z", "y"])
        self.tracker(host="host1", nodes=["b", "a"])
        nodes = self.store.get_compute_nodes()
        self.assertEqual([("host1", "a"), ("host1", "b"), ("host2", "y"), ("host2", "z")],
                         [(n.host, n.nodename) for n in nodes])
        self.assertEqual(["y", "z"], [n.nodename for n in self.store.get_compute_nodes("host2")])
        self.assertEqual(4, len({n.uuid for n in nodes}))
        node = self.store.get_compute_node("host1", "a")
        self.assertEqual(1000, node.inventory("VCPU").total)
        exc = self.assertRaises(NodeNotFound, self.store.get_compute_node, "host1", "nope")
        self.assertIn("nope", str(exc))

    def test_exact_ratios_survive_the_store(self):
        settings = self.settings(cpu_allocation_ratio=0.7, ram_allocation_ratio=1.5,
                                 reserved_host_memory_mb=0)
        self.make_tracker("fake", store=self.store, settings=settings, vcpus=10)
        node = self.open_store().get_compute_node(self.host, self.host)
        self.assertEqual(Fraction(7, 10), node.inventory("VCPU").allocation_ratio)
        self.assertEqual(7, node.capacity("VCPU"))
        self.assertEqual(Fraction(3, 2), node.inventory("MEMORY_MB").allocation_ratio)

    def test_node_report_round_trips(self):
        topo = NUMATopology(cells=[NUMACell(id=0, cpuset={0, 1}, pcpuset={2, 3},
                                            memory_mb=2048, siblings=[{2, 3}])])
        gpu = PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4",
                        numa_node=0)
        driver, rt = self.tracker(nodes=["a"], numa_topology=topo, pci_devices=[gpu],
                                  pcpus=4, traits=["HW_CPU_X86_AVX2", "CUSTOM_GOLD"])
        stored = self.store.get_compute_node("host1", "a")
        # Recorded with the trait of the fake driver's same-host resize, and
        # COMPUTE_NODE.
        self.assertEqual(attrs.evolve(driver.get_available_resource("a"), traits={
            "HW_CPU_X86_AVX2", "CUSTOM_GOLD", "COMPUTE_SAME_HOST_COLD_MIGRATE",
            "COMPUTE_NODE"}),
            stored.resources)
        inst = instance(flavor(vcpus=2), pci_requests=[
            PciRequest(count=1, vendor_id="10de", product_id="1db4")],
            numa_topology=InstanceNUMATopology(cells=[InstanceNUMACell(
                id=0, cpuset={0, 1}, memory_mb=512, cpu_policy="dedicated")]))
        placed = rt.instance_claim(inst, "a").instance
        again = self.open_store()
        self.assertEqual(placed, again.get_instance(inst.uuid))
        alloc, = again.list_allocations(instance_uuid=inst.uuid)
        self.assertEqual(placed.numa_topology, alloc.numa_topology)
        self.assertEqual((gpu.address,), alloc.pci_devices)
        node = again.get_compute_node("host1", "a")
        self.assertEqual({gpu.address}, set(node.pci_in_use))
        self.assertEqual((placed.numa_topology,), node.numa_placements)

    def test_delete_compute_node(self):
        _, rt = self.tracker(nodes=["a", "b"])
        inst = rt.instance_claim(instance(), "a").instance
        uuid_a = rt.get_node("a").uuid
        self.store.delete_compute_node("host1", "a")
        self.assertEqual(["b"], [n.nodename for n in self.store.get_compute_nodes()])
        self.assertEqual([], self.store.list_allocations(node_uuid=uuid_a))
        self.assertEqual(inst.uuid, self.store.get_instance(inst.uuid).uuid)
        with self.store.db.engine.connect() as conn:
            self.assertEqual(0, conn.execute(sa.select(sa.func.count()).select_from(
                models.inventories).where(models.inventories.c.node_uuid == uuid_a)).scalar())
        self.assertRaises(NodeNotFound, self.store.delete_compute_node, "host1", "a")

    def test_set_node_error(self):
        self.tracker(nodes=["a"])
        self.store.set_node_error("host1", "a", "broken")
        self.assertEqual("broken", self.store.get_compute_node("host1", "a").last_error)
        self.store.set_node_error("host1", "a", None)
        self.assertIsNone(self.store.get_compute_node("host1", "a").last_error)
        self.store.set_node_error("host1", "never-recorded", "x")   # nothing to mark

    # -- instances --------------------------------------------------------------------
    def test_instances(self):
        inst = instance(flavor(extra_specs={"hw:cpu_policy": "shared"}), vm_state="active",
                        host="h", node="n")
        base.write_instance_row(self.store, inst)
        self.assertEqual(inst, self.store.get_instance(inst.uuid))
        base.write_instance_row(self.store, attrs.evolve(inst, vm_state="deleted"))
        self.assertEqual("deleted", self.store.get_instance(inst.uuid).vm_state)
        self.assertEqual([], self.store.list_instances(host="h"))
        self.assertEqual(1, len(self.store.list_instances(host="h", live_only=False)))
        exc = self.assertRaises(InstanceNotFound, self.store.get_instance, "nope")
        self.assertIn("nope", str(exc))

    def test_claimed_rows_read_back_as_claimed(self):
        # The claim writes its rows as tuples on a plain cursor: read back,
        # they are exactly the records the claim returned.
        _, rt = self.make_tracker("fake", store=self.store)
        inst = attrs.evolve(instance(flavor(swap=1536)), project_id="p", user_id="u",
                            display_name="")
        claim = rt.instance_claim(inst, self.host)
        self.assertEqual(claim.instance, self.store.get_instance(inst.uuid))
        self.assertEqual([claim.allocation], self.store.list_allocations())

    # -- claims across trackers (as across processes) ----------------------------------
    def test_claims_from_two_trackers_see_each_other(self):
        settings = self.settings(cpu_allocation_ratio=1.0, reserved_host_memory_mb=0)
        driver, rt1 = self.make_tracker("fake", store=self.store, settings=settings, vcpus=2)
        other_store = self.open_store()
        rt2 = ResourceTracker(self.host, driver, store=other_store, settings=settings)
        rt2.get_node(self.host)   # rt2 caches the node at generation g
        rt1.instance_claim(instance(flavor(vcpus=1)), self.host)
        rt2.instance_claim(instance(flavor(vcpus=1)), self.host)   # stale cache: re-reads
        for rt in (rt1, rt2):
            exc = self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                                    instance(flavor(vcpus=1)), self.host)
            self.assertEqual(["Free vcpu 0.00 VCPU < requested 1 VCPU"], exc.reasons)
        self.assertEqual(2, self.store.get_compute_node(self.host, self.host).used("VCPU"))

    def test_get_node_shows_what_another_tracker_changed(self):
        settings = self.settings(cpu_allocation_ratio=1.0, reserved_host_memory_mb=0)
        driver, rt1 = self.make_tracker("fake", store=self.store, settings=settings, vcpus=4)
        rt2 = ResourceTracker(self.host, driver, store=self.open_store(), settings=settings)
        self.assertEqual({}, dict(rt2.get_node(self.host).usage))
        rt1.instance_claim(instance(flavor(vcpus=3)), self.host)
        node = rt2.get_node(self.host)
        self.assertEqual(3, node.used("VCPU"))
        self.assertEqual(1, node.free("VCPU"))
        self.assertEqual(rt1.get_node(self.host).generation, node.generation)

    def test_release_by_one_tracker_is_seen_by_the_other(self):
        settings = self.settings(cpu_allocation_ratio=1.0, reserved_host_memory_mb=0)
        driver, rt1 = self.make_tracker("fake", store=self.store, settings=settings, vcpus=1)
        rt2 = ResourceTracker(self.host, driver, store=self.open_store(), settings=settings)
        claim = rt1.instance_claim(instance(flavor(vcpus=1)), self.host)
        self.assertRaises(ComputeResourcesUnavailable, rt2.instance_claim,
                          instance(flavor(vcpus=1)), self.host)
        claim.abort()
        rt2.instance_claim(instance(flavor(vcpus=1)), self.host)
        self.assertRaises(ComputeResourcesUnavailable, rt1.instance_claim,
                          instance(flavor(vcpus=1)), self.host)


class TestSQLiteStore(StoreTests, base.TestCase):

    def make_url(self):
        self.db = self.useFixture(databases.SQLiteFile())
        return self.db.url

    def test_wal_mode(self):
        self.store.heartbeat("host1")
        with self.store.db.engine.connect() as conn:
            self.assertEqual("wal", conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        # it is a property of the file, seen by any other connection too
        raw = sqlite3.connect(self.db.path)
        self.addCleanup(raw.close)
        self.assertEqual("wal", raw.execute("PRAGMA journal_mode").fetchone()[0])

    def test_file_is_owner_only(self):
        self.assertEqual(0o600, stat.S_IMODE(os.stat(self.db.path).st_mode))

    def test_state_directory_is_created_owner_only(self):
        directory = os.path.join(self.state_path, "new", "state")
        store = Store("sqlite:///" + os.path.join(directory, "nova-lite.db"))
        self.addCleanup(store.close)
        self.assertEqual(0o700, stat.S_IMODE(os.stat(directory).st_mode))
        self.assertEqual(0o600, stat.S_IMODE(os.stat(os.path.join(
            directory, "nova-lite.db")).st_mode))

    def test_default_url_from_settings(self):
        settings = self.settings()
        store = Store(settings.database_url)
        self.addCleanup(store.close)
        self.assertTrue(os.path.exists(os.path.join(self.state_path, "nova-lite.db")))

    def test_memory_store(self):
        store = Store("sqlite://")
        self.addCleanup(store.close)
        _, rt = self.make_tracker("fake", store=store)
        rt.instance_claim(instance(), self.host)
        self.assertEqual(1, store.get_compute_node(self.host, self.host).used("VCPU"))


class TestPostgreSQLStore(StoreTests, base.TestCase):

    def make_url(self):
        databases.use_postgresql(self)
        self.db = self.useFixture(databases.PostgreSQLSchema())
        return self.db.url

    def test_dialect(self):
        self.assertEqual("postgresql", self.store.db.dialect)

    def test_plain_postgresql_url(self):
        plain = self.url.replace("postgresql+psycopg://", "postgresql://")
        store = self.open_store() if plain == self.url else Store(plain)
        self.addCleanup(store.close)
        self.assertEqual("postgresql", store.db.dialect)
        self.assertEqual(migrations.head(), store.schema.revision)

    def test_the_stores_sessions_run_with_jit_off_and_a_read_each_in_autocommit(self):
        # Given when the session connects (no pooler): every statement of the
        # store is planned without JIT, a read of statements alone included.
        show = sa.text("SHOW jit")
        for read in (self.store.db.read, self.store.db.read_each, self.store.db.write):
            self.assertEqual("off", read("jit", lambda conn: conn.execute(show).scalar()))
        self.assertEqual("off", self.store.db.read_direct(
            "jit", lambda conn: conn.execute(show).scalar()))
        # No transaction around a read of statements alone: each statement
        # begins its own, where a read's began with a BEGIN before it.
        began_before = sa.text("SELECT statement_timestamp() > transaction_timestamp()")
        self.assertFalse(self.store.db.read_each("xact", lambda conn: conn.execute(
            began_before).scalar()))
        self.assertTrue(self.store.db.read("xact", lambda conn: conn.execute(
            began_before).scalar()))

    def test_a_read_only_store_reads_each_statement_alone_and_writes_none(self):
        # The change readers of the API and metrics servers run on read-only
        # stores: their statements go alone (autocommit), and the session
        # keeps them read-only where no BEGIN READ ONLY does.
        reader = Store(self.url, readonly=True)
        self.addCleanup(reader.close)
        began_before = sa.text("SELECT statement_timestamp() > transaction_timestamp()")
        for read_each in (reader.db.read_each, reader.db.read_each_direct):
            self.assertFalse(read_each("xact", lambda conn: conn.execute(began_before).scalar()))
            with self.assertRaisesRegex(StoreError, "read-only transaction"):
                read_each("write", lambda conn: conn.execute(
                    models.services.delete().where(models.services.c.host == "h1")))


class TestPostgreSQLIdleConnections(base.TestCase):
    """A pooled connection whose server side died while idle is replaced, not used."""

    def test_an_idle_connection_killed_by_the_server_is_replaced(self):
        databases.use_postgresql(self)
        url = self.useFixture(databases.PostgreSQLSchema()).url
        store = Store(url)
        self.addCleanup(store.close)
        pid = store.db.read("backend pid", lambda conn: conn.exec_driver_sql(
            "SELECT pg_backend_pid()").scalar())
        base.terminate_backend(self, url, pid)
        self.useFixture(fixtures.MonkeyPatch("nova_lite.db.engine.IDLE_PING_S", 0.0))
        self.assertEqual([], store.get_compute_nodes())   # no "connection is lost"
        self.assertNotEqual(pid, store.db.read("backend pid", lambda conn: conn.exec_driver_sql(
            "SELECT pg_backend_pid()").scalar()))


class TestClaimRows(base.TestCase):
    """The claim's rows name every column of their tables, and only those."""

    def test_allocation_row_covers_the_table(self):
        alloc0 = Allocation(consumer_uuid="c", consumer_type="instance", instance_uuid="i",
                            node_uuid="n", flavor=flavor(), resources={})
        self.assertEqual({c.name for c in models.allocations.columns},
                         set(rows.allocation_values(alloc0, 1.0)))
        alloc = Allocation(consumer_uuid="c", consumer_type="instance", instance_uuid="i",
                           node_uuid="n", flavor=flavor(),
                           resources={"VCPU": 2, "MEMORY_MB": 512, "CUSTOM_GPU": 1})
        values = rows.allocation_values(alloc, 5.0)
        self.assertEqual((2, 0, 512, 0, '{"CUSTOM_GPU":1}'),
                         (values["vcpu"], values["pcpu"], values["memory_mb"],
                          values["disk_gb"], values["other"]))

    def test_instance_row_covers_the_table(self):
        inst = instance(flavor(), host="h", node="n", project_id="p")
        self.assertEqual({c.name for c in models.instances.columns},
                         set(rows.new_instance_values(inst, 1.0)))
        values = rows.instance_values(inst, 5.0)
        self.assertNotIn("uuid", values)
        self.assertNotIn("created_at", values)
        self.assertEqual(("h", "n", "p", 5.0), (values["host"], values["node"],
                                                values["project_id"], values["updated_at"]))


class TestStoreErrors(base.TestCase):

    def test_unreachable_postgresql_names_the_database_not_the_password(self):
        exc = self.assertRaises(
            StoreError, Store,
            "postgresql://nova:s3cret@127.0.0.1:1/nova?connect_timeout=2")
        self.assertIn("127.0.0.1:1", str(exc))
        self.assertNotIn("s3cret", str(exc))

    def test_sqlite_url_without_a_file(self):
        self.assertRaises(StoreError, Store, "sqlite:///")


class TestDatabaseFixtures(base.TestCase):

    def test_postgresql_database_is_dropped(self):
        databases.use_postgresql(self)
        fixture = databases.PostgreSQLDatabase()
        fixture.setUp()
        store = Store(fixture.url)
        store.heartbeat("h")       # a connection stays open in the pool
        name = fixture.name
        self.assertTrue(name.startswith(databases.DATABASE_PREFIX))
        fixture.cleanUp()
        admin = sa.create_engine(databases.components.postgresql_url(),
                                 poolclass=sa.pool.NullPool)
        self.addCleanup(admin.dispose)
        with admin.connect() as conn:
            found = conn.execute(sa.text("SELECT count(*) FROM pg_database WHERE datname = :n"),
                                 {"n": name}).scalar()
        self.assertEqual(0, found)
        store.close()

    def test_postgresql_schema_is_dropped(self):
        databases.use_postgresql(self)
        fixture = databases.PostgreSQLSchema()
        fixture.setUp()
        store = Store(fixture.url)
        self.addCleanup(store.close)
        store.heartbeat("h")
        with store.db.engine.connect() as conn:
            self.assertEqual(fixture.name,
                             conn.exec_driver_sql("SELECT current_schema()").scalar())
        store.close()
        fixture.cleanUp()
        admin = sa.create_engine(databases.components.postgresql_url(),
                                 poolclass=sa.pool.NullPool)
        self.addCleanup(admin.dispose)
        with admin.connect() as conn:
            found = conn.execute(sa.text(
                "SELECT count(*) FROM pg_namespace WHERE nspname = :n"),
                {"n": fixture.name}).scalar()
        self.assertEqual(0, found)

    def test_missing_server_is_reported(self):
        problem = databases.postgresql_problem("postgresql://postgres@127.0.0.1:1/x")
        self.assertIn("127.0.0.1:1", problem)
