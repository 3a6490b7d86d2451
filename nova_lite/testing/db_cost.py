"""Count what a piece of code costs the database: transactions, statements, rows written.

:class:`DatabaseCost` listens to a SQLAlchemy engine's events while it is
open (a context manager): every statement run on the DBAPI cursor
(``before_cursor_execute``, ``after_cursor_execute``) and every transaction
(``begin``, ``commit``)::

    from nova_lite.testing.db_cost import DatabaseCost

    with DatabaseCost(store.db.engine) as cost:
        service.run_once()
    print(len(cost.transactions), cost.statements, cost.rows_written)

SQLite's ``BEGIN`` (issued on the cursor by the engine's own begin hook)
starts a transaction and is not counted as one of its statements.  On
PostgreSQL each transaction's id is read at its commit
(``txid_current_if_assigned()``, on the transaction's own DBAPI
connection, outside SQLAlchemy's events, so not counted): None for a
transaction that never wrote or locked a row, and so wrote no WAL record of
its own and waited for no flush at its commit; for a statement sent alone in
autocommit mode (``Database.write_alone``: the heartbeat), which has
committed before its id could be read, ``AUTOCOMMIT_WRITE`` if it writes,
else None.

Transactions run straight on a DBAPI connection held off the pool
(``Database.write_direct``: the claims; ``read_direct``: a service's pass
read; ``write_alone``: the heartbeat) are not seen by SQLAlchemy's events;
they are counted the same way, as a
:class:`nova_lite.db.direct.DirectObserver`.  Rows written are the cursor's
``rowcount`` after each INSERT, UPDATE and DELETE; SQLite gives no count
for a statement with RETURNING before its rows are fetched, which a
Connection's statement is counted before, so those count 0 there (a direct
statement's rows are fetched first).
"""

from typing import Any

import attrs
import sqlalchemy as sa

from nova_lite.db import direct

_WRITES = ("INSERT", "UPDATE", "DELETE")
#: The ``xid`` of a writing statement sent in autocommit mode (PostgreSQL):
#: it had a transaction id, committed before it could be read.
AUTOCOMMIT_WRITE = "assigned (autocommit)"


@attrs.define
class Transaction:
    """One transaction: its ``statements`` (SQL text, BEGIN aside), the rows its
    INSERT, UPDATE and DELETE statements changed (``rows_written``) and, on
    PostgreSQL, its transaction id at commit (``xid``, None: never assigned;
    on SQLite always None; "not committed" until it commits)."""

    statements: list[str] = attrs.field(factory=list)
    rows_written: int = 0
    xid: object = "not committed"

    @property
    def writes(self) -> list[str]:
        """Its INSERT, UPDATE and DELETE statements."""
        return [s for s in self.statements if s.lstrip().upper().startswith(_WRITES)]


class DatabaseCost:
    """The transactions run on ``engine`` while this context is open (see the
    module's docstring).

    :param engine: the store's engine (``store.db.engine``).
    """

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.postgresql = engine.dialect.name == "postgresql"
        #: The transactions seen, in order.
        self.transactions: list[Transaction] = []
        self._listeners = (("begin", self._begin),
                           ("before_cursor_execute", self._statement),
                           ("after_cursor_execute", self._done),
                           ("commit", self._commit))

    def __enter__(self) -> "DatabaseCost":
        for name, fn in self._listeners:
            sa.event.listen(self.engine, name, fn)
        direct.observe(self.engine, self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, fn in self._listeners:
            sa.event.remove(self.engine, name, fn)
        direct.unobserve(self.engine, self)

    # -- the figures -----------------------------------------------------------
    @property
    def statements(self) -> int:
        """How many statements ran (BEGIN aside)."""
        return sum(len(t.statements) for t in self.transactions)

    @property
    def rows_written(self) -> int:
        """How many rows the INSERT, UPDATE and DELETE statements changed."""
        return sum(t.rows_written for t in self.transactions)

    @property
    def xids(self) -> int:
        """How many transactions were given a transaction id (PostgreSQL)."""
        return sum(1 for t in self.transactions if t.xid not in (None, "not committed"))

    # -- the events --------------------------------------------------------------
    def _begin(self, conn: sa.Connection) -> None:
        if self.postgresql:   # the driver's BEGIN is implicit there
            self.transactions.append(Transaction())

    def _statement(self, conn: sa.Connection, cursor: Any, text: str, *args: Any) -> None:
        if text.lstrip().upper().startswith("BEGIN"):
            self.transactions.append(Transaction())
            return
        if not self.transactions:
            self.transactions.append(Transaction())
        self.transactions[-1].statements.append(text)

    def _done(self, conn: Any, cursor: Any, text: str, *args: Any) -> None:
        if self.transactions and text.lstrip().upper().startswith(_WRITES) and \
                cursor.rowcount and cursor.rowcount > 0:
            self.transactions[-1].rows_written += cursor.rowcount

    def _commit(self, conn: sa.Connection) -> None:
        dbapi: Any = conn.connection.dbapi_connection
        self._ending(dbapi, bool(getattr(dbapi, "autocommit", False)))

    # -- the direct transactions (nova_lite.db.direct.DirectObserver) -------------
    def direct_begin(self) -> None:
        self.transactions.append(Transaction())

    def direct_statement(self, sql: str) -> None:
        if not self.transactions:
            self.transactions.append(Transaction())
        self.transactions[-1].statements.append(sql)

    def direct_done(self, sql: str, cursor: Any) -> None:
        self._done(None, cursor, sql)

    def direct_ending(self, dbapi_connection: Any, autocommit: bool) -> None:
        self._ending(dbapi_connection, autocommit)

    def _ending(self, dbapi: Any, autocommit: bool) -> None:
        if not self.transactions:
            return
        xid = None
        if self.postgresql and autocommit:
            # A statement sent in autocommit mode was its own transaction and
            # has committed: its id cannot be read now.  One that writes gets
            # one, so that is what it is counted as.
            xid = AUTOCOMMIT_WRITE if self.transactions[-1].writes else None
        elif self.postgresql:
            cursor = dbapi.cursor()
            try:
                cursor.execute("SELECT txid_current_if_assigned()")
                row = cursor.fetchone()
                xid = None if row is None else row[0]
            finally:
                cursor.close()
        self.transactions[-1].xid = xid


def wal_position(engine: sa.Engine) -> int | None:
    """The server's WAL insert position in bytes (PostgreSQL), else None.

    Server-wide: every writer of the server moves it.  Read in a transaction
    of its own that writes nothing.
    """
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")).scalar_one())


__all__ = ["DatabaseCost", "Transaction", "wal_position"]
