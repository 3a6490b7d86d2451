"""The DBAPI connections that direct transactions (the claims) run on, held off the pool.

SQLAlchemy's pool checks a connection out and back in around every
transaction: its events, its bookkeeping and a ROLLBACK on return.  On a
claim that is about 20 us, a tenth of a SQLite claim's time, spent on a
connection whose transaction has just committed.  The direct transactions
instead take a connection from a short stack held here (LIFO, so the
connections in use stay few and warm) and put it back after COMMIT.

The connections are made by the engine's pool (its "connect" hooks set
them up as any other: SQLite's pragmas, PostgreSQL's options) and then
detached from it, so they do not count against its size.  A connection
idle for longer than ``engine.IDLE_PING_S`` is pinged before use (a server
restart costs no claim); one whose transaction failed on a lost connection
is closed, never put back.  After the engine's ``dispose()`` (a new pool),
no connection made before it is used again.

A PostgreSQL connection is put back in the autocommit mode its
transaction left it in; the next transaction on it changes the mode only
if it needs the other (see ``Database._direct_transaction``), so claims
sent alone, one after another, change none.

On PostgreSQL each connection keeps the cursor its writing direct
transactions run on (:meth:`HeldConnections.cursor`): making one was
about a twentieth of the instructions of a claim's client (psycopg copies
the connection's adapters into every new cursor).  A write that fails
drops it with :meth:`HeldConnections.drop_cursor`, so a cursor that saw an
error is never used again.  A read makes and closes its own, as
psycopg's cursor holds its last result until its next statement.
"""

import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

#: The most connections kept when none is in use; more are made while more
#: transactions run at once, and closed when they end.
MOST_HELD = 8
#: The key of a connection's kept cursor in its pool proxy's ``info``.
_CURSOR = "nl_cursor"


class HeldConnections:
    """A stack of DBAPI connections for direct transactions (see the module's docstring).

    :param engine: the engine whose pool makes the connections.
    :param idle_ping_s: the idle time (s) after which a connection is pinged
        before use; called on each take, so a change to the setting applies
        at once.
    """

    def __init__(self, engine: sa.Engine, idle_ping_s: Callable[[], float]) -> None:
        self._engine = engine
        self._idle_ping_s = idle_ping_s
        self._postgresql = engine.dialect.name == "postgresql"
        #: (pool proxy, DBAPI connection, monotonic time put back), most recent last.
        self._held: list[tuple[Any, Any, float]] = []
        self._lock = threading.Lock()
        #: The engine's pool the held connections came from.
        self._pool = engine.pool

    def take(self) -> tuple[Any, Any]:
        """A connection to run one transaction on: ``(proxy, dbapi_connection)``.

        Give it back with :meth:`give_back` after its COMMIT, or
        :meth:`discard` it.
        """
        if self._engine.pool is not self._pool:
            self.close()   # the engine was disposed of: its connections with it
        while True:
            with self._lock:
                entry = self._held.pop() if self._held else None
            if entry is None:
                pool = self._engine.pool
                proxy = self._engine.raw_connection()
                proxy.detach()
                proxy.info["nl_pool"] = pool
                return proxy, proxy.dbapi_connection
            proxy, dbapi, since = entry
            if not self._postgresql or time.monotonic() - since < self._idle_ping_s():
                return proxy, dbapi
            if self._alive(dbapi):
                return proxy, dbapi
            self.discard(proxy)

    def give_back(self, proxy: Any, dbapi: Any) -> None:
        """Keep ``dbapi`` (outside any transaction) for the next :meth:`take`."""
        with self._lock:
            if len(self._held) < MOST_HELD and proxy.info.get("nl_pool") is self._pool:
                self._held.append((proxy, dbapi, time.monotonic()))
                return
        self.discard(proxy)

    @staticmethod
    def cursor(proxy: Any, make: Callable[[], Any]) -> Any:
        """The cursor kept with ``proxy``'s connection, made by ``make()`` for
        its first write; it lives as long as the connection, or until
        :meth:`drop_cursor`."""
        cursor = proxy.info.get(_CURSOR)
        if cursor is None:
            cursor = proxy.info[_CURSOR] = make()
        return cursor

    @staticmethod
    def drop_cursor(proxy: Any) -> None:
        """Close the cursor kept with ``proxy``'s connection, if any (a
        write on it failed); the next write makes another."""
        cursor = proxy.info.pop(_CURSOR, None)
        if cursor is not None:
            try:
                cursor.close()
            except Exception:   # noqa: BLE001 - a lost connection may fail to close it
                pass

    @staticmethod
    def discard(proxy: Any) -> None:
        """Close a connection that is lost or not wanted (errors closing it are moot)."""
        try:
            proxy.close()
        except Exception:   # noqa: BLE001 - a lost connection may fail to close
            pass

    def close(self) -> None:
        """Close every connection held (those in use are closed when given back
        to a full stack, or kept for the next use)."""
        with self._lock:
            held, self._held = self._held, []
            self._pool = self._engine.pool
        for proxy, _, _ in held:
            self.discard(proxy)

    @staticmethod
    def _alive(dbapi: Any) -> bool:
        try:
            cursor = dbapi.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
            dbapi.rollback()
            return True
        except Exception:   # noqa: BLE001 - any failure: take another connection
            return False


__all__ = ["HeldConnections", "MOST_HELD"]
