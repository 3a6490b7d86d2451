"""Host aggregates and availability zones, in the records: tables ``aggregates``,
``aggregate_hosts`` and ``aggregate_metadata`` (Nova's names).

An aggregate is a named group of compute hosts with metadata; the key
``availability_zone`` makes it an availability zone.  A host may be in
several aggregates, in at most one zone.  ``aggregate_hosts`` is indexed
by host (a host's aggregates) and ``aggregate_metadata`` by key (the
aggregates of a zone).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "aggregates",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("uuid", sa.String(36), nullable=False, unique=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("name", name="uniq_aggregate0name"),
    )
    op.create_table(
        "aggregate_hosts",
        sa.Column("aggregate_id", sa.Integer,
                  sa.ForeignKey("aggregates.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("host", sa.String(255), primary_key=True),
    )
    op.create_index("aggregate_hosts_host_idx", "aggregate_hosts", ["host"])
    op.create_table(
        "aggregate_metadata",
        sa.Column("aggregate_id", sa.Integer,
                  sa.ForeignKey("aggregates.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.String(255), nullable=False),
    )
    op.create_index("aggregate_metadata_key_idx", "aggregate_metadata", ["key"])
