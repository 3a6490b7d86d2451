"""The indexed change sequence the fleet's readers follow, on both backends.

Every writer that changes a node's generation or host moves its
``change_seq`` past any reader's mark (the database's triggers do it, so
the test runs the writers themselves: audit, claims, releases, moves, heal,
node and service deletion); a reader sees a change committed after a later
one (PostgreSQL), deletions, and nothing when nothing changed.
"""

import time

import attrs
import fixtures
import sqlalchemy as sa

from nova_lite import leaks
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import COMPUTE_BINARY, look, models, node_changes, queries
from nova_lite.db import store as store_module
from nova_lite.db.direct import observe as direct_observe, unobserve as direct_unobserve
from nova_lite.db.node_changes import ChangeReader
from nova_lite.objects import DELETED
from nova_lite.virt import loader
from tests import base
from tests.pg_trace import client_messages, round_trips
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
        returns the view (``{uuid: ComputeNode}``)."""
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
            return dict(view)

        return look

    def assert_view(self, look):
        seen = look()
        self.assertEqual({u: (g, h) for u, (g, h, _) in _rows(self.store).items()},
                         {u: (n.generation, n.host) for u, n in seen.items()})
        # whole records, read again whole or for their usage alone
        self.assertEqual({n.uuid: n for n in self.store.get_compute_nodes()}, seen)

    def described(self):
        """``{nodename: (described_seq, change_seq)}`` of every node row."""
        return self.store.db.read("described", lambda conn: {
            r.nodename: (r.described_seq, r.change_seq) for r in conn.execute(
                sa.select(T_NODES.c.nodename, T_NODES.c.described_seq, T_NODES.c.change_seq))})

    def test_described_seq_moves_with_the_description_alone(self):
        look = self.follow()
        driver, rt = self.tracker("h1", ["n1", "n2"])
        moved = []

        def step(name, fn, nodename="n1"):
            mark = self.store.db.read("mark", queries.change_mark)
            before = self.described()
            fn()
            after = self.described()
            if after[nodename][0] != before.get(nodename, (None,))[0]:
                moved.append(name)
                self.assertGreaterEqual(after[nodename][0], mark, name)
                # a change of the description alone is seen by the readers too
                self.assertGreaterEqual(after[nodename][1], mark, name)
            self.assert_view(look)

        step("audit (insert)", rt.update_available_resource)
        step("steady audit", rt.update_available_resource)
        inst = rt.instance_claim(base.instance(), "n1").instance
        step("claim", lambda: rt.instance_claim(base.instance(), "n1"))
        step("release", lambda: rt.update_usage(attrs.evolve(inst, vm_state=DELETED)))

        def claim_with_extras(conn):
            # an allocation of a class the database does not sum (as a claim
            # of a custom resource leaves), then another plain claim on top
            uuid = conn.execute(sa.select(T_NODES.c.uuid).where(
                T_NODES.c.nodename == "n1")).scalar_one()
            conn.execute(models.allocations.insert().values(
                consumer_uuid="c-gold", node_uuid=uuid, consumer_type="instance",
                instance_uuid="c-gold", vcpu=0, pcpu=0, memory_mb=0, disk_gb=0, flavor="{}",
                other='{"CUSTOM_GOLD": 2}', created_at=1.0))
            conn.execute(T_NODES.update().where(T_NODES.c.uuid == uuid).values(
                generation=T_NODES.c.generation + 1))
        step("claim with extras", lambda: self.store.db.write("gold", claim_with_extras))
        step("claim on extras", lambda: rt.instance_claim(base.instance(), "n1"))
        driver.set_node_size("n1", memory_mb=4096)
        step("inventory changed", rt.update_available_resource)
        driver.set_node_traits("n1", ["CUSTOM_GOLD"])
        step("report changed", rt.update_available_resource)
        step("last error", lambda: self.store.set_node_error("h1", "n1", "boom"))
        step("last error cleared", rt.update_available_resource)
        driver.set_nodes(["n2"])
        step("not reported", rt.update_available_resource)
        step("inventory row deleted", lambda: self.store.db.write("inv", lambda conn: conn.execute(
            models.inventories.delete().where(models.inventories.c.node_uuid == sa.select(
                T_NODES.c.uuid).where(T_NODES.c.nodename == "n1").scalar_subquery()))))
        step("host change", lambda: self.store.db.write("rebalance", lambda conn: conn.execute(
            T_NODES.update().where(T_NODES.c.nodename == "n1").values(host="h2"))))
        self.assertEqual(["audit (insert)", "inventory changed", "report changed", "last error",
                          "last error cleared", "not reported", "inventory row deleted",
                          "host change"], moved)

    def test_a_claim_is_renewed_from_the_look_and_a_new_description_read_whole(self):
        driver, rt = self.tracker("h1", ["n1"])
        rt.update_available_resource()
        reader = ChangeReader(self.store)
        held = {n.uuid: n for n in reader.read({}).nodes}
        read_whole = []
        real = node_changes.load_nodes_by_uuid
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.db.node_changes.load_nodes_by_uuid",
            lambda conn, uuids, described=None: read_whole.extend(uuids) or real(
                conn, uuids, described)))

        def renewed():
            found = reader.read(held).nodes
            held.update((n.uuid, n) for n in found)
            self.assertEqual(self.store.get_compute_nodes(), list(found))
            return read_whole[:]

        # the description held: generation and usage from the look alone
        rt.instance_claim(base.instance(), "n1")
        self.assertEqual([], renewed())
        # another description (a last error): read whole
        self.store.set_node_error("h1", "n1", "boom")
        self.assertEqual(list(held), renewed())

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

    def test_a_look_runs_on_the_drivers_cursor_and_reads_nothing_more_when_steady(self):
        # Every scheduler, API and metrics request looks: its one statement
        # skips SQLAlchemy's Connection and result machinery, as the claims
        # do (that layer was a sixth of a build's client time).
        driver, rt = self.tracker("h1", ["n1"])
        rt.update_available_resource()
        reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        held = {n.uuid: n for n in reader.read({}).nodes}
        rt.instance_claim(base.instance(), "n1")   # renewed from the look alone
        through_sqlalchemy, direct = [], []

        class Seen:
            def direct_begin(self):
                pass

            def direct_statement(self, sql):
                direct.append(sql)

            def direct_done(self, sql, cursor):
                pass

            def direct_ending(self, dbapi_connection, autocommit):
                pass

        engine = self.store.db.engine
        sa.event.listen(engine, "before_cursor_execute",
                        lambda conn, cursor, text, *args: through_sqlalchemy.append(text))
        seen = Seen()
        direct_observe(engine, seen)
        self.addCleanup(direct_unobserve, engine, seen)
        self.assertEqual(["n1"], [n.nodename for n in reader.read(held).nodes])
        self.assertEqual([], through_sqlalchemy)
        self.assertEqual(1, len(direct), direct)
        self.assertIn("look", direct[0])

    def test_a_reader_whose_last_look_is_too_old_reads_everything(self):
        reader = ChangeReader(self.store)
        self.assertTrue(reader.read({}).full)
        self.assertFalse(reader.read({}).full)
        reader._looked_at = time.time() - queries.TOMBSTONE_KEEP_S
        self.assertTrue(reader.read({}).full)


class TestChangeSeqOnSQLite(ChangeSeqTests, base.OnSQLiteFile, base.TestCase):

    def test_a_look_reads_each_table_by_its_change_sequence(self):
        # every branch of the one statement is a range read of a change_seq
        # index (or a primary key that starts with it), the stamps of the
        # aggregates apart: never every service of a binary or every node;
        # the changed nodes' allocations are looked up by node
        mark = self.store.db.read("mark", queries.change_mark)
        statement = look._STATEMENTS[("sqlite", True, True)]
        compiled = statement.compile(dialect=self.store.db.engine.dialect)
        params = compiled.construct_params({"mark": mark, "binary": COMPUTE_BINARY})
        with self.store.db.engine.connect() as conn:
            plan = [r[3] for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + compiled.string,
                tuple(params[name] for name in compiled.positiontup)).all()]
        reads = [p for p in plan if p.startswith(("SEARCH", "SCAN")) and "look" not in p
                 and "changed" not in p and "CONSTANT" not in p]
        self.assertEqual(9, len(reads), plan)
        self.assertIn("SEARCH allocations USING INDEX allocations_node_idx (node_uuid=?)", reads)
        for read in reads:
            if "aggregates" in read or "change_counter" in read or "allocations" in read:
                continue
            if read.startswith("SEARCH used "):   # the sums made above, by node
                self.assertRegex(read, r"\(allocated=\?\)", plan)
                continue
            self.assertRegex(read, r"^SEARCH .*\(change_seq>\? AND change_seq<\?\)$", plan)

    def test_a_look_gives_the_services_of_its_binary_alone(self):
        reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        reader.read({})
        self.store.heartbeat("h1")
        self.store.heartbeat("h1", binary="nova-lite-other")
        self.assertEqual([("h1", COMPUTE_BINARY)],
                         [(s.host, s.binary) for s in reader.read({}).services])


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

    def test_the_claims_one_statement_moves_the_change_seq_without_the_trigger(self):
        # The trigger's function is made to write a sentinel: a claim's one
        # statement must give the node its transaction's id itself (and so
        # skip the trigger), every other writer still goes through it.
        driver, rt = self.tracker("h1", ["n1"])
        rt.update_available_resource()
        with self.store.db.engine.begin() as conn:
            conn.exec_driver_sql(
                "CREATE OR REPLACE FUNCTION nova_lite_change_seq() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN NEW.change_seq := -1; RETURN NEW; END $$")

        def node_row():
            return self.store.db.read("node", lambda conn: conn.execute(sa.text(
                "SELECT generation, change_seq, xmin::text::bigint AS xmin "
                "FROM compute_nodes WHERE nodename = 'n1'")).one())

        class Seen:
            statements = set()

            def direct_statement(self, sql):
                if sql.startswith("WITH "):   # a one statement: named by its first clause
                    self.statements.add(sql.split()[1])

            def __getattr__(self, name):
                return lambda *args: None

        seen = Seen()
        direct_observe(self.store.db.engine, seen)
        self.addCleanup(direct_unobserve, self.store.db.engine, seen)
        claimed = []
        for _ in range(store_module.PLAIN_CLAIM_AFTER_SWAPS + 2):
            before = node_row()
            claimed.append(rt.instance_claim(base.instance(base.flavor(memory_mb=64)),
                                             "n1").instance)
            after = node_row()
            self.assertEqual(before.generation + 1, after.generation)
            # the transaction's id: the row version's xmin is its low 32 bits
            self.assertEqual(after.xmin, after.change_seq % 2 ** 32, after)
        # both one statements ran: the one on the usage row, then the plain one
        self.assertLessEqual({"node_lock", "bump"}, seen.statements)
        rt.update_usage(attrs.evolve(claimed[0], vm_state=DELETED))
        self.assertEqual(-1, node_row().change_seq)   # a release: through the trigger

    def test_a_look_sums_the_changed_nodes_allocations_by_node_in_a_generic_plan(self):
        # psycopg prepares the look after its fifth run, and PostgreSQL may
        # then plan it once for any mark: the allocations are still looked
        # up by node, for the changed nodes alone, never read whole.
        from tests.test_steady_pass import analyze_own_tables, generic_plan
        with self.store.db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO compute_nodes (uuid, host, nodename, generation, resources, "
                "reported, created_at, updated_at) SELECT 'n' || g, 'h' || g, 'n' || g, 1, "
                "'{}', true, 0, 0 FROM generate_series(1, 3000) g")
            conn.exec_driver_sql(
                "INSERT INTO allocations (consumer_uuid, node_uuid, consumer_type, "
                "instance_uuid, vcpu, pcpu, memory_mb, disk_gb, flavor, created_at) "
                "SELECT 'c' || g, 'n' || (g %% 3000 + 1), 'instance', 'c' || g, 1, 0, 512, 1, "
                "'{}', 0 FROM generate_series(1, 12000) g")
        mark = self.store.db.read("mark", queries.change_mark)
        with self.store.db.engine.connect() as conn:
            analyze_own_tables(conn)
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            for i, ((dialect, *_), statement) in enumerate(look._STATEMENTS.items()):
                if dialect != "postgresql":
                    continue
                plan = generic_plan(conn, f"look_{i}", statement,
                                    {"mark": mark, "binary": COMPUTE_BINARY})
                self.assertRegex(plan, r"\$\d")   # planned for any mark
                self.assertRegex(plan, r"Index Scan (using|on) allocations_node_idx", plan)
                self.assertNotRegex(plan, r"Seq Scan on (allocations|compute_nodes)\b", plan)

    def test_a_look_is_one_round_trip_a_claims_renewal_included(self):
        # Each statement of a look is its own transaction (autocommit): no
        # BEGIN and COMMIT around them, which made a look three round trips.
        driver, rt = self.tracker("h1", ["n1", "n2"])
        rt.update_available_resource()
        reader = ChangeReader(self.store, binary=COMPUTE_BINARY)
        held = {n.uuid: n for n in reader.read({}).nodes}
        messages = client_messages(self.store, lambda: reader.read(held))
        self.assertEqual(1, round_trips(messages), messages)
        self.assertFalse([m for m in messages if "BEGIN" in m[1] or "COMMIT" in m[1]],
                         messages)
        rt.instance_claim(base.instance(), "n1")   # renewed from the look alone
        found = []
        messages = client_messages(self.store, lambda: found.append(reader.read(held)))
        self.assertEqual(1, round_trips(messages), messages)
        self.assertEqual([("n1", 1)], [(n.nodename, n.used("VCPU")) for n in found[0].nodes])
