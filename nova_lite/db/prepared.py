"""Statements compiled once and run on a plain DBAPI cursor: the claim's path.

SQLAlchemy Core spends more time building, caching and executing a small
statement than SQLite spends running it (about 50 us against 3 us).  The
few statements a claim runs are still written in Core, with named
``bindparam`` placeholders; :class:`Prepared` compiles each once for the
database's dialect and runs it on the cursor of
:meth:`nova_lite.db.engine.Database.write_raw`.

Values must already be the DBAPI's plain types (str, int, float, None): no
SQLAlchemy type processing happens on this path.
"""

import operator

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


class Prepared:
    """One Core statement, compiled for ``dialect``, run with a dict of values."""

    def __init__(self, statement, dialect):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        # SQLite's driver takes "?" placeholders, in this order; psycopg named ones.
        self._positional = None
        if compiled.positional:
            order = tuple(compiled.positiontup)
            pick = operator.itemgetter(*order)
            # itemgetter of one name returns the value, not a 1-tuple.
            self._positional = pick if len(order) > 1 else (lambda values: (pick(values),))

    def execute(self, cursor, values):
        """Run on ``cursor`` with ``values`` (a dict by placeholder name); returns it."""
        if self._positional is not None:
            values = self._positional(values)
        cursor.execute(self.sql, values)
        return cursor


class PreparedRow:
    """One statement whose placeholders ``columns`` are filled from a tuple in that order.

    The claim's INSERTs and generation swap: no dict is built per row.
    SQLite's driver gets the tuple itself (reordered only if the compiled
    statement lists the placeholders in another order); psycopg gets the
    named dict it wants.
    """

    def __init__(self, statement, dialect, columns):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        self._columns = columns
        self._reorder = None
        self._named = not compiled.positional
        if compiled.positional:
            order = tuple(compiled.positiontup)
            if order != columns:
                self._reorder = operator.itemgetter(*[columns.index(name) for name in order])

    def execute(self, cursor, row):
        """Run on ``cursor`` with ``row`` (values in ``columns`` order); returns it."""
        if self._named:
            cursor.execute(self.sql, dict(zip(self._columns, row)))
        else:
            cursor.execute(self.sql, row if self._reorder is None else self._reorder(row))
        return cursor


class Statements:
    """The prepared INSERTs and UPDATEs of one database, compiled on first use.

    Each is keyed by its table and column names, so it is exactly the
    statement ``table.insert().values(**values)`` would build.
    """

    def __init__(self, dialect):
        self.dialect = dialect
        self._prepared = {}

    def _get(self, key, build, columns=None):
        """The statement cached under ``key``, else ``build()`` compiled and cached.

        With ``columns`` it is a :class:`PreparedRow` (run with tuples in that
        order), else a :class:`Prepared` (run with dicts).
        """
        prepared = self._prepared.get(key)
        if prepared is None:   # a race only compiles it twice
            prepared = self._prepared[key] = (
                Prepared(build(), self.dialect) if columns is None
                else PreparedRow(build(), self.dialect, columns))
        return prepared

    def insert(self, cursor, table, values):
        """INSERT ``values`` (a dict by column name) into ``table``."""
        prepared = self._get(("insert", table.name, tuple(values)), lambda: table.insert().values(
            {name: sa.bindparam(name) for name in values}))
        return prepared.execute(cursor, values)

    def insert_row(self, cursor, table, columns, row, new_only=False):
        """INSERT ``row`` (a tuple of values of ``columns``, a constant tuple) into ``table``.

        ``new_only``: insert unless a row with the same primary key exists.
        Returns the cursor: its ``rowcount`` is 0 when ``new_only`` found the
        row (and nothing was written), 1 when it was inserted.
        """
        def build():
            statement = self._insert(table, new_only).values(
                {name: sa.bindparam(name) for name in columns})
            if new_only:
                statement = statement.on_conflict_do_nothing(
                    index_elements=[c.name for c in table.primary_key.columns])
            return statement
        prepared = self._get(("insert-row", table.name, columns, new_only), build, columns)
        return prepared.execute(cursor, row)

    def bump_generation(self, cursor, table, key, generation):
        """Compare-and-swap: set ``table``'s ``generation`` to ``generation + 1``
        where its ``uuid`` is ``key`` and its generation still ``generation``.

        Returns the cursor: ``rowcount`` 0 means another writer got there first.
        """
        prepared = self._get(("bump-generation", table.name), lambda: table.update().where(
            table.c.uuid == sa.bindparam("key"),
            table.c.generation == sa.bindparam("seen")).values(generation=sa.bindparam("next")),
            ("next", "key", "seen"))
        return prepared.execute(cursor, (generation + 1, key, generation))

    def _insert(self, table, dialect_specific):
        if not dialect_specific:
            return table.insert()
        return (postgresql.insert if self.dialect.name == "postgresql" else sqlite.insert)(table)

    def update(self, cursor, table, values, **where):
        """UPDATE ``table`` SET ``values`` WHERE each ``where`` column equals its value.

        Returns the cursor: its ``rowcount`` is the number of rows changed.
        """
        def build():
            return table.update().where(
                *[table.c[name] == sa.bindparam(f"where_{name}") for name in where]).values(
                {name: sa.bindparam(name) for name in values})
        prepared = self._get(("update", table.name, tuple(values), tuple(where)), build)
        params = dict(values)
        params.update({f"where_{name}": value for name, value in where.items()})
        return prepared.execute(cursor, params)
