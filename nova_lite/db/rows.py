"""Records from rows and rows from records; usage summed from allocations.

The read side of :mod:`nova_lite.db.store` and of an audit's writes:
turning rows into :class:`~nova_lite.objects.Instance`,
:class:`~nova_lite.objects.Migration`, :class:`~nova_lite.objects.Allocation`
and :class:`~nova_lite.objects.ComputeNode` records (and back), and a
node's usage as the database sums it.
"""

import collections
import contextlib
import functools
import json
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from nova_lite.db import models, serialize as ser, trusted
from nova_lite.db.direct import DirectConnection
from nova_lite.db.engine import session_has_settings
from nova_lite.exception import NodeNotFound
from nova_lite.objects import (
    Allocation, ComputeNode, Instance, InstanceNUMATopology, Migration, nested_amounts)
from nova_lite.resources import Inventory

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG = models.instances, models.migrations
T_USAGE = models.node_usage
STD_COLUMNS = tuple(models.ALLOCATION_COLUMNS.items())

# Rows are SQLAlchemy rows read by column name (``row.uuid``): typed Any here.
# A node's usage: (amounts by class, NUMA placements, PCI addresses in use).
_Usage = tuple[Mapping[str, int], Sequence[InstanceNUMATopology], Iterable[str],
               Mapping[str, Mapping[str, int]]]
_Summed = tuple[dict[str, int], list[InstanceNUMATopology], set[str],
                dict[str, dict[str, int]]]


def instance_from_row(row: Any) -> Instance:
    return Instance(
        uuid=row.uuid, flavor=ser.flavor_from_json(row.flavor), project_id=row.project_id,
        user_id=row.user_id, host=row.host, node=row.node, vm_state=row.vm_state,
        task_state=row.task_state, numa_topology=ser.numa_from_json(row.numa_topology),
        pci_requests=ser.pci_requests_from_json(row.pci_requests),
        pci_devices=ser.strings_from_json(row.pci_devices),
        availability_zone=row.availability_zone)


def migration_from_row(row: Any) -> Migration:
    return Migration(
        uuid=row.uuid, instance_uuid=row.instance_uuid, source_compute=row.source_compute,
        source_node=row.source_node, dest_compute=row.dest_compute, dest_node=row.dest_node,
        old_flavor=ser.flavor_from_json(row.old_flavor),
        new_flavor=ser.flavor_from_json(row.new_flavor), status=row.status,
        migration_type=row.migration_type,
        new_pci_requests=None if row.new_pci_requests is None
        else ser.pci_requests_from_json(row.new_pci_requests))


def allocation_resources(row: Any) -> dict[str, int]:
    """Everything the allocation holds: the node's own classes and its children's."""
    amounts = {rc: getattr(row, col) for rc, col in STD_COLUMNS if getattr(row, col)}
    if row.other:
        amounts.update(json.loads(row.other))
    if row.providers:
        for per in json.loads(row.providers).values():
            for rc, n in per.items():
                amounts[rc] = amounts.get(rc, 0) + n
    return amounts


def allocation_from_row(row: Any) -> Allocation:
    return Allocation(
        consumer_uuid=row.consumer_uuid, consumer_type=row.consumer_type,
        instance_uuid=row.instance_uuid, node_uuid=row.node_uuid,
        resources=allocation_resources(row), flavor=ser.flavor_from_json(row.flavor),
        numa_topology=ser.numa_from_json(row.numa_topology),
        pci_devices=ser.strings_from_json(row.pci_devices),
        providers=json.loads(row.providers) if row.providers else None)


#: The columns of an allocation's row, in the order :func:`allocation_row` gives them.
ALLOCATION_ROW_COLUMNS = ("consumer_uuid", "node_uuid", "consumer_type", "instance_uuid",
                          *(col for _, col in STD_COLUMNS), "other", "flavor",
                          "numa_topology", "pci_devices", "created_at", "providers")


def allocation_row(alloc: Allocation, now: float) -> tuple[Any, ...]:
    """An allocation's row, recorded at ``now``, as a tuple of the columns
    :data:`ALLOCATION_ROW_COLUMNS` names, in their order."""
    resources = alloc.resources
    providers = alloc.providers
    if providers:
        nested = {rc for per in providers.values() for rc in per}
        other = {rc: n for rc, n in resources.items()
                 if rc not in models.ALLOCATION_COLUMNS and rc not in nested}
    else:
        other = {rc: n for rc, n in resources.items() if rc not in models.ALLOCATION_COLUMNS}
    return (alloc.consumer_uuid, alloc.node_uuid, alloc.consumer_type, alloc.instance_uuid,
            *[resources.get(rc, 0) for rc, _ in STD_COLUMNS],
            ser.dumps(other) if other else None, ser.flavor_to_json(alloc.flavor),
            ser.numa_to_json(alloc.numa_topology), ser.strings_to_json(alloc.pci_devices), now,
            ser.dumps({name: dict(per) for name, per in providers.items()})
            if providers else None)


def allocation_values(alloc: Allocation, now: float) -> dict[str, Any]:
    """An allocation's row, recorded at ``now``, as a dict by column name."""
    return dict(zip(ALLOCATION_ROW_COLUMNS, allocation_row(alloc, now)))


#: The columns :func:`instance_values` sets.
INSTANCE_UPDATE_COLUMNS = ("host", "node", "vm_state", "task_state", "project_id", "user_id",
                           "flavor", "numa_topology", "pci_requests", "pci_devices",
                           "availability_zone", "updated_at")


#: The columns of an instance's row, in the order :func:`new_instance_row` gives them.
INSTANCE_ROW_COLUMNS = ("uuid", "host", "node", "vm_state", "task_state", "project_id",
                        "user_id", "flavor", "numa_topology", "pci_requests", "pci_devices",
                        "created_at", "updated_at", "availability_zone")


def new_instance_row(inst: Instance, now: float) -> tuple[Any, ...]:
    """The whole row of an instance first recorded at ``now``, as a tuple of
    the columns :data:`INSTANCE_ROW_COLUMNS` names, in their order."""
    return (inst.uuid, inst.host, inst.node, inst.vm_state, inst.task_state, inst.project_id,
            inst.user_id, ser.flavor_to_json(inst.flavor), ser.numa_to_json(inst.numa_topology),
            ser.pci_requests_to_json(inst.pci_requests), ser.strings_to_json(inst.pci_devices),
            now, now, inst.availability_zone)


def new_instance_values(inst: Instance, now: float) -> dict[str, Any]:
    """The whole row of an instance first recorded at ``now``, as a dict by column name."""
    return dict(zip(INSTANCE_ROW_COLUMNS, new_instance_row(inst, now)))


def instance_values(inst: Instance, now: float) -> dict[str, Any]:
    """The columns an update of ``inst``'s row at ``now`` sets (not its uuid nor created_at)."""
    values = new_instance_values(inst, now)
    del values["uuid"], values["created_at"]
    return values


def upsert_instance(conn: sa.Connection, inst: Instance, now: float) -> None:
    values = instance_values(inst, now)
    if conn.execute(T_INST.update().where(T_INST.c.uuid == inst.uuid).values(**values)).rowcount:
        return
    conn.execute(T_INST.insert().values(uuid=inst.uuid, created_at=now, **values))


def migration_values(mig: Migration, now: float) -> dict[str, Any]:
    return dict(
        uuid=mig.uuid, instance_uuid=mig.instance_uuid, source_compute=mig.source_compute,
        source_node=mig.source_node, dest_compute=mig.dest_compute, dest_node=mig.dest_node,
        old_flavor=ser.flavor_to_json(mig.old_flavor),
        new_flavor=ser.flavor_to_json(mig.new_flavor), status=mig.status,
        migration_type=mig.migration_type, created_at=now, updated_at=now,
        new_pci_requests=None if mig.new_pci_requests is None
        else ser.pci_requests_to_json(mig.new_pci_requests) or "[]")


def node_generation(conn: sa.Connection, node_uuid: str) -> int:
    """The recorded generation of a node; raises NodeNotFound."""
    generation = conn.execute(sa.select(T_NODES.c.generation).where(
        T_NODES.c.uuid == node_uuid)).scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    return generation


# One node's statements, built once: a claim that lost its race re-reads the
# node with them while it holds the node's lock.
_NODE = T_NODES.select().where(T_NODES.c.uuid == sa.bindparam("node"))
_NODE_INVENTORIES = T_INV.select().where(T_INV.c.node_uuid == sa.bindparam("node"))
_NODE_SUMS = sa.select(*[sa.func.sum(T_ALLOC.c[col]) for _, col in STD_COLUMNS]).where(
    T_ALLOC.c.node_uuid == sa.bindparam("node"))
_NODE_EXTRAS = sa.select(T_ALLOC.c.other, T_ALLOC.c.numa_topology, T_ALLOC.c.pci_devices,
                         T_ALLOC.c.providers).where(
    T_ALLOC.c.node_uuid == sa.bindparam("node"), sa.text(f"({models.EXTRAS_PREDICATE})"))


def load_node(conn: sa.Connection, node_uuid: str) -> ComputeNode:
    """The :class:`ComputeNode` with this uuid as recorded now: owner, reported
    flag, inventories, report and usage, all at one generation (read in one
    transaction).  Raises NodeNotFound.
    """
    params = {"node": node_uuid}
    row = conn.execute(_NODE, params).first()
    if row is None:
        raise NodeNotFound(node_uuid)
    sums = _column_sums(conn, params)
    return _node_with_extras(conn, row, sums, params)


# The node row, with the usage a claim recorded for one generation (if any)
# and the inventories: one round trip for a claim that holds the node's lock.
_InventoryRow = collections.namedtuple("_InventoryRow", [
    "resource_class", "total", "reserved", "min_unit", "max_unit", "step_size",
    "allocation_ratio"])
_INVENTORY_FIELDS = _InventoryRow._fields
USAGE_FIELDS = (*(col for _, col in STD_COLUMNS), "extras")
#: The fields of a ``node_usage`` row a claim writes besides its node and generation.
USAGE_ROW_FIELDS = (*USAGE_FIELDS, "since")


def _node_usage_inventories(usage_at: sa.ColumnElement[Any]) -> sa.Select[Any]:
    return sa.select(
        T_NODES, *[T_USAGE.c[col].label(f"usage_{col}") for col in USAGE_ROW_FIELDS],
        T_USAGE.c.generation.label("usage_generation"),
        *[T_INV.c[f].label(f"inv_{f}") for f in _INVENTORY_FIELDS]).select_from(
        T_NODES.outerjoin(T_USAGE, sa.and_(T_USAGE.c.node_uuid == T_NODES.c.uuid,
                                           T_USAGE.c.generation == usage_at))
        .outerjoin(T_INV, T_INV.c.node_uuid == T_NODES.c.uuid)
    ).where(T_NODES.c.uuid == sa.bindparam("node"))


_NODE_USAGE_INVENTORIES = _node_usage_inventories(sa.bindparam("usage_at"))
#: The same, read by the transaction that bumped the node's generation: the
#: usage row is of the generation the bump moved the node from.
NODE_USAGE_INVENTORIES_BUMPED = _node_usage_inventories(
    T_NODES.c.generation - sa.literal_column("1"))


def locked_node_rows(conn: sa.Connection | DirectConnection, node_uuid: str,
                     generation: int) -> Sequence[Any]:
    """The rows of :func:`load_node_locked`'s first statement, for a claim
    that moved the node from ``generation`` (see also
    :data:`NODE_USAGE_INVENTORIES_BUMPED`, the same rows read in the round
    trip of the bump)."""
    return conn.execute(_NODE_USAGE_INVENTORIES, {"node": node_uuid,
                                                 "usage_at": generation}).all()


def load_node_locked(conn: sa.Connection | DirectConnection, node_uuid: str,
                     found: Sequence[Any]) -> tuple[ComputeNode, dict[str, int]]:
    """:func:`load_node` for a claim holding the node's lock; returns
    ``(node, usage)``.  ``found``: the node's rows as
    :func:`locked_node_rows` reads them.

    ``usage`` (``{field: amount}`` of :data:`USAGE_ROW_FIELDS`) holds the
    standard columns' sums over the node's allocations at the generation
    the claim moved the node from, and how many of them have extras (other
    classes, NUMA cells, PCI devices): the ``node_usage`` row recorded for
    exactly that generation (see :func:`record_usage`) if there is one, else
    read from the allocations.  Any change since that row was written moved
    the generation, so a row of another generation is never used.  Its
    ``since`` is the row's (the node changed only through that row since
    then) or, where the row is not used or has none, the generation the
    claim moved the node from: the records just read are of that one.
    """
    if not found:
        raise NodeNotFound(node_uuid)
    params = {"node": node_uuid}
    row = found[0]
    inventories = [_InventoryRow(*(getattr(r, f"inv_{f}") for f in _INVENTORY_FIELDS))
                   for r in found if r.inv_resource_class is not None]
    moved_from = row.generation - 1
    if row.usage_generation is not None:
        usage = {f: int(getattr(row, f"usage_{f}")) for f in USAGE_FIELDS}
        usage["since"] = moved_from if row.usage_since is None else row.usage_since
        extras = conn.execute(_NODE_EXTRAS, params).all() if usage["extras"] else ()
    else:
        usage = _column_sums(conn, params)
        extras = conn.execute(_NODE_EXTRAS, params).all()
        usage["extras"] = len(extras)
        usage["since"] = moved_from
    amounts = {rc: usage[col] for rc, col in STD_COLUMNS if usage[col]}
    numa: list[InstanceNUMATopology] = []
    pci: set[str] = set()
    nested: dict[str, dict[str, int]] = {}
    for other, numa_json, pci_json, providers_json in extras:
        _add_extras(amounts, numa, pci, nested, other, numa_json, pci_json, providers_json)
    return _node(row, inventories, (amounts, numa, pci, nested)), usage


def _column_sums(conn: sa.Connection | DirectConnection,
                 params: Mapping[str, Any]) -> dict[str, int]:
    return {col: int(total or 0) for (_, col), total in
            zip(STD_COLUMNS, conn.execute(_NODE_SUMS, params).one())}


def _node_with_extras(conn: sa.Connection, row: Any, sums: Mapping[str, int],
                      params: Mapping[str, Any]) -> ComputeNode:
    amounts = {rc: sums[col] for rc, col in STD_COLUMNS if sums[col]}
    numa: list[InstanceNUMATopology] = []
    pci: set[str] = set()
    nested: dict[str, dict[str, int]] = {}
    for other, numa_json, pci_json, providers_json in conn.execute(_NODE_EXTRAS, params):
        _add_extras(amounts, numa, pci, nested, other, numa_json, pci_json, providers_json)
    return _node(row, conn.execute(_NODE_INVENTORIES, params).all(),
                 (amounts, numa, pci, nested))


_UPSERT_USAGE: dict[str, sa.Insert] = {}


def record_usage(conn: sa.Connection | DirectConnection, node_uuid: str, generation: int,
                 usage: Mapping[str, int]) -> None:
    """Record ``usage`` (see :func:`load_node_locked`) as the node's at ``generation``.

    Written by a claim, under the node's lock, in the transaction that
    moved the node to ``generation`` and wrote the allocations ``usage``
    counts.
    """
    statement = _UPSERT_USAGE.get(conn.dialect.name)
    if statement is None:
        insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(
            T_USAGE)
        statement = _UPSERT_USAGE[conn.dialect.name] = insert.on_conflict_do_update(
            index_elements=[T_USAGE.c.node_uuid],
            set_={c: insert.excluded[c] for c in ("generation", *USAGE_ROW_FIELDS)})
    conn.execute(statement, dict(usage, node_uuid=node_uuid, generation=generation))


def _add_extras(amounts: dict[str, int], numa: list[InstanceNUMATopology], pci: set[str],
                nested: dict[str, dict[str, int]], other: str | None, numa_json: str | None,
                pci_json: str | None, providers_json: str | None) -> None:
    for rc, n in (json.loads(other) if other else {}).items():
        amounts[rc] = amounts.get(rc, 0) + n
    topology = ser.numa_from_json(numa_json) if numa_json else None
    if topology is not None:
        numa.append(topology)
    pci.update(ser.strings_from_json(pci_json))
    if providers_json:
        for name, per in json.loads(providers_json).items():
            into = nested.setdefault(name, {})
            for rc, n in per.items():
                into[rc] = into.get(rc, 0) + n


@functools.lru_cache(maxsize=16384)
def _inventory(total: int, reserved: int, min_unit: int, max_unit: int, step_size: int,
               ratio: Any, used: int = 0) -> Inventory:
    inv = Inventory(total=total, reserved=reserved, min_unit=min_unit, max_unit=max_unit,
                    step_size=step_size, allocation_ratio=Fraction(ratio))
    return attrs.evolve(inv, used=used) if used else inv


class _Offered:
    """A node's inventories as read: ``items``, ``((resource class, Inventory
    without usage), ...)``, and ``unused``, the read-only mapping of a node
    that offers them and has no usage (shared by every such node)."""

    __slots__ = ("items", "unused", "_in_use")

    def __init__(self, items: tuple[tuple[str, Inventory], ...]) -> None:
        self.items = items
        self.unused: Mapping[str, Inventory] = types.MappingProxyType(dict(items))
        self._in_use: dict[tuple[str, int], Inventory] = {}

    def in_use(self, rc: str, inv: Inventory, used: int) -> Inventory:
        """``inv``, the Inventory of ``rc`` of :attr:`items`, with ``used``
        units in use: one record per amount, found by class and amount (not
        by every field, a ratio's hash among them, as :func:`_inventory`)."""
        key = (rc, used)
        found = self._in_use.get(key)
        if found is None:
            if len(self._in_use) > 4096:   # many amounts: start again
                self._in_use.clear()
            found = self._in_use[key] = _inventory(
                inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
                inv.allocation_ratio, used)
        return found


_NOTHING_OFFERED = _Offered(())
# Nodes of one kind offer equal inventories: one tuple for all of them, by
# the inventory rows' values.
_OFFERED: dict[tuple[Any, ...], _Offered] = {}


def _offered(inventory_rows: Iterable[Any]) -> _Offered:
    """The inventories of some inventory rows, the tuple shared by every
    node that offers the same."""
    key = tuple((i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit, i.step_size,
                 i.allocation_ratio) for i in inventory_rows)
    found = _OFFERED.get(key)
    if found is None:
        if len(_OFFERED) > 65536:   # a fleet of many kinds: start again
            _OFFERED.clear()
        found = _OFFERED[key] = _Offered(tuple((sys.intern(rc), _inventory(*values))
                                               for rc, *values in key))
    return found


_NO_PCI: frozenset[str] = frozenset()


def _node(row: Any, inventory_rows: Iterable[Any], usage: _Usage) -> ComputeNode:
    """A ComputeNode from its row, its inventory rows and its usage triple."""
    return _node_offering(row, _offered(inventory_rows), usage)


def _node_offering(row: Any, offered: _Offered, usage: _Usage) -> ComputeNode:
    """A ComputeNode from its row, its inventories and its usage triple.

    The values come from the database, which holds only what the records'
    validators accepted: the record is built without running them again
    (:mod:`nova_lite.db.trusted`).
    """
    used, numa, pci, nested = usage
    inventories: Mapping[str, Inventory]
    if used and any(rc in used for rc, _ in offered.items):
        inventories = {rc: offered.in_use(rc, inv, used[rc]) if used.get(rc) else inv
                       for rc, inv in offered.items}
    else:   # what nodes of one kind without usage share
        inventories = offered.unused
    return trusted.node_record(
        row, inventories, {sys.intern(rc): n for rc, n in used.items()},
        trusted.report(row.resources, row.uuid, row.nodename) if row.resources else None,
        tuple(numa), frozenset(pci) if pci else _NO_PCI, nested_amounts(nested))


#: The (amounts, numa_placements, pci_in_use, provider_usage) of a node
#: without allocations.
NO_USAGE: _Usage = ({}, (), (), {})


def usage_by_node(conn: sa.Connection, where: sa.ColumnElement[bool]) -> dict[str, _Summed]:
    """``{node_uuid: (amounts, numa_placements, pci_in_use, provider_usage)}`` of
    the allocations ``where``.

    The standard classes are summed by the database; only the rows with
    other classes, NUMA cells or PCI devices are read one by one.
    """
    usage: dict[str, _Summed] = {}
    totals = [sa.func.sum(T_ALLOC.c[col]) for _, col in STD_COLUMNS]
    sums = sa.select(T_ALLOC.c.node_uuid, *totals).where(where).group_by(T_ALLOC.c.node_uuid)
    for node_uuid, *totals in conn.execute(sums):
        amounts = {rc: int(total) for (rc, _), total in zip(STD_COLUMNS, totals) if total}
        usage[node_uuid] = (amounts, [], set(), {})
    _add_extras_rows(usage, conn.execute(_EXTRAS_COLUMNS.where(where, _HAS_EXTRAS)))
    return usage


_EXTRAS_COLUMNS = sa.select(T_ALLOC.c.node_uuid, T_ALLOC.c.other, T_ALLOC.c.numa_topology,
                            T_ALLOC.c.pci_devices, T_ALLOC.c.providers)
_HAS_EXTRAS = sa.text(f"({models.EXTRAS_PREDICATE})")


def _add_extras_rows(usage: dict[str, _Summed], extras: Iterable[Any]) -> None:
    """Add to ``usage`` the allocation rows ``extras`` (node uuid, other, NUMA,
    PCI and providers columns) one by one."""
    for node_uuid, other, numa_json, pci_json, providers_json in extras:
        # A node with only extras has no sums row when its allocations hold
        # none of the standard columns' classes.
        amounts, numa, pci, nested = usage.setdefault(node_uuid, ({}, [], set(), {}))
        _add_extras(amounts, numa, pci, nested, other, numa_json, pci_json, providers_json)


def load_nodes(conn: sa.Connection, host: str | None = None,
               nodename: str | None = None, *, limit: int | None = None,
               after: tuple[str, str] | None = None) -> list[ComputeNode]:
    """ComputeNode records with inventories and usage, a few queries in all,
    sorted by (host, nodename).

    ``limit``: at most this many (SQL ``LIMIT``); ``after``: only the nodes
    whose (host, nodename) sorts after this pair (a keyset ``WHERE`` on the
    unique (host, nodename) index), so a page reads only its own rows.
    """
    query = T_NODES.select().order_by(T_NODES.c.host, T_NODES.c.nodename)
    if host is not None:
        query = query.where(T_NODES.c.host == host)
    if nodename is not None:
        query = query.where(T_NODES.c.nodename == nodename)
    if after is not None:
        query = query.where(sa.tuple_(T_NODES.c.host, T_NODES.c.nodename) > sa.tuple_(*after))
    if limit is not None:
        query = query.limit(limit)
    if nodename is None and limit is None and after is None:
        return _load_every_node(conn, host)
    rows = conn.execute(query).all()
    if not rows:
        return []
    node_filter = scope_filter(host, [r.uuid for r in rows])
    offered = _offered_by_node(conn, node_filter)
    usage = usage_by_node(conn, node_filter(T_ALLOC.c.node_uuid))
    return [_node_offering(row, offered.get(row.uuid, _NOTHING_OFFERED),
                           usage.get(row.uuid, NO_USAGE)) for row in rows]


def load_nodes_of(conn: sa.Connection, node_uuids: Sequence[str],
                  described: dict[str, int] | None = None) -> list[ComputeNode]:
    """The ComputeNode records of the live nodes among ``node_uuids`` (in no
    particular order): one statement gives the node rows, each with its
    inventories as one text (:data:`_OFFERED_BY_KEY`) and the sums of its
    allocations' standard classes; only the nodes that have allocations
    with extras (other classes, NUMA cells, PCI devices, child providers)
    have those rows read, by a second.

    The uuids travel as one parameter (an array on PostgreSQL, a JSON text
    on SQLite), so each statement's text is the same whatever their number:
    compiled once, parsed once by the driver, and never over SQLite's limit
    of bound variables.  ``described``, if given, takes each node's
    ``described_seq`` as read (``{uuid: value}``).
    """
    if not node_uuids:
        return []
    postgres = conn.dialect.name == "postgresql"
    statements = _NODES_OF_PG if postgres else _NODES_OF_SQLITE
    if postgres and not session_has_settings(conn):
        # A table whose statistics lag (just filled) can make the planner
        # think the inventories' lookups costly enough to JIT-compile the
        # statement: about 12 ms of the server's, for a read of a few.
        # (A session of the store's own has JIT off already.)
        conn.exec_driver_sql("SET LOCAL jit = off")
    wanted = list(node_uuids) if postgres else json.dumps(list(node_uuids))
    node_rows = conn.execute(statements[0], {"uuids": wanted}).all()
    usage: dict[str, _Summed] = {}
    with_extras = []
    first = len(node_rows[0]) - len(STD_COLUMNS) - 1 if node_rows else 0
    if described is not None:
        described.update((row.uuid, row.described_seq) for row in node_rows)
    for row in node_rows:
        if row.allocated:
            amounts = {}
            for i, (rc, _) in enumerate(STD_COLUMNS, first):
                if row[i]:
                    amounts[rc] = int(row[i])
            usage[row.uuid] = (amounts, [], set(), {})
            if row.has_extras:
                with_extras.append(row.uuid)
    if with_extras:
        _add_extras_rows(usage, conn.execute(statements[1], {
            "uuids": with_extras if postgres else json.dumps(with_extras)}))
    return [_node_offering(row, _offered_text(row.offered), usage.get(row.uuid, NO_USAGE))
            for row in node_rows]


def with_usage(node: ComputeNode, generation: int, amounts: dict[str, int],
               memo: dict[tuple[int, int], Inventory]) -> ComputeNode:
    """``node`` at ``generation`` with ``amounts`` of the standard classes as
    its whole usage (no extras), its inventories' ``used`` to match, its
    description kept.  ``memo``: ``{(id of an inventory, used): inventory}``
    shared by the calls for one set of nodes (nodes of one kind hold the same
    inventory objects, so each new one is made once)."""
    inventories = {}
    for rc, inv in node.inventories.items():
        used = amounts.get(rc, 0)
        if inv.used == used:
            inventories[rc] = inv
            continue
        key = (id(inv), used)
        found = memo.get(key)
        if found is None:
            found = memo[key] = _inventory(inv.total, inv.reserved, inv.min_unit,
                                           inv.max_unit, inv.step_size, inv.allocation_ratio,
                                           used)
        inventories[rc] = found
    return trusted.renewed(node, generation, inventories, amounts)


def allocation_sums(where: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The allocations ``where`` picks, summed: their standard classes
    (``used_<column>``) and whether any of them has extras (``has_extras``:
    1 or 0); add a grouping for sums per node."""
    return sa.select(
        *[sa.func.sum(T_ALLOC.c[col]).label(f"used_{col}") for _, col in STD_COLUMNS],
        sa.func.max(sa.case((_HAS_EXTRAS, sa.literal_column("1")),
                            else_=sa.literal_column("0"))).label("has_extras"),
    ).where(where)


def sums_by_node(in_uuids: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[bool]]
                 ) -> sa.Subquery:
    """Per node whose uuid ``in_uuids`` accepts: its uuid (``allocated``) and
    :func:`allocation_sums` of its allocations."""
    return allocation_sums(in_uuids(T_ALLOC.c.node_uuid)).add_columns(
        T_ALLOC.c.node_uuid.label("allocated")).group_by(T_ALLOC.c.node_uuid).subquery("used")


def _nodes_of_statements(in_uuids: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[bool]]
                         ) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The two statements of :func:`load_nodes_of`, given how a column is
    matched against the ``uuids`` parameter."""
    sums = sums_by_node(in_uuids)
    nodes = sa.select(T_NODES, _OFFERED_BY_KEY, sums.c.allocated,
                      *[sums.c[f"used_{col}"] for _, col in STD_COLUMNS],
                      sums.c.has_extras).select_from(
        T_NODES.outerjoin(sums, sums.c.allocated == T_NODES.c.uuid)).where(
        in_uuids(T_NODES.c.uuid))
    return nodes, _EXTRAS_COLUMNS.where(in_uuids(T_ALLOC.c.node_uuid), _HAS_EXTRAS)


def _in_array(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    return column == sa.any_(sa.bindparam("uuids", type_=postgresql.ARRAY(sa.String)))


def _in_json_list(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
    return column.in_(sa.select(sa.literal_column("value")).select_from(
        sa.func.json_each(sa.bindparam("uuids", type_=sa.String))))


#: Node rows fetched at a time by a read of every node.
_STREAM_ROWS = 2000
#: Fields of an inventory row in its text (:data:`_INVENTORY_TEXTS`), in order.
_TEXT_FIELDS = ("resource_class", "total", "reserved", "min_unit", "max_unit", "step_size",
                "allocation_ratio")


def _inventory_text() -> sa.ColumnElement[str]:
    parts: list[sa.ColumnElement[Any]] = []
    for name in _TEXT_FIELDS:
        column = T_INV.c[name]
        if parts:
            parts.append(sa.literal_column("':'"))
        parts.append(sa.func.coalesce(sa.cast(column, sa.String), "")
                     if name == "max_unit" else sa.cast(column, sa.String))
    joined = parts[0]
    for part in parts[1:]:
        joined = joined.concat(part)
    return sa.func.aggregate_strings(joined, ";").label("offered")


#: Each node's inventory rows as one text: ``class:total:reserved:min_unit:
#: max_unit:step_size:ratio`` joined by ``;`` (``max_unit`` empty for NULL).
_INVENTORY_TEXTS = sa.select(T_INV.c.node_uuid, _inventory_text())
#: The text of a node's inventories (the node row's ``offered`` column):
#: a lookup in the inventories' key, per node row read.
_OFFERED_BY_KEY = sa.select(_inventory_text()).where(
    T_INV.c.node_uuid == T_NODES.c.uuid).scalar_subquery().label("offered")
_OFFERED_TEXTS: dict[str, _Offered] = {}


def _offered_text(text: str | None) -> _Offered:
    """The inventories of a text of :data:`_INVENTORY_TEXTS` (None: none),
    the tuple shared by every node that offers the same."""
    if not text:
        return _NOTHING_OFFERED
    found = _OFFERED_TEXTS.get(text)
    if found is None:
        rows = []
        for part in sorted(text.split(";")):
            rc, total, reserved, min_unit, max_unit, step, ratio = part.split(":")
            rows.append(_InventoryRow(rc, int(total), int(reserved), int(min_unit),
                                      int(max_unit) if max_unit else None, int(step), ratio))
        if len(_OFFERED_TEXTS) > 65536:   # a fleet of many kinds: start again
            _OFFERED_TEXTS.clear()
        found = _OFFERED_TEXTS[text] = _offered(rows)
    return found


# Built once per dialect: every view asks them on every change it reads.
_NODES_OF_PG = _nodes_of_statements(_in_array)
_NODES_OF_SQLITE = _nodes_of_statements(_in_json_list)


def _offered_by_node(conn: sa.Connection, node_filter: Callable[
        [sa.ColumnElement[Any]], sa.ColumnElement[bool]]) -> dict[str, _Offered]:
    """``{node uuid: its inventories}`` of the nodes ``node_filter`` selects."""
    rows: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
    for r in conn.execute(T_INV.select().where(node_filter(T_INV.c.node_uuid))):
        rows[r.node_uuid].append(r)
    return {uuid: _offered(found) for uuid, found in rows.items()}


def scope_filter(
        host: str | None, node_uuids: Sequence[str] | None,
) -> Callable[[sa.ColumnElement[Any]], sa.ColumnElement[bool]]:
    def node_filter(column: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        if node_uuids is not None:
            return column.in_(node_uuids)
        if host is not None:
            return column.in_(sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host))
        return sa.true()
    return node_filter


# -- the read of every node --------------------------------------------------

#: A full read's row: the node row's columns it takes, then its inventories'
#: text (by name for :func:`_node_offering`).
_FullRow = collections.namedtuple("_FullRow", [
    "uuid", "host", "nodename", "generation", "resources", "last_error", "reported",
    "offered"])
_FULL_COLUMNS = tuple(T_NODES.c[name] for name in _FullRow._fields[:-1])
#: The full read's settings on PostgreSQL, for its transaction.
_FULL_READ_SETTINGS = ("SELECT set_config('jit', 'off', true), "
                       "set_config('enable_bitmapscan', 'off', true)")


def _load_every_node(conn: sa.Connection, host: str | None) -> list[ComputeNode]:
    """:func:`load_nodes` of every node (of ``host``, if given): its
    inventories and usage first, then the node rows streamed, so the
    reports' texts are never all held at once.  Each node's inventories
    come with its row, as one text the database joins (nodes of one kind:
    one text, parsed once)."""
    usage = usage_by_node(conn, scope_filter(host, None)(T_ALLOC.c.node_uuid))
    query = sa.select(*_FULL_COLUMNS)
    if host is not None:
        query = query.where(T_NODES.c.host == host)
    if conn.dialect.name != "postgresql":
        inventories = _INVENTORY_TEXTS if host is None else _INVENTORY_TEXTS.where(
            T_INV.c.node_uuid.in_(sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)))
        texts = inventories.group_by(T_INV.c.node_uuid).subquery()
        query = query.add_columns(texts.c.offered).select_from(
            T_NODES.outerjoin(texts, texts.c.node_uuid == T_NODES.c.uuid)).order_by(
            T_NODES.c.host, T_NODES.c.nodename)
        return _records(conn.execute(query.execution_options(yield_per=_STREAM_ROWS)), usage)
    # Each node's text by a lookup in the inventories' key, in the order of
    # the (host, nodename) index: rows streamed as they come, no sort of
    # every wide row (it spilled to disk at the default work_mem) nor an
    # aggregate of every inventory row made once per parallel worker; no JIT
    # compilation (a fifth of a second) either.  Each lookup a plain index
    # scan: a bitmap of a node's few rows costs a tenth more, and gives them
    # in no fixed order (each order a text of its own to parse).
    conn.exec_driver_sql(_FULL_READ_SETTINGS)
    query = query.add_columns(_OFFERED_BY_KEY).order_by(T_NODES.c.host, T_NODES.c.nodename)
    with _streamed(conn, query) as streamed:
        return _records(streamed, usage)


@contextlib.contextmanager
def _streamed(conn: sa.Connection, query: sa.Select[Any]) -> Iterator[Iterable[Any]]:
    """The rows of ``query`` (PostgreSQL) as plain tuples, as they come.

    With psycopg on libpq 17 or later, the database sends every row at
    once, in chunks of :data:`_STREAM_ROWS`, while the rows already here
    are turned into records: the query's time and the records' overlap
    (a server-side cursor would ask for each chunk when the one before is
    done, and wait for it).  Otherwise, a server-side cursor.
    """
    if not _chunked_stream(conn):
        yield conn.execute(query.execution_options(yield_per=_STREAM_ROWS))
        return
    compiled = query.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    statement, params = compiled.string, compiled.params
    driver: Any = conn.connection.dbapi_connection   # a psycopg Connection
    cursor = driver.cursor()
    # The engine's listeners see the statement as they see every other one.
    for listener in conn.dispatch.before_cursor_execute:
        statement, params = listener(conn, cursor, statement, params, None, False)
    rows = cursor.stream(statement, params, size=_STREAM_ROWS)
    try:
        yield rows
        conn.dispatch.after_cursor_execute(conn, cursor, statement, params, None, False)
    finally:
        rows.close()   # an early end cancels the query and drains what came of it
        cursor.close()


def _chunked_stream(conn: sa.Connection) -> bool:
    """Whether ``conn`` streams a result in chunks (psycopg 3.2 or later on
    libpq 17 or later)."""
    if conn.dialect.driver != "psycopg":
        return False
    import psycopg   # the driver of the connection: loaded already
    capabilities = getattr(psycopg, "capabilities", None)
    return capabilities is not None and bool(capabilities.has_stream_chunked())


def _records(rows: Iterable[Any], usage: Mapping[str, _Usage]) -> list[ComputeNode]:
    """The records of a full read's rows (:data:`_FULL_COLUMNS` and the
    inventories' text, as tuples), in their order."""
    nodes: list[ComputeNode] = []
    append, unused_node, report = nodes.append, trusted.unused_node, trusted.report
    row_type = _FullRow._make
    for values in rows:
        uuid, host, nodename, generation, resources, last_error, reported, offered = values
        held = usage.get(uuid)
        if held is None:   # most nodes: nothing to add to the kind's inventories
            append(unused_node(
                uuid, host, nodename, generation, last_error, reported,
                _offered_text(offered).unused,
                report(resources, uuid, nodename) if resources else None))
        else:
            append(_node_offering(row_type(values), _offered_text(offered), held))
    return nodes
