"""Claims' usage snapshots (node_usage) and an index of the allocations with
other classes, NUMA cells or PCI devices.

``node_usage`` holds one row per node: the usage of the standard classes as
a claim that re-read the node under its lock recorded it (and how many
allocations have extras: other classes, NUMA cells or PCI devices), valid only while
the node is at that row's ``generation`` (any later change bumps the
generation, so an old row is never trusted).  The partial index lets that
re-read find the few allocations with extras without reading them all.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_EXTRAS = ("other IS NOT NULL OR numa_topology IS NOT NULL OR pci_devices IS NOT NULL")


def upgrade() -> None:
    op.create_table(
        "node_usage",
        sa.Column("node_uuid", sa.String(36),
                  sa.ForeignKey("compute_nodes.uuid", ondelete="CASCADE"), primary_key=True),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("vcpu", sa.BigInteger, nullable=False),
        sa.Column("pcpu", sa.BigInteger, nullable=False),
        sa.Column("memory_mb", sa.BigInteger, nullable=False),
        sa.Column("disk_gb", sa.BigInteger, nullable=False),
        sa.Column("extras", sa.Integer, nullable=False),
    )
    op.create_index("allocations_node_extras_idx", "allocations", ["node_uuid"],
                    postgresql_where=sa.text(_EXTRAS), sqlite_where=sa.text(_EXTRAS))
