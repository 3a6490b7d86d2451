"""Work addressed to a host, in the records: a table ``tasks``.

An operator's command (or the API, or ``compute.api.build``) records a
task addressed to a host: build, delete, the steps of a resize or
migration, an audit.  That host's compute service takes it (one taker:
SKIP LOCKED on PostgreSQL, the write lock on SQLite), carries it out on its
own driver and records the outcome.  Indexed by (host, state, id) for the
taking, and by (instance_uuid, state) for an instance's open tasks.
``shadow_tasks`` receives the finished tasks ``nova-lite db archive`` moves
out (the same columns, plus ``archived_at``).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("instance_uuid", sa.String(36)),
        sa.Column("migration_uuid", sa.String(36)),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("taken_by", sa.String(512)),
        sa.Column("lease_until", sa.Float),
        sa.Column("detail", sa.Text),
        sa.Column("result", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
    )
    op.create_index("tasks_host_state_idx", "tasks", ["host", "state", "id"])
    op.create_index("tasks_instance_state_idx", "tasks", ["instance_uuid", "state"])
    op.create_table(
        "shadow_tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("instance_uuid", sa.String(36)),
        sa.Column("migration_uuid", sa.String(36)),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("taken_by", sa.String(512)),
        sa.Column("lease_until", sa.Float),
        sa.Column("detail", sa.Text),
        sa.Column("result", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("archived_at", sa.Float, nullable=False),
    )
    op.create_index("shadow_tasks_archived_at_idx", "shadow_tasks", ["archived_at"])
