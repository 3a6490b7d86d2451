"""The connections direct transactions (the claims) run on, held off the pool.

A claim takes a connection from the stack :mod:`nova_lite.db.held` keeps
and puts it back after COMMIT; these tests hold what that promises on both
backends: one connection serves one claim after another; a connection the
server killed while it sat idle is replaced, not used; one lost in the
middle of a transaction is never put back; the stack keeps at most
``MOST_HELD``; and closing the store, or disposing of its engine, closes
what is held.
"""

import sqlite3
import threading

import fixtures
import sqlalchemy as sa

from nova_lite.db import Store, held
from nova_lite.exception import StoreError
from tests.base import terminate_backend
from tests.reliability import base


def _session_id(store):
    """An id of the database session a direct transaction runs on."""
    if store.db.dialect == "postgresql":
        return store.db.write_direct("pid", lambda conn: conn.execute(
            sa.text("SELECT pg_backend_pid()")).scalar())
    return store.db.write_direct("connection", lambda conn: id(conn.cursor.connection))


class HeldConnectionsMixin:

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.store = Store(self.url)
        self.addCleanup(self.store.close)

    def test_one_connection_serves_one_transaction_after_another(self):
        first = _session_id(self.store)
        self.assertEqual([first] * 5, [_session_id(self.store) for _ in range(5)])

    def test_a_failed_transaction_rolls_back_and_its_connection_serves_again(self):
        first = _session_id(self.store)

        def fail(conn):
            conn.execute(sa.text("SELECT 1"))
            raise RuntimeError("on purpose")

        self.assertRaises(RuntimeError, self.store.db.write_direct, "fail", fail)
        self.assertEqual(first, _session_id(self.store))

    def test_a_snapshot_read_and_a_write_share_the_connection_each_as_it_should_be(self):
        # A read of one snapshot, then a write, then another alone, on one
        # connection: each finds it as its kind of transaction needs it.
        first = _session_id(self.store)
        read = self.store.db.read_direct("read", _isolation)
        self.assertEqual(first, _session_id(self.store))
        written = self.store.db.write_direct("write", _isolation)
        alone = self.store.db.write_alone("alone", _isolation)
        if self.store.db.dialect == "postgresql":
            self.assertEqual(("repeatable read", "on", True), read)
            self.assertEqual(("read committed", "off", True), written)
            self.assertEqual(("read committed", "off", False), alone)
            self.assertEqual(("read committed", "off", True), self.store.db.write_direct(
                "write", _isolation))
        else:
            self.assertEqual(("deferred", "immediate", "immediate"), (read, written, alone))
        self.assertEqual(first, _session_id(self.store))

    def test_close_closes_what_is_held(self):
        _session_id(self.store)
        kept = [dbapi for _, dbapi, _ in self.store.db._held._held]
        self.assertEqual(1, len(kept))
        self.store.close()
        self.assertEqual([], self.store.db._held._held)
        self.assertTrue(_closed(kept[0]))

    def test_engine_dispose_retires_what_is_held(self):
        first = _session_id(self.store)
        kept = [dbapi for _, dbapi, _ in self.store.db._held._held]
        self.store.db.engine.dispose()
        self.assertNotEqual(first, _session_id(self.store))
        self.assertTrue(_closed(kept[0]))


def _isolation(conn):
    """PostgreSQL: (transaction_isolation, transaction_read_only) of ``conn``'s
    transaction; SQLite: whether it holds the write lock yet."""
    if conn.dialect.name == "postgresql":
        import psycopg
        found = tuple(conn.execute(sa.text(
            "SELECT current_setting('transaction_isolation'), "
            "current_setting('transaction_read_only')")).one())
        # Still in its transaction after the statement, unless sent alone.
        status = conn.cursor.connection.info.transaction_status
        return (*found, status == psycopg.pq.TransactionStatus.INTRANS)
    # A deferred transaction takes no lock until it writes: another
    # connection can still begin an immediate one.
    other = sqlite3.connect(conn.cursor.connection.execute(
        "PRAGMA database_list").fetchone()[2], timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return "deferred"
    except sqlite3.OperationalError:
        return "immediate"
    finally:
        other.close()


def _id_in(conn):
    if conn.dialect.name == "postgresql":
        return conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
    return id(conn.cursor.connection)


def _closed(dbapi):
    if hasattr(dbapi, "closed"):   # psycopg
        return bool(dbapi.closed)
    try:
        dbapi.execute("SELECT 1")
    except Exception:   # noqa: BLE001 - sqlite3.ProgrammingError: closed
        return True
    return False


class TestHeldConnectionsSQLite(HeldConnectionsMixin, base.SQLiteBackend, base.TestCase):
    pass


class TestHeldConnectionsPostgreSQL(HeldConnectionsMixin, base.PostgreSQLBackend,
                                    base.TestCase):

    def _terminate(self, pid):
        terminate_backend(self, self.url, pid)

    def test_a_connection_keeps_its_cursor_until_a_write_on_it_fails(self):
        def cursor(conn):
            return conn.cursor

        first = self.store.db.write_direct("cursor", cursor)
        self.assertIs(first, self.store.db.write_direct("cursor", cursor))
        self.assertIs(first, self.store.db.write_alone("cursor", cursor))

        def fail(conn):
            conn.execute(sa.text("SELECT 1"))
            raise RuntimeError("on purpose")

        self.assertRaises(RuntimeError, self.store.db.write_direct, "fail", fail)
        # The connection serves again, on a cursor of its own: the one that
        # saw the failure is closed.
        after = self.store.db.write_direct("cursor", cursor)
        self.assertIsNot(first, after)
        self.assertTrue(first.closed)
        self.assertFalse(after.closed)
        self.assertEqual(1, len(self.store.db._held._held))

    def test_a_read_closes_its_cursor(self):
        # psycopg's cursor holds its last result until its next statement: a
        # read's (a fleet's changed nodes) is not kept beyond the read.
        def cursor(conn):
            conn.execute(sa.text("SELECT 1"))
            return conn.cursor

        kept = self.store.db.write_direct("cursor", cursor)
        for read in (self.store.db.read_direct, self.store.db.read_each_direct):
            used = read("read", cursor)
            self.assertIsNot(kept, used)
            self.assertTrue(used.closed)
        self.assertIs(kept, self.store.db.write_direct("cursor", cursor))
        self.assertFalse(kept.closed)

    def test_a_snapshot_read_writes_nothing(self):
        # READ ONLY is the transaction's own property here (SQLite's deferred
        # transaction is what a read runs in, and enforces nothing).
        self.store.heartbeat("h1")
        update = sa.text("UPDATE services SET report_count = 99")
        self.assertRaisesRegex(StoreError, "read-only transaction",
                               self.store.db.read_direct, "write in a read",
                               lambda conn: conn.execute(update))
        self.assertEqual(1, self.store.list_services("h1")[0].report_count)
        self.assertEqual(1, len(self.store.db._held._held))

    def test_a_statement_that_fails_leaves_nothing_behind_and_its_connection_serves(self):
        first = _session_id(self.store)
        insert = sa.text("INSERT INTO services (host, \"binary\", created_at, updated_at, "
                         "report_count, disabled) VALUES ('h1', 'b', 0, 0, 0, false)")

        def write(conn):
            conn.execute(insert, [{}, {}])   # the key again: the second row fails

        self.assertRaisesRegex(StoreError, "duplicate key", self.store.db.write_direct,
                               "write twice", write)
        self.assertEqual(first, _session_id(self.store))
        self.assertEqual(0, self.store.db.read_direct("count", lambda conn: conn.execute(
            sa.text("SELECT count(*) FROM services")).scalar()))
        self.assertEqual(("read committed", "off", True), self.store.db.write_direct(
            "write", _isolation))

    def test_an_idle_connection_killed_by_the_server_is_replaced(self):
        pid = _session_id(self.store)
        self._terminate(pid)
        self.useFixture(fixtures.MonkeyPatch("nova_lite.db.engine.IDLE_PING_S", 0.0))
        replaced = _session_id(self.store)   # no "connection is lost"
        self.assertNotEqual(pid, replaced)
        self.assertEqual(1, len(self.store.db._held._held))

    def test_a_busy_connection_is_not_pinged(self):
        pid = _session_id(self.store)
        self._terminate(pid)
        # Not idle long enough to be pinged: the lost connection is found by
        # the transaction itself, which fails, and is never used again.
        self.assertRaisesRegex(Exception, "nothing was written", _session_id, self.store)
        self.assertEqual([], self.store.db._held._held)
        self.assertNotEqual(pid, _session_id(self.store))

    def test_at_most_most_held_are_kept_after_many_at_once(self):
        # PostgreSQL only: SQLite's writers take the whole file one at a time.
        count = held.MOST_HELD + 4
        barrier = threading.Barrier(count)
        seen, errors = [], []

        def one():
            def op(conn):
                barrier.wait(60)   # every transaction holds its connection at once
                return _id_in(conn)
            try:
                seen.append(self.store.db.write_direct("many", op))
            except Exception as exc:   # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=one) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.assertEqual([], errors)
        self.assertEqual(count, len(set(seen)), "each transaction had its own connection")
        self.assertEqual(held.MOST_HELD, len(self.store.db._held._held))
        # The ones kept are ones that served; the next transactions reuse them.
        self.assertLessEqual({_session_id(self.store) for _ in range(3)}, set(seen))
