"""What one periodic pass of a compute host reads, in one read-only transaction.

A pass (:meth:`nova_lite.compute.manager.ComputeService.run_once`) audits
the host's nodes, looks for its leaks, records its findings and those of
the hosts that are down, and looks for its work.  Most passes find nothing
changed; such a *steady* pass must cost the database as little as
possible: one read-only transaction (no transaction id on PostgreSQL, so
no WAL and no flush at commit), no row lock, no row written.  :func:`read`
takes everything the pass compares against in at most six statements:

1. the host's node rows, and the node rows at the other end of its moves
   in progress, each joined to its inventories;
2. the allocations on those nodes and those of the host's moves in
   progress (usage is summed from them here, not by the database);
3. the migrations in progress that touch the host, and those that hold an
   allocation on its nodes;
4. the host's instances, and those the allocations on its nodes, the
   allocations of its moves and the migrations above name (with, for a
   build on the host, its oldest open task);
5. (a service's pass) the compute service rows the pass needs, joined to
   their recorded findings (their text only for the host's own): the
   host's own, those at the other end of the migrations read in 3, and
   those that look down (no heartbeat within ``service_down_time``: only
   they can need a peer to record their findings).  With every service up
   and no move in progress that is one row, however many services there
   are;
6. (a service's pass) whether the host has a task to take.

A tracker's audit on its own (no service: no leak search) reads five
statements instead, which return no row of a steady node's consumers: the
node rows with their inventories, their usage summed by the database, the
stale allocations, and the instances and the migrations without their
allocation.

The pass then compares in memory (:meth:`PassRecords.audit_differs`,
:meth:`PassRecords.snapshot`, ...).  Only what differs opens a writing
transaction, which locks and re-checks under the lock as it always did
(:meth:`nova_lite.db.store.Store.record_audit` and the others).

PostgreSQL runs the transaction under REPEATABLE READ (one snapshot for
every statement); SQLite's deferred transaction reads one snapshot of its
write-ahead log.
"""

import collections
import functools
import json
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from nova_lite import holds, work
from nova_lite.db import audit_writes, holds_sql, models, rows, serialize as ser
from nova_lite.db import services as services_sql
from nova_lite.db.audit_writes import MissingAllocation
from nova_lite.db.direct import DirectConnection
from nova_lite.db.services import ServiceRecord
from nova_lite.db.snapshot import RecordsSnapshot
from nova_lite.db.tasks import Building
from nova_lite.objects import Allocation, ComputeNode, Instance, Migration, NodeResources

if TYPE_CHECKING:
    from nova_lite.db.store import AuditedNode

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG, T_SVC = models.instances, models.migrations, models.services
T_FIND, T_TASK = models.host_findings, models.tasks


@attrs.frozen
class NodeRow:
    """One node row: what an audit compares of it, and what
    ``nova_lite.db.rows._node`` builds a ComputeNode from."""

    uuid: str
    host: str
    nodename: str
    generation: int
    resources: str | None
    last_error: str | None
    reported: bool


@attrs.frozen
class FindingsRow:
    """A host's recorded findings: their JSON ``text`` (None: not read, another
    host's), ``recorded_by`` and ``recorded_at`` (epoch s)."""

    text: str | None
    recorded_by: str
    recorded_at: float


@attrs.frozen(slots=False)   # not slotted: the indexes below are cached on it
class PassRecords:
    """The records one pass of ``host`` compares against, read at ``read_at`` (epoch s).

    ``node_rows``: ``{nodename: NodeRow}`` of the host's nodes;
    ``nodes``: the ComputeNode records of those and of the other end of
    each of the host's moves, with their usage; ``inventories``:
    ``{node_uuid: {class: fields}}`` as stored
    (``audit_writes.INV_FIELDS``); ``allocations``,
    ``instances``, ``migrations``, ``migration_times``: as in a
    :class:`~nova_lite.db.snapshot.RecordsSnapshot` of the host (and the
    allocations on the other ends).  A service's pass also has
    ``services`` (``{host: ServiceRecord}`` of the compute services read:
    the host's own, those at either end of the migrations read, and those
    with no heartbeat within ``service_down_time`` seconds of ``read_at``;
    every compute service when ``service_down_time`` is None),
    ``findings`` (``{host: FindingsRow}`` of those), ``builds`` (the
    instances building on the host) and ``has_work``; a tracker's own read
    leaves them None.  A service absent from ``services`` is not known to
    be down: it may be up and not read.
    """

    host: str
    read_at: float
    node_rows: dict[str, NodeRow]
    inventories: dict[str, dict[str, tuple[Any, ...]]]
    migrations: dict[str, Migration]
    migration_times: dict[str, tuple[float, float]]
    #: ``{node_uuid: (amounts, numa_placements, pci_in_use, provider_usage)}``.
    usage: dict[str, Any]
    # The rows as read: parsed into records only when asked (a steady audit
    # of a node with thousands of instances never parses them).
    node_heads: tuple[NodeRow, ...] = attrs.field(repr=False, eq=False)
    allocation_rows: tuple[Any, ...] = attrs.field(repr=False, eq=False)
    instance_rows: tuple[Any, ...] = attrs.field(repr=False, eq=False)
    #: The missing and stale allocations, when the database found them (a
    #: tracker's read); None: worked out from the rows (a service's).
    missing: tuple[MissingAllocation, ...] | None = None
    stale: tuple["StaleAllocation", ...] | None = None
    services: dict[str, ServiceRecord] | None = None
    findings: dict[str, FindingsRow] | None = None
    builds: tuple[Building, ...] | None = None
    has_work: bool | None = None
    #: The seconds without a heartbeat after which the read took a service
    #: as down (its services are those and the ones it needs by name); None:
    #: every service was read.
    service_down_time: float | None = None

    @functools.cached_property
    def nodes(self) -> tuple[ComputeNode, ...]:
        """The ComputeNode records read, sorted by host and name."""
        return tuple(rows._node(head, [_Inventory(rc, *fields) for rc, fields in
                                       self.inventories.get(head.uuid, {}).items()],
                                self.usage.get(head.uuid, rows.NO_USAGE))
                     for head in self.node_heads)

    @functools.cached_property
    def allocations(self) -> tuple[Allocation, ...]:
        """The allocations read, by node and consumer."""
        return tuple(rows.allocation_from_row(r) for r in self.allocation_rows)

    @functools.cached_property
    def instances(self) -> dict[str, Instance]:
        """``{uuid: Instance}`` of the instances read."""
        return {r.uuid: rows.instance_from_row(r) for r in self.instance_rows}

    @functools.cached_property
    def _instance_rows(self) -> dict[str, Any]:
        uuid = _INST["uuid"]
        return {r[uuid]: r for r in self.instance_rows}

    # -- the audit -----------------------------------------------------------
    def _in(self, nodename: str | None, only: Collection[str] | None) -> bool:
        return only is None or nodename in only

    def node_uuid(self, nodename: str) -> str | None:
        """The uuid of the host's node ``nodename``, None if it has no record."""
        row = self.node_rows.get(nodename)
        return None if row is None else row.uuid

    def missing_allocations(self, only: Collection[str] | None = None
                            ) -> list[MissingAllocation]:
        """The consumers on the host's nodes (``only`` these names, if given) that
        hold no allocation there, as ``audit_writes.missing_allocations`` finds
        them."""
        return [m for m in self._missing if self._in(m.nodename, only)]

    def stale_allocations(self, only: Collection[str] | None = None
                          ) -> list["StaleAllocation"]:
        """The allocations on the host's nodes (``only`` these names, if given) that
        no live record backs, as ``audit_writes.reconcile_allocations`` finds
        them."""
        return [a for a in self._stale if self._in(a.nodename, only)]

    @functools.cached_property
    def _missing(self) -> tuple[MissingAllocation, ...]:
        if self.missing is not None:
            return self.missing
        found: list[MissingAllocation] = []
        uuid, host, node, vm_state, task_state = (_INST[k] for k in (
            "uuid", "host", "node", "vm_state", "task_state"))
        held = self._allocation_keys
        for r in self.instance_rows:   # by uuid
            if r[host] != self.host or r[node] is None:
                continue
            if not holds.instance_holds(r[vm_state], r[task_state], placed=True):
                continue
            node_uuid = self.node_uuid(r[node])
            if (r[uuid], node_uuid) not in held:
                inst = rows.instance_from_row(r)
                found.append(MissingAllocation(inst, node_uuid, r[node], inst.numa_topology))
        for mig in sorted(self.migrations.values(), key=lambda m: m.uuid):
            if mig.dest_compute != self.host or not holds.migration_holds(mig.status):
                continue
            node_uuid = self.node_uuid(mig.dest_node)
            if (mig.uuid, node_uuid) not in held:
                owner = self._instance_rows.get(mig.instance_uuid)
                found.append(MissingAllocation(
                    mig, node_uuid, mig.dest_node,
                    None if owner is None else ser.numa_from_json(owner.numa_topology)))
        return tuple(found)

    @functools.cached_property
    def _stale(self) -> tuple["StaleAllocation", ...]:
        if self.stale is not None:
            return self.stale
        names = {row.uuid: row.nodename for row in self.node_rows.values()}
        consumer, node_uuid, kind = (_ALLOC[k] for k in (
            "consumer_uuid", "node_uuid", "consumer_type"))
        host, node, vm_state, task_state = (_INST[k] for k in (
            "host", "node", "vm_state", "task_state"))
        found: list[StaleAllocation] = []
        for r in self.allocation_rows:
            nodename = names.get(r[node_uuid])
            if nodename is None:
                continue
            if r[kind] == "instance":
                inst = self._instance_rows.get(r[consumer])
                backed = inst is not None and (inst[host], inst[node]) == (
                    self.host, nodename) and holds.instance_holds(
                    inst[vm_state], inst[task_state], placed=True)
            else:
                mig = self.migrations.get(r[consumer])
                backed = mig is not None and holds.migration_holds(mig.status)
            if not backed:
                found.append(StaleAllocation(r[consumer], r[node_uuid], nodename, r[kind]))
        return tuple(found)

    def audit_differs(self, audits: Sequence["AuditedNode"],
                      known_texts: dict[str, tuple[NodeResources, str]],
                      listed: Collection[str] | None = None,
                      only: Collection[str] | None = None) -> str | None:
        """What :meth:`~nova_lite.db.store.Store.record_audit` would change for these
        arguments, on these records: a short reason, or None when it would write
        nothing.  ``known_texts``: the host's report texts
        (``audit_writes.report_text``)."""
        for audit in audits:
            row = self.node_rows.get(audit.nodename)
            if row is None:
                return f"node {audit.nodename} has no record"
            text = audit_writes.report_text(audit, known_texts)
            if row.resources != text:
                return f"node {audit.nodename} reports other resources"
            if row.last_error is not None or not row.reported:
                return f"node {audit.nodename} reports again"
            wanted = {rc: audit_writes.inventory_fields(inv)
                      for rc, inv in audit.inventories.items()}
            if wanted != self.inventories.get(row.uuid, {}):
                return f"node {audit.nodename} has other inventories"
        if listed is not None:
            for row in self.node_rows.values():
                if row.reported and row.nodename not in listed:
                    return f"node {row.nodename} is no longer listed"
        stale = self.stale_allocations(only)
        if stale:
            return f"{len(stale)} allocation(s) no live record backs"
        missing = [m for m in self.missing_allocations(only) if m.node_uuid is not None]
        if missing:
            return f"{len(missing)} consumer(s) without their allocation"
        return None

    def audited_nodes(self, audits: Iterable["AuditedNode"]) -> dict[str, ComputeNode]:
        """``{nodename: ComputeNode}`` of the audited nodes, as
        ``audit_writes.audited_nodes`` gives them after a pass that changed
        nothing: the reports and inventories as the driver gave them (not
        parsed back from their rows), the generations, errors and usage as
        read."""
        found: dict[str, ComputeNode] = {}
        for audit in sorted(audits, key=lambda a: a.nodename):
            row = self.node_rows[audit.nodename]
            used, numa, pci, nested = self.usage.get(row.uuid, rows.NO_USAGE)
            inventories = {rc: attrs.evolve(inv, used=used[rc]) if used.get(rc) else inv
                           for rc, inv in audit.inventories.items()}
            found[audit.nodename] = ComputeNode(
                uuid=row.uuid, host=self.host, nodename=audit.nodename,
                generation=row.generation, inventories=inventories, usage=used,
                resources=audit.resources, numa_placements=tuple(numa), pci_in_use=pci,
                provider_usage=nested, last_error=row.last_error, reported=row.reported)
        return found

    def allocations_on(self, node_uuid: str) -> list[Allocation]:
        """The allocations held on one of the nodes read."""
        return [a for a in self.allocations if a.node_uuid == node_uuid]

    @property
    def host_nodes(self) -> list[ComputeNode]:
        """The ComputeNode records of the host, sorted by name."""
        mine = {row.uuid for row in self.node_rows.values()}
        return [n for n in self.nodes if n.uuid in mine]

    # -- the findings ------------------------------------------------------------
    def snapshot(self) -> RecordsSnapshot:
        """The :class:`~nova_lite.db.snapshot.RecordsSnapshot` of the host these
        records hold (what :meth:`~nova_lite.db.store.Store.records_snapshot`
        would read in the same transaction); needs a service's read."""
        if self.services is None:
            raise ValueError("a tracker's read has no services: it makes no snapshot")
        scoped = frozenset(row.uuid for row in self.node_rows.values())
        moving = {u for u, m in self.migrations.items() if holds.migration_holds(m.status)
                  and self.host in (m.source_compute, m.dest_compute)}
        kept = tuple(sorted((a for a in self.allocations
                             if a.node_uuid in scoped or a.consumer_uuid in moving),
                            key=lambda a: (a.consumer_uuid, a.node_uuid)))
        # The snapshot's services are the host's and its migrations' ends
        # (what snapshot.read reads): the rules ask about no other.
        named = _service_hosts(self.host, self.migrations.values())
        return RecordsSnapshot(
            host=self.host, nodes=self.nodes, scoped=scoped, allocations=kept,
            instances=self.instances, migrations=self.migrations,
            migration_times=self.migration_times,
            services={h: s for h, s in self.services.items() if h in named},
            read_at=self.read_at)

    def hosts_needing_findings(self, service_down_time: float, interval: float,
                               binary: str) -> list[str]:
        """:meth:`~nova_lite.db.store.Store.hosts_needing_findings` of this host, on
        these records (a service's read, of ``binary``'s services).  Raises
        ValueError for a ``service_down_time`` (s) shorter than the read's: the
        services down for less were not read."""
        if self.services is None or self.findings is None:
            raise ValueError("a tracker's read has no services")
        if self.service_down_time is not None and service_down_time < self.service_down_time:
            # Services down for less than the read's down time were not read.
            raise ValueError(f"these records hold the services down for "
                             f"{self.service_down_time:g} s or more, not "
                             f"{service_down_time:g} s")
        deadline = self.read_at - service_down_time
        down = []
        for host, service in sorted(self.services.items()):
            if host == self.host or service.binary != binary or service.updated_at >= deadline:
                continue
            last = self.findings.get(host)
            if last is None or last.recorded_by == host or \
                    last.recorded_at <= self.read_at - interval:
                down.append(host)
        return down

    @functools.cached_property
    def _allocation_keys(self) -> frozenset[tuple[str, str]]:
        consumer, node_uuid = _ALLOC["consumer_uuid"], _ALLOC["node_uuid"]
        return frozenset((r[consumer], r[node_uuid]) for r in self.allocation_rows)


@attrs.frozen
class StaleAllocation:
    """An allocation on one of the host's nodes that no live record backs."""

    consumer_uuid: str
    node_uuid: str
    nodename: str
    consumer_type: str


#: Column positions in the rows of the allocations and instances statements.
_ALLOC = {c.name: i for i, c in enumerate(T_ALLOC.c)}
_INST = {c.name: i for i, c in enumerate(T_INST.c)}


def _moves_of(host: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """The migrations in progress that touch ``host``."""
    return sa.and_(holds_sql.migration_holds(), sa.or_(T_MIG.c.source_compute == host,
                                                       T_MIG.c.dest_compute == host))


def _scoped_uuids(host: sa.ColumnElement[str]) -> sa.CompoundSelect[Any]:
    """The uuids of the node rows a pass of ``host`` reads: its own, and the
    other end of its moves.

    A union of two indexed reads, not one scan with an OR: a condition
    ``host = :host OR EXISTS (...)`` cannot use the host's index, and read
    every node row of the fleet on every pass of every service.
    """
    own = sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)
    m, end = T_MIG.alias("move"), T_NODES.alias("end_node")
    ends = sa.select(end.c.uuid).select_from(m.join(end, sa.or_(
        sa.and_(m.c.source_compute == end.c.host, m.c.source_node == end.c.nodename),
        sa.and_(m.c.dest_compute == end.c.host, m.c.dest_node == end.c.nodename)))).where(
        holds_sql.migration_holds(m), sa.or_(m.c.source_compute == host,
                                             m.c.dest_compute == host))
    return sa.union(own, ends)


def _nodes_statement(scope: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The node rows ``scope`` picks, one row per (node, inventory); the node's
    report (its largest column) only on the first row of each node, which the
    order puts first."""
    first = sa.func.row_number().over(partition_by=T_NODES.c.uuid,
                                      order_by=T_INV.c.resource_class) == 1
    return sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename,
                     T_NODES.c.generation,
                     sa.case((first, T_NODES.c.resources), else_=None).label("resources"),
                     T_NODES.c.last_error, T_NODES.c.reported, T_INV.c.resource_class,
                     *audit_writes.INV_FIELDS).select_from(
        T_NODES.outerjoin(T_INV, T_INV.c.node_uuid == T_NODES.c.uuid)).where(scope).order_by(
        T_NODES.c.host, T_NODES.c.nodename, T_INV.c.resource_class)


def _moves_read(host: sa.ColumnElement[str]) -> sa.CompoundSelect[Any]:
    """The uuids of the migrations a pass of ``host`` reads: those in progress
    that touch the host, and those that hold an allocation on its nodes."""
    own_uuids = sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)
    held = T_ALLOC.alias("held")
    held_by_moves = sa.select(held.c.consumer_uuid).where(
        held.c.consumer_type == "migration", held.c.node_uuid.in_(own_uuids))
    return sa.union(sa.select(T_MIG.c.uuid).where(_moves_of(host)), held_by_moves)


def _statements(host: sa.ColumnElement[str]) -> tuple[sa.Select[Any], ...]:
    """The four statements of a service's pass before its services' (see the
    module's docstring), for the host ``host`` names (a bound parameter).

    Each reads through indexes only, however large the fleet: every "this
    or that" over rows found by different indexes is a union of indexed
    reads, never an OR the database could only answer with a scan.
    """
    scoped_uuids = _scoped_uuids(host)
    nodes = _nodes_statement(T_NODES.c.uuid.in_(scoped_uuids))
    own_uuids = sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)
    moving = sa.select(T_MIG.c.uuid).where(_moves_of(host))
    scoped_allocations = sa.union(
        T_ALLOC.select().where(T_ALLOC.c.node_uuid.in_(scoped_uuids)),
        T_ALLOC.select().where(T_ALLOC.c.consumer_uuid.in_(moving))).subquery("scoped")
    allocations = sa.select(scoped_allocations).order_by(
        scoped_allocations.c.node_uuid, scoped_allocations.c.consumer_uuid)
    migrations = T_MIG.select().where(T_MIG.c.uuid.in_(_moves_read(host))).order_by(
        T_MIG.c.uuid)
    a3, m3 = T_ALLOC.alias("named"), T_MIG.alias("naming")
    a2 = T_ALLOC.alias("held")
    held_by_moves = sa.select(a2.c.consumer_uuid).where(
        a2.c.consumer_type == "migration", a2.c.node_uuid.in_(own_uuids))
    named = sa.union(
        sa.select(T_INST.c.uuid).where(T_INST.c.host == host),
        sa.select(a3.c.instance_uuid).where(a3.c.node_uuid.in_(own_uuids)),
        sa.select(a3.c.instance_uuid).where(a3.c.consumer_uuid.in_(moving)),
        sa.select(m3.c.instance_uuid).where(holds_sql.migration_holds(m3), sa.or_(
            m3.c.source_compute == host, m3.c.dest_compute == host)),
        sa.select(m3.c.instance_uuid).where(m3.c.uuid.in_(held_by_moves)))
    open_task = sa.select(sa.func.min(T_TASK.c.id)).where(
        T_TASK.c.instance_uuid == T_INST.c.uuid,
        T_TASK.c.state.in_(holds_sql.constants(work.OPEN_STATES))).scalar_subquery()
    building = sa.and_(T_INST.c.host == host, T_INST.c.vm_state == holds.BUILDING)
    instances = sa.select(T_INST, sa.case((building, open_task), else_=None).label(
        "open_task")).where(T_INST.c.uuid.in_(named)).order_by(T_INST.c.uuid)
    return nodes, allocations, migrations, instances


def _service_hosts(host: str, migrations: Iterable[Any]) -> frozenset[str]:
    """The hosts whose service a pass of ``host`` reads by name: its own and
    both ends of each migration read (Migration records or rows)."""
    return frozenset({host} | {m.source_compute for m in migrations}
                     | {m.dest_compute for m in migrations}) - {None}


def _service_statements(every: bool) -> tuple[sa.Select[Any] | sa.CompoundSelect[Any],
                                              sa.Select[Any]]:
    """The two more statements of a service's pass (see the module's
    docstring), for the parameters ``host``, ``binary``, ``now`` (epoch s)
    and, unless ``every`` service of the binary is read, ``deadline`` (the
    oldest heartbeat that counts as up, epoch s).

    The services read by name (the host's and those at both ends of the
    migrations the pass reads, :func:`_service_hosts`) are picked by the
    statement itself, so that it needs nothing the others return and all
    six go to the database together.
    """
    host = sa.bindparam("host", type_=sa.String)
    binary = T_SVC.c.binary == sa.bindparam("binary", type_=sa.String)
    service_columns = (T_SVC.c.host, T_SVC.c.binary, T_SVC.c.created_at, T_SVC.c.updated_at,
                       T_SVC.c.report_count, T_SVC.c.disabled, T_SVC.c.disabled_reason)
    services: sa.Select[Any] | sa.CompoundSelect[Any]
    if every:
        joined: sa.Select[Any] = sa.select(
            *service_columns, T_FIND.c.recorded_by, T_FIND.c.recorded_at,
            sa.case((T_SVC.c.host == host, T_FIND.c.findings), else_=None).label("findings"),
        ).select_from(T_SVC.outerjoin(T_FIND, T_FIND.c.host == T_SVC.c.host)).where(
            binary).order_by(T_SVC.c.host)
        services = joined
    else:
        def found(column: sa.Column[Any]) -> sa.ScalarSelect[Any]:
            return sa.select(column).where(T_FIND.c.host == T_SVC.c.host).scalar_subquery()

        # A few rows, each with its findings' record looked up by key: a
        # join would let PostgreSQL's generic plan, whose guess of the
        # services down grows with the table, hash the whole host_findings
        # table on every pass once that guess is large enough.
        columns: sa.Select[Any] = sa.select(
            *service_columns, found(T_FIND.c.recorded_by).label("recorded_by"),
            found(T_FIND.c.recorded_at).label("recorded_at"),
            sa.case((T_SVC.c.host == host, found(T_FIND.c.findings)),
                    else_=None).label("findings"))
        ends = T_MIG.alias("ends")
        moves = _moves_read(host)
        # Three indexed reads, whole rows each, not one condition over the
        # table: the planner, misled by stale statistics, answered "host in
        # (these) and binary = :binary" by reading every service row of the
        # binary (20 ms a pass at 10,000 services).  A row read twice is
        # the same row.
        services = sa.union_all(
            columns.where(binary, T_SVC.c.host == host),
            columns.where(binary, T_SVC.c.host.in_(sa.union(
                sa.select(ends.c.source_compute).where(ends.c.uuid.in_(moves)),
                sa.select(ends.c.dest_compute).where(ends.c.uuid.in_(moves))))),
            columns.where(binary, services_sql.heartbeat_before(
                sa.bindparam("deadline", type_=sa.Float))))
    now = sa.bindparam("now", type_=sa.Float)
    work_waiting = sa.select(T_TASK.c.id).where(T_TASK.c.host == host, sa.or_(
        T_TASK.c.state == work.WAITING,
        sa.and_(T_TASK.c.state == work.RUNNING, T_TASK.c.lease_until < now))).limit(1)
    return services, work_waiting


# Built once, run with their parameters: a fleet's services each read these
# on every pass, and building and compiling them each time cost more than
# their execution.
_PASS = _statements(sa.bindparam("host", type_=sa.String))
_PASS_SERVICES = {every: _service_statements(every) for every in (True, False)}


def _service_values(host: str, binary: str, now: float,
                    service_down_time: float | None) -> dict[str, Any]:
    """The parameters of :func:`_service_statements`'s statements; with
    ``service_down_time`` (s) None, every service of ``binary``."""
    values: dict[str, Any] = {"host": host, "binary": binary, "now": now}
    if service_down_time is not None:
        values["deadline"] = services_sql.heartbeat_deadline(service_down_time, now)
    return values


def _usage(allocs: Iterable[Any]) -> dict[str, Any]:
    """``{node_uuid: (amounts, numa_placements, pci_in_use, provider_usage)}`` summed
    from allocation rows, as :func:`nova_lite.db.rows.usage_by_node` sums them in
    the database."""
    node_uuid = _ALLOC["node_uuid"]
    std = [(rc, _ALLOC[col]) for rc, col in rows.STD_COLUMNS]
    other, numa_col, pci_col, providers = (_ALLOC[k] for k in (
        "other", "numa_topology", "pci_devices", "providers"))
    totals: dict[str, dict[str, int]] = {}
    extras: dict[str, list[Any]] = collections.defaultdict(list)
    for r in allocs:
        sums = totals.get(r[node_uuid])
        if sums is None:
            sums = totals[r[node_uuid]] = {rc: 0 for rc, _ in std}
        for rc, i in std:
            sums[rc] += r[i]
        if r[other] is not None or r[numa_col] is not None or \
                r[pci_col] is not None or r[providers] is not None:
            extras[r[node_uuid]].append(r)
    usage: dict[str, Any] = {}
    for uuid, sums in totals.items():
        amounts = {rc: int(n) for rc, n in sums.items() if n}
        numa: list[Any] = []
        pci: set[str] = set()
        nested: dict[str, dict[str, int]] = {}
        for r in extras.get(uuid, ()):
            rows._add_extras(amounts, numa, pci, nested, r[other], r[numa_col],
                             r[pci_col], r[providers])
        usage[uuid] = (amounts, numa, pci, nested)
    return usage


def _nodes_from(found: Iterable[Sequence[Any]], host: str
                ) -> tuple[dict[str, NodeRow], dict[str, dict[str, tuple[Any, ...]]],
                           dict[str, NodeRow]]:
    """(every node row read by uuid, inventories by uuid, the host's by name)
    of the rows of a :func:`_nodes_statement`."""
    heads: dict[str, NodeRow] = {}
    inventories: dict[str, dict[str, tuple[Any, ...]]] = {}
    # (uuid, host, nodename, generation, resources, last_error, reported,
    # resource_class, *INV_FIELDS).
    for r in found:
        uuid = r[0]
        if uuid not in heads:
            heads[uuid] = NodeRow(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))
            inventories[uuid] = {}
        if r[7] is not None:
            inventories[uuid][r[7]] = tuple(r[8:])
    node_rows = {head.nodename: head for head in heads.values() if head.host == host}
    return heads, inventories, node_rows


def _read_for_tracker(conn: sa.Connection, host: str, now: float) -> PassRecords:
    """A tracker's read: the host's node rows; usage, stale and missing
    allocations as the database sums and finds them (no row of a steady
    node's consumers is read)."""
    heads, inventories, node_rows = _nodes_from(
        conn.execute(_nodes_statement(T_NODES.c.host == host)), host)
    mine = T_ALLOC.c.node_uuid.in_(sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host))
    sums = sa.select(T_ALLOC.c.node_uuid, *[sa.func.sum(T_ALLOC.c[col]) for _, col in
                                            rows.STD_COLUMNS],
                     *[sa.null() for _ in _EXTRAS]).where(mine).group_by(T_ALLOC.c.node_uuid)
    extras = sa.select(T_ALLOC.c.node_uuid, *[sa.literal(0) for _ in rows.STD_COLUMNS],
                       *[T_ALLOC.c[col] for col in _EXTRAS]).where(
        mine, sa.text(f"({models.EXTRAS_PREDICATE})"))
    usage: dict[str, Any] = {}
    for node_uuid, *values in conn.execute(sa.union_all(sums, extras)):
        amounts, numa, pci, nested = usage.setdefault(node_uuid, ({}, [], set(), {}))
        for (rc, _), n in zip(rows.STD_COLUMNS, values):
            if n:
                amounts[rc] = amounts.get(rc, 0) + int(n)
        if any(v is not None for v in values[len(rows.STD_COLUMNS):]):
            rows._add_extras(amounts, numa, pci, nested, *values[len(rows.STD_COLUMNS):])
    kinds = ("instance", "migration")
    stale = tuple(StaleAllocation(consumer, node_uuid, nodename, kind)
                  for consumer, node_uuid, nodename, kind in conn.execute(sa.union_all(*[
                      q.add_columns(sa.literal(k).label("kind"))
                      for q, k in zip(audit_writes.stale_queries(host), kinds)])))
    return PassRecords(
        host=host, read_at=now, node_rows=node_rows, inventories=inventories,
        migrations={}, migration_times={}, usage=usage, node_heads=tuple(heads.values()),
        allocation_rows=(), instance_rows=(),
        missing=tuple(audit_writes.missing_allocations(conn, host)), stale=stale)


#: The allocation columns a node's usage cannot be summed from in SQL alone,
#: in the order of :func:`nova_lite.db.rows._add_extras`.
_EXTRAS = ("other", "numa_topology", "pci_devices", "providers")


def read(conn: sa.Connection, host: str, now: float) -> PassRecords:
    """The :class:`PassRecords` of a tracker's audit of ``host`` on its own (no
    service: no leak search), read at ``now`` (epoch s): five statements that
    read no row of a steady node's consumers (the node rows with their
    inventories, their usage summed, the stale allocations, and the
    instances and the migrations that lost their allocation)."""
    return _read_for_tracker(conn, host, now)


def read_for_service(conn: DirectConnection, host: str, now: float, service_binary: str,
                     service_down_time: float | None) -> PassRecords:
    """The :class:`PassRecords` of a service's pass of ``host`` on ``conn``, read
    at ``now`` (epoch s): the six statements of the module's docstring, sent
    together with the transaction's BEGIN and COMMIT (one round trip on
    PostgreSQL), every row a leak search reads too.  Its services are the
    host's, its migrations' ends and those of ``service_binary`` without a
    heartbeat for ``service_down_time`` seconds before ``now``; every
    service of ``service_binary`` when ``service_down_time`` is None.
    """
    svc_sql, work_sql = _PASS_SERVICES[service_down_time is None]
    of_host = {"host": host}
    values = _service_values(host, service_binary, now, service_down_time)
    node_sql, alloc_sql, mig_sql, inst_sql = _PASS
    found = conn.execute_together([(node_sql, of_host), (alloc_sql, of_host),
                                   (mig_sql, of_host), (inst_sql, of_host),
                                   (svc_sql, values), (work_sql, values)], ending=True)
    heads, inventories, node_rows = _nodes_from(found[0].rows, host)
    alloc_rows = tuple(found[1].rows)
    mig_rows = found[2].rows
    inst_rows = tuple(found[3].rows)
    services: dict[str, ServiceRecord] = {}
    findings: dict[str, FindingsRow] = {}
    for r in found[4].rows:
        services[r.host] = ServiceRecord(r.host, r.binary, r.created_at, r.updated_at,
                                         r.report_count, bool(r.disabled), r.disabled_reason)
        if r.recorded_by is not None:
            findings[r.host] = FindingsRow(r.findings, r.recorded_by, r.recorded_at)
    builds = tuple(Building(r.uuid, r.created_at, r.updated_at, r.open_task)
                   for r in inst_rows if r.host == host and r.vm_state == holds.BUILDING)
    return PassRecords(
        host=host, read_at=now, node_rows=node_rows,
        inventories=inventories,
        migrations={r.uuid: rows.migration_from_row(r) for r in mig_rows},
        migration_times={r.uuid: (r.created_at, r.updated_at) for r in mig_rows},
        usage=_usage(a for a in alloc_rows if a[_ALLOC["node_uuid"]] in heads),
        node_heads=tuple(heads.values()),
        allocation_rows=alloc_rows, instance_rows=inst_rows,
        services=services, findings=findings, builds=builds,
        has_work=bool(found[5].rows), service_down_time=service_down_time)


@attrs.frozen
class _Inventory:
    """An inventory row as :func:`nova_lite.db.rows._node` reads it."""

    resource_class: str
    total: int
    reserved: int
    min_unit: int
    max_unit: int | None
    step_size: int
    allocation_ratio: str


def findings_text(findings: Iterable[Any]) -> str:
    """The JSON text findings are recorded as (see ``Store.record_findings``)."""
    return json.dumps([f.to_dict() for f in findings], sort_keys=True)


__all__ = ["FindingsRow", "NodeRow", "PassRecords", "read", "read_for_service"]
