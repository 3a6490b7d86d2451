"""The moves in progress of a node, found by indexes of those moves alone.

A pass, the audit and heal look up the moves in progress from and to a
host on every pass.  The indexes of 0005 hold every move ever recorded,
by (host, node, status): a lookup of the ten statuses of a move in
progress is ten descents of an index that grows with the history of
finished moves.  Two partial indexes, on (source_compute, source_node) and
on (dest_compute, dest_node) of the rows whose status is one of a move in
progress, hold a few rows however long that history grows; a statement
whose condition names those statuses as literals (as
``nova_lite.db.holds_sql.migration_holds`` does) reads them with one
descent.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

#: The statuses of a move in progress (a migration keeps its own copy: it
#: must not change when nova_lite.holds.MIGRATION_IN_PROGRESS does).
_IN_PROGRESS = ("accepted", "confirming", "finished", "migrating", "post-migrating",
                "pre-migrating", "preparing", "queued", "reverting", "running")


def _in_progress() -> sa.ColumnElement[bool]:
    return sa.column("status").in_([sa.literal_column(f"'{s}'") for s in _IN_PROGRESS])


def upgrade() -> None:
    for end in ("source", "dest"):
        op.create_index(f"migrations_{end}_in_progress_idx", "migrations",
                        [f"{end}_compute", f"{end}_node"],
                        postgresql_where=_in_progress(), sqlite_where=_in_progress())


def downgrade() -> None:
    for end in ("source", "dest"):
        op.drop_index(f"migrations_{end}_in_progress_idx", table_name="migrations")
