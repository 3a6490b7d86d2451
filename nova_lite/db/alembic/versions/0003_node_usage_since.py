"""Claims checked by the database: a column node_usage.since.

``since`` is the generation from which the node has changed only by claims
that kept its ``node_usage`` row current, so its inventories, owner and
reported flag are as they were at that generation.  A claim decided on a
record at least that recent is then checked against the row's usage by the
database itself, under the node row's lock (see
``nova_lite.db.claim_writes``).  Rows written before this revision have no
``since`` and are never used that way.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("node_usage", sa.Column("since", sa.Integer))
