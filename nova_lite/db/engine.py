"""Database engines for the store: SQLite (file or memory) and PostgreSQL.

SQLite files run in WAL mode; every writing transaction starts with
``BEGIN IMMEDIATE`` so writers queue for the lock instead of failing half
way.  In-memory SQLite shares one connection behind a lock.  PostgreSQL
URLs use psycopg 3.

Every wait for a lock is bounded by ``busy_timeout`` seconds: SQLite's busy
handler, PostgreSQL's ``lock_timeout``.  A transaction that runs into the
bound fails with :class:`~nova_lite.exception.DatabaseBusy` and writes
nothing.  A read-only database opens SQLite files with ``mode=ro`` and
starts every PostgreSQL transaction ``READ ONLY`` (connected directly, its
sessions also default to read-only transactions, which covers statements
sent in autocommit mode), so a reader never takes the write lock.

PostgreSQL may be reached through a connection pooler (``pooler``, see
:data:`POOLERS`).  With none, ``lock_timeout`` is a setting of each session,
given when it connects, and so are ``client_connection_check_interval``
(:data:`CLIENT_CHECK_MS`: a statement whose client died while it waited
for a lock is ended, not committed) and ``jit = off``: the store's statements are
index lookups and scans whose plans a JIT compilation (tens of
milliseconds, more for a full read) never pays back, and a table whose
statistics lag makes the planner ask for one.  Behind a pooler (PgBouncer
rejects the startup ``options`` that carry them) each transaction sets the
bound with ``SET LOCAL`` instead, and the reads that could be compiled turn
JIT off for their transaction (:func:`session_has_settings` tells them).
Behind a pooler in transaction mode, where consecutive transactions of one
client may run on different server sessions, nothing relies on a session:
psycopg prepares no statement on the server, and the compute service does
not ``LISTEN`` (see :mod:`nova_lite.db.listen`).
Advisory locks are transaction-level everywhere (``pg_advisory_xact_lock``).
"""

import contextlib
import functools
import os
import random
import sqlite3
import threading
import time
import urllib.parse
import uuid
import weakref
from collections.abc import Callable
from typing import Any, ContextManager, TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.pool import StaticPool

from nova_lite.conf import DATABASE_POOLERS, redact_url
from nova_lite.db.direct import DirectConnection, DirectObserver, new_cursor, observers_of
from nova_lite.db.held import HeldConnections
from nova_lite.db.wal_checkpoints import BACKSTOP_PAGES, WalCheckpointer
from nova_lite.exception import ClaimRaceLost, DatabaseBusy, StoreError

#: Default bound (s) on any wait for a database lock.
DEFAULT_BUSY_TIMEOUT_S = 10.0
_PG_RETRY_STATES = {"40001", "40P01"}   # serialization failure, deadlock
_PG_BUSY_STATES = {"55P03"}             # lock_not_available (lock_timeout)
_PG_UNIQUE_VIOLATION = "23505"

#: ``[database] pooler`` values (:data:`nova_lite.conf.DATABASE_POOLERS`).
POOLERS = DATABASE_POOLERS

_T = TypeVar("_T")

#: What a direct transaction is (Database._direct_transaction): a write, a
#: write of one statement alone, a read of one snapshot, a read of
#: statements that each see what committed before they started.
_WRITE, _ALONE, _SNAPSHOT, _EACH = range(4)


#: How a direct read of one snapshot begins on PostgreSQL.
_PG_SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
#: How a direct read of statements alone begins on PostgreSQL where it needs
#: a transaction (behind a pooler).
_PG_READ_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"
#: How a direct write begins on PostgreSQL when its first statements are
#: sent together (psycopg's own BEGIN, in a pipeline, waits for its answer
#: before the statements go: a round trip of its own).
_PG_WRITE_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE"


def normalize_url(url: str) -> str:
    """Accept ``postgresql://`` (psycopg 3) and plain SQLite paths' URLs."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def is_memory_sqlite(url: str) -> bool:
    """True for ``sqlite://`` and ``sqlite:///:memory:``."""
    return url in ("sqlite://", "sqlite:///:memory:")


def sqlite_file_path(url: str) -> tuple[str | None, bool]:
    """``(path, may_create)`` of a SQLite file URL, or ``(None, False)`` for other URLs.

    SQLite's URI filenames (``sqlite:///file:/path/x.db?mode=ro&uri=true``)
    name ``/path/x.db``; only their default mode (rwc) may create the file.
    """
    url = normalize_url(url)
    if not url.startswith("sqlite") or is_memory_sqlite(url):
        return None, False
    parsed = sa.engine.make_url(url)
    path = parsed.database
    if str(parsed.query.get("uri", "")).lower() in ("true", "1") and path \
            and path.startswith("file:"):
        mode = parsed.query.get("mode", "rwc")
        return urllib.parse.unquote(urllib.parse.urlsplit(path).path), mode == "rwc"
    return path, True


def _prepare_sqlite_file(path: str, busy_timeout_s: float,
                         initialise: Callable[[sa.Engine], object] | None) -> bool:
    """Create the state directory (0700) and, if there is none, the database file.

    A new database is built whole under a temporary name beside ``path``
    (owner-only, 0600; ``initialise(engine)`` gives it its schema) and then
    linked into place, which fails if another process got there first: a
    database file never exists half made, so an empty one found later is
    not one of ours.  Returns True if the file was created here.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.path.exists(path):
        return False
    temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.new"
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.close(fd)
    try:
        if initialise is not None:
            engine = sa.create_engine("sqlite:///" + temporary, poolclass=sa.pool.NullPool,
                                      connect_args={"timeout": busy_timeout_s})
            _install_sqlite_hooks(engine, True, busy_timeout_s, readonly=False)
            try:
                initialise(engine)
            finally:
                engine.dispose()   # the last connection checkpoints the WAL
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        for leftover in (temporary, temporary + "-wal", temporary + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _readonly_sqlite_url(path: str) -> str:
    """A URL opening ``path`` read-only; immutable where nothing could write it."""
    quoted = urllib.parse.quote(os.path.abspath(path))
    writable = os.access(path, os.W_OK) and os.access(os.path.dirname(
        os.path.abspath(path)) or ".", os.W_OK)
    # On a read-only file or filesystem SQLite cannot create the WAL index
    # (-shm) a reader needs; "immutable" reads the file as it is.
    flags = "mode=ro" if writable else "mode=ro&immutable=1"
    return f"sqlite:///file:{quoted}?{flags}&uri=true"


def _install_sqlite_hooks(engine: sa.Engine, wal: bool, busy_timeout_s: float,
                          readonly: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.isolation_level = None   # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        if wal and not readonly:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        deferred = readonly or conn.get_execution_options().get("nl_readonly")
        conn.exec_driver_sql("BEGIN DEFERRED" if deferred else "BEGIN IMMEDIATE")


def _backstop_checkpoints(dbapi_conn: Any, record: Any) -> None:
    """A writer's own automatic checkpoint, where a
    :class:`~nova_lite.db.wal_checkpoints.WalCheckpointer` runs them: only
    past :data:`~nova_lite.db.wal_checkpoints.BACKSTOP_PAGES` pages."""
    dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")


def make_engine(url: str, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S, readonly: bool = False,
                initialise: Callable[[sa.Engine], object] | None = None,
                pooler: str = "none") -> tuple[sa.Engine, bool]:
    """An SQLAlchemy engine for ``url`` with nova-lite's settings applied.

    Returns ``(engine, created)``: ``created`` is True when a new SQLite
    file was made for it (given its schema by ``initialise(engine)``
    before anyone else can open it).  ``pooler`` (one of :data:`POOLERS`)
    says what is between nova-lite and a PostgreSQL server; SQLite ignores it.
    """
    url = normalize_url(url)
    if url.startswith("sqlite"):
        if is_memory_sqlite(url):
            engine = sa.create_engine(
                "sqlite://", poolclass=StaticPool,
                connect_args={"check_same_thread": False})
            _install_sqlite_hooks(engine, False, busy_timeout_s, readonly=False)
            return engine, True
        path, may_create = sqlite_file_path(url)
        if not path:
            raise StoreError(f"SQLite URL {url!r} names no file")
        created = False
        if readonly:
            if not os.path.exists(path):
                raise StoreError(f"Database file {path} does not exist (opened read-only: "
                                 "nothing is created)")
            url = _readonly_sqlite_url(path)
        elif may_create:
            created = _prepare_sqlite_file(path, busy_timeout_s, initialise)
        engine = sa.create_engine(
            url, pool_size=4, max_overflow=8,
            connect_args={"check_same_thread": False, "timeout": busy_timeout_s})
        _install_sqlite_hooks(engine, True, busy_timeout_s, readonly)
        return engine, created
    # libpq's "options" of the URL (e.g. a search_path) are kept beside ours.
    parsed = sa.engine.make_url(url)
    connect_args: dict[str, Any] = {}
    options = [str(parsed.query.get("options", "")).strip()]
    if pooler == "none":
        options.append(f"-c lock_timeout={lock_timeout_ms(busy_timeout_s)} -c jit=off "
                       f"-c client_connection_check_interval={CLIENT_CHECK_MS}")
        if readonly:
            # A statement sent in autocommit mode has no BEGIN to say READ
            # ONLY: the session's default says it.
            options.append("-c default_transaction_read_only=on")
    if any(options):
        connect_args["options"] = " ".join(o for o in options if o)
    if pooler == "transaction":
        # A statement psycopg prepared on one server session would be missing
        # on the next transaction's; PgBouncer before 1.21 cannot follow them.
        connect_args["prepare_threshold"] = None
    engine = sa.create_engine(parsed.difference_update_query(["options"]),
                              pool_size=4, max_overflow=8, connect_args=connect_args,
                              execution_options={_SESSION_SETTINGS: pooler == "none"})
    _install_postgresql_hooks(engine, readonly, pooler, busy_timeout_s)
    _ping_idle_connections(engine)
    return engine, False


#: PostgreSQL's ``client_connection_check_interval`` (ms) of a session
#: connected directly: how often a running statement looks for its client.
#: A claim's one statement runs in autocommit mode; if its client dies while
#: the statement waits for a lock, the server ends it (nothing written)
#: within this interval instead of committing it once the lock is free.
CLIENT_CHECK_MS = 1000


#: The execution option of a PostgreSQL engine whose sessions carry the
#: store's settings (no pooler): see :func:`session_has_settings`.
_SESSION_SETTINGS = "nl_session_settings"


def session_has_settings(conn: sa.Connection) -> bool:
    """Whether ``conn``'s PostgreSQL session was started with the store's
    settings (``lock_timeout``, ``jit = off``): True with no pooler between
    nova-lite and the server.  A statement that must not be JIT-compiled
    sets ``jit`` for its transaction only where this is False."""
    return bool(conn.get_execution_options().get(_SESSION_SETTINGS))


def lock_timeout_ms(busy_timeout_s: float) -> int:
    """PostgreSQL's ``lock_timeout`` (ms) for a bound of ``busy_timeout_s`` seconds."""
    return max(1, int(busy_timeout_s * 1000))


def transaction_setup(pooler: str, busy_timeout_s: float) -> str | None:
    """The statement that starts each PostgreSQL transaction behind ``pooler``
    (None: none is needed, the session has its settings).

    Through a pooler the session's settings are not ours: the bound on lock
    waits is set for the transaction alone (``SET LOCAL``), so it reaches no
    other client of the server session and lasts exactly as long as the
    transaction.
    """
    if pooler == "none":
        return None
    return f"SET LOCAL lock_timeout = {lock_timeout_ms(busy_timeout_s)}"


def _install_postgresql_hooks(engine: sa.Engine, readonly: bool, pooler: str,
                              busy_timeout_s: float) -> None:
    if readonly:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, record: Any) -> None:
            # psycopg starts each transaction with BEGIN READ ONLY: a property
            # of the transaction, kept wherever the pooler runs it.
            dbapi_conn.read_only = True

    setup = transaction_setup(pooler, busy_timeout_s)
    if setup is not None:
        statement = sa.text(setup)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: sa.Connection) -> None:
            conn.execute(statement)


#: A pooled PostgreSQL connection idle for longer than this (s) is pinged
#: before use; a busy one is not (a ping is a round trip: about 15% of a claim).
IDLE_PING_S = 30.0


def _ping_idle_connections(engine: sa.Engine) -> None:
    """Check a pooled connection that sat idle, so a restarted server costs no error.

    A connection that died while in use is invalidated by SQLAlchemy when
    its statement fails; one that died while idle in the pool is found here.
    """
    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_conn: Any, record: Any) -> None:
        record.info["nl_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("nl_idle_since")
        if since is None or time.monotonic() - since < IDLE_PING_S:
            return
        try:
            cursor = dbapi_conn.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
            dbapi_conn.rollback()
        except Exception as exc:   # noqa: BLE001 - any failure: take a new connection
            raise sa_exc.DisconnectionError(f"idle connection is gone: {exc}") from exc


def _orig(error: BaseException) -> BaseException:
    return getattr(error, "orig", None) or error


def is_busy(error: BaseException) -> bool:
    """True when a lock wait ran into the busy bound (SQLite busy, PG lock_timeout)."""
    orig = _orig(error)
    if isinstance(orig, sqlite3.OperationalError):
        text = str(orig).lower()
        return "locked" in text or "busy" in text
    return getattr(orig, "sqlstate", None) in _PG_BUSY_STATES


def is_transient(error: BaseException) -> bool:
    """True for errors a retry can cure: serialisation failures and deadlocks."""
    return getattr(_orig(error), "sqlstate", None) in _PG_RETRY_STATES


def is_unique_violation(error: BaseException) -> bool:
    """True for a PostgreSQL unique-key violation, also as a StoreError's cause."""
    if isinstance(error, StoreError):
        error = error.__cause__ or error
    return getattr(_orig(error), "sqlstate", None) == _PG_UNIQUE_VIOLATION


def cause(exc: BaseException) -> str:
    """``"ErrorType: first line"`` of a database error, for messages."""
    orig = _orig(exc)
    text = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {text[0] if text else ''}"


class Database:
    """Runs transactions with bounded waits and clear errors.

    ``write(op, fn)``/``read(op, fn)`` call ``fn(connection)`` inside one
    transaction.  A serialisation failure or deadlock (PostgreSQL) is
    retried up to ``retries`` times with jittered back-off; a lock wait
    longer than ``busy_timeout_s`` seconds raises
    :class:`~nova_lite.exception.DatabaseBusy`; any other database failure
    becomes a :class:`StoreError` naming the operation, the database and
    the cause.  Exceptions ``fn`` raises on purpose roll back and propagate
    unchanged.  With ``readonly`` every transaction is read-only and
    :meth:`write` is refused.  ``initialise(engine)`` gives a SQLite file
    created here its schema before it is published (see make_engine).
    ``pooler`` (one of :data:`POOLERS`) says what is between nova-lite and
    a PostgreSQL server.
    """

    def __init__(self, url: str, retries: int = 10, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
                 readonly: bool = False,
                 initialise: Callable[[sa.Engine], object] | None = None,
                 pooler: str = "none") -> None:
        if pooler not in POOLERS:
            raise StoreError(f"Unknown database pooler {pooler!r}: use one of "
                             f"{', '.join(POOLERS)}")
        self.url = normalize_url(url)
        self.redacted_url = redact_url(self.url)
        self.retries = retries
        self.busy_timeout_s = busy_timeout_s
        self.readonly = readonly
        #: What is between nova-lite and the server (one of :data:`POOLERS`).
        self.pooler = pooler
        try:
            self.engine, self.created = make_engine(self.url, busy_timeout_s, readonly,
                                                    initialise, pooler)
        except (OSError, sa_exc.ArgumentError) as exc:
            raise StoreError(f"Cannot open database {self.redacted_url}: {exc}") from exc
        self.dialect = self.engine.dialect.name
        # In-memory SQLite is one shared connection: one transaction at a time.
        self.memory = is_memory_sqlite(self.url)
        self._serialised: ContextManager[Any] = (
            threading.RLock() if self.memory else contextlib.nullcontext())
        self._dbapi_error = self.engine.dialect.loaded_dbapi.Error
        self._setup = (transaction_setup(pooler, busy_timeout_s)
                       if self.dialect == "postgresql" else None)
        self._held = HeldConnections(self.engine, lambda: IDLE_PING_S)
        #: The thread that checkpoints a writable SQLite file's log
        #: (:mod:`nova_lite.db.wal_checkpoints`); None for other databases.
        self.checkpointer: WalCheckpointer | None = None
        path, _ = sqlite_file_path(self.url)
        if path and not readonly:
            self.checkpointer = WalCheckpointer(path)
            event.listen(self.engine, "connect", _backstop_checkpoints)
            # A Database dropped without dispose() still ends its thread.
            weakref.finalize(self, self.checkpointer.stop)

    def _run(self, op: str, fn: Callable[[sa.Connection], _T], readonly: bool,
             snapshot: bool = False, each_alone: bool = False) -> _T:
        def transaction() -> _T:
            with self._serialised, self.engine.connect() as conn:
                if readonly:
                    conn = conn.execution_options(nl_readonly=True)
                if snapshot and self.dialect == "postgresql":
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                elif each_alone and self.dialect == "postgresql" and self._setup is None:
                    conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                with conn.begin():
                    return fn(conn)
        return self._retrying(op, transaction)

    def _retrying(self, op: str, transaction: Callable[[], _T]) -> _T:
        """``transaction()``, retried on a transient error; database errors explained."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return transaction()
            except (sa_exc.DBAPIError, self._dbapi_error) as exc:
                if is_busy(exc):
                    raise DatabaseBusy(
                        f"{op}: database busy: {self.redacted_url} stayed locked by another "
                        f"writer for more than {self.busy_timeout_s:g} s; nothing was "
                        "written") from exc
                if is_transient(exc) and attempt <= self.retries:
                    time.sleep(min(0.5, 0.002 * 2 ** attempt) * random.random())
                    continue
                if is_transient(exc):
                    raise ClaimRaceLost(
                        f"{op} on {self.redacted_url} gave up after {attempt} attempts: "
                        f"{cause(exc)}") from exc
                raise StoreError(
                    f"{op} failed on {self.redacted_url}: {cause(exc)}; nothing was "
                    "written") from exc
            except sa_exc.SQLAlchemyError as exc:
                raise StoreError(f"{op} failed on {self.redacted_url}: {exc}") from exc

    def write(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """Run ``fn(conn)`` in a writing transaction (BEGIN IMMEDIATE on SQLite)."""
        if self.readonly:
            raise StoreError(f"{op}: the database {self.redacted_url} is open read-only")
        result = self._run(op, fn, readonly=False)
        if self.checkpointer is not None:
            self.checkpointer.committed()
        return result

    def write_direct(self, op: str, fn: Callable[[DirectConnection], _T]) -> _T:
        """:meth:`write` with ``fn`` given a :class:`~nova_lite.db.direct.DirectConnection`.

        The same transaction, bounds, retries and errors as :meth:`write`,
        without SQLAlchemy's Connection in between (see
        :mod:`nova_lite.db.direct` for where that is worth it), on a
        connection held off the pool (:mod:`nova_lite.db.held`).
        """
        if self.readonly:
            raise StoreError(f"{op}: the database {self.redacted_url} is open read-only")
        return self._retrying(op, lambda: self._direct_transaction(fn, _WRITE))

    def write_alone(self, op: str, fn: Callable[[DirectConnection], _T]) -> _T:
        """:meth:`write_direct` for an ``fn`` that runs exactly one statement.

        On PostgreSQL the statement is sent in autocommit mode: it is its own
        transaction, one round trip instead of three (BEGIN, the statement,
        COMMIT), and it commits or not as a whole.  Behind a pooler
        (``[database] pooler``) it runs in a transaction as :meth:`write`
        does, so its lock bound (``SET LOCAL lock_timeout``) holds.  The one
        difference a caller may see: a statement whose answer is lost with
        the connection may have committed, as a transaction whose COMMIT's
        answer is lost may have.  For a heartbeat that is harmless; a
        claim runs this way only as a statement that writes the claim whole
        or nothing (``claim_writes.PG_SINGLE_CLAIM``).
        """
        if self.readonly:
            raise StoreError(f"{op}: the database {self.redacted_url} is open read-only")
        return self._retrying(op, lambda: self._direct_transaction(fn, _ALONE))

    def read_direct(self, op: str, fn: Callable[[DirectConnection], _T]) -> _T:
        """:meth:`read_snapshot` with ``fn`` given a
        :class:`~nova_lite.db.direct.DirectConnection` (as :meth:`write_direct`).

        One read-only transaction whose statements all see one snapshot:
        ``REPEATABLE READ READ ONLY`` on PostgreSQL, a deferred transaction
        on SQLite.  Statements ``fn`` sends together
        (:meth:`~nova_lite.db.direct.DirectConnection.execute_together`)
        reach PostgreSQL in one round trip with the BEGIN, and with the
        COMMIT too when ``fn`` says they are its last (``ending=True``):
        a read of one such batch is one round trip.
        """
        return self._retrying(op, lambda: self._direct_transaction(fn, _SNAPSHOT))

    def read_each_direct(self, op: str, fn: Callable[[DirectConnection], _T]) -> _T:
        """:meth:`read_each` with ``fn`` given a
        :class:`~nova_lite.db.direct.DirectConnection` (as :meth:`read_direct`).

        On PostgreSQL each statement is sent in autocommit mode, one round
        trip (read-only on a read-only store, as :meth:`read_each` says);
        behind a pooler the statements run in a ``READ COMMITTED READ ONLY``
        transaction whose BEGIN and COMMIT travel with them as
        :meth:`read_direct`'s do.  A deferred transaction on SQLite.
        """
        return self._retrying(op, lambda: self._direct_transaction(fn, _EACH))

    def _direct_transaction(self, fn: Callable[[DirectConnection], _T], mode: int) -> _T:
        if self.memory:
            return self._pooled_direct_transaction(fn, mode)
        if self.dialect == "sqlite":
            return self._sqlite_direct_transaction(fn, mode)
        proxy, dbapi = self._held.take()
        # A write keeps its connection's cursor (see nova_lite.db.held); a
        # read's last result may be large, and psycopg's cursor would hold
        # it until the connection's next statement, so it is closed.
        keep = mode in (_WRITE, _ALONE)
        try:
            cursor = self._held.cursor(proxy, lambda: new_cursor(dbapi, self.engine.dialect)) \
                if keep else new_cursor(dbapi, self.engine.dialect)
        except BaseException:
            self._held.discard(proxy)
            raise
        observers = observers_of(self.engine)
        alone = False
        opening: tuple[str, ...] = ()
        closing = None
        begin_explicitly: Callable[[], None] | None = None
        try:
            for observer in observers:
                observer.direct_begin()
            if mode == _EACH and self._setup is None:
                alone = autocommit = True
            elif mode in (_SNAPSHOT, _EACH):
                # BEGIN and COMMIT are ours, sent in the round trips of the
                # statements (see DirectConnection): a read whose answer is
                # lost wrote nothing, so it may end in the round trip of its
                # statements.
                autocommit = True
                opening = (_PG_SNAPSHOT_BEGIN if mode == _SNAPSHOT else _PG_READ_BEGIN,) + (
                    (self._setup,) if self._setup else ())
                closing = "COMMIT"
            elif mode == _ALONE and self._setup is None:
                alone = autocommit = True
            else:
                # psycopg begins before a statement sent alone first (the same
                # round trip as a BEGIN of ours, and cheaper); statements sent
                # together first go with a BEGIN of ours, in autocommit mode
                # (psycopg's own, in a pipeline, waits for its answer first).
                autocommit = False
                opening = (_PG_WRITE_BEGIN,) + ((self._setup,) if self._setup else ())
                begin_explicitly = functools.partial(setattr, dbapi, "autocommit", True)
            # A held connection keeps the mode its last transaction left it
            # in: it is changed only when this one needs the other (psycopg's
            # setter is several microseconds, and claims in a row need none).
            if dbapi.autocommit is not autocommit:
                dbapi.autocommit = autocommit
            conn = DirectConnection(cursor, self.engine.dialect, observers, opening, closing,
                                    begin_explicitly)
            result = fn(conn)
            for observer in observers:
                observer.direct_ending(dbapi, alone)
            if closing is not None:
                conn.finish()
            elif not alone:
                # By the server's transaction state, in autocommit mode or
                # not: no round trip if nothing began.
                dbapi.commit()
        except BaseException as exc:
            if keep:
                self._held.drop_cursor(proxy)
            else:
                cursor.close()
            if self._rolled_back(dbapi, cursor, exc):
                self._held.give_back(proxy, dbapi)
            else:
                self._held.discard(proxy)
            raise
        if not keep:
            cursor.close()
        self._held.give_back(proxy, dbapi)
        return result

    def _sqlite_direct_transaction(self, fn: Callable[[DirectConnection], _T],
                                   mode: int) -> _T:
        # A SQLite file: no round trip to save and no autocommit mode to
        # restore, so none of the PostgreSQL steps of _direct_transaction.
        proxy, dbapi = self._held.take()
        try:
            cursor = dbapi.cursor()
        except BaseException:
            self._held.discard(proxy)
            raise
        try:
            result = self._sqlite_statements(dbapi, cursor, fn, mode, observers_of(self.engine))
        except BaseException as exc:
            cursor.close()
            if self._rolled_back(dbapi, cursor, exc):
                self._held.give_back(proxy, dbapi)
            else:
                self._held.discard(proxy)
            raise
        cursor.close()
        self._held.give_back(proxy, dbapi)
        if mode in (_WRITE, _ALONE) and self.checkpointer is not None:
            self.checkpointer.committed()
        return result

    def _sqlite_statements(self, dbapi: Any, cursor: Any,
                           fn: Callable[[DirectConnection], _T], mode: int,
                           observers: tuple[DirectObserver, ...]) -> _T:
        """A SQLite direct transaction on ``cursor`` of ``dbapi``: BEGIN (IMMEDIATE
        to write, DEFERRED to read), ``fn``'s statements, COMMIT."""
        for observer in observers:
            observer.direct_begin()
        cursor.execute("BEGIN DEFERRED" if mode in (_SNAPSHOT, _EACH) else "BEGIN IMMEDIATE")
        result = fn(DirectConnection(cursor, self.engine.dialect, observers))
        for observer in observers:
            observer.direct_ending(dbapi, False)
        dbapi.commit()
        return result

    def _pooled_direct_transaction(self, fn: Callable[[DirectConnection], _T], mode: int) -> _T:
        # In-memory SQLite: the one shared connection, one transaction at a time.
        with self._serialised:
            pooled = self.engine.raw_connection()
            observers = observers_of(self.engine)
            try:
                cursor = pooled.cursor()
                try:
                    return self._sqlite_statements(pooled.dbapi_connection, cursor, fn, mode,
                                                   observers)
                except BaseException as exc:
                    self._abandon(pooled, cursor, exc)
                    raise
                finally:
                    cursor.close()
            finally:
                pooled.close()

    def _rolled_back(self, dbapi: Any, cursor: Any, exc: BaseException) -> bool:
        """Roll ``dbapi``'s transaction back after ``exc``; False if the
        connection is lost (or cannot roll back): it is not to be used again."""
        if isinstance(exc, self._dbapi_error) and self.engine.dialect.is_disconnect(
                exc, dbapi, cursor):
            return False
        try:
            dbapi.rollback()
        except self._dbapi_error:
            return False
        return True

    def read(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """Run ``fn(conn)`` in a read-only transaction."""
        return self._run(op, fn, readonly=True)

    def read_each(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """:meth:`read` for an ``fn`` whose statements need no snapshot in common.

        Each statement sees what had committed when it started, as in
        :meth:`read` (PostgreSQL's READ COMMITTED); on PostgreSQL each is sent
        in autocommit mode, its own transaction: one round trip where a
        transaction costs three (BEGIN, the statement, COMMIT).  For readers
        that ask again, next time, whatever changed while they read (the
        change readers of :mod:`nova_lite.db.node_changes`).  Behind a pooler
        (its ``SET LOCAL`` needs a transaction) it is :meth:`read`.  On a
        store opened read-only each statement is still read-only: the
        session's default (``default_transaction_read_only``) says so where
        no ``BEGIN READ ONLY`` does.
        """
        return self._run(op, fn, readonly=True, each_alone=True)

    def read_snapshot(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """:meth:`read`, with every statement of ``fn`` seeing one snapshot.

        REPEATABLE READ on PostgreSQL (a read-only transaction there never
        fails to serialise); on SQLite one deferred transaction already
        reads one snapshot of the write-ahead log.
        """
        return self._run(op, fn, readonly=True, snapshot=True)

    def _abandon(self, pooled: Any, cursor: Any, exc: BaseException) -> None:
        """Roll back after ``exc``; a connection that is gone (or cannot roll
        back) leaves the pool, and ``exc`` stays the error reported."""
        try:
            if isinstance(exc, self._dbapi_error) and self.engine.dialect.is_disconnect(
                    exc, pooled.dbapi_connection, cursor):
                pooled.invalidate(exc)
            else:
                pooled.rollback()
        except self._dbapi_error:
            pooled.invalidate(exc)

    def dispose(self) -> None:
        """Close every pooled connection, and those held for direct
        transactions; end the checkpoints' thread."""
        if self.checkpointer is not None:
            self.checkpointer.stop()
        self._held.close()
        self.engine.dispose()
