"""The connections direct transactions (the claims) run on, held off the pool.

A claim takes a connection from the stack :mod:`nova_lite.db.held` keeps
and puts it back after COMMIT; these tests hold what that promises on both
backends: one connection serves one claim after another; a connection the
server killed while it sat idle is replaced, not used; one lost in the
middle of a transaction is never put back; the stack keeps at most
``MOST_HELD``; and closing the store, or disposing of its engine, closes
what is held.
"""

import threading

import fixtures
import sqlalchemy as sa

from nova_lite.db import Store, held
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
