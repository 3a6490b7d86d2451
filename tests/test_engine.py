"""The SQLite engine's set-up: how parameters reach sqlite3."""

import sqlite3

import fixtures

from nova_lite.db import Store
from nova_lite.db import engine as db_engine
from tests import base

_NONE_KEY = (type(None), sqlite3.PrepareProtocol)


class TestNoneParameters(base.TestCase):

    def setUp(self):
        super().setUp()
        # The registry is the sqlite3 module's: each test starts without an
        # adapter for None and leaves the registry as it found it.
        before = sqlite3.adapters.get(_NONE_KEY)
        sqlite3.adapters.pop(_NONE_KEY, None)

        def restore():
            sqlite3.adapters.pop(_NONE_KEY, None)
            if before is not None:
                sqlite3.adapters[_NONE_KEY] = before
        self.addCleanup(restore)

    def store(self):
        path = self.useFixture(fixtures.TempDir()).join("nova-lite.db")
        store = Store(f"sqlite:///{path}")
        self.addCleanup(store.close)
        return store

    def test_a_sqlite_store_has_none_bound_without_the_failed_lookup(self):
        store = self.store()
        adapter = sqlite3.adapters.get(_NONE_KEY)
        self.assertIs(db_engine._NONE_ADAPTER, adapter)
        self.assertIsNone(adapter(None))
        # and a None still binds NULL
        with store.db.engine.connect() as conn:
            found = conn.exec_driver_sql("SELECT ? IS NULL, typeof(?)", (None, None)).one()
        self.assertEqual((1, "null"), tuple(found))

    def test_an_adapter_registered_before_is_kept(self):
        def theirs(value):
            return value
        sqlite3.register_adapter(type(None), theirs)
        self.store()
        self.assertIs(theirs, sqlite3.adapters.get(_NONE_KEY))
