"""Small read-only queries on the compute node rows, for the views that keep them.

Plain functions on a SQLAlchemy connection; they never write.  Code
outside ``nova_lite.db`` reaches them through
:class:`~nova_lite.db.node_changes.ChangeReader`.  The service rows have
their own module, :mod:`nova_lite.db.services`.

**The change sequence.**  ``compute_nodes.change_seq`` (indexed) moves, by
the database's own triggers (revision 0010), in the statement that inserts
a node or changes its generation or host; deleting a node leaves a
tombstone in ``node_deletions``.  A reader takes a **mark**
(:func:`change_mark`) before it reads, and next time asks only for the
rows whose ``change_seq`` is at least that mark, changed rows and
tombstones in one statement (:func:`nova_lite.db.look.look_since`):

- PostgreSQL: the value a writer leaves is its transaction id, and the mark
  is the ``xmin`` of the reader's snapshot: every transaction the reader
  could not see (running, or not started) has an id at least that, however
  late it commits, so no change is missed; a row seen already may come
  again (the reader compares generations).
- SQLite: writers are serialised and take the next value of
  ``change_counter``; the mark is the counter's value plus one, read in
  the reader's snapshot.
"""


import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nova_lite.db import models

T_NODES = models.compute_nodes
T_GONE = models.node_deletions

#: Tombstones of deleted rows are kept this long (s) by the triggers that
#: write them; a reader whose last look is older than half of it reads
#: everything again instead of asking for what changed.
TOMBSTONE_KEEP_S = 3600.0


@attrs.frozen
class NodeVersion:
    """Identity, generation and change sequence of one compute node row, and
    ``described_seq``: the change sequence's value when its description
    (report, host, name, reported flag, last error, inventories) last
    changed (revision 0012)."""

    uuid: str
    host: str
    nodename: str
    generation: int
    change_seq: int = 0
    described_seq: int = 0


#: PostgreSQL's change sequence value: the writing transaction's id, as the
#: triggers of revision 0010 give it.  A statement that sets ``change_seq``
#: to it itself skips the node's trigger (revision 0015).
PG_CHANGE_SEQ_SQL = "pg_current_xact_id()::text::bigint"
#: PostgreSQL's mark: the oldest transaction id its snapshot could not see.
PG_MARK_SQL = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
_PG_MARK = sa.text(f"SELECT {PG_MARK_SQL}")
SQLITE_MARK = sa.select(models.change_counter.c.value + 1).where(
    models.change_counter.c.id == 1)


def change_mark(conn: Connection) -> int:
    """The mark to ask from next time: run it before the reads it covers
    (in the same transaction or an earlier one).  Every change that the
    reads after it could not see has ``change_seq`` >= the mark."""
    query = _PG_MARK if conn.dialect.name == "postgresql" else SQLITE_MARK
    return int(conn.execute(query).scalar_one())


#: Above any change sequence (64-bit transaction ids and counters stay far below).
NO_SEQ_ABOVE = 2 ** 62


def since(column: sa.ColumnElement[int]) -> sa.ColumnElement[bool]:
    """``column >= :mark``, written as a closed range: a planner without
    statistics yet (a table just filled) then still takes the index, as it
    takes a closed range for narrow, rather than a third of the table."""
    return column.between(sa.bindparam("mark"), sa.literal(NO_SEQ_ABOVE, sa.BigInteger))


def described_since(conn: Connection, mark: int) -> dict[str, int]:
    """``{uuid: described_seq}`` of the nodes whose description changed at
    or after ``mark`` (one scan of the node rows: for a full read, which
    reads every row anyway)."""
    return {uuid: seq for uuid, seq in conn.execute(
        sa.select(T_NODES.c.uuid, T_NODES.c.described_seq).where(
            T_NODES.c.described_seq >= mark))}


def existing_nodes(conn: Connection, uuids: set[str]) -> set[str]:
    """Those of ``uuids`` that have a node row."""
    found: set[str] = set()
    ordered = sorted(uuids)
    for i in range(0, len(ordered), 500):
        found.update(conn.execute(sa.select(T_NODES.c.uuid).where(
            T_NODES.c.uuid.in_(ordered[i:i + 500]))).scalars())
    return found


__all__ = ["NodeVersion", "PG_CHANGE_SEQ_SQL", "PG_MARK_SQL", "SQLITE_MARK", "TOMBSTONE_KEEP_S",
           "change_mark", "described_since", "existing_nodes", "since"]
