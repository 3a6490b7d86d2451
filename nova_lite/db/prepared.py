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

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


class Prepared:
    """One Core statement, compiled for ``dialect``, run with a dict of values."""

    def __init__(self, statement, dialect):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        # SQLite's driver takes "?" placeholders, in this order; psycopg named ones.
        self._order = tuple(compiled.positiontup) if compiled.positional else None

    def execute(self, cursor, values):
        """Run on ``cursor`` with ``values`` (a dict by placeholder name); returns it."""
        if self._order is not None:
            values = tuple([values[name] for name in self._order])
        cursor.execute(self.sql, values)
        return cursor


class Statements:
    """The prepared INSERTs and UPDATEs of one database, compiled on first use.

    Each is keyed by its table and column names, so it is exactly the
    statement ``table.insert().values(**values)`` would build.
    """

    def __init__(self, dialect):
        self.dialect = dialect
        self._prepared = {}

    def _get(self, key, build):
        prepared = self._prepared.get(key)
        if prepared is None:   # a race only compiles it twice
            prepared = self._prepared[key] = Prepared(build(), self.dialect)
        return prepared

    def insert(self, cursor, table, values):
        """INSERT ``values`` (a dict by column name) into ``table``."""
        prepared = self._get(("insert", table.name, tuple(values)), lambda: table.insert().values(
            {name: sa.bindparam(name) for name in values}))
        return prepared.execute(cursor, values)

    def insert_new(self, cursor, table, values):
        """INSERT ``values`` unless a row with the same primary key exists.

        Returns the cursor: its ``rowcount`` is 0 when the row existed (and
        nothing was written), 1 when it was inserted.
        """
        def build():
            dialect_insert = postgresql.insert if self.dialect.name == "postgresql" \
                else sqlite.insert
            return dialect_insert(table).values(
                {name: sa.bindparam(name) for name in values}).on_conflict_do_nothing(
                index_elements=[c.name for c in table.primary_key.columns])
        prepared = self._get(("insert-new", table.name, tuple(values)), build)
        return prepared.execute(cursor, values)

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
