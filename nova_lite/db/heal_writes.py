"""The statements of a heal step: one change, one transaction, decided again inside it.

A heal step (:class:`HealChange`) was planned from records read earlier.
:func:`apply` decides it again on the consumer's own record, in the
transaction that applies it, before it writes anything:

1. it locks each consumer's instance row (then the migration's), in the
   order claims and releases take them, and checks with the one rule of
   :mod:`nova_lite.holds` that a stale allocation's consumer still holds
   nothing on that node, or that a stuck migration is still in progress,
   unchanged since it was read, and (unless the operator named it) still
   has a compute service down at one end;
2. it bumps each guarded node's generation (``claim_writes.bump_and_lock``,
   which takes the node row's lock): a node that moved on meanwhile (a
   claim, a release, an audit) skips the step too.

A skip raises :class:`HealSkipped` and the transaction rolls back: nothing
is written.  Otherwise the allocations go and a stuck migration takes its
planned status (``confirmed``: the destination's claim becomes the
instance's, which is recorded there with its new flavor).
"""

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import sqlalchemy as sa

from nova_lite import holds
from nova_lite.db import claim_writes, models, rows, services
from nova_lite.db import providers as provider_rows
from nova_lite.exception import HealSkipped
from nova_lite.objects import Migration

LOG = logging.getLogger(__name__)

T_NODES, T_ALLOC, T_MIG = models.compute_nodes, models.allocations, models.migrations
T_INST, T_SVC = models.instances, models.services

#: Kind of change: drop the allocations of a consumer that no live record backs.
REMOVE_ALLOCATION = "remove_allocation"
#: Kind of change: finish a migration stuck in progress.
FINISH_MIGRATION = "finish_migration"
CHANGE_KINDS = (REMOVE_ALLOCATION, FINISH_MIGRATION)


def _guards(value: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple(value)


def _allocations(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _generations(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


@attrs.frozen
class HealChange:
    """One repair, planned from records read at known generations.

    ``guards``: ``((node_uuid, generation), ...)`` the plan read; the step
    applies only if every node is still at that generation.
    ``allocations``: ``((consumer_uuid, node_uuid), ...)`` to remove.
    For :data:`FINISH_MIGRATION`, ``migration_uuid`` is marked
    ``migration_status`` if it is still in progress and its ``updated_at``
    (epoch s) is still ``migration_updated_at``, and every host of
    ``down_hosts`` still has no heartbeat within ``service_down_time`` (s);
    ``confirmed`` also frees the instance's own claim on
    ``source_node_uuid``.  An empty ``down_hosts`` is an operator's order.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(CHANGE_KINDS))
    subject: str
    guards: tuple[tuple[str, int], ...] = attrs.field(converter=_guards)
    allocations: tuple[tuple[str, str], ...] = attrs.field(converter=_allocations)
    migration_uuid: str | None = None
    migration_status: str | None = None
    migration_updated_at: float | None = None
    source_node_uuid: str | None = None
    down_hosts: tuple[str, ...] = attrs.field(default=(), converter=_names)
    service_down_time: float = 60.0


@attrs.frozen
class HealResult:
    """What :meth:`Store.heal` did: ``applied``, or why not (``reason``);
    ``generations``: ``{node_uuid: generation}`` after an applied step."""

    applied: bool
    reason: str = ""
    generations: dict[str, int] = attrs.field(factory=dict, converter=_generations)


def apply(conn: sa.Connection, change: HealChange) -> HealResult:
    """The statements of one heal step on ``conn``; raises :class:`HealSkipped`."""
    if change.kind == REMOVE_ALLOCATION:
        for consumer_uuid, node_uuid in change.allocations:
            _check_still_stale(conn, consumer_uuid, node_uuid)
        migration = None
    else:
        migration = _check_still_stuck(conn, change)
    generations: dict[str, int] = {}
    for node_uuid, seen in sorted(change.guards):
        try:
            generation = claim_writes.bump_and_lock(conn, node_uuid)
        except LookupError:
            raise HealSkipped(f"node {node_uuid} has no record any more") from None
        if generation != seen + 1:
            raise HealSkipped(f"node {node_uuid} moved from generation {seen} to "
                              f"{generation - 1} since the audit read it")
        generations[node_uuid] = generation
    now = time.time()
    if migration is not None and change.migration_status == "confirmed":
        _confirm(conn, change, migration, now)
    else:
        for consumer_uuid, node_uuid in change.allocations:
            removed = provider_rows.delete_allocations(conn, sa.and_(
                T_ALLOC.c.consumer_uuid == consumer_uuid, T_ALLOC.c.node_uuid == node_uuid), now)
            if removed != 1:
                raise HealSkipped(f"the allocation of {consumer_uuid} on node {node_uuid} is "
                                  "gone already")
    if migration is not None:
        conn.execute(T_MIG.update().where(T_MIG.c.uuid == change.migration_uuid).values(
            status=change.migration_status, updated_at=now))
    return HealResult(applied=True, generations=generations)


def _lock(conn: sa.Connection, query: sa.Select[Any]) -> sa.Row[Any] | None:
    return conn.execute(query.with_for_update() if conn.dialect.name == "postgresql"
                        else query).first()


def _check_still_stale(conn: sa.Connection, consumer_uuid: str, node_uuid: str) -> None:
    """Skip unless the allocation's consumer, read under its lock, holds nothing there."""
    alloc = conn.execute(sa.select(T_ALLOC.c.consumer_type, T_ALLOC.c.instance_uuid).where(
        T_ALLOC.c.consumer_uuid == consumer_uuid, T_ALLOC.c.node_uuid == node_uuid)).first()
    if alloc is None:
        raise HealSkipped(f"the allocation of {consumer_uuid} on node {node_uuid} is gone "
                          "already")
    node = conn.execute(sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
        T_NODES.c.uuid == node_uuid)).first()
    inst = _lock(conn, T_INST.select().where(T_INST.c.uuid == alloc.instance_uuid))
    if alloc.consumer_type == "migration":
        mig = _lock(conn, sa.select(T_MIG.c.status).where(T_MIG.c.uuid == consumer_uuid))
        if mig is not None and holds.migration_holds(mig.status):
            raise HealSkipped(f"migration {consumer_uuid} is {mig.status} now: it holds its "
                              "claim")
        return
    if inst is None or node is None:
        return
    record = rows.instance_from_row(inst)
    if holds.instance_holds_on(record, node.host, node.nodename):
        raise HealSkipped(
            f"instance {consumer_uuid} holds resources on {node.host}/{node.nodename} now "
            f"({record.vm_state}, task {record.task_state or 'none'}): its allocation is live")


def _check_still_stuck(conn: sa.Connection, change: HealChange) -> Migration:
    """Skip unless the migration is as read and nobody is left to finish it; returns its row."""
    mig = conn.execute(sa.select(T_MIG.c.instance_uuid).where(
        T_MIG.c.uuid == change.migration_uuid)).first()
    if mig is None:
        raise HealSkipped(f"migration {change.migration_uuid} has no record any more")
    _lock(conn, sa.select(T_INST.c.uuid).where(T_INST.c.uuid == mig.instance_uuid))
    row = _lock(conn, T_MIG.select().where(T_MIG.c.uuid == change.migration_uuid))
    if row is None:
        raise HealSkipped(f"migration {change.migration_uuid} has no record any more")
    if not holds.migration_holds(row.status) or row.updated_at != change.migration_updated_at:
        raise HealSkipped(f"migration {change.migration_uuid} changed since the audit read it "
                          f"(now {row.status}, updated at {row.updated_at})")
    if change.down_hosts:
        back = conn.execute(sa.select(T_SVC.c.host).where(
            T_SVC.c.host.in_(list(change.down_hosts)),
            services.heartbeat_within(change.service_down_time, time.time()))
        ).scalars().all()
        if back:
            raise HealSkipped(f"the compute service of host {', '.join(sorted(back))} is up "
                              f"again: it finishes migration {change.migration_uuid} itself")
    return rows.migration_from_row(row)


def _confirm(conn: sa.Connection, change: HealChange, migration: Migration, now: float) -> None:
    """Free the instance's own claim at the source; its move's claim becomes its own."""
    target = conn.execute(sa.select(
        T_ALLOC.c.node_uuid, T_ALLOC.c.numa_topology, T_ALLOC.c.pci_devices,
        T_NODES.c.host, T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid)).where(
        T_ALLOC.c.consumer_uuid == migration.uuid)).first()
    if target is None:
        raise HealSkipped(f"migration {migration.uuid} holds no claim to confirm")
    if change.source_node_uuid is not None:
        provider_rows.delete_allocations(conn, sa.and_(
            T_ALLOC.c.consumer_uuid == migration.instance_uuid,
            T_ALLOC.c.node_uuid == change.source_node_uuid), now)
    conn.execute(T_ALLOC.update().where(T_ALLOC.c.consumer_uuid == migration.uuid).values(
        consumer_uuid=migration.instance_uuid, consumer_type="instance"))
    row = conn.execute(T_INST.select().where(T_INST.c.uuid == migration.instance_uuid)).first()
    if row is not None:
        inst = rows.instance_from_row(row)
        alloc = rows.allocation_from_row(conn.execute(T_ALLOC.select().where(
            T_ALLOC.c.consumer_uuid == migration.instance_uuid,
            T_ALLOC.c.node_uuid == target.node_uuid)).first())
        healed = attrs.evolve(
            inst, flavor=migration.new_flavor, host=target.host, node=target.nodename,
            numa_topology=alloc.numa_topology, pci_devices=alloc.pci_devices)
        if migration.new_pci_requests is not None:   # the devices claimed were for these
            healed = attrs.evolve(healed, pci_requests=migration.new_pci_requests)
        rows.upsert_instance(conn, healed, now)
