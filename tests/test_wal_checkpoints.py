"""Checkpoints of a SQLite file's write-ahead log, off the writers' thread.

A writable SQLite store's commits wake a thread that copies the log into
the database file (:mod:`nova_lite.db.wal_checkpoints`); these tests hold
what that promises: the claims' rows reach the database file itself with no
writer checkpointing (the file is read alone, without its log), the
writers' own checkpoint waits for the backstop bound, a failing checkpoint
is reported once and leaves the writers alone, and the thread ends with
its store, or with its Database when that is dropped, and starts again in
a forked child.
"""

import gc
import logging
import os
import shutil
import sqlite3
import threading
import time

import fixtures

from nova_lite.db import Store, wal_checkpoints
from nova_lite.db.engine import Database
from nova_lite.testing import databases
from tests import base


def wait_until(test, condition, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        test.assertLess(time.monotonic(), deadline, f"timed out waiting for {what}")
        time.sleep(0.01)   # poll interval; the condition decides


def _threads_of(path):
    name = f"wal-checkpoints:{os.path.basename(path)}"
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


class TestStoreCheckpoints(base.TestCase):

    def setUp(self):
        super().setUp()
        self.db_file = self.useFixture(databases.SQLiteFile("checkpointed.db"))
        self.store = Store(self.db_file.url)
        self.addCleanup(self.store.close)

    def _instances_in_the_file_alone(self):
        """Instances in a copy of the database file without its log: what
        checkpoints have copied into the file."""
        copy = os.path.join(self.state_path, "file-alone.db")
        shutil.copyfile(self.db_file.path, copy)
        conn = sqlite3.connect(copy)
        try:
            return conn.execute("SELECT count(*) FROM instances").fetchone()[0]
        except sqlite3.DatabaseError:
            return -1   # copied while a checkpoint wrote it; look again
        finally:
            conn.close()
            for leftover in (copy, copy + "-wal", copy + "-shm"):
                if os.path.exists(leftover):
                    os.unlink(leftover)

    def test_claims_reach_the_database_file_through_the_thread(self):
        _, rt = self.make_tracker(store=self.store)
        for inst in [base.instance() for _ in range(30)]:
            rt.instance_claim(inst, self.host)
        checkpointer = self.store.db.checkpointer
        self.assertIsNotNone(checkpointer)
        wait_until(self, lambda: self._instances_in_the_file_alone() == 30,
                   "the 30 claimed instances in the database file")
        totals = checkpointer.totals()
        self.assertGreaterEqual(totals.checkpoints, 1)
        self.assertEqual(0, totals.failures)
        self.assertEqual(1, len(_threads_of(self.db_file.path)))

    def test_writers_checkpoint_themselves_only_past_the_backstop(self):
        self.make_tracker(store=self.store)
        pooled = self.store.db.read("autocheckpoint", lambda conn: conn.exec_driver_sql(
            "PRAGMA wal_autocheckpoint").scalar())
        direct = self.store.db.write_direct("autocheckpoint", lambda conn: conn.cursor.execute(
            "PRAGMA wal_autocheckpoint").fetchone()[0])
        self.assertEqual([wal_checkpoints.BACKSTOP_PAGES] * 2, [pooled, direct])

    def test_closing_the_store_ends_the_thread_and_a_write_starts_it_again(self):
        self.store.heartbeat(self.host)
        wait_until(self, lambda: self.store.db.checkpointer.totals().checkpoints >= 1,
                   "a checkpoint after the heartbeat")
        self.assertEqual(1, len(_threads_of(self.db_file.path)))
        self.store.close()
        self.assertEqual([], _threads_of(self.db_file.path))
        self.store.heartbeat(self.host)
        self.assertEqual(1, len(_threads_of(self.db_file.path)))
        self.store.close()
        self.assertEqual([], _threads_of(self.db_file.path))

    def test_read_only_and_in_memory_databases_have_no_checkpointer(self):
        self.store.heartbeat(self.host)
        readonly = Store(self.db_file.url, readonly=True)
        self.addCleanup(readonly.close)
        memory = Store("sqlite://")
        self.addCleanup(memory.close)
        self.assertEqual([None, None], [readonly.db.checkpointer, memory.db.checkpointer])


class TestDroppedDatabase(base.TestCase):

    def test_a_database_dropped_without_dispose_ends_its_thread(self):
        db_file = self.useFixture(databases.SQLiteFile("dropped.db"))
        Store(db_file.url).close()   # the schema
        db = Database(db_file.url)
        db.write("a write", lambda conn: conn.exec_driver_sql("SELECT 1"))
        threads = _threads_of(db_file.path)
        self.assertEqual(1, len(threads))
        del db
        gc.collect()
        threads[0].join(60)
        self.assertFalse(threads[0].is_alive())


class TestCheckpointer(base.TestCase):

    def _wal_file(self, name):
        path = os.path.join(self.state_path, name)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE t (x INTEGER)")
        self.addCleanup(conn.close)
        return path, conn

    def test_a_failing_checkpoint_is_logged_once_until_one_succeeds(self):
        logged = self.useFixture(fixtures.FakeLogger(name=wal_checkpoints.__name__,
                                                     level=logging.INFO))
        path = os.path.join(self.state_path, "not-yet.db")
        checkpointer = wal_checkpoints.WalCheckpointer(path, gap_s=0)
        self.addCleanup(checkpointer.stop)
        checkpointer.committed()
        wait_until(self, lambda: checkpointer.totals().failures >= 1, "a first failure")
        checkpointer.committed()
        wait_until(self, lambda: checkpointer.totals().failures >= 2, "a second failure")
        self.assertEqual(1, logged.output.count("Checkpoint of the write-ahead log"))
        self.assertIn(path, logged.output)
        self.assertFalse(os.path.exists(path), "a checkpoint created the file")
        # The file appears: the next commit's checkpoint succeeds and says so.
        self.assertEqual(path, self._wal_file("not-yet.db")[0])
        checkpointer.committed()
        wait_until(self, lambda: checkpointer.totals().checkpoints >= 1, "a checkpoint")
        self.assertIn("succeed again", logged.output)
        self.assertEqual(1, logged.output.count("Checkpoint of the write-ahead log"))

    def test_a_checkpoint_copies_the_whole_log(self):
        path, conn = self._wal_file("copied.db")
        for x in range(50):
            conn.execute("INSERT INTO t VALUES (?)", (x,))
        checkpointer = wal_checkpoints.WalCheckpointer(path)
        self.addCleanup(checkpointer.stop)
        checkpointer.committed()
        wait_until(self, lambda: checkpointer.totals().checkpoints >= 1, "a checkpoint")
        totals = checkpointer.totals()
        self.assertGreater(totals.log_pages, 0)
        self.assertEqual(totals.log_pages, totals.checkpointed_pages)

    def test_a_forked_child_starts_a_thread_of_its_own(self):
        path, conn = self._wal_file("forked.db")
        checkpointer = wal_checkpoints.WalCheckpointer(path)
        self.addCleanup(checkpointer.stop)
        checkpointer.committed()
        wait_until(self, lambda: checkpointer.totals().checkpoints >= 1, "a checkpoint")
        conn.execute("INSERT INTO t VALUES (1)")
        pid = os.fork()
        if pid == 0:   # the child: the parent's thread is not here
            code = 1
            try:
                before = checkpointer.totals().checkpoints
                checkpointer.committed()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if checkpointer.totals().checkpoints > before:
                        code = 0
                        break
                    time.sleep(0.01)   # poll interval; the condition decides
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(0, os.waitstatus_to_exitcode(status),
                         "the child's commit was never checkpointed")
