"""The indexed change sequence the fleet's readers follow, on both backends.

Every writer that changes a node's generation or host moves its
``change_seq`` past any reader's mark (the database's triggers do it, so
the test runs the writers themselves: audit, claims, releases, moves, heal,
node and service deletion); a reader sees a change committed after a later
one (PostgreSQL), deletions, and nothing when nothing changed.
"""

import time

import attrs
import sqlalchemy as sa

from nova_lite import leaks
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import COMPUTE_BINARY, models, queries
from nova_lite.db.node_changes import ChangeReader
from nova_lite.objects import DELETED
from nova_lite.virt import loader
from tests import base
from tests.test_heal import api_delete

T_NODES = models.compute_nodes


def _rows(store):
    """``{uuid: (generation, host, change_seq)}`` of every node row."""
    return store.db.read("rows", lambda conn: {
        r.uuid: (r.generation, r.host, r.change_seq) for r in conn.execute(
            sa.select(T_NODES.c.uuid, T_NODES.c.generation, T_NODES.c.host,
                      T_NODES.c.change_seq))})


class ChangeSeqTests:
    """Mixed into a TestCase with ``make_store()``."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.settings_ = self.settings(reserved_host_memory_mb=0, migration_stuck_age=600)

    def tracker(self, host, nodes):
        driver = loader.load_driver("fake.multinode", settings=self.settings_, nodes=nodes,
                                    memory_mb=8192)
        driver.init_host(host)
        self.addCleanup(driver.destroy_all)
        return driver, ResourceTracker(host, driver, store=self.store, settings=self.settings_)

    def follow(self):
        """A reader and the view it keeps: ``look()`` applies its changes and
        returns the view (``{uuid: (generation, host)}``)."""
        reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        view = {}

        def look():
            changes = reader.read(view)
            if changes.full:
                view.clear()
            for node in changes.nodes:
                view[node.uuid] = node
            for uuid in changes.gone_nodes:
                view.pop(uuid, None)
            return {u: (n.generation, n.host) for u, n in view.items()}

        return look

    def assert_view(self, look):
        self.assertEqual({u: (g, h) for u, (g, h, _) in _rows(self.store).items()}, look())

    def test_every_writer_moves_the_change_seq_of_what_it_changes(self):
        look = self.follow()
        driver, rt = self.tracker("h1", ["n1", "n2"])
        steps = []

        def step(name, fn):
            mark = self.store.db.read("mark", queries.change_mark)
            before = _rows(self.store)
            result = fn()
            after = _rows(self.store)
            for uuid, (generation, host, seq) in after.items():
                old = before.get(uuid)
                if old is None or old[:2] != (generation, host):
                    self.assertGreaterEqual(seq, mark, f"{name}: node {uuid} moved from "
                                            f"{old} to {(generation, host)} at {seq}")
                    steps.append(name)
            self.assert_view(look)
            return result

        step("audit (insert)", rt.update_available_resource)
        inst = step("claim", lambda: rt.instance_claim(base.instance(), "n1").instance)
        many = step("claims", lambda: [c.instance for c in rt.instance_claims(
            [base.instance(), base.instance()], "n2")])
        step("release", lambda: rt.update_usage(attrs.evolve(many[0], vm_state=DELETED)))
        claim = step("resize", lambda: rt.resize_claim(inst, base.flavor(memory_mb=1024),
                                                       "n2"))
        step("drop move", lambda: rt.drop_move_claim(inst, "n1", inst.flavor))
        self.assertIsNotNone(claim.migration)
        api_delete(self.store, many[1].uuid)
        report = step("find leaks", lambda: leaks.find_leaks(self.store, self.settings_,
                                                             host="h1"))
        self.assertFalse(report.clean)
        step("heal", lambda: leaks.heal(self.store, report))
        driver.set_nodes(["n1", "n2", "n3"])
        step("audit (node added)", rt.update_available_resource)
        step("node delete", lambda: self.store.delete_compute_node("h1", "n3"))
        self.assertEqual({"audit (insert)", "claim", "claims", "release", "resize",
                          "drop move", "heal", "audit (node added)"}, set(steps))
        # A node moving to another host moves too (an Ironic rebalance).
        step("host change", lambda: self.store.db.write("rebalance", lambda conn: conn.execute(
            T_NODES.update().where(T_NODES.c.nodename == "n1").values(host="h2"))))
        self.assertEqual("host change", steps[-1])

    def test_a_steady_look_reads_nothing_and_deletions_are_seen(self):
        look = self.follow()
        driver, rt = self.tracker("h1", ["n1", "n2"])
        rt.update_available_resource()
        self.store.heartbeat("h1")
        self.assert_view(look)
        reader = ChangeReader(self.store)
        reader.read({})
        held = {n.uuid: n for n in self.store.get_compute_nodes()}
        self.assertEqual((), reader.read(held).nodes)   # nothing changed: nothing read
        self.store.delete_compute_node("h1", "n2")
        gone = reader.read(held).gone_nodes
        self.assertEqual({held[u].nodename for u in gone}, {"n2"})
        self.assert_view(look)
        # Deleted, then recorded again (a new row): not gone.
        rt.update_available_resource()
        self.assert_view(look)
        self.store.heartbeat("h2")
        svc_reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        svc_reader.read({})
        driver2, rt2 = self.tracker("h2", ["m1"])
        rt2.update_available_resource()
        self.store.delete_compute_service("h2")
        changes = svc_reader.read({})
        self.assertEqual({"h2"}, changes.gone_services)
        self.assertEqual(1, len(changes.gone_nodes))
        self.assert_view(look)

    def test_a_reader_whose_last_look_is_too_old_reads_everything(self):
        reader = ChangeReader(self.store)
        self.assertTrue(reader.read({}).full)
        self.assertFalse(reader.read({}).full)
        reader._looked_at = time.time() - queries.TOMBSTONE_KEEP_S
        self.assertTrue(reader.read({}).full)


class TestChangeSeqOnSQLite(ChangeSeqTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestChangeSeqOnPostgreSQL(ChangeSeqTests, base.OnPostgreSQL, base.TestCase):

    def test_a_change_committed_after_a_later_one_is_seen(self):
        driver, rt = self.tracker("h1", ["n1", "n2"])
        rt.update_available_resource()
        nodes = {n.nodename: n for n in self.store.get_compute_nodes()}
        reader = ChangeReader(self.store)
        reader.read({})
        held = dict((n.uuid, n) for n in nodes.values())
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        self.addCleanup(engine.dispose)
        bump = T_NODES.update().values(generation=T_NODES.c.generation + 1)
        with engine.connect() as a:
            a.begin()
            a.execute(bump.where(T_NODES.c.nodename == "n1"))   # A takes its id first
            with engine.begin() as b:
                b.execute(bump.where(T_NODES.c.nodename == "n2"))   # B commits first
            seen = reader.read(held).nodes
            self.assertEqual(["n2"], [n.nodename for n in seen])
            held.update((n.uuid, n) for n in seen)
            a.commit()
        seen = reader.read(held).nodes
        self.assertEqual(["n1"], [n.nodename for n in seen])
        self.assertEqual(nodes["n1"].generation + 1, seen[0].generation)
