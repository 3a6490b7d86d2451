"""The read of every node builds the records every other read builds.

:func:`nova_lite.db.rows.load_nodes` reads every node (of a host) in one
streamed statement and builds most records through
:func:`nova_lite.db.trusted.unused_node`; on PostgreSQL the rows come as
the database sends them (psycopg's chunked stream) or, without it, from a
server-side cursor.  These tests hold every way to the records the read of
one node at a time gives, field for field and type for type, on both
backends, and a read that fails part way to leave the store usable.
"""

import json

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite.db import models, rows, trusted
from nova_lite.exception import InvalidNodeResources
from nova_lite.objects import ComputeNode
from tests import base
from tests.base import instance

T_NODES = models.compute_nodes


class FullReadTests:
    """Mixed into a TestCase with make_store()."""

    def setUp(self):
        super().setUp()
        trusted.cache_clear()
        self.store = self.make_store()
        settings = self.settings(reserved_host_memory_mb=0)
        _, self.rt1 = self.make_tracker("fake.multinode", settings=settings, store=self.store,
                                        host="h1", nodes=["a", "b", "c", "d", "e", "f"])
        _, self.rt2 = self.make_tracker("fake.multinode", settings=settings, store=self.store,
                                        host="h2", nodes=["g", "h"])
        self.rt1.instance_claim(instance(), "b")
        self.rt2.instance_claim(instance(base.flavor(vcpus=2)), "h")
        with self.store.db.engine.begin() as conn:
            def node(name):
                return T_NODES.c.nodename == name
            conn.execute(T_NODES.update().where(node("c")).values(last_error="it broke"))
            conn.execute(T_NODES.update().where(node("d")).values(reported=False))
            conn.execute(T_NODES.update().where(node("e")).values(resources=None))
            conn.execute(models.inventories.delete().where(
                models.inventories.c.node_uuid == sa.select(T_NODES.c.uuid).where(
                    node("f")).scalar_subquery()))

    def assert_as_read_one_by_one(self, nodes):
        for node in nodes:
            alone = self.store.get_compute_node(node.host, node.nodename)
            self.assertEqual(alone, node, node.nodename)
            for field in attrs.fields(ComputeNode):
                self.assertIs(type(getattr(alone, field.name)), type(getattr(node, field.name)),
                              f"{node.nodename}: {field.name}'s type")

    def test_every_node_as_read_one_by_one(self):
        nodes = self.store.get_compute_nodes()
        self.assertEqual([("h1", n) for n in "abcdef"] + [("h2", "g"), ("h2", "h")],
                         [(n.host, n.nodename) for n in nodes])
        by_name = {n.nodename: n for n in nodes}
        self.assertEqual(1, by_name["b"].used("VCPU"))
        self.assertEqual(2, by_name["h"].used("VCPU"))
        self.assertEqual("it broke", by_name["c"].last_error)
        self.assertIs(False, by_name["d"].reported)
        self.assertIsNone(by_name["e"].resources)
        self.assertEqual({}, dict(by_name["f"].inventories))
        self.assertEqual("a", by_name["a"].resources.hypervisor_hostname)
        self.assertEqual(by_name["a"].uuid, by_name["a"].resources.uuid)
        self.assert_as_read_one_by_one(nodes)

    def test_each_nodes_inventories_count_its_own_usage(self):
        # a and b hold the same amounts, c more: one kind, three nodes in use
        self.rt1.instance_claim(instance(), "a")
        self.rt1.instance_claim(instance(base.flavor(vcpus=3, memory_mb=1024)), "c")
        by_name = {n.nodename: n for n in self.store.get_compute_nodes()}
        self.assertEqual((1, 1, 3, 0), tuple(by_name[n].inventory("VCPU").used for n in "abcd"))
        for node in by_name.values():
            for rc, inv in node.inventories.items():
                self.assertEqual(node.used(rc), inv.used, (node.nodename, rc))

    def test_every_node_of_a_host_as_read_one_by_one(self):
        nodes = self.store.get_compute_nodes(host="h2")
        self.assertEqual(["g", "h"], [n.nodename for n in nodes])
        self.assert_as_read_one_by_one(nodes)
        self.assertEqual([], self.store.get_compute_nodes(host="h3"))


class TestFullReadSQLite(FullReadTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestFullReadPostgreSQL(FullReadTests, base.OnPostgreSQL, base.TestCase):

    def test_rows_come_in_chunks_as_the_database_sends_them(self):
        seen = []
        chunked = rows._chunked_stream

        def spy(conn):
            seen.append(chunked(conn))
            return seen[-1]
        self.useFixture(fixtures.MockPatch("nova_lite.db.rows._chunked_stream", spy))
        self.useFixture(fixtures.MockPatch("nova_lite.db.rows._STREAM_ROWS", 3))
        nodes = self.store.get_compute_nodes()
        if seen != [True]:
            self.skipTest("psycopg streams no chunks here (libpq before 17)")
        self.assertEqual(8, len(nodes))
        self.assert_as_read_one_by_one(nodes)

    def test_a_server_side_cursor_reads_the_same_records(self):
        streamed = self.store.get_compute_nodes()
        self.useFixture(fixtures.MockPatch("nova_lite.db.rows._chunked_stream",
                                           return_value=False))
        self.useFixture(fixtures.MockPatch("nova_lite.db.rows._STREAM_ROWS", 3))
        self.assertEqual(streamed, self.store.get_compute_nodes())
        self.assertEqual(streamed[6:], self.store.get_compute_nodes(host="h2"))

    def test_a_read_that_fails_part_way_leaves_the_store_usable(self):
        # the third node's report is bad: the read ends with rows still to come
        self.useFixture(fixtures.MockPatch("nova_lite.db.rows._STREAM_ROWS", 2))
        good = self.store.get_compute_nodes()
        with self.store.db.engine.begin() as conn:
            stored = conn.execute(sa.select(T_NODES.c.resources).where(
                T_NODES.c.nodename == "c")).scalar()
            report = json.loads(stored)
            report["vcpus"] = -1
            conn.execute(T_NODES.update().where(T_NODES.c.nodename == "c").values(
                resources=json.dumps(report)))
        trusted.cache_clear()
        for _ in range(3):   # more than the pool holds connections
            self.assertRaisesRegex(InvalidNodeResources, "vcpus", self.store.get_compute_nodes)
        with self.store.db.engine.begin() as conn:
            conn.execute(T_NODES.update().where(T_NODES.c.nodename == "c").values(
                resources=stored))
        self.assertEqual(good, self.store.get_compute_nodes())


class TrustedBuildTests(base.TestCase):

    def test_new_node_sets_every_field(self):
        values = {f.name: object() for f in attrs.fields(ComputeNode)}
        node = trusted.new_node(**values)
        for name, value in values.items():
            self.assertIs(value, getattr(node, name), name)

    def test_a_kinds_report_with_a_nodes_identity(self):
        _, rt = self.make_tracker("fake.multinode", nodes=["a"])
        kind = rt.store.get_compute_node(self.host, "a").resources
        mine = trusted._with_identity(kind, "other", "1234")
        self.assertEqual(attrs.evolve(kind, hypervisor_hostname="other", uuid="1234"), mine)
        for field in attrs.fields(type(kind)):
            if field.name not in ("hypervisor_hostname", "uuid"):
                self.assertIs(getattr(kind, field.name), getattr(mine, field.name), field.name)


class TestFullReadEventsPostgreSQL(base.OnPostgreSQL, base.TestCase):

    def test_the_engines_listeners_see_the_streamed_statement(self):
        store = self.make_store()
        self.make_tracker("fake.multinode", store=store, nodes=["a", "b"])
        seen = []
        for event in ("before_cursor_execute", "after_cursor_execute"):
            def listener(conn, cursor, text, params, context, many, event=event):
                seen.append((event, text))
            sa.event.listen(store.db.engine, event, listener)
            self.addCleanup(sa.event.remove, store.db.engine, event, listener)
        self.assertEqual(2, len(store.get_compute_nodes()))
        read = [(event, text) for event, text in seen
                if "FROM compute_nodes" in text and "FROM inventories" in text]
        self.assertEqual(["before_cursor_execute", "after_cursor_execute"],
                         [event for event, _ in read])
