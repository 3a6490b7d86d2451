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
   After a re-read, or a compare-and-swap on a record whose usage is
   known (no allocation with extras), the node's usage at the new
   generation is recorded with them (``node_usage``), so the next claim
   that loses its race reads one row instead of summing every allocation
   of the node while it holds the lock.

On SQLite a writing transaction holds the whole database from its first
statement, so the order only matters on PostgreSQL.

On PostgreSQL each statement is a round trip.  Under the node's lock the
re-read is sent with the bump (:func:`bump_and_reread`: both in one round
trip), and the common cases are folded into one statement each: a claim
of one new instance (:data:`PG_SINGLE_CLAIM`, sent alone in autocommit
mode: the bump, the instance's row and its allocation if the record it
was decided on is still current or the database finds that only usage
changed since and the plan still fits its bounds; else nothing, and a
transaction of the steps above decides under the lock), and, after a
re-read under the node's lock, a new instance's row, its allocation and
the usage row together.  Anything
else (a move, a known instance, several claims at once) takes the steps
above.  The one statement keeps the usage row too: a claim whose
compare-and-swap holds records the usage it commits at from the record
it was decided on (the node at exactly the generation the bump moved
from), so the claims that lost the race to it are checked by the
database rather than decided again under the lock.
"""

import operator
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from nova_lite import holds
from nova_lite.db import holds_sql, models, providers as provider_rows, rows, serialize as ser
from nova_lite.db import queries, task_writes
from nova_lite.db.direct import DirectConnection
from nova_lite.exception import (
    InstanceNotFound, InstanceStateConflict, InvalidInput, NodeNotFound)
from nova_lite.model.plans import MAX_AMOUNT, ClaimPlan, ClaimRequest
from nova_lite.objects import DELETED, ComputeNode, Migration
from nova_lite.validators import replaced

T_NODES, T_ALLOC = models.compute_nodes, models.allocations
T_INST, T_MIG, T_USAGE = models.instances, models.migrations, models.node_usage


# The claim's statements are built once, and run on the transaction's DBAPI
# cursor (:mod:`nova_lite.db.direct`), each compiled once per dialect.
_SELECT_INSTANCE = sa.select(T_INST.c.uuid, T_INST.c.vm_state, T_INST.c.task_state,
                             T_INST.c.host, T_INST.c.node, T_INST.c.flavor).where(
    T_INST.c.uuid == sa.bindparam("uuid"))
_SELECT_INSTANCE_LOCKED = _SELECT_INSTANCE.with_for_update()
_SELECT_HELD = sa.select(T_NODES.c.host, T_NODES.c.nodename).select_from(
    T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid)).where(
    T_ALLOC.c.consumer_uuid == sa.bindparam("uuid"))
_SELECT_MOVING = sa.select(T_MIG.c.uuid, T_MIG.c.status).where(
    T_MIG.c.instance_uuid == sa.bindparam("uuid"),
    holds_sql.migration_holds()).limit(1)
_BUMP = T_NODES.update().where(T_NODES.c.uuid == sa.bindparam("node")).values(
    generation=T_NODES.c.generation + sa.literal_column("1")).returning(T_NODES.c.generation)
_UPDATE_INSTANCE = T_INST.update().where(T_INST.c.uuid == sa.bindparam("key")).values(
    {name: sa.bindparam(name) for name in rows.INSTANCE_UPDATE_COLUMNS})
_INSERT_ALLOCATION = T_ALLOC.insert().values(
    {c.name: sa.bindparam(c.name) for c in T_ALLOC.columns})
_INSERT_MIGRATION = T_MIG.insert().values({c.name: sa.bindparam(c.name) for c in T_MIG.columns})


def _new_instance_insert(dialect: Any, columns: Iterable[str]) -> sa.ClauseElement:
    """``dialect``'s INSERT of a new instance's ``columns``; nothing if its uuid is known."""
    return dialect.insert(T_INST).values(  # type: ignore[no-any-return]
        {c: sa.bindparam(c) for c in columns}).on_conflict_do_nothing(
        index_elements=[T_INST.c.uuid])


_DIALECTS = (("postgresql", postgresql), ("sqlite", sqlite))
_INSERT_NEW_INSTANCE = {name: _new_instance_insert(dialect, T_INST.columns.keys())
                        for name, dialect in _DIALECTS}


class _LeanInsert:
    """``full``, an INSERT of every column of a row, and ``lean``, the same
    without the columns ``nullable``, for a row that holds NULL in every one
    of them (a plain claim's rows: no NUMA cell, no PCI device, no class
    beyond the standard ones, no zone), which then take their NULL default.
    ``sqlite3`` binds a None through a failed lookup of an adapter (an
    exception made and dropped, for each): the lean statement binds none."""

    __slots__ = ("full", "lean", "_nullable", "_nulls")

    def __init__(self, full: sa.ClauseElement, lean: sa.ClauseElement,
                 nullable: tuple[str, ...]) -> None:
        self.full, self.lean = full, lean
        self._nullable = operator.itemgetter(*nullable)
        self._nulls = (None,) * len(nullable)

    def of(self, values: Mapping[str, Any]) -> sa.ClauseElement:
        """The statement for a row of ``values`` (every column named)."""
        return self.lean if self._nullable(values) == self._nulls else self.full


_INSTANCE_NULLABLE = ("task_state", "numa_topology", "pci_requests", "pci_devices",
                      "availability_zone")
_LEAN_INSERT_NEW_INSTANCE = {
    name: _LeanInsert(_INSERT_NEW_INSTANCE[name], _new_instance_insert(
        dialect, [c for c in T_INST.columns.keys() if c not in _INSTANCE_NULLABLE]),
        _INSTANCE_NULLABLE)
    for name, dialect in _DIALECTS}
_ALLOCATION_NULLABLE = ("other", "numa_topology", "pci_devices", "providers")
_LEAN_INSERT_ALLOCATION = _LeanInsert(_INSERT_ALLOCATION, T_ALLOC.insert().values(
    {c.name: sa.bindparam(c.name) for c in T_ALLOC.columns
     if c.name not in _ALLOCATION_NULLABLE}), _ALLOCATION_NULLABLE)

_V = TypeVar("_V")

#: ``(node_uuid, generation, usage)`` of a claim that re-read its node under
#: the lock: ``usage`` as :func:`nova_lite.db.rows.load_node_locked` gives it.
LockedUsage = tuple[str, int, Mapping[str, int]]


def _locked_instance(conn: DirectConnection, instance_uuid: str) -> Any:
    """The instance's row, locked until the transaction ends (None if unknown)."""
    query = _SELECT_INSTANCE_LOCKED if conn.dialect.name == "postgresql" else _SELECT_INSTANCE
    return conn.execute(query, {"uuid": instance_uuid}).first()


def _guard_instance_claim(conn: DirectConnection, instance_uuid: str) -> None:
    """A known instance may be claimed unless deleted or already holding a claim."""
    stored = _locked_instance(conn, instance_uuid)
    if stored is None:
        raise InvalidInput(f"Instance {instance_uuid} was claimed and removed by another "
                           "request at the same time; this claim is refused")
    if stored.vm_state == DELETED:
        raise InstanceStateConflict(instance_uuid, DELETED, "claimed",
                                    "deleted is final; a deleted instance is never claimed "
                                    "again")
    held = conn.execute(_SELECT_HELD, {"uuid": instance_uuid}).all()
    if held:
        where = ", ".join(f"{host}/{node}" for host, node in held)
        raise InvalidInput(f"Instance {instance_uuid} already holds a claim on node {where}; "
                           "abort it or free the instance before claiming again")


def _guard_move(conn: DirectConnection, migration: Migration) -> None:
    """A move is of a live instance on record with no other move in progress."""
    stored = _locked_instance(conn, migration.instance_uuid)
    if stored is None:
        raise InstanceNotFound(migration.instance_uuid, "in the records")
    if not holds.instance_holds(stored.vm_state, stored.task_state,
                                placed=stored.host is not None and stored.node is not None):
        raise InstanceStateConflict(
            migration.instance_uuid, stored.vm_state, f"moving ({migration.migration_type})",
            "there is nothing to move")
    recorded = ser.flavor_from_json(stored.flavor)
    if recorded != migration.old_flavor:
        raise InvalidInput(
            f"Instance {migration.instance_uuid} is recorded with flavor {recorded.name!r}, "
            f"not {migration.old_flavor.name!r}, since this move was planned; nothing was "
            "claimed: move it again")
    moving = conn.execute(_SELECT_MOVING, {"uuid": migration.instance_uuid}).first()
    if moving is not None:
        raise InvalidInput(
            f"Instance {migration.instance_uuid} already has migration {moving.uuid} "
            f"({moving.status}) in progress; confirm, revert or abort it first")


def guard_requests(conn: DirectConnection, requests: Iterable[ClaimRequest]) -> None:
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


def bump_and_lock(conn: sa.Connection | DirectConnection, node_uuid: str) -> int:
    """Move the node to its next generation; returns it (NodeNotFound if none).

    The update takes the node row's lock until the transaction ends (on
    SQLite the transaction holds the database already): whoever bumps
    second waits, then moves on from the first one's generation.
    """
    generation = conn.execute(_BUMP, {"node": node_uuid}).scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    return generation


def bump_and_reread(conn: DirectConnection, node_uuid: str) -> tuple[int, list[Any]]:
    """:func:`bump_and_lock` and the node's re-read under that lock, sent
    together; returns ``(generation, rows)``, the rows for
    :func:`nova_lite.db.rows.load_node_locked`.

    On PostgreSQL that is one round trip: the read runs as soon as the bump
    has the lock, and the lock is not held while its answer travels back
    before the read is even sent.
    """
    bumped, found = conn.execute_together([
        (_BUMP, {"node": node_uuid}), (rows.NODE_USAGE_INVENTORIES_BUMPED, {"node": node_uuid})])
    generation = bumped.scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    return generation, found.all()


def write_plans(conn: DirectConnection, plans: Sequence[ClaimPlan], now: float,
                usage: LockedUsage | None = None) -> None:
    """The instance, migration and allocation rows of admitted plans.

    A new instance's row is inserted; a known one is checked under its
    row's lock (:func:`_guard_instance_claim`: not deleted, no other claim)
    and updated.  ``usage``: ``(node_uuid, generation, usage)`` of a claim
    that re-read the node under its lock, or whose compare-and-swap held on
    a record whose usage is known (:func:`recorded_usage`): the node's
    ``node_usage`` row is recorded with the plans (see
    :func:`nova_lite.db.rows.record_usage`).
    Each child provider an allocation lands on moves to its next
    generation (:func:`nova_lite.db.providers.bump_children`).
    """
    if usage is None and conn.dialect.name == "postgresql" and _pg_on_children(conn, plans, now):
        return
    for plan in plans:
        if plan.allocation.providers:
            provider_rows.bump_children(conn, plan.allocation.node_uuid,
                                        plan.allocation.providers, now)
    if usage is not None and conn.dialect.name == "postgresql" and len(plans) == 1 \
            and plans[0].instance is not None and plans[0].migration is None \
            and _pg_new_instance_with_usage(conn, plans[0], now, usage):
        return
    for plan in plans:
        instance = plan.instance
        if instance is None:
            continue
        values = rows.new_instance_values(instance, now)
        if not conn.execute(_LEAN_INSERT_NEW_INSTANCE[conn.dialect.name].of(values),
                            values).rowcount:
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
            conn.execute(_LEAN_INSERT_ALLOCATION.of(values), values)
        return
    node_uuid, generation, before = usage
    totals = usage_after(before, allocations, generation)
    if conn.dialect.name != "postgresql" or not allocations:
        for values in allocations:
            conn.execute(_LEAN_INSERT_ALLOCATION.of(values), values)
        rows.record_usage(conn, node_uuid, generation, totals)
        return
    # PostgreSQL: the last allocation and the usage row in one statement,
    # one round trip less while the node's lock is held.
    for values in allocations[:-1]:
        conn.execute(_LEAN_INSERT_ALLOCATION.of(values), values)
    conn.execute(_PG_ALLOCATION_AND_USAGE, dict(
        allocations[-1], **_prefixed(totals, "u_"), u_node_uuid=node_uuid,
        u_generation=generation))


#: The standard classes, each with a column of its own in an allocation's row.
_STD_CLASSES = frozenset(models.ALLOCATION_COLUMNS)
#: The parameters of the lean INSERTs (:class:`_LeanInsert`), in their
#: compiled order, as :func:`write_plain_rows` gives them.
_PLAIN_INSTANCE_NAMES = ("uuid", "host", "node", "vm_state", "project_id", "user_id", "flavor",
                         "created_at", "updated_at")
_PLAIN_ALLOCATION_NAMES = ("consumer_uuid", "node_uuid", "consumer_type", "instance_uuid",
                           *(col for _, col in rows.STD_COLUMNS), "flavor", "created_at")


def plain_rows(plan: ClaimPlan) -> bool:
    """Whether ``plan`` is a plain claim: a build's amounts of the standard
    classes (VCPU, PCPU, MEMORY_MB, DISK_GB) on the node itself, for an
    instance with no task state, NUMA cell, PCI request or device, nor zone.
    Every nullable column of its two rows is then NULL, and
    :func:`write_plain_rows` may write them."""
    instance, alloc = plan.instance, plan.allocation
    return (instance is not None and plan.migration is None and not alloc.providers
            and alloc.numa_topology is None and not alloc.pci_devices
            and _STD_CLASSES.issuperset(alloc.resources)
            and instance.task_state is None and instance.numa_topology is None
            and not instance.pci_requests and not instance.pci_devices
            and instance.availability_zone is None)


def write_plain_rows(conn: DirectConnection, plan: ClaimPlan, now: float) -> bool:
    """The rows of a plain claim (:func:`plain_rows`), as :func:`write_plans`
    writes them with no usage row, built as tuples: its new instance's row,
    then its allocation's.  Returns False, having written nothing, if the
    instance is recorded already: :func:`write_plans` then guards and
    updates it.

    The rows are the lean INSERTs' (:class:`_LeanInsert`); a test holds
    them equal to :func:`write_plans`' rows.
    """
    instance, alloc = plan.instance, plan.allocation
    assert instance is not None   # see plain_rows
    flavor = ser.flavor_to_json(alloc.flavor)
    if not conn.execute_row(_LEAN_INSERT_NEW_INSTANCE[conn.dialect.name].lean,
                            _PLAIN_INSTANCE_NAMES,
                            (instance.uuid, instance.host, instance.node, instance.vm_state,
                             instance.project_id, instance.user_id,
                             flavor if instance.flavor is alloc.flavor
                             else ser.flavor_to_json(instance.flavor), now, now)).rowcount:
        return False
    amounts = alloc.resources
    conn.execute_row(_LEAN_INSERT_ALLOCATION.lean, _PLAIN_ALLOCATION_NAMES,
                     (alloc.consumer_uuid, alloc.node_uuid, alloc.consumer_type,
                      alloc.instance_uuid, *[amounts.get(rc, 0) for rc, _ in rows.STD_COLUMNS],
                      flavor, now))
    return True


_PG_INSERT_ALLOCATION_IF_NEW = postgresql.insert(T_ALLOC).values(
    {c.name: sa.bindparam(c.name) for c in T_ALLOC.columns}).on_conflict_do_nothing(
    index_elements=[T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid])


def _pg_on_children(conn: DirectConnection, plans: Sequence[ClaimPlan], now: float) -> bool:
    """PostgreSQL, a claim decided on the current record that lands amounts on
    child providers: the children's generations, the new instance's row and
    its allocation in one round trip.  False (nothing sent) for anything
    else: a move, several plans, no child.

    Every statement is one that writes nothing where it must not: a child
    no longer recorded is moved by none (refused below), a known instance
    is not inserted (it is then guarded and updated as :func:`write_plans`
    does), an allocation the consumer holds on the node already is not
    inserted again (the guard then refuses the claim).
    """
    if len(plans) != 1 or plans[0].instance is None or plans[0].migration is not None \
            or not plans[0].allocation.providers:
        return False
    plan = plans[0]
    instance, allocation = plan.instance, plan.allocation
    assert instance is not None
    names = sorted(allocation.providers)
    statements: list[tuple[sa.ClauseElement, Mapping[str, Any] | None]] = [
        (provider_rows.BUMP_CHILD, provider_rows.bump_values(allocation.node_uuid, name, now))
        for name in names]
    statements.append((_INSERT_NEW_INSTANCE["postgresql"], rows.new_instance_values(instance,
                                                                                 now)))
    statements.append((_PG_INSERT_ALLOCATION_IF_NEW, rows.allocation_values(allocation, now)))
    results = conn.execute_together(statements)
    for name, moved in zip(names, results):
        if moved.rowcount != 1:
            raise InvalidInput(f"child provider {name} of node {allocation.node_uuid}, named by "
                               "this claim, is no longer recorded; nothing was claimed: try "
                               "again")
    inserted, allocated = results[-2].rowcount, results[-1].rowcount
    if not inserted:
        _guard_instance_claim(conn, instance.uuid)
        conn.execute(_UPDATE_INSTANCE, dict(rows.instance_values(instance, now),
                                            key=instance.uuid))
    if not allocated:
        raise InvalidInput(f"Instance {instance.uuid} already holds a claim on node "
                           f"{allocation.node_uuid}; abort it or free the instance before "
                           "claiming again")
    return True


def _pg_new_instance_with_usage(conn: DirectConnection, plan: ClaimPlan, now: float,
                                usage: LockedUsage) -> bool:
    """:data:`_PG_NEW_INSTANCE_WITH_USAGE`: True if it wrote the plan; False
    if the instance is known (its row, guard and allocation are then still
    to write; the usage row it wrote counts them already)."""
    node_uuid, generation, before = usage
    assert plan.instance is not None   # the caller's condition: a new instance's plan
    allocation = rows.allocation_values(plan.allocation, now)
    values = dict(_prefixed(allocation, "a_"),
                  **_prefixed(rows.new_instance_values(plan.instance, now), "i_"),
                  **_prefixed(usage_after(before, [allocation], generation), "u_"),
                  u_node_uuid=node_uuid, u_generation=generation)
    return bool(conn.execute(_PG_NEW_INSTANCE_WITH_USAGE, values).rows)


def usage_after(usage: Mapping[str, int], allocations: Iterable[Mapping[str, Any]],
                generation: int) -> dict[str, int]:
    """``usage`` (see :func:`nova_lite.db.rows.load_node_locked`) with the
    allocation rows ``allocations`` (dicts by column) added at ``generation``,
    counted as the database would count them.

    An allocation with extras (other classes, NUMA cells, PCI devices)
    changes more than the standard columns, so the row's ``since`` moves to
    ``generation``: a record older than that is no longer the node's.
    """
    totals = dict(usage)
    for values in allocations:
        for _, col in rows.STD_COLUMNS:
            totals[col] += values[col]
        if values["other"] is not None or values["numa_topology"] is not None or \
                values["pci_devices"] is not None or values["providers"] is not None:
            totals["extras"] += 1
            totals["since"] = generation
    return totals


def _pg_usage_upsert_cte() -> sa.CTE:
    """The upsert of the node's usage row (values ``u_<column>``), as a WITH clause."""
    fields = ("node_uuid", "generation", *rows.USAGE_ROW_FIELDS)
    upsert = postgresql.insert(models.node_usage).values(
        {f: sa.bindparam(f"u_{f}") for f in fields})
    return upsert.on_conflict_do_update(
        index_elements=[models.node_usage.c.node_uuid],
        set_={f: upsert.excluded[f] for f in fields[1:]}).cte("usage_row")


def _row_of_values(table: sa.Table, prefix: str) -> sa.Select[Any]:
    """SELECT of one row of ``table`` from values named ``<prefix><column>``.

    Text values are sent without a cast: PostgreSQL gives them the
    column's type, and the statements that use this stay shorter.
    """
    return sa.select(*[sa.bindparam(f"{prefix}{c.name}",
                                    type_=None if isinstance(c.type, sa.String) else c.type)
                       for c in table.columns])


class _PrefixedNames(dict[str, str]):
    """``{name: prefix + name}``, each made once and interned: a claim's dict
    of values names each of its forty-odd keys by a string made before,
    whose hash is known, not by a new one hashed on every claim."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def __missing__(self, name: str) -> str:
        key = self[name] = sys.intern(self.prefix + name)
        return key


_NAMES = {prefix: _PrefixedNames(prefix) for prefix in ("a_", "i_", "u_")}
#: The one-statement claims' names of the instance's and the allocation's
#: columns, in the order of their rows (``rows.new_instance_row``, ``rows.allocation_row``).
_INSTANCE_NAMES = tuple(_NAMES["i_"][col] for col in rows.INSTANCE_ROW_COLUMNS)
_ALLOCATION_NAMES = tuple(_NAMES["a_"][col] for col in rows.ALLOCATION_ROW_COLUMNS)
#: ``(class, "most_<column>")`` of each class with a column of its own.
_MOST_NAMES = tuple((rc, f"most_{col}") for rc, col in rows.STD_COLUMNS)


def _prefixed(values: Mapping[str, _V], prefix: str) -> dict[str, _V]:
    names = _NAMES[prefix]
    return {names[k]: v for k, v in values.items()}


def _build_pg_allocation_and_usage() -> sa.Insert:
    """INSERT of an allocation with, in a WITH clause, the upsert of the node's usage row."""
    return _INSERT_ALLOCATION.add_cte(_pg_usage_upsert_cte())


_PG_ALLOCATION_AND_USAGE = _build_pg_allocation_and_usage()


def _build_pg_new_instance_with_usage() -> sa.Insert:
    """One statement: a new instance's row, its allocation and the node's
    usage row; the allocation only if the instance had no row."""
    instance = postgresql.insert(T_INST).values(
        {c.name: sa.bindparam(f"i_{c.name}") for c in T_INST.columns}).on_conflict_do_nothing(
        index_elements=[T_INST.c.uuid]).returning(T_INST.c.uuid).cte("instance_row")
    return T_ALLOC.insert().from_select(
        [c.name for c in T_ALLOC.columns],
        _row_of_values(T_ALLOC, "a_").where(sa.exists(sa.select(instance.c.uuid)))).returning(
        T_ALLOC.c.consumer_uuid).add_cte(_pg_usage_upsert_cte())


_PG_NEW_INSTANCE_WITH_USAGE = _build_pg_new_instance_with_usage()


def _build_pg_single_claim(with_task: bool = False) -> sa.Select[Any]:
    """One statement, alone in its transaction: a new instance's claim,
    written whole if the database admits it, else nothing at all;
    ``with_task``: and one waiting task recorded, its host notified.

    1. ``node_lock``: the node row, locked (``FOR UPDATE``: a claim that
       comes second waits for the first one's commit and then reads the
       generation it left), unless the instance has a row already (then
       nothing happens at all).  ``held``: the generation it holds.
    2. ``usage_row``: the node's ``node_usage`` row, inserted or, if the
       node has one, updated (``INSERT ... ON CONFLICT``: PostgreSQL finds
       and locks the row's latest version, even one committed by the
       lock's previous holder after this statement began, and evaluates
       the update's conditions on it, not on the statement's snapshot).
       The row takes the allocation (usage added, at generation ``held``
       + 1) if it is of generation ``held`` (so current) and either
       ``held`` is the generation the plan was decided at (the
       compare-and-swap) or the database admits the plan: the row's
       ``since`` is no later than the plan's record (so the inventories,
       owner and reported flag are the ones decided on), the plan is plain
       and every class stays within the plan's bounds.  Else, when the
       compare-and-swap holds and the record's usage is ``known`` (it has
       no allocation with extras), the row becomes that usage plus the
       allocation (values ``u_<field>``): the record is the node at exactly
       the generation ``held``.  Else the row is left as it is; a node
       with no row at all then gets one of generation -1, which no node
       ever has: it vouches for nothing, and the next claim that decides
       under the node's lock records the real one.
    3. ``ok``: the claim is admitted if the compare-and-swap holds or the
       usage row took it.
    4. Only then ``bump``: the node moves to generation ``held`` + 1, and
       the instance's row and its allocation are written.

    Returns one row (the new generation, and the node's usage row as
    the statement left it, null if it wrote none) if the claim was
    written, else no row, and then the statement
    wrote nothing: a claim it does not admit (or of a known instance) is
    decided by a transaction of the steps of the module's first part.  An
    instance recorded between the check and the insert fails the whole
    statement on its primary key.  So it needs no transaction of its own
    making: sent in autocommit mode it is one round trip where BEGIN and
    COMMIT around it made three.

    ``with_task`` (:data:`PG_SINGLE_CLAIM_WITH_TASK`): the task's row is
    inserted with the claim, and only with it; its columns come first in
    the one row, named ``t_<column>``.
    """
    one: sa.ColumnElement[int] = sa.literal_column("1")
    node = sa.bindparam("node", type_=sa.String)
    unknown = ~sa.exists().where(T_INST.c.uuid == sa.bindparam("i_uuid"))
    lock = sa.select(T_NODES.c.generation).where(
        T_NODES.c.uuid == node, unknown).with_for_update().cte("node_lock")
    expected = sa.bindparam("expected", type_=sa.Integer)
    known = sa.bindparam("known", type_=sa.Boolean)
    extra = sa.bindparam("extra", type_=sa.Integer)
    amount = {col: sa.bindparam(f"a_{col}", type_=T_ALLOC.c[col].type)
              for _, col in rows.STD_COLUMNS}
    swapped = lock.c.generation == expected
    # The row the claim leaves if the node has none: the record's usage plus
    # the allocation when the swap held and that usage is known, else one of
    # generation -1 (no node has that generation: it vouches for nothing).
    # A node with a row reaches the update below, on the row's latest
    # version, even one inserted after this statement began.
    insert = postgresql.insert(T_USAGE).from_select(
        ["node_uuid", "generation", *rows.USAGE_ROW_FIELDS],
        sa.select(node,
                  sa.case((sa.and_(swapped, known), lock.c.generation + one),
                          else_=sa.literal_column("-1")),
                  *[sa.bindparam(f"u_{f}", type_=T_USAGE.c[f].type)
                    for f in rows.USAGE_ROW_FIELDS]).select_from(lock))
    recorded = insert.excluded.generation >= sa.literal_column("0")   # swapped and known
    held = sa.select(lock.c.generation).scalar_subquery()
    moved_to = held + one
    admitted = sa.and_(
        sa.bindparam("plain", type_=sa.Boolean), T_USAGE.c.since <= expected,
        *[T_USAGE.c[col] + amount[col] <= sa.bindparam(f"most_{col}", type_=sa.BigInteger)
          for _, col in rows.STD_COLUMNS])
    usage = insert.on_conflict_do_update(
        index_elements=[T_USAGE.c.node_uuid],
        set_={"generation": moved_to,
              **{col: sa.case((recorded, insert.excluded[col]),
                              else_=T_USAGE.c[col] + amount[col])
                 for _, col in rows.STD_COLUMNS},
              "extras": sa.case((recorded, insert.excluded.extras),
                                else_=T_USAGE.c.extras + extra),
              "since": sa.case((extra == one, moved_to),
                               (sa.or_(~recorded, T_USAGE.c.generation == expected),
                                T_USAGE.c.since),
                               else_=insert.excluded.since)},
        where=sa.or_(recorded, sa.and_(T_USAGE.c.generation == held, sa.or_(
            held == expected, admitted)))).returning(
        T_USAGE.c.generation, *[T_USAGE.c[f] for f in rows.USAGE_FIELDS]).cte("usage_row")
    ok = sa.select(lock.c.generation).where(sa.or_(
        swapped, sa.exists().where(usage.c.generation == lock.c.generation + one))).cte("ok")
    bump = T_NODES.update().where(
        T_NODES.c.uuid == node, sa.exists(sa.select(ok.c.generation))).values(
        generation=T_NODES.c.generation + one, change_seq=_CHANGE_SEQ).returning(
        T_NODES.c.generation).cte("bump")
    return _claim_with_bump(bump, (bump.c.generation, *[usage.c[f] for f in rows.USAGE_FIELDS]),
                            bump.outerjoin(usage, sa.true()), with_task)


#: The one-statement claims move the node's change sequence themselves, to
#: the value its trigger would give (so the trigger's PL/pgSQL function is
#: not called for them: revision 0015).
_CHANGE_SEQ = sa.literal_column(queries.PG_CHANGE_SEQ_SQL, type_=sa.BigInteger)


def _claim_with_bump(bump: sa.CTE, columns: tuple[sa.ColumnElement[Any], ...],
                     source: sa.FromClause, with_task: bool) -> sa.Select[Any]:
    """The end of a one-statement claim whose node moved on in ``bump`` (a
    WITH clause of one row or none): the instance's row and its allocation
    inserted with the bump's row, and, ``with_task``, one waiting task
    (:func:`nova_lite.db.task_writes.insert_one_with`), whose columns come
    first in the one row, named ``t_<column>``; then ``columns`` of
    ``source``."""
    instance = T_INST.insert().from_select(
        [c.name for c in T_INST.columns],
        _row_of_values(T_INST, "i_").select_from(bump)).cte("instance_row")
    allocation = T_ALLOC.insert().from_select(
        [c.name for c in T_ALLOC.columns],
        _row_of_values(T_ALLOC, "a_").select_from(bump)).cte("allocation_row")
    # PostgreSQL runs every data-modifying CTE to its end, read or not.
    if not with_task:
        return sa.select(*columns).select_from(source).add_cte(instance, allocation)
    task = task_writes.insert_one_with(bump).cte("task_row")
    return sa.select(*[c.label(f"t_{c.name}") for c in task.c], *columns).select_from(
        task.join(source, sa.true())).add_cte(instance, allocation)


def _build_pg_plain_claim(with_task: bool = False) -> sa.Select[Any]:
    """One statement, alone in its transaction: a new instance's claim,
    written whole if the node is still at the generation the plan was
    decided at (the compare-and-swap), else nothing at all; ``with_task``:
    and one waiting task recorded, its host notified.

    :func:`_build_pg_single_claim` without the node's ``node_usage`` row:
    no row lock before the bump, no usage row to upsert, no check of a plan
    decided on an older record.  The bump's own ``WHERE`` is the
    compare-and-swap (a claim that queued on the node's lock finds the
    generation moved on and updates nothing) and holds only for an instance
    with no row yet; the instance's row and its allocation are inserted
    only with the bump's row.  Returns one row (the new generation; the
    task's columns first, named ``t_<column>``, with ``with_task``) if the
    claim was written, else no row, and then the statement wrote nothing.

    For a store that is a node's only writer of late (see
    :data:`nova_lite.db.store.PLAIN_CLAIM_AFTER_SWAPS`): its records of the
    node are current, so its compare-and-swaps hold, and no other writer
    has a stale claim for the usage row to admit.
    """
    one: sa.ColumnElement[int] = sa.literal_column("1")
    node = sa.bindparam("node", type_=sa.String)
    unknown = ~sa.exists().where(T_INST.c.uuid == sa.bindparam("i_uuid"))
    bump = T_NODES.update().where(
        T_NODES.c.uuid == node, T_NODES.c.generation == sa.bindparam("expected", type_=sa.Integer),
        unknown).values(generation=T_NODES.c.generation + one, change_seq=_CHANGE_SEQ).returning(
        T_NODES.c.generation).cte("bump")
    return _claim_with_bump(bump, (bump.c.generation,), bump, with_task)


#: See :func:`_build_pg_single_claim`: the common claim in one round trip,
#: sent in autocommit mode (:meth:`nova_lite.db.engine.Database.write_alone`).
#: The node row's lock is held for the statement alone, so the claims that
#: queue on a node wait for no round trip of the one before them.
PG_SINGLE_CLAIM = _build_pg_single_claim()

#: :data:`PG_SINGLE_CLAIM` with one waiting task recorded in it (a build's
#: claim and its host's build task): see :func:`_build_pg_single_claim`.
#: Its values: the claim's and :func:`nova_lite.db.task_writes.one_values`.
PG_SINGLE_CLAIM_WITH_TASK = _build_pg_single_claim(with_task=True)

#: See :func:`_build_pg_plain_claim`: :data:`PG_SINGLE_CLAIM` for a node
#: this store alone writes of late; its values: :func:`plain_claim_row`.
PG_PLAIN_CLAIM = _build_pg_plain_claim()

#: :data:`PG_PLAIN_CLAIM` with one waiting task recorded in it; its values:
#: :func:`plain_claim_row` and :func:`nova_lite.db.task_writes.one_row`.
PG_PLAIN_CLAIM_WITH_TASK = _build_pg_plain_claim(with_task=True)


def single_claim_values(node: ComputeNode, plan: ClaimPlan,
                        now: float) -> dict[str, Any] | None:
    """The values of :data:`PG_SINGLE_CLAIM` for ``plan`` decided on ``node``,
    or None if the plan is not a case it covers (one new instance, no move).

    The database may check the plan against newer usage (see ``bounds``
    of :class:`~nova_lite.model.plans.ClaimPlan`) only if it is plain: its
    classes all have columns of their own, and it places no NUMA cell, no
    PCI device and no other class.
    """
    if plan.instance is None or plan.migration is not None:
        return None
    allocation_row = rows.allocation_row(plan.allocation, now)
    allocation = dict(zip(rows.ALLOCATION_ROW_COLUMNS, allocation_row))
    bounds = plan.bounds
    plain = bounds is not None and allocation["other"] is None \
        and allocation["numa_topology"] is None and allocation["pci_devices"] is None \
        and allocation["providers"] is None \
        and all(rc in models.ALLOCATION_COLUMNS for rc in bounds) \
        and all(allocation[col] == 0 or rc in bounds for rc, col in rows.STD_COLUMNS)
    # A class the plan does not ask for is not checked (a node over capacity
    # still takes what makes it no worse): its bound is the most recorded.
    most = {key: bounds.get(rc, MAX_AMOUNT) if plain and bounds is not None else 0
            for rc, key in _MOST_NAMES}
    extra = int(allocation["other"] is not None or allocation["numa_topology"] is not None
                or allocation["pci_devices"] is not None or allocation["providers"] is not None)
    # The usage row at the next generation if the compare-and-swap holds:
    # ``node``'s usage plus the allocation, as ``usage_after`` counts it.
    after = usage_after(recorded_usage(node), [allocation], node.generation + 1)
    # One dict, filled in place: the statement's 40-odd values are copied once,
    # the rows' by their prefixed names in column order.
    values = dict(most, node=node.uuid, expected=node.generation, plain=plain,
                  known=usage_known(node), extra=extra)
    values.update(zip(_INSTANCE_NAMES, rows.new_instance_row(plan.instance, now)))
    values.update(zip(_ALLOCATION_NAMES, allocation_row))
    values.update(_prefixed(after, "u_"))
    return values


#: The parameters of :data:`PG_PLAIN_CLAIM` in their compiled order (with
#: PostgreSQL's numbered parameters), as :func:`plain_claim_row` gives them.
PG_PLAIN_NAMES = (*_INSTANCE_NAMES, "node", "expected", *_ALLOCATION_NAMES)
#: The parameters of :data:`PG_PLAIN_CLAIM_WITH_TASK`, in their compiled order:
#: :func:`plain_claim_row`'s, then :func:`nova_lite.db.task_writes.one_row`'s.
PG_PLAIN_WITH_TASK_NAMES = PG_PLAIN_NAMES + task_writes.ONE_NAMES


def plain_claim_row(node: ComputeNode, plan: ClaimPlan, now: float) -> tuple[Any, ...]:
    """The values of :data:`PG_PLAIN_CLAIM` for ``plan`` decided on ``node``,
    as a tuple in the order of :data:`PG_PLAIN_NAMES`: the new instance's
    row, the node and its generation, the allocation's row.  Only for a
    plan of one new instance and no move (:func:`one_statement_plan`)."""
    assert plan.instance is not None
    return (*rows.new_instance_row(plan.instance, now), node.uuid, node.generation,
            *rows.allocation_row(plan.allocation, now))


def one_statement_plan(plan: ClaimPlan) -> bool:
    """Whether PostgreSQL's one statement of a claim covers ``plan``: one
    new instance, no move, nothing on child providers."""
    return plan.instance is not None and plan.migration is None and not plan.allocation.providers


def recorded_usage(node: ComputeNode) -> dict[str, int]:
    """``node``'s ``node_usage`` row at its generation (fields as
    :func:`nova_lite.db.rows.load_node_locked` gives them), from the record
    itself; only for a record whose usage is known (:func:`usage_known`)."""
    usage = {col: node.usage.get(rc, 0) for rc, col in rows.STD_COLUMNS}
    usage.update(extras=0, since=node.generation)
    return usage


def usage_known(node: ComputeNode) -> bool:
    """True if ``node``'s record gives its ``node_usage`` row at its generation:
    none of its allocations has extras (other classes, NUMA cells, PCI
    devices, child providers), so the row's standard columns are the
    record's usage and its count of such allocations is 0."""
    return not node.numa_placements and not node.pci_in_use and not node.provider_usage \
        and all(rc in models.ALLOCATION_COLUMNS for rc in node.usage)


def node_with_usage_row(node: ComputeNode, row: Any) -> ComputeNode:
    """``node`` as recorded after the usage row took a claim decided on it
    (:data:`PG_SINGLE_CLAIM` answered ``row``): the row's usage of the
    standard classes at the row's generation; nothing else changed since
    ``node`` was recorded (the row's ``since``)."""
    usage = {rc: n for rc, n in node.usage.items() if rc not in models.ALLOCATION_COLUMNS}
    for rc, col in rows.STD_COLUMNS:
        if getattr(row, col):
            usage[rc] = int(getattr(row, col))
    return replaced(node, generation=row.generation, usage=usage)
