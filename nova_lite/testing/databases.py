"""Database fixtures: a fresh SQLite file or a fresh PostgreSQL database.

Both give a ``url`` for :class:`nova_lite.db.Store` and remove everything
they made at cleanup::

    db = self.useFixture(SQLiteFile())
    store = Store(db.url)

    use_postgresql(self)                      # skip or fail, see below
    db = self.useFixture(PostgreSQLDatabase())
    store = Store(db.url)

:func:`use_postgresql` checks the server first and goes through
:func:`nova_lite.testing.components.require`: a missing server skips the
test outside CI and fails it when the environment requires PostgreSQL
(``NOVA_LITE_REQUIRE_ALL=1``).
"""

import os
import unittest
import uuid
from typing import TYPE_CHECKING, cast

import fixtures

from nova_lite.testing import components

if TYPE_CHECKING:
    import sqlalchemy as sa

#: Prefix of every database :class:`PostgreSQLDatabase` creates.
DATABASE_PREFIX = "nova_lite_test_"


class SQLiteFile(fixtures.Fixture):
    """A new SQLite database file in a temporary directory.

    Attributes after setUp: ``path`` (the file, not created yet: the Store
    creates it owner-only) and ``url`` (``sqlite:///<path>``).
    """

    def __init__(self, name: str = "nova-lite.db") -> None:
        super().__init__()
        self.name = name
        #: The database file and its URL (after setUp; None before).
        self.path: str = cast(str, None)
        self.url: str = cast(str, None)

    def _setUp(self) -> None:
        directory = self.useFixture(fixtures.TempDir()).path
        self.path = os.path.join(directory, self.name)
        self.url = "sqlite:///" + self.path


def _admin_engine(admin_url: str) -> "sa.engine.Engine":
    import sqlalchemy as sa

    from nova_lite.db.engine import normalize_url
    return sa.create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT",
                            poolclass=sa.pool.NullPool,
                            connect_args={"connect_timeout": 3})


def postgresql_problem(admin_url: str | None = None) -> str | None:
    """None if the PostgreSQL server at ``admin_url`` answers, else why not."""
    admin_url = admin_url or components.postgresql_url()
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    try:
        import sqlalchemy as sa
        engine = _admin_engine(admin_url)
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:   # noqa: BLE001 - any failure means "unavailable"
        from nova_lite.conf import redact_url
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cannot connect to {redact_url(admin_url)}: {first}"
    return None


_ANSWERED: set[str] = set()


def use_postgresql(test: unittest.TestCase, admin_url: str | None = None) -> None:
    """Skip ``test`` (or fail it where required) unless PostgreSQL answers.

    A server that answered once in this process is not asked again.
    """
    admin_url = admin_url or components.postgresql_url()
    if admin_url in _ANSWERED:
        return
    problem = postgresql_problem(admin_url)
    if problem is None:
        _ANSWERED.add(admin_url)
    components.require(test, "postgresql", problem)


def _admin_execute(admin_url: str, statement: str) -> None:
    """Run one statement on the server at ``admin_url`` (autocommit)."""
    import sqlalchemy as sa
    engine = _admin_engine(admin_url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()


class PostgreSQLDatabase(fixtures.Fixture):
    """A new, empty PostgreSQL database, dropped at cleanup.

    ``admin_url`` is a URL of the server with the right to create databases
    (default :func:`nova_lite.testing.components.postgresql_url`).  After
    setUp, ``name`` is the database and ``url`` its URL.  Cleanup drops it
    even when connections to it are still open.
    """

    def __init__(self, admin_url: str | None = None) -> None:
        super().__init__()
        self.admin_url = admin_url or components.postgresql_url()
        #: The database (schema) name and its URL (after setUp; None before).
        self.name: str = cast(str, None)
        self.url: str = cast(str, None)

    def _setUp(self) -> None:
        import sqlalchemy as sa
        name = DATABASE_PREFIX + uuid.uuid4().hex[:16]
        _admin_execute(self.admin_url, f'CREATE DATABASE "{name}"')
        self.name = name
        self.addCleanup(self._drop)
        url = sa.engine.make_url(self.admin_url).set(database=name)
        self.url = url.render_as_string(hide_password=False)

    def _drop(self) -> None:
        _admin_execute(self.admin_url, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class PostgreSQLSchema(fixtures.Fixture):
    """A new, empty schema in an existing PostgreSQL database, dropped at cleanup.

    Cheaper than :class:`PostgreSQLDatabase` (no CREATE DATABASE): ``url``
    is ``admin_url`` with ``search_path`` set to the new schema, so a Store
    built from it sees only its own tables, and ``application_name`` set to
    it, so its sessions are told apart in ``pg_stat_activity``.  ``name`` is the schema.
    """

    def __init__(self, admin_url: str | None = None) -> None:
        super().__init__()
        self.admin_url = admin_url or components.postgresql_url()
        #: The database (schema) name and its URL (after setUp; None before).
        self.name: str = cast(str, None)
        self.url: str = cast(str, None)

    def _setUp(self) -> None:
        import sqlalchemy as sa
        name = DATABASE_PREFIX + uuid.uuid4().hex[:16]
        _admin_execute(self.admin_url, f'CREATE SCHEMA "{name}"')
        self.name = name
        self.addCleanup(self._drop)
        url = sa.engine.make_url(self.admin_url)
        # The schema's name is also its sessions' application_name, so a test
        # can tell its own sessions in pg_stat_activity from those of the
        # tests sharing the database: application_name =
        # current_setting('application_name').
        url = url.update_query_dict({"options": f"-csearch_path={name}",
                                     "application_name": name})
        self.url = url.render_as_string(hide_password=False)

    def _drop(self) -> None:
        _admin_execute(self.admin_url, f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')


__all__ = ["SQLiteFile", "PostgreSQLDatabase", "PostgreSQLSchema", "postgresql_problem",
           "use_postgresql", "DATABASE_PREFIX"]
