"""Database engines for the store: SQLite (file or memory) and PostgreSQL.

SQLite files run in WAL mode; every writing transaction starts with
``BEGIN IMMEDIATE`` so writers queue for the lock instead of failing half
way.  In-memory SQLite shares one connection behind a lock.  PostgreSQL
URLs use psycopg 3.
"""

import contextlib
import os
import random
import sqlite3
import threading
import time
import urllib.parse

import sqlalchemy as sa
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.pool import StaticPool

from nova_lite.conf import redact_url
from nova_lite.exception import ClaimRaceLost, StoreError

SQLITE_BUSY_TIMEOUT_S = 30.0
_PG_RETRY_STATES = {"40001", "40P01"}   # serialization failure, deadlock


def normalize_url(url):
    """Accept ``postgresql://`` (psycopg 3) and plain SQLite paths' URLs."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def is_memory_sqlite(url):
    """True for ``sqlite://`` and ``sqlite:///:memory:``."""
    return url in ("sqlite://", "sqlite:///:memory:")


def _prepare_sqlite_file(path):
    """Create the state directory and database file owner-only (0700/0600)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)


def _sqlite_file(url):
    """``(path, create)`` of a SQLite file URL.

    SQLite's URI filenames (``sqlite:///file:/path/x.db?mode=ro&uri=true``)
    name ``/path/x.db``; only their default mode (rwc) may create the file.
    """
    parsed = sa.engine.make_url(url)
    path = parsed.database
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and path \
            and path.startswith("file:"):
        mode = parsed.query.get("mode", "rwc")
        return urllib.parse.unquote(urllib.parse.urlsplit(path).path), mode == "rwc"
    return path, True


def _install_sqlite_hooks(engine, wal):
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, record):
        dbapi_conn.isolation_level = None   # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        if wal:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        mode = "DEFERRED" if conn.get_execution_options().get("nl_readonly") else "IMMEDIATE"
        conn.exec_driver_sql(f"BEGIN {mode}")


def make_engine(url):
    """An SQLAlchemy engine for ``url`` with nova-lite's settings applied."""
    url = normalize_url(url)
    if url.startswith("sqlite"):
        if is_memory_sqlite(url):
            engine = sa.create_engine(
                "sqlite://", poolclass=StaticPool,
                connect_args={"check_same_thread": False})
            _install_sqlite_hooks(engine, wal=False)
            return engine
        path, create = _sqlite_file(url)
        if not path:
            raise StoreError(f"SQLite URL {url!r} names no file")
        if create:
            _prepare_sqlite_file(path)
        engine = sa.create_engine(
            url, pool_size=4, max_overflow=8,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S})
        _install_sqlite_hooks(engine, wal=True)
        return engine
    return sa.create_engine(url, pool_pre_ping=True, pool_size=4, max_overflow=8)


def is_transient(error):
    """True for errors a retry can cure: lock contention and serialisation.

    ``error`` is SQLAlchemy's wrapper or the DBAPI driver's own exception.
    """
    orig = getattr(error, "orig", error)
    if isinstance(orig, sqlite3.OperationalError):
        text = str(orig).lower()
        return "locked" in text or "busy" in text
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return state in _PG_RETRY_STATES


class Database:
    """Runs transactions with retries and clear errors.

    ``write(op, fn)``/``read(op, fn)`` call ``fn(connection)`` inside one
    transaction; a transient failure is retried up to ``retries`` times
    with jittered back-off, any other database failure becomes a
    :class:`StoreError` naming the operation, the database and the cause.
    Exceptions ``fn`` raises on purpose roll back and propagate unchanged.
    """

    def __init__(self, url, retries=10):
        self.url = normalize_url(url)
        self.redacted_url = redact_url(self.url)
        self.retries = retries
        try:
            self.engine = make_engine(self.url)
        except (OSError, sa_exc.ArgumentError) as exc:
            raise StoreError(f"Cannot open database {self.redacted_url}: {exc}") from exc
        self.dialect = self.engine.dialect.name
        # In-memory SQLite is one shared connection: one transaction at a time.
        self._memory = is_memory_sqlite(self.url)
        self._serialised = threading.RLock() if self._memory else contextlib.nullcontext()
        # ... and write_raw keeps it checked out: a pool checkout and its
        # reset on return cost more than a claim's statements.
        self._pinned = None
        # The driver's own base exception: what write_raw's statements raise.
        self._dbapi_error = self.engine.dialect.loaded_dbapi.Error

    def _run(self, op, fn, readonly, raw=False):
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._serialised:
                    if raw:
                        return self._raw_transaction(fn)
                    with self.engine.connect() as conn:
                        if readonly:
                            conn = conn.execution_options(nl_readonly=True)
                        with conn.begin():
                            return fn(conn)
            except (sa_exc.DBAPIError, self._dbapi_error) as exc:
                if is_transient(exc) and attempt <= self.retries:
                    time.sleep(min(0.5, 0.002 * 2 ** attempt) * random.random())
                    continue
                if is_transient(exc):
                    raise ClaimRaceLost(
                        f"{op} on {self.redacted_url} gave up after {attempt} attempts: "
                        f"{_cause(exc)}") from exc
                raise StoreError(
                    f"{op} failed on {self.redacted_url}: {_cause(exc)}; nothing was "
                    "written") from exc
            except sa_exc.SQLAlchemyError as exc:
                raise StoreError(f"{op} failed on {self.redacted_url}: {exc}") from exc

    def _raw_transaction(self, fn):
        if self._memory:
            if self._pinned is None:
                self._pinned = self.engine.raw_connection()
            return self._raw_in(self._pinned, fn, close=False)
        return self._raw_in(self.engine.raw_connection(), fn, close=True)

    def _raw_in(self, raw, fn, close):
        try:
            cursor = raw.cursor()
            if self.dialect == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            # psycopg opens the transaction itself at the first statement.
            result = fn(cursor)
            raw.commit()
            return result
        except BaseException:
            try:
                raw.rollback()
            except self._dbapi_error:
                raw.invalidate()   # a broken connection must not go back to the pool
                if not close:
                    self._pinned = None
            raise
        finally:
            if close:
                raw.close()

    def write(self, op, fn):
        """Run ``fn(conn)`` in a writing transaction (BEGIN IMMEDIATE on SQLite)."""
        return self._run(op, fn, readonly=False)

    def write_raw(self, op, fn):
        """Run ``fn(cursor)`` in a writing transaction on a plain DBAPI cursor.

        For the few statements on a hot path (a claim), where SQLAlchemy's
        work per statement costs more than the database's: see
        :class:`nova_lite.db.prepared.Prepared`.  Same transaction, retry
        and error rules as :meth:`write`.
        """
        return self._run(op, fn, readonly=False, raw=True)

    def read(self, op, fn):
        """Run ``fn(conn)`` in a read-only transaction."""
        return self._run(op, fn, readonly=True)

    def dispose(self):
        """Close every pooled connection."""
        with self._serialised:
            if self._pinned is not None:
                self._pinned.close()
                self._pinned = None
        self.engine.dispose()


def _cause(exc):
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text[0] if text else ''}"
