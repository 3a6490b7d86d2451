"""SQLAlchemy Core statements run straight on a DBAPI cursor: the claim's path.

Every statement of the store is written with SQLAlchemy Core.  Most run
through SQLAlchemy's Connection; the claim's transaction runs them here
instead: each statement is compiled once per dialect and executed on the
driver's own cursor, with no result processing.  The claim is the one
path whose rate is a product goal, so it is the one path that skips that
layer (measured figures: doc/source/benchmarks.rst).

Values must be plain DBAPI types (str, int, float, None) and results come
back as the driver returns them (SQLite booleans as 0/1, PostgreSQL sums as
Decimal): the callers convert what they read.

On PostgreSQL the statements are compiled with PostgreSQL's own numbered
parameters (``$1``) and run on psycopg's ``RawCursor`` (psycopg 3.2 and
later; with an older psycopg, its plain cursor and named parameters),
which sends them as they are: psycopg's cursor would otherwise parse each
statement for its named parameters and reorder them on every run (a few
microseconds for a claim's forty), and keeps that parsed form only for
statements of up to 4 kB.

SQLAlchemy's engine events do not see these statements.  A
:class:`DirectObserver` registered with :func:`observe` does (this is how
:class:`nova_lite.testing.db_cost.DatabaseCost` counts them); with none
registered for an engine, a transaction pays one dictionary lookup.
"""

import collections
import copy
import operator
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPICursor, Dialect
from sqlalchemy.sql.compiler import SQLCompiler

#: ``{column: value}`` of one statement's parameters (plain DBAPI types).
Values = Mapping[str, Any]


#: The row type of a statement that returns no rows.
_NO_ROWS = object()


class _Compiled:
    """One statement compiled for one dialect: its SQL, how to order its
    parameters, its default values, and a row type once its columns are seen
    (:data:`_NO_ROWS` if it has none)."""

    __slots__ = ("sql", "order", "defaults", "row_type", "_ordered")

    def __init__(self, statement: sa.ClauseElement, dialect: Dialect) -> None:
        # DML and SELECT statements: their compiler is a SQLCompiler, whose
        # positiontup is a list whenever it is positional.
        done = cast(SQLCompiler, statement.compile(dialect=_compiling_dialect(dialect)))
        self.sql: str = done.string
        self.order: tuple[str, ...] | None = \
            tuple(done.positiontup) if done.positional else None  # type: ignore[arg-type]
        self.defaults: dict[str, Any] = {k: v for k, v in done.params.items() if v is not None}
        #: a namedtuple class, :data:`_NO_ROWS`, or None until the first result.
        self.row_type: Any = None
        self._ordered = None if self.order is None else _in_order(self.order)

    def parameters(self, values: Values) -> Values | tuple[Any, ...]:
        if self.defaults:
            values = {**self.defaults, **values}
        if self._ordered is None:
            return values
        return self._ordered(values)


def _in_order(order: tuple[str, ...]) -> Callable[[Values], tuple[Any, ...]]:
    """A function giving a statement's values as the tuple of ``order``'s names."""
    if len(order) > 1:
        return operator.itemgetter(*order)   # a tuple, built in C
    return lambda values: tuple(values[name] for name in order)


#: ``{dialect: the dialect statements are compiled with}`` (see :func:`_compiling_dialect`).
_COMPILING: "weakref.WeakKeyDictionary[Dialect, Dialect]" = weakref.WeakKeyDictionary()


def _raw_cursor(dialect: Dialect) -> Any:
    """psycopg's ``RawCursor`` class if ``dialect`` is psycopg's and has one
    (psycopg 3.2 and later), else None."""
    if dialect.driver != "psycopg":
        return None
    import psycopg   # the driver of the dialect's connections: loaded already
    return getattr(psycopg, "RawCursor", None)


def _compiling_dialect(dialect: Dialect) -> Dialect:
    """The dialect the direct statements are compiled with: for psycopg with
    a ``RawCursor``, ``dialect`` with PostgreSQL's numbered parameters
    (``$1``, each name once however often the statement uses it), which
    that cursor sends as they are (see :func:`new_cursor`); else
    ``dialect`` itself."""
    if _raw_cursor(dialect) is None:
        return dialect
    found = _COMPILING.get(dialect)
    if found is None:
        found = copy.copy(dialect)
        found.paramstyle = "numeric_dollar"
        found.positional = True
        found.identifier_preparer = found.preparer(found)
        _COMPILING[dialect] = found
    return found


def new_cursor(dbapi_connection: Any, dialect: Dialect) -> DBAPICursor:
    """A cursor of ``dbapi_connection`` for direct statements: psycopg's
    ``RawCursor`` where it has one (the statements are then compiled for
    it with numbered parameters), else the driver's own."""
    raw = _raw_cursor(dialect)
    if raw is not None:
        return cast(DBAPICursor, raw(dbapi_connection))
    return cast(DBAPICursor, dbapi_connection.cursor())


class DirectObserver(Protocol):
    """What sees the direct transactions of an engine (see :func:`observe`)."""

    def direct_begin(self) -> None:
        """A direct transaction starts (or a statement sent alone, autocommit)."""

    def direct_statement(self, sql: str) -> None:
        """``sql`` is about to run in the current direct transaction."""

    def direct_done(self, sql: str, cursor: Any) -> None:
        """``sql`` ran; ``cursor`` holds its ``rowcount``."""

    def direct_ending(self, dbapi_connection: Any, autocommit: bool) -> None:
        """The transaction is about to commit on ``dbapi_connection`` (still
        open unless ``autocommit``: the statement was its own transaction)."""


_OBSERVERS: "weakref.WeakKeyDictionary[sa.Engine, tuple[DirectObserver, ...]]" = \
    weakref.WeakKeyDictionary()


def observe(engine: sa.Engine, observer: DirectObserver) -> None:
    """Have ``observer`` see every direct transaction run on ``engine`` from now on."""
    _OBSERVERS[engine] = (*_OBSERVERS.get(engine, ()), observer)


def unobserve(engine: sa.Engine, observer: DirectObserver) -> None:
    """Stop ``observer`` seeing ``engine``'s direct transactions."""
    kept = tuple(o for o in _OBSERVERS.get(engine, ()) if o is not observer)
    if kept:
        _OBSERVERS[engine] = kept
    else:
        _OBSERVERS.pop(engine, None)


def observers_of(engine: sa.Engine) -> tuple[DirectObserver, ...]:
    """The observers of ``engine``'s direct transactions (usually none)."""
    return _OBSERVERS.get(engine, ())


class DirectResult:
    """The rows of one statement, fetched at once; named like SQLAlchemy's Result."""

    __slots__ = ("rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows   # namedtuples named after the statement's columns
        self.rowcount = rowcount

    def first(self) -> Any:
        return self.rows[0] if self.rows else None

    def all(self) -> list[Any]:
        return self.rows

    def one(self) -> Any:
        if len(self.rows) != 1:
            raise sa.exc.NoResultFound(f"expected one row, got {len(self.rows)}")
        return self.rows[0]

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)


class DirectConnection:
    """A transaction's DBAPI cursor with a Core-statement ``execute``.

    ``dialect``: the engine's dialect (statements compile for it, and
    callers branch on ``dialect.name`` as they do with a Connection).
    ``observers``: what sees each statement (:func:`observers_of`).
    ``opening``: statements that begin the transaction (a connection in
    autocommit mode), sent in the round trip of its first statement;
    ``closing``: the one that ends it (COMMIT), sent by
    :meth:`execute_together` with ``ending`` in the round trip of its
    statements, else by :meth:`finish`.  ``begin_explicitly``, if given:
    the connection is out of autocommit mode and the driver begins the
    transaction by itself before a statement sent alone (the same round trip
    as a BEGIN of ours, and less of the client's time), so only the opening
    statements after the first (the BEGIN) are sent then; when the first
    statements are sent together it is called first (it puts the connection
    in autocommit mode: the driver's own BEGIN there would wait for its
    answer before the statements go) and the whole opening goes with them.
    """

    _compiled: dict[tuple[int, str], tuple[Any, _Compiled]] = {}

    def __init__(self, cursor: DBAPICursor, dialect: Dialect,
                 observers: tuple[DirectObserver, ...] = (),
                 opening: Sequence[str] = (), closing: str | None = None,
                 begin_explicitly: Callable[[], None] | None = None) -> None:
        self.cursor = cursor
        self.dialect = dialect
        self.observers = observers
        self.opening = opening
        self.closing = closing
        self.begin_explicitly = begin_explicitly
        #: Whether ``begin_explicitly`` was called.
        self.began_explicitly = False

    def _open(self, cursor: DBAPICursor) -> None:
        """Begin the transaction, if it is still to begin: send the opening
        statements, or let the driver send the BEGIN (see the class)."""
        opening, self.opening = self.opening, ()
        if self.begin_explicitly is not None and not self.began_explicitly:
            opening = opening[1:]
        for sql in opening:
            cursor.execute(sql)

    def finish(self) -> None:
        """End the transaction with the closing statement, unless it was sent
        already or nothing began it."""
        if self.opening:
            return   # no statement ran: nothing began
        closing, self.closing = self.closing, None
        if closing is not None:
            self.cursor.execute(closing)

    def _run(self, cursor: DBAPICursor, compiled: _Compiled, values: Values) -> None:
        """``cursor.execute`` of ``compiled`` with ``values``, seen by the observers."""
        for observer in self.observers:
            observer.direct_statement(compiled.sql)
        cursor.execute(compiled.sql, compiled.parameters(values))

    def _compile(self, statement: sa.ClauseElement) -> _Compiled:
        key = (id(statement), self.dialect.name)
        entry = self._compiled.get(key)
        if entry is None or entry[0] is not statement:
            # The statement is kept in the entry so its id is never reused.
            entry = self._compiled[key] = (statement, _Compiled(statement, self.dialect))
        return entry[1]

    def _connection(self) -> Any:
        """The cursor's DBAPI connection (not in the DBAPI cursor protocol's types)."""
        return self.cursor.connection  # type: ignore[attr-defined]

    def _pipeline(self) -> Any:
        """psycopg's pipeline on this connection, or None (SQLite has none)."""
        pipeline = getattr(self._connection(), "pipeline", None)
        return pipeline() if pipeline is not None else None

    def execute_together(self, statements: Sequence[tuple[sa.ClauseElement, Values | None]],
                         ending: bool = False) -> list[DirectResult]:
        """Run ``[(statement, values), ...]`` in order; their results, in order.

        On PostgreSQL they are sent at once and answered at once: one round
        trip, however long the first one waits for a lock.  Each statement
        after the first still sees what committed before it started (read
        committed), so a read sent behind a lock-taking update sees the
        records as the lock's previous holder left them.  With ``ending``
        (the transaction's last statements) the closing statement goes in
        the same round trip, unless observers must see the transaction
        before it ends.
        """
        pipeline = self._pipeline()
        if pipeline is None:
            return [self.execute(statement, values) for statement, values in statements]
        connection = self._connection()
        sent = [(new_cursor(connection, self.dialect), self._compile(statement), values or {})
                for statement, values in statements]
        if self.opening and self.begin_explicitly is not None:
            # Out of the pipeline: in it, psycopg would sync to change modes.
            self.begin_explicitly()
            self.began_explicitly = True
        try:
            with pipeline:
                self._open(sent[0][0] if sent else self.cursor)
                for cursor, compiled, values in sent:
                    self._run(cursor, compiled, values)
                if ending and self.closing is not None and not self.observers:
                    self.cursor.execute(self.closing)
                    self.closing = None
            results = [self._result(compiled, cursor) for cursor, compiled, _ in sent]
            for observer in self.observers:
                for cursor, compiled, _ in sent:
                    observer.direct_done(compiled.sql, cursor)
            return results
        finally:
            for cursor, _, _ in sent:
                cursor.close()

    def execute(self, statement: sa.ClauseElement,
                values: Values | list[dict[str, Any]] | None = None) -> DirectResult:
        """Run ``statement`` with ``values`` (a dict, or a list of dicts for many rows)."""
        # The steps of _compile, _open and _run, written out for the common
        # case: a claim runs a handful of statements, each a few microseconds.
        entry = self._compiled.get((id(statement), self.dialect.name))
        compiled = entry[1] if entry is not None and entry[0] is statement \
            else self._compile(statement)
        cursor = self.cursor
        if self.opening:
            self._open(cursor)
        if isinstance(values, list):
            # One statement per row, not executemany: a claim writes a few
            # rows, and psycopg's executemany (a pipeline) reports a server
            # error less clearly than a plain execute.
            count = 0
            for row in values:
                self._run(cursor, compiled, row)
                count += cursor.rowcount
                for observer in self.observers:
                    observer.direct_done(compiled.sql, cursor)
            return DirectResult([], count)
        observers = self.observers
        if observers:
            for observer in observers:
                observer.direct_statement(compiled.sql)
        cursor.execute(compiled.sql, compiled.parameters(values or {}))
        result = self._result(compiled, cursor)
        if observers:
            for observer in observers:
                observer.direct_done(compiled.sql, cursor)
        return result

    def takes_row(self, statement: sa.ClauseElement, names: tuple[str, ...]) -> bool:
        """Whether :meth:`execute_row` takes ``statement``'s values in the
        order of ``names``: they are exactly its parameters, in their
        compiled order, with no default to fill in.  False where parameters
        are named, not numbered (psycopg before 3.2, with no ``RawCursor``):
        there the values go as a dict."""
        compiled = self._compile(statement)
        return compiled.order == names and not compiled.defaults

    def execute_row(self, statement: sa.ClauseElement, names: tuple[str, ...],
                    row: tuple[Any, ...]) -> DirectResult:
        """Run ``statement`` with ``row``: its values in the order of ``names``.

        For a writer that builds its row as a tuple (no dictionary of column
        names to order): ``names`` must be exactly the statement's
        parameters, in their compiled order, with no default to fill in
        (else ValueError, and nothing runs; see :meth:`takes_row`).
        """
        entry = self._compiled.get((id(statement), self.dialect.name))
        compiled = entry[1] if entry is not None and entry[0] is statement \
            else self._compile(statement)
        if compiled.order != names or compiled.defaults:
            raise ValueError(f"execute_row: {names} are not the parameters of "
                             f"{compiled.sql!r} ({compiled.order}) in their order")
        cursor = self.cursor
        if self.opening:
            self._open(cursor)
        observers = self.observers
        for observer in observers:
            observer.direct_statement(compiled.sql)
        cursor.execute(compiled.sql, row)
        result = self._result(compiled, cursor)
        for observer in observers:
            observer.direct_done(compiled.sql, cursor)
        return result

    @staticmethod
    def _result(compiled: _Compiled, cursor: DBAPICursor) -> DirectResult:
        # A statement returns rows every time or never: its columns are read
        # once (psycopg builds ``description`` anew on each call, a cost of
        # its own for the wide row of a node's re-read).
        row_type = compiled.row_type
        if row_type is None:
            description = cursor.description
            row_type = compiled.row_type = _NO_ROWS if description is None else \
                collections.namedtuple("Row", [d[0] for d in description], rename=True)
        if row_type is _NO_ROWS:
            return DirectResult([], cursor.rowcount)
        return DirectResult([row_type._make(r) for r in cursor.fetchall()], cursor.rowcount)


__all__ = ["DirectConnection", "DirectObserver", "DirectResult", "new_cursor", "observe",
           "observers_of", "unobserve"]
