"""The schema of nova-lite 0.1.0: services, compute nodes, inventories,
instances, migrations and allocations.

Frozen: this revision spells out every table as 0.1.0 created it and never
imports the current models, so a column added to a model later is added by
its own revision, on new and old databases alike.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("binary", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("report_count", sa.Integer, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("disabled_reason", sa.String(255)),
        sa.UniqueConstraint("host", "binary", name="uniq_services0host0binary"),
    )
    op.create_table(
        "compute_nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("nodename", sa.String(255), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("resources", sa.Text),
        sa.Column("last_error", sa.Text),
        sa.Column("reported", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("host", "nodename", name="uniq_compute_nodes0host0nodename"),
    )
    op.create_table(
        "inventories",
        sa.Column("node_uuid", sa.String(36),
                  sa.ForeignKey("compute_nodes.uuid", ondelete="CASCADE"), primary_key=True),
        sa.Column("resource_class", sa.String(255), primary_key=True),
        sa.Column("total", sa.BigInteger, nullable=False),
        sa.Column("reserved", sa.BigInteger, nullable=False),
        sa.Column("min_unit", sa.BigInteger, nullable=False),
        sa.Column("max_unit", sa.BigInteger),
        sa.Column("step_size", sa.BigInteger, nullable=False),
        sa.Column("allocation_ratio", sa.String(64), nullable=False),
    )
    op.create_table(
        "instances",
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
    )
    op.create_index("instances_host_node_idx", "instances", ["host", "node"])
    op.create_table(
        "migrations",
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
    )
    op.create_index("ix_migrations_instance_uuid", "migrations", ["instance_uuid"])
    op.create_table(
        "allocations",
        sa.Column("consumer_uuid", sa.String(36), primary_key=True),
        sa.Column("node_uuid", sa.String(36),
                  sa.ForeignKey("compute_nodes.uuid", ondelete="CASCADE"), primary_key=True),
        sa.Column("consumer_type", sa.String(16), nullable=False),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.Column("vcpu", sa.BigInteger, nullable=False),
        sa.Column("pcpu", sa.BigInteger, nullable=False),
        sa.Column("memory_mb", sa.BigInteger, nullable=False),
        sa.Column("disk_gb", sa.BigInteger, nullable=False),
        sa.Column("other", sa.Text),
        sa.Column("flavor", sa.Text, nullable=False),
        sa.Column("numa_topology", sa.Text),
        sa.Column("pci_devices", sa.Text),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_allocations_instance_uuid", "allocations", ["instance_uuid"])
    op.create_index("allocations_node_idx", "allocations", ["node_uuid"])
