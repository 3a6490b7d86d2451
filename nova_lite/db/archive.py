"""History out of the way: archive deleted records, purge archived ones.

``nova-lite db archive`` moves the records nothing reads any more out of
``instances`` and ``migrations`` into ``shadow_instances`` and
``shadow_migrations`` (the same columns, plus ``archived_at``), so the
periodic pass, the audit and the listings never scan an ever-growing
history; ``nova-lite db purge`` deletes archived rows for good.

What may be archived follows :mod:`nova_lite.holds`:

- an **instance** whose vm_state is ``deleted``, with no allocation
  recorded for it on any node (neither its own nor a move's: a leaked one
  keeps it, for the leak finder and heal to find) and no migration in
  progress;
- a **migration** whose status is final (not one of
  :data:`nova_lite.holds.MIGRATION_IN_PROGRESS`), that holds no allocation,
  and whose instance is not live: its record is deleted or already gone.

Only records last updated before a time (``updated_at``, epoch seconds)
are taken.  Each batch moves at most ``max_rows`` rows of one table in its
own transaction and re-checks the rule inside it, so a record that became
live again meanwhile stays.
"""

import logging
import time

import attrs
import sqlalchemy as sa

from nova_lite.db import holds_sql, models
from nova_lite.holds import DELETED

LOG = logging.getLogger(__name__)

T_INST, T_MIG, T_ALLOC = models.instances, models.migrations, models.allocations
#: Each live table with its shadow, in the order they are archived.
SHADOWS = ((T_MIG, models.shadow_migrations), (T_INST, models.shadow_instances))


@attrs.frozen
class TableCount:
    """How many rows of one table were (or, in a dry run, would be) moved or
    deleted: ``table`` the table the rows left, ``rows`` a count >= 0."""

    table: str
    rows: int


def _eligible(table: sa.Table, before: float | None) -> sa.ColumnElement[bool]:
    """True for a row of ``table`` (instances or migrations) that may be archived."""
    if table is T_INST:
        alloc = sa.select(T_ALLOC.c.consumer_uuid).where(T_ALLOC.c.instance_uuid == T_INST.c.uuid)
        moving = sa.select(T_MIG.c.uuid).where(T_MIG.c.instance_uuid == T_INST.c.uuid,
                                               holds_sql.migration_holds())
        rule = sa.and_(T_INST.c.vm_state == DELETED, ~alloc.exists(), ~moving.exists())
    else:
        alloc = sa.select(T_ALLOC.c.consumer_uuid).where(T_ALLOC.c.consumer_uuid == T_MIG.c.uuid)
        live = sa.select(T_INST.c.uuid).where(T_INST.c.uuid == T_MIG.c.instance_uuid,
                                              T_INST.c.vm_state != DELETED)
        rule = sa.and_(~holds_sql.migration_holds(), ~alloc.exists(), ~live.exists())
    if before is not None:
        rule = sa.and_(rule, table.c.updated_at < before)
    return rule


def count_eligible(conn: sa.Connection, before: float | None) -> list[TableCount]:
    """How many rows of each table :func:`archive_batch` would move (nothing written)."""
    return [TableCount(table.name, conn.execute(
        sa.select(sa.func.count()).select_from(table).where(_eligible(table, before))
    ).scalar_one()) for table, _ in SHADOWS]


def archive_batch(conn: sa.Connection, table: sa.Table, before: float | None,
                  max_rows: int) -> int:
    """Move at most ``max_rows`` archivable rows of ``table`` (instances or
    migrations) into its shadow table, in ``conn``'s transaction; returns how
    many moved (0: none is left)."""
    shadow = models.metadata.tables[f"shadow_{table.name}"]
    picked = (sa.select(table.c.uuid).where(_eligible(table, before))
              .order_by(table.c.updated_at, table.c.uuid).limit(max_rows))
    if conn.dialect.name == "postgresql":
        picked = picked.with_for_update(of=table, skip_locked=True)
    uuids = list(conn.execute(picked).scalars())
    if not uuids:
        return 0
    # Deleted only if still archivable inside this transaction.
    gone = conn.execute(table.delete().where(table.c.uuid.in_(uuids),
                                             _eligible(table, before))
                        .returning(*table.columns)).mappings().all()
    if gone:
        now = time.time()
        conn.execute(shadow.insert(), [dict(row, archived_at=now) for row in gone])
    return len(gone)


def count_archived(conn: sa.Connection, before: float | None) -> list[TableCount]:
    """How many rows of each shadow table were archived before ``before``
    (epoch seconds; None: all of them)."""
    return [TableCount(shadow.name, conn.execute(
        sa.select(sa.func.count()).select_from(shadow).where(_archived(shadow, before))
    ).scalar_one()) for _, shadow in SHADOWS]


def purge(conn: sa.Connection, before: float | None) -> list[TableCount]:
    """Delete the rows of each shadow table archived before ``before`` (epoch
    seconds; None: all of them), in ``conn``'s transaction."""
    return [TableCount(shadow.name, conn.execute(
        shadow.delete().where(_archived(shadow, before))).rowcount)
        for _, shadow in SHADOWS]


def _archived(shadow: sa.Table, before: float | None) -> sa.ColumnElement[bool]:
    return sa.true() if before is None else shadow.c.archived_at < before
