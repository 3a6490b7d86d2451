"""The statements of a heal step: one change, one transaction, guarded by generations.

A heal step (:class:`HealChange`) was planned from records read earlier,
at the generations it names.  :func:`apply` bumps each of those nodes'
generation first (``claim_writes.bump_and_lock``, which takes the node
row's lock): if a node moved on meanwhile (a claim, a
release, an audit), the step raises :class:`HealSkipped` and the
transaction rolls back, so nothing is written and the bump is undone.
Otherwise it drops the allocations and, for a stuck migration, marks it
finished with the planned status, only if it is still in progress and
unchanged since it was read.
"""

import logging
import time

import attrs
import sqlalchemy as sa

from nova_lite.db import claim_writes, models
from nova_lite.objects import MIGRATION_IN_PROGRESS
from nova_lite.exception import HealSkipped

LOG = logging.getLogger(__name__)

T_NODES, T_ALLOC, T_MIG = models.compute_nodes, models.allocations, models.migrations

#: Kind of change: drop the allocations of a consumer that no live record backs.
REMOVE_ALLOCATION = "remove_allocation"
#: Kind of change: finish a migration stuck in progress.
FINISH_MIGRATION = "finish_migration"
CHANGE_KINDS = (REMOVE_ALLOCATION, FINISH_MIGRATION)


@attrs.frozen
class HealChange:
    """One repair, planned from records read at known generations.

    ``guards``: ``((node_uuid, generation), ...)`` the plan read; the step
    applies only if every node is still at that generation.
    ``allocations``: ``((consumer_uuid, node_uuid), ...)`` to remove.
    For :data:`FINISH_MIGRATION`, ``migration_uuid`` is marked
    ``migration_status`` if it is still in progress and its ``updated_at``
    (epoch s) is still ``migration_updated_at``.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(CHANGE_KINDS))
    subject: str
    guards: tuple[tuple[str, int], ...] = attrs.field(converter=tuple)
    allocations: tuple[tuple[str, str], ...] = attrs.field(converter=tuple)
    migration_uuid: str | None = None
    migration_status: str | None = None
    migration_updated_at: float | None = None


@attrs.frozen
class HealResult:
    """What :meth:`Store.heal` did: ``applied``, or why not (``reason``);
    ``generations``: ``{node_uuid: generation}`` after an applied step."""

    applied: bool
    reason: str = ""
    generations: dict[str, int] = attrs.field(factory=dict, converter=dict)


def apply(conn, change):
    """The statements of one heal step on ``conn``; raises :class:`HealSkipped`."""
    generations = {}
    for node_uuid, seen in sorted(change.guards):
        try:
            generation = claim_writes.bump_and_lock(conn, node_uuid)
        except LookupError:
            raise HealSkipped(f"node {node_uuid} has no record any more") from None
        if generation != seen + 1:
            raise HealSkipped(f"node {node_uuid} moved from generation {seen} to "
                              f"{generation - 1} since the audit read it")
        generations[node_uuid] = generation
    for consumer_uuid, node_uuid in change.allocations:
        removed = conn.execute(T_ALLOC.delete().where(
            T_ALLOC.c.consumer_uuid == consumer_uuid, T_ALLOC.c.node_uuid == node_uuid))
        if removed.rowcount != 1:
            raise HealSkipped(f"the allocation of {consumer_uuid} on node {node_uuid} is "
                              "gone already")
    if change.migration_uuid is not None:
        updated = conn.execute(T_MIG.update().where(
            T_MIG.c.uuid == change.migration_uuid,
            T_MIG.c.status.in_(MIGRATION_IN_PROGRESS),
            T_MIG.c.updated_at == change.migration_updated_at).values(
            status=change.migration_status, updated_at=time.time()))
        if updated.rowcount != 1:
            raise HealSkipped(f"migration {change.migration_uuid} changed since the audit "
                              "read it (no longer in progress, or updated)")
    return HealResult(applied=True, generations=generations)


def migration_times(conn, in_progress_only=True):
    """``{migration uuid: (created_at, updated_at)}`` (epoch s)."""
    query = sa.select(T_MIG.c.uuid, T_MIG.c.created_at, T_MIG.c.updated_at)
    if in_progress_only:
        query = query.where(T_MIG.c.status.in_(MIGRATION_IN_PROGRESS))
    return {r.uuid: (r.created_at, r.updated_at) for r in conn.execute(query)}
