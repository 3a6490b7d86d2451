"""History that does not grow forever: migration indexes and shadow tables.

- ``migrations`` gets two indexes, (dest_compute, dest_node, status) and
  (source_compute, source_node, status): the audit and the leak finder look
  up the moves into and out of a node by status.
- ``shadow_instances`` and ``shadow_migrations`` receive the deleted
  instances and finished migrations that ``nova-lite db archive`` moves out
  of ``instances`` and ``migrations``: the same columns, plus
  ``archived_at`` (epoch seconds, indexed) for ``nova-lite db purge``.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("migrations_dest_status_idx", "migrations",
                    ["dest_compute", "dest_node", "status"])
    op.create_index("migrations_source_status_idx", "migrations",
                    ["source_compute", "source_node", "status"])
    op.create_table(
        "shadow_instances",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("host", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("vm_state", sa.String(255), nullable=False),
        sa.Column("task_state", sa.String(255)),
        sa.Column("project_id", sa.String(255), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("flavor", sa.Text, nullable=False),
        sa.Column("numa_topology", sa.Text),
        sa.Column("pci_requests", sa.Text),
        sa.Column("pci_devices", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("archived_at", sa.Float, nullable=False),
    )
    op.create_index("shadow_instances_archived_at_idx", "shadow_instances", ["archived_at"])
    op.create_table(
        "shadow_migrations",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.Column("source_compute", sa.String(255), nullable=False),
        sa.Column("source_node", sa.String(255), nullable=False),
        sa.Column("dest_compute", sa.String(255), nullable=False),
        sa.Column("dest_node", sa.String(255), nullable=False),
        sa.Column("old_flavor", sa.Text, nullable=False),
        sa.Column("new_flavor", sa.Text, nullable=False),
        sa.Column("status", sa.String(255), nullable=False),
        sa.Column("migration_type", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("archived_at", sa.Float, nullable=False),
    )
    op.create_index("shadow_migrations_archived_at_idx", "shadow_migrations",
                    ["archived_at"])
