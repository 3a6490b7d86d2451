"""The statements of a claim's transaction: guards, the generation swap, the rows.

A claim's transaction locks (or checks) in a fixed order, instance rows
first and the node row last, so two transactions never wait on each other
in a circle:

1. :func:`guard_requests` checks, under the instance row's lock, that a move
   is of a live instance with no other move in progress.
2. The node: :func:`bump_and_lock` moves its generation and takes its
   row's lock; the store compares the generation it moved from with the
   one the decision was made at (else it reads the node again, under that
   lock, and decides on fresh records).
3. :func:`write_plans`: the instance, migration and allocation rows; a
   known instance is checked here (not deleted, no other claim), under its
   row's lock.
   After a re-read, the node's usage at the new generation is recorded
   with them (``node_usage``), so the next claim that loses its race reads
   one row instead of summing every allocation of the node while it holds
   the lock.

On SQLite a writing transaction holds the whole database from its first
statement, so the order only matters on PostgreSQL.
"""

import functools

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from nova_lite.db import models, rows
from nova_lite.exception import (
    InstanceNotFound, InstanceStateConflict, InvalidInput, NodeNotFound)
from nova_lite.objects import DELETED, MIGRATION_IN_PROGRESS

T_NODES, T_ALLOC = models.compute_nodes, models.allocations
T_INST, T_MIG = models.instances, models.migrations


# The claim's statements are built once.  The ones every claim runs are also
# compiled once and run as SQL text (:class:`HotStatement`): measured on a
# SQLite file, 1,000 claims ran at 5,471/s with each statement executed by
# SQLAlchemy Core (about 9 us of Python a statement) and at 6,702/s this way
# (about 5 us); on PostgreSQL, 1,509/s against 1,583/s.
_SELECT_INSTANCE = sa.select(T_INST.c.uuid, T_INST.c.vm_state, T_INST.c.task_state,
                             T_INST.c.host, T_INST.c.node).where(
    T_INST.c.uuid == sa.bindparam("uuid"))
_SELECT_INSTANCE_LOCKED = _SELECT_INSTANCE.with_for_update()
_BUMP = T_NODES.update().where(T_NODES.c.uuid == sa.bindparam("node")).values(
    generation=T_NODES.c.generation + sa.literal_column("1")).returning(T_NODES.c.generation)
_UPDATE_INSTANCE = T_INST.update().where(T_INST.c.uuid == sa.bindparam("key"))
_INSERT_ALLOCATION = T_ALLOC.insert()
_INSERT_MIGRATION = T_MIG.insert()


class HotStatement:
    """A Core statement compiled once per dialect and run as its SQL text
    (``exec_driver_sql``) on the transaction's connection.

    Values must be plain DBAPI types (str, int, float, None): no SQLAlchemy
    type processing happens here.  Same transaction, same connection, same
    error handling as every other statement of the store.
    """

    def __init__(self, statement):
        self.statement = statement
        self._compiled = {}

    def _for(self, dialect):
        compiled = self._compiled.get(dialect.name)
        if compiled is None:
            done = self.statement.compile(dialect=dialect)
            order = tuple(done.positiontup) if done.positional else None
            compiled = self._compiled[dialect.name] = (done.string, order)
        return compiled

    def execute(self, conn, values):
        """Run with ``values`` (a dict by placeholder name); returns the result."""
        sql, order = self._for(conn.dialect)
        return conn.exec_driver_sql(
            sql, tuple(values[name] for name in order) if order else values)


@functools.cache
def _insert_new_instance(dialect_name):
    """INSERT of an instance row that does nothing if the uuid has one already."""
    insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    return HotStatement(insert(T_INST).on_conflict_do_nothing(index_elements=[T_INST.c.uuid]))


_HOT_BUMP = HotStatement(_BUMP)
_HOT_INSERT_ALLOCATION = HotStatement(_INSERT_ALLOCATION)


def _locked_instance(conn, instance_uuid):
    """The instance's row, locked until the transaction ends (None if unknown)."""
    query = _SELECT_INSTANCE_LOCKED if conn.dialect.name == "postgresql" else _SELECT_INSTANCE
    return conn.execute(query, {"uuid": instance_uuid}).first()


def holds_resources(vm_state, task_state):
    """The records' rule of :attr:`nova_lite.objects.Instance.holds_resources`."""
    from nova_lite.objects import Instance
    return Instance.state_holds_resources(vm_state, task_state)


def _guard_instance_claim(conn, instance_uuid):
    """A known instance may be claimed unless deleted or already holding a claim."""
    stored = _locked_instance(conn, instance_uuid)
    if stored is None:
        raise InvalidInput(f"Instance {instance_uuid} was claimed and removed by another "
                           "request at the same time; this claim is refused")
    if stored.vm_state == DELETED:
        raise InstanceStateConflict(instance_uuid, DELETED, "claimed",
                                    "deleted is final; a deleted instance is never claimed "
                                    "again")
    held = conn.execute(sa.select(T_NODES.c.host, T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid)).where(
        T_ALLOC.c.consumer_uuid == instance_uuid)).all()
    if held:
        where = ", ".join(f"{host}/{node}" for host, node in held)
        raise InvalidInput(f"Instance {instance_uuid} already holds a claim on node {where}; "
                           "abort it or free the instance before claiming again")


def _guard_move(conn, migration):
    """A move is of a live instance on record with no other move in progress."""
    stored = _locked_instance(conn, migration.instance_uuid)
    if stored is None:
        raise InstanceNotFound(migration.instance_uuid, "in the records")
    if not holds_resources(stored.vm_state, stored.task_state):
        raise InstanceStateConflict(
            migration.instance_uuid, stored.vm_state, f"moving ({migration.migration_type})",
            "there is nothing to move")
    moving = conn.execute(sa.select(T_MIG.c.uuid, T_MIG.c.status).where(
        T_MIG.c.instance_uuid == migration.instance_uuid,
        T_MIG.c.status.in_(MIGRATION_IN_PROGRESS))).first()
    if moving is not None:
        raise InvalidInput(
            f"Instance {migration.instance_uuid} already has migration {moving.uuid} "
            f"({moving.status}) in progress; confirm, revert or abort it first")


def guard_requests(conn, requests):
    """Step 1: every move's guard (:func:`_guard_move`), under its instance row's lock.

    Raises (and the transaction rolls back) on the first refusal.  An
    instance claim is checked when its row is written (:func:`write_plans`):
    a new instance has no row to lock, and inserting one before the node's
    lock would make an audit that adopts the node wait on it while holding
    the node.
    """
    for request in requests:
        if request.migration is not None:
            _guard_move(conn, request.migration)


def bump_and_lock(conn, node_uuid):
    """Move the node to its next generation; returns it (NodeNotFound if none).

    The update takes the node row's lock until the transaction ends (on
    SQLite the transaction holds the database already): whoever bumps
    second waits, then moves on from the first one's generation.
    """
    generation = _HOT_BUMP.execute(conn, {"node": node_uuid}).scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    return generation


def write_plans(conn, plans, now, usage=None):
    """The instance, migration and allocation rows of admitted plans.

    A new instance's row is inserted; a known one is checked under its
    row's lock (:func:`_guard_instance_claim`: not deleted, no other claim)
    and updated.  ``usage``: ``(node_uuid, generation, usage)`` of a claim
    that re-read the node under its lock (see :func:`record_usage`).
    """
    for plan in plans:
        instance = plan.instance
        if instance is None:
            continue
        if not _insert_new_instance(conn.dialect.name).execute(
                conn, rows.new_instance_values(instance, now)).rowcount:
            _guard_instance_claim(conn, instance.uuid)
            conn.execute(_UPDATE_INSTANCE, dict(rows.instance_values(instance, now),
                                                key=instance.uuid))
    migrations = [rows.migration_values(p.migration, now) for p in plans
                  if p.migration is not None]
    if migrations:
        conn.execute(_INSERT_MIGRATION, migrations)
    allocations = [rows.allocation_values(plan.allocation, now) for plan in plans]
    if usage is None:
        for values in allocations:
            _HOT_INSERT_ALLOCATION.execute(conn, values)
        return
    node_uuid, generation, before = usage
    totals = usage_after(before, allocations)
    if conn.dialect.name != "postgresql" or not allocations:
        for values in allocations:
            _HOT_INSERT_ALLOCATION.execute(conn, values)
        rows.record_usage(conn, node_uuid, generation, totals)
        return
    # PostgreSQL: the last allocation and the usage row in one statement,
    # one round trip less while the node's lock is held.
    for values in allocations[:-1]:
        _HOT_INSERT_ALLOCATION.execute(conn, values)
    conn.exec_driver_sql(_pg_allocation_and_usage(), dict(
        allocations[-1], **{f"u_{f}": n for f, n in totals.items()},
        u_node_uuid=node_uuid, u_generation=generation))


def usage_after(usage, allocations):
    """``usage`` (see :func:`nova_lite.db.rows.load_node_locked`) with the
    allocation rows ``allocations`` (dicts by column) added, counted as the
    database would count them."""
    totals = dict(usage)
    for values in allocations:
        for _, col in rows.STD_COLUMNS:
            totals[col] += values[col]
        if values["other"] is not None or values["numa_topology"] is not None or \
                values["pci_devices"] is not None:
            totals["extras"] += 1
    return totals


@functools.cache
def _pg_allocation_and_usage():
    """INSERT of an allocation with, in a WITH clause, the upsert of the node's usage row."""
    dialect = postgresql.dialect(paramstyle="pyformat")
    fields = ("node_uuid", "generation", *rows.USAGE_FIELDS)
    upsert = postgresql.insert(models.node_usage).values(
        {f: sa.bindparam(f"u_{f}") for f in fields})
    upsert = upsert.on_conflict_do_update(
        index_elements=[models.node_usage.c.node_uuid],
        set_={f: upsert.excluded[f] for f in fields[1:]})
    allocation = _INSERT_ALLOCATION.values(
        {c.name: sa.bindparam(c.name) for c in T_ALLOC.columns})
    return (f"WITH usage_row AS ({upsert.compile(dialect=dialect)}) "
            f"{allocation.compile(dialect=dialect)}")
