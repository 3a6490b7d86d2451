"""The rule of :mod:`nova_lite.holds`, as SQL over the records.

Built from the same sets as the Python rule, so a statement that picks the
consumers holding resources (the periodic pass's missing and stale
allocations, heal's re-check, the live listings) agrees with every Python
reader row for row; ``tests/test_holds.py`` walks the whole table through
both.
"""

from collections.abc import Iterable

import sqlalchemy as sa

from nova_lite.db import models
from nova_lite.holds import (
    DELETED, SHELVED_OFFLOADED, UNSHELVE_TASK_STATES)

T_INST, T_MIG = models.instances, models.migrations


def instance_holds(table: sa.FromClause = T_INST) -> sa.ColumnElement[bool]:
    """True for a row of ``table`` (the instances table, or an alias of it) that holds
    resources on the node it is placed on: :func:`nova_lite.holds.instance_holds` with
    ``placed`` from the row's host and node."""
    placed = sa.and_(table.c.host.is_not(None), table.c.node.is_not(None))
    # Never NULL (task_state may be): the rule is negated for stale allocations.
    unshelving = sa.and_(table.c.task_state.is_not(None),
                         table.c.task_state.in_(constants(UNSHELVE_TASK_STATES)))
    return sa.and_(table.c.vm_state != DELETED,
                   sa.or_(table.c.vm_state != SHELVED_OFFLOADED, placed, unshelving))


def instance_holds_on(nodes: sa.FromClause,
                      table: sa.FromClause = T_INST) -> sa.ColumnElement[bool]:
    """True for an instance row (outer-joined: it may be missing) that holds resources on
    the row of ``nodes`` (the compute_nodes table); never NULL, so it can be negated."""
    return sa.and_(table.c.uuid.is_not(None), table.c.host.is_not(None),
                   table.c.node.is_not(None), table.c.host == nodes.c.host,
                   table.c.node == nodes.c.nodename, instance_holds(table))


def migration_holds(table: sa.FromClause = T_MIG) -> sa.ColumnElement[bool]:
    """True for a migration row whose status holds its claim
    (:func:`nova_lite.holds.migration_holds`)."""
    return table.c.status.in_(models.in_progress_statuses())


def constants(values: Iterable[str]) -> list[sa.BindParameter[str]]:
    """``values`` (sorted) as one bound parameter each, for an ``IN``: a list of
    plain values would be one "expanding" parameter, which SQLAlchemy rewrites
    on every execution and :mod:`nova_lite.db.direct` cannot run."""
    return [sa.literal(v, type_=sa.String) for v in sorted(values)]
