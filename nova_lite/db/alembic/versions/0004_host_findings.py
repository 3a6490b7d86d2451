"""Findings that outlive the process that found them: a table host_findings.

Each compute service records the findings of its last leak search (one row
per host: when, by which host's service, and the findings as JSON), so
every process that serves
metrics, the API or the audit command reads the same figures.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "host_findings",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("recorded_by", sa.String(255), nullable=False),
        sa.Column("findings", sa.Text, nullable=False),
    )
