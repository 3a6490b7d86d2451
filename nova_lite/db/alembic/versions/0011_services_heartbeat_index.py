"""The compute services that look down, found by an index.

``services`` gets an index on (binary, updated_at): a compute service's
periodic pass reads the services whose last heartbeat (``updated_at``,
epoch s) is older than ``service_down_time`` (only they can need a live
peer to record their findings), and so does
``Store.hosts_needing_findings``.  Without it every pass scans every
service row, which at thousands of services costs each pass milliseconds
of the database (the fleet's passes then cost it the number of services
squared).  The price: a heartbeat changes an indexed column, so on
PostgreSQL it is no longer a HOT update and adds an entry to each index
of ``services``.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("services_binary_updated_at_idx", "services", ["binary", "updated_at"])
