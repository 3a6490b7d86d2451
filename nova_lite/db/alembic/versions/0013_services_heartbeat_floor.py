"""The services that look down, found by a column most heartbeats leave alone.

Revision 0011 indexed ``services`` on (binary, updated_at), so a pass finds
the services that look down without reading every service row.  The
price was every heartbeat: it changed an indexed column, so on PostgreSQL
it was never a HOT update; each beat added an entry to every index of
``services`` and wrote about twice the WAL, and the indexes grew until a
vacuum cleaned them.

``services.updated_floor`` is ``updated_at`` rounded down to a whole
``HEARTBEAT_GRAIN_S`` (30 s), computed by the database (a generated
column: STORED on PostgreSQL, VIRTUAL on SQLite, which cannot add a
stored one), so every writer of ``updated_at`` keeps it.  The index moves
to (binary, updated_floor): a service beating every 10 s changes it once
in three beats.  A heartbeat older than a deadline has its floor older
than the deadline too, so the down services are the index's range below
the deadline, rechecked by ``updated_at``.  On PostgreSQL the table also
gets ``fillfactor`` 70: the free room in each page is where a HOT update
puts the row's new version.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

#: Must match nova_lite.db.models.HEARTBEAT_GRAIN_S (a migration keeps its
#: own copy: it must not change when the model does).
_GRAIN_S = 30


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Set before the column is added: adding a stored column rewrites the
        # table, and the rewrite leaves each page's room for HOT updates.
        op.execute("ALTER TABLE services SET (fillfactor = 70)")
        op.execute("ALTER TABLE services ADD COLUMN updated_floor double precision "
                   f"GENERATED ALWAYS AS (floor(updated_at / {_GRAIN_S}) * {_GRAIN_S}) STORED")
    else:
        op.execute("ALTER TABLE services ADD COLUMN updated_floor FLOAT "
                   f"GENERATED ALWAYS AS (CAST(updated_at / {_GRAIN_S} AS INTEGER) * {_GRAIN_S}) "
                   "VIRTUAL")
    op.create_index("services_binary_updated_floor_idx", "services", ["binary", "updated_floor"])
    op.drop_index("services_binary_updated_at_idx", table_name="services")
