"""Devices as providers of their own: table ``resource_providers`` and
``allocations.providers``.

A compute node is the root of a tree of providers; the devices it
accounts for apart (a physical GPU with its VGPU inventory, say) are its
children, each with its inventories, traits and a generation of its own.
An allocation that holds amounts of classes only children offer records
them by the child that holds them (``providers``, JSON ``{child name:
{class: amount}}``), and the partial index of the allocations a node's
usage is not summed from in SQL alone takes them in.  Existing rows need
nothing: no node had children before.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The predicate as of this revision (models.EXTRAS_PREDICATE may move on).
_EXTRAS = ("other IS NOT NULL OR numa_topology IS NOT NULL OR pci_devices IS NOT NULL"
           " OR providers IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "resource_providers",
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("root_uuid", sa.String(36),
                  sa.ForeignKey("compute_nodes.uuid", ondelete="CASCADE"), nullable=False),
        sa.Column("parent_uuid", sa.String(36), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("inventories", sa.Text, nullable=False),
        sa.Column("traits", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("root_uuid", "name", name="uniq_resource_providers0root_uuid0name"),
    )
    op.add_column("allocations", sa.Column("providers", sa.Text))
    op.drop_index("allocations_node_extras_idx", table_name="allocations")
    op.create_index("allocations_node_extras_idx", "allocations", ["node_uuid"],
                    postgresql_where=sa.text(_EXTRAS), sqlite_where=sa.text(_EXTRAS))
