"""Instances record their availability zone: ``instances.availability_zone``
(Nova's column), and the same column in ``shadow_instances``.  Moves record
the PCI requests they claim on the destination: ``migrations.new_pci_requests``
(and in ``shadow_migrations``), Nova's ``MigrationContext.new_pci_requests``.

A build records the zone it was scheduled in (the requested one, else
``default_schedule_zone``, else the zone of the host it landed on).  Rows
written before this revision have none (NULL): ``server show`` then shows
the zone of the instance's host, and a move keeps the server in that zone.
A migration row written before has no PCI requests (NULL): the instance's
own are kept when it is confirmed, as before.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A nullable column without a default: an ALTER TABLE on both backends,
    # no table copy.
    op.add_column("instances", sa.Column("availability_zone", sa.String(255)))
    op.add_column("shadow_instances", sa.Column("availability_zone", sa.String(255)))
    op.add_column("migrations", sa.Column("new_pci_requests", sa.Text))
    op.add_column("shadow_migrations", sa.Column("new_pci_requests", sa.Text))
