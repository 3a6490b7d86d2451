"""History out of the way: archive deleted records, purge archived ones.

``nova-lite db archive`` moves the records nothing reads any more out of
``instances``, ``migrations`` and ``tasks`` into ``shadow_instances``,
``shadow_migrations`` and ``shadow_tasks`` (the same columns, plus
``archived_at``), so the
periodic pass, the audit and the listings never scan an ever-growing
history; ``nova-lite db purge`` deletes archived rows for good.

What may be archived follows :mod:`nova_lite.holds`:

- an **instance** whose vm_state is ``deleted``, with no allocation
  recorded for it on any node (neither its own nor a move's: a leaked one
  keeps it, for the leak finder and heal to find) and no migration in
  progress;
- a **migration** whose status is final (not one of
  :data:`nova_lite.holds.MIGRATION_IN_PROGRESS`), that holds no allocation,
  and whose instance is not live: its record is deleted or already gone;
- a **task** that is over (done, failed or cancelled) and whose instance
  is not live (a host's audit: any that is over).

Only records last updated (a task: finished) before a time (epoch
seconds) are taken.  Each batch moves at most ``max_rows`` rows of one table in its
own transaction and re-checks the rule inside it, so a record that became
live again meanwhile stays.
"""

import logging
import time
from typing import Any

import attrs
import sqlalchemy as sa

from nova_lite import work
from nova_lite.db import holds_sql, models
from nova_lite.holds import DELETED

LOG = logging.getLogger(__name__)

T_INST, T_MIG, T_ALLOC = models.instances, models.migrations, models.allocations
T_TASK = models.tasks
#: Each live table with its shadow, in the order they are archived.
SHADOWS = ((T_TASK, models.shadow_tasks), (T_MIG, models.shadow_migrations),
           (T_INST, models.shadow_instances))


def _key(table: sa.Table) -> sa.Column[Any]:
    return table.c.id if table is T_TASK else table.c.uuid


def _changed_at(table: sa.Table) -> sa.Column[Any]:
    return table.c.finished_at if table is T_TASK else table.c.updated_at


@attrs.frozen
class TableCount:
    """How many rows of one table were (or, in a dry run, would be) moved or
    deleted: ``table`` the table the rows left, ``rows`` a count >= 0."""

    table: str
    rows: int


def _eligible(table: sa.Table, before: float | None) -> sa.ColumnElement[bool]:
    """True for a row of ``table`` (instances, migrations or tasks) that may be archived."""
    if table is T_TASK:
        live = sa.select(T_INST.c.uuid).where(T_INST.c.uuid == T_TASK.c.instance_uuid,
                                              T_INST.c.vm_state != DELETED)
        rule = sa.and_(T_TASK.c.state.in_(work.FINAL_STATES), ~live.exists())
    elif table is T_INST:
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
        rule = sa.and_(rule, _changed_at(table) < before)
    return rule


def count_eligible(conn: sa.Connection, before: float | None) -> list[TableCount]:
    """How many rows of each table :func:`archive_batch` would move (nothing written)."""
    return [TableCount(table.name, conn.execute(
        sa.select(sa.func.count()).select_from(table).where(_eligible(table, before))
    ).scalar_one()) for table, _ in SHADOWS]


def archive_batch(conn: sa.Connection, table: sa.Table, before: float | None,
                  max_rows: int) -> int:
    """Move at most ``max_rows`` archivable rows of ``table`` (instances,
    migrations or tasks) into its shadow table, in ``conn``'s transaction; returns how
    many moved (0: none is left)."""
    shadow = models.metadata.tables[f"shadow_{table.name}"]
    key = _key(table)
    picked = (sa.select(key).where(_eligible(table, before))
              .order_by(_changed_at(table), key).limit(max_rows))
    if conn.dialect.name == "postgresql":
        picked = picked.with_for_update(of=table, skip_locked=True)
    keys = list(conn.execute(picked).scalars())
    if not keys:
        return 0
    # Deleted only if still archivable inside this transaction.
    gone = conn.execute(table.delete().where(key.in_(keys),
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
