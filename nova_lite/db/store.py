"""``Store``: the records, and the transactions that change them.

Every change that affects a node's capacity or usage is one transaction
that bumps the node's ``generation``.  A claim first tries a
compare-and-swap on the generation it last saw, deciding on the usage it
has; if another process got there first (nothing was written), a second
transaction locks the node row, re-reads the usage and decides on fresh
numbers.  The claim's statements are prepared once (:mod:`.prepared`).
"""

import collections
import json
import logging
import time
import uuid as uuidlib
from fractions import Fraction

import attrs
import sqlalchemy as sa

from nova_lite.db import migrations, models, serialize as ser
from nova_lite.db.engine import Database
from nova_lite.db.prepared import Statements
from nova_lite.exception import InstanceNotFound, InvalidInput, NodeNotFound, StoreError
from nova_lite.objects import (
    MIGRATION_IN_PROGRESS, SHELVED_OFFLOADED, STATES_WITHOUT_RESOURCES, Allocation,
    ComputeNode, Instance, Migration, NodeResources, NodeUsage)
from nova_lite.resources import Inventory

LOG = logging.getLogger(__name__)

COMPUTE_BINARY = "nova-lite-compute"

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG, T_SVC = models.instances, models.migrations, models.services
_STD_COLUMNS = tuple(models.ALLOCATION_COLUMNS.items())


@attrs.frozen
class ServiceRecord:
    """A row of ``services``; ``updated_at`` is the last heartbeat (epoch s)."""

    host: str
    binary: str
    created_at: float
    updated_at: float
    report_count: int
    disabled: bool

    def is_up(self, service_down_time, now=None):
        """True if the last heartbeat is within ``service_down_time`` seconds."""
        now = time.time() if now is None else now
        return not self.disabled and now - self.updated_at <= service_down_time


@attrs.frozen
class NodeAudit:
    """One node's audit outcome for :meth:`Store.record_audit`."""

    nodename: str
    resources: NodeResources
    inventories: object   # {rc: Inventory}
    node_uuid: str = None  # the driver's stable uuid, if it has one


@attrs.frozen
class ClaimPlan:
    """What a claim writes: the allocation, and the instance/migration rows."""

    allocation: Allocation
    instance: Instance = None
    migration: Migration = None


def default_url(settings):
    """The database URL from settings (``[database] connection``)."""
    return settings.database_url


class Store:
    """Record store on SQLAlchemy: ``Store("sqlite:///path.db")``,
    ``Store("sqlite://")`` (in memory) or ``Store("postgresql://...")``.

    ``claim_retries`` bounds the retries of a transaction that lost a race.
    The schema is created or upgraded on construction.
    """

    def __init__(self, url, claim_retries=10):
        self.db = Database(url, retries=claim_retries)
        self.url = self.db.url
        try:
            self.schema_version = migrations.upgrade(self.db.engine)
        except sa.exc.SQLAlchemyError as exc:
            self.db.dispose()
            raise StoreError(f"Cannot open database {self.db.redacted_url}: "
                             f"{_first_line(exc)}") from exc
        self._sql = Statements(self.db.engine.dialect)   # the claim's statements
        self._report_texts = collections.defaultdict(dict)   # see _report_text()

    def __repr__(self):
        return f"Store({self.db.redacted_url!r})"

    def close(self):
        """Release the database connections."""
        self.db.dispose()

    # -- services -----------------------------------------------------------
    def heartbeat(self, host, binary=COMPUTE_BINARY):
        """Create or refresh the (host, binary) service row; returns it."""
        def op(conn):
            now = time.time()
            res = conn.execute(T_SVC.update().where(
                T_SVC.c.host == host, T_SVC.c.binary == binary).values(
                updated_at=now, report_count=T_SVC.c.report_count + 1))
            if res.rowcount == 0:
                conn.execute(T_SVC.insert().values(
                    host=host, binary=binary, created_at=now, updated_at=now,
                    report_count=1, disabled=False))
            row = conn.execute(T_SVC.select().where(
                T_SVC.c.host == host, T_SVC.c.binary == binary)).one()
            return _service(row)
        return self.db.write(f"heartbeat of service {host}/{binary}", op)

    def list_services(self, binary=COMPUTE_BINARY):
        """Every service row of ``binary``, sorted by host."""
        def op(conn):
            rows = conn.execute(T_SVC.select().where(T_SVC.c.binary == binary)
                                .order_by(T_SVC.c.host))
            return [_service(r) for r in rows]
        return self.db.read("list services", op)

    # -- compute nodes --------------------------------------------------------
    def get_compute_nodes(self, host=None):
        """Live compute node records (of ``host``, or all), sorted by host and name."""
        return self.db.read("list compute nodes", lambda conn: _load_nodes(conn, host))

    def get_compute_node(self, host, nodename):
        """One node record; raises :class:`NodeNotFound` naming it."""
        for node in self.db.read(f"get compute node {nodename}",
                                 lambda conn: _load_nodes(conn, host, nodename)):
            return node
        raise NodeNotFound(nodename, host)

    def delete_compute_node(self, host, nodename):
        """Delete a node record with its inventories and allocations."""
        def op(conn):
            row = conn.execute(sa.select(T_NODES.c.uuid).where(
                T_NODES.c.host == host, T_NODES.c.nodename == nodename)).first()
            if row is None:
                raise NodeNotFound(nodename, host)
            for table in (T_ALLOC, T_INV):
                conn.execute(table.delete().where(table.c.node_uuid == row.uuid))
            conn.execute(T_NODES.delete().where(T_NODES.c.uuid == row.uuid))
        self.db.write(f"delete compute node {host}/{nodename}", op)

    def set_node_error(self, host, nodename, error):
        """Record (or clear, with None) why the last audit of a node failed."""
        def op(conn):
            conn.execute(T_NODES.update().where(
                T_NODES.c.host == host, T_NODES.c.nodename == nodename,
                T_NODES.c.last_error.is_distinct_from(error)).values(last_error=error))
        self.db.write(f"mark compute node {host}/{nodename}", op)

    def record_audit(self, host, audits, rebuild_allocation):
        """Write one audit pass of ``host`` in one transaction.

        ``audits``: :class:`NodeAudit` per node that reported well.  Node
        rows and inventories are written only where they changed.  Stale
        allocations (deleted instances, finished migrations) are removed
        and missing ones rebuilt with ``rebuild_allocation(consumer,
        node_uuid, numa_request)`` (consumer: Instance or Migration;
        numa_request: the NUMA topology its claim asked for, the
        instance's), each logged at WARNING.  Returns ``{nodename:
        ComputeNode}`` for the audited nodes.
        """
        def op(conn):
            _serialise_host(conn, host)
            changed = _write_nodes(conn, host, audits, self._report_texts[host])
            changed |= _reconcile_allocations(conn, host, rebuild_allocation)
            _bump_generations(conn, changed)
            return _audited_nodes(conn, host, audits)
        return self.db.write(f"record audit of host {host}", op)

    # -- claims -------------------------------------------------------------
    def claim(self, node_uuid, cached_usage, decide):
        """Admit one claim on a node in one transaction.

        ``decide(usage) -> ClaimPlan`` sees the node's usage and raises to
        refuse.  The fast path decides on ``cached_usage`` before any
        transaction, then writes the plan in one that bumps the generation
        only if it is still ``cached_usage``'s (a compare-and-swap on
        prepared statements).  If another writer got there first (nothing
        was written), or the cached usage refuses, a second transaction
        locks the node row, re-reads the usage and decides on fresh numbers:
        that decision is final.  Returns ``(usage_seen, plan,
        new_generation)``.
        """
        sql = self._sql
        seen = cached_usage.generation
        try:
            cached_plan = decide(cached_usage)
        except Exception:   # noqa: BLE001 - the usage may be stale: decide again on fresh
            cached_plan = None

        def optimistic(cursor):
            if not sql.update(cursor, T_NODES, {"generation": seen + 1},
                              uuid=node_uuid, generation=seen).rowcount:
                return None   # lost the race: nothing was written
            _write_plan(sql, cursor, cached_plan)
            return cached_usage, cached_plan, seen + 1

        def locked(conn):
            usage = _lock_and_load_usage(conn, node_uuid)
            conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid)
                         .values(generation=usage.generation + 1))
            plan = decide(usage)
            _write_plan(sql, conn.connection.cursor(), plan)
            return usage, plan, usage.generation + 1

        op = f"claim on node {node_uuid}"
        if cached_plan is not None:
            won = self.db.write_raw(op, optimistic)
            if won is not None:
                return won
        return self.db.write(op, locked)

    def release(self, node_uuids, consumer_uuids, instance=None, migration_status=None,
                transfer=None):
        """Drop allocations and update rows in one transaction.

        Removes the allocations of ``consumer_uuids`` on ``node_uuids``;
        upserts ``instance`` if given; sets ``migration_status`` as
        ``(migration_uuid, status)`` (or a list of them); ``transfer`` = ``(migration_uuid,
        instance_uuid)`` re-labels a migration's allocation as the
        instance's (a confirmed resize).  Bumps each node's generation and
        returns ``{node_uuid: NodeUsage}`` fresh from the records.
        """
        def op(conn):
            return _release(conn, node_uuids, consumer_uuids, instance=instance,
                            migration_status=migration_status, transfer=transfer)
        return self.db.write("release allocations", op)

    def record_instance_state(self, instance):
        """Record ``instance``'s new state in one transaction; frees it if it holds nothing now.

        A live instance keeps the placement of its record (host, node, NUMA
        pinning, PCI devices).  A deleted or shelve-offloaded one gives back
        every allocation it holds at once, its in-progress migrations are
        marked "error", and (offloaded) it leaves its host and node.  Returns
        ``{node_uuid: NodeUsage}`` of the nodes whose usage changed.  Raises
        :class:`InstanceNotFound` if the instance has no record.
        """
        def op(conn):
            row = conn.execute(T_INST.select().where(T_INST.c.uuid == instance.uuid)).first()
            if row is None:
                raise InstanceNotFound(instance.uuid, "in the records")
            stored = _instance(row)
            if instance.holds_resources:
                _upsert_instance(conn, attrs.evolve(
                    instance, host=stored.host, node=stored.node,
                    numa_topology=stored.numa_topology, pci_devices=stored.pci_devices),
                    time.time())
                return {}
            held = conn.execute(sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid).where(
                T_ALLOC.c.instance_uuid == instance.uuid)).all()
            moving = conn.execute(sa.select(T_MIG.c.uuid).where(
                T_MIG.c.instance_uuid == instance.uuid,
                T_MIG.c.status.in_(MIGRATION_IN_PROGRESS))).scalars().all()
            offloaded = instance.vm_state != "deleted"
            gone = attrs.evolve(instance, host=None if offloaded else stored.host,
                                node=None if offloaded else stored.node, pci_devices=())
            return _release(conn, sorted({r.node_uuid for r in held}),
                            [r.consumer_uuid for r in held], instance=gone,
                            migration_status=[(m, "error") for m in moving])
        return self.db.write(f"record state of instance {instance.uuid}", op)

    def node_usage(self, node_uuid):
        """The current :class:`NodeUsage` of a node, from the records."""
        return self.db.read(f"usage of node {node_uuid}",
                            lambda conn: _lock_and_load_usage(conn, node_uuid, lock=False))

    # -- instances, migrations, allocations ------------------------------------
    def save_instance(self, instance):
        """Insert or update an instance row."""
        self.db.write(f"save instance {instance.uuid}",
                      lambda conn: _upsert_instance(conn, instance, time.time()))

    def get_instance(self, instance_uuid):
        """The instance row as an Instance; raises :class:`InstanceNotFound`."""
        def op(conn):
            row = conn.execute(T_INST.select().where(T_INST.c.uuid == instance_uuid)).first()
            if row is None:
                raise InstanceNotFound(instance_uuid, "in the records")
            return _instance(row)
        return self.db.read(f"get instance {instance_uuid}", op)

    def list_instances(self, host=None, node=None, live_only=True):
        """Instances on ``host``/``node``; ``live_only`` drops deleted/offloaded."""
        def op(conn):
            query = T_INST.select()
            if host is not None:
                query = query.where(T_INST.c.host == host)
            if node is not None:
                query = query.where(T_INST.c.node == node)
            if live_only:
                query = query.where(T_INST.c.vm_state.not_in(STATES_WITHOUT_RESOURCES))
            return [_instance(r) for r in conn.execute(query.order_by(T_INST.c.uuid))]
        return self.db.read("list instances", op)

    def list_migrations(self, instance_uuid=None, in_progress_only=False):
        """Migration rows (of one instance, or all)."""
        def op(conn):
            query = T_MIG.select()
            if instance_uuid is not None:
                query = query.where(T_MIG.c.instance_uuid == instance_uuid)
            if in_progress_only:
                query = query.where(T_MIG.c.status.in_(MIGRATION_IN_PROGRESS))
            return [_migration(r) for r in conn.execute(query.order_by(T_MIG.c.created_at))]
        return self.db.read("list migrations", op)

    def list_allocations(self, node_uuid=None, instance_uuid=None):
        """Allocation records, filtered by node and/or instance."""
        def op(conn):
            query = T_ALLOC.select()
            if node_uuid is not None:
                query = query.where(T_ALLOC.c.node_uuid == node_uuid)
            if instance_uuid is not None:
                query = query.where(T_ALLOC.c.instance_uuid == instance_uuid)
            return [_allocation(r) for r in conn.execute(
                query.order_by(T_ALLOC.c.consumer_uuid))]
        return self.db.read("list allocations", op)


def _serialise_host(conn, host):
    """Make audits of one host take turns across processes.

    SQLite's BEGIN IMMEDIATE already does; on PostgreSQL two first audits
    would otherwise both insert the same (host, nodename) row.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:h))"),
                     {"h": "nova-lite-audit:" + host})


def _first_line(exc):
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {lines[0] if lines else ''}"


# -- row <-> record ---------------------------------------------------------

def _release(conn, node_uuids, consumer_uuids, instance=None, migration_status=None,
             transfer=None):
    """The statements of :meth:`Store.release`, on ``conn`` inside its transaction."""
    now = time.time()
    for node_uuid in node_uuids:
        conn.execute(T_ALLOC.delete().where(
            T_ALLOC.c.node_uuid == node_uuid,
            T_ALLOC.c.consumer_uuid.in_(list(consumer_uuids))))
    if transfer is not None:
        conn.execute(T_ALLOC.update().where(T_ALLOC.c.consumer_uuid == transfer[0])
                     .values(consumer_uuid=transfer[1], consumer_type="instance"))
    if instance is not None:
        _upsert_instance(conn, instance, now)
    statuses = migration_status or []
    if isinstance(statuses, tuple):
        statuses = [statuses]
    for mig_uuid, status in statuses:
        conn.execute(T_MIG.update().where(T_MIG.c.uuid == mig_uuid)
                     .values(status=status, updated_at=now))
    fresh = {}
    for node_uuid in node_uuids:
        conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid)
                     .values(generation=T_NODES.c.generation + 1))
        fresh[node_uuid] = _lock_and_load_usage(conn, node_uuid, lock=False)
    return fresh


def _service(row):
    return ServiceRecord(host=row.host, binary=row.binary, created_at=row.created_at,
                         updated_at=row.updated_at, report_count=row.report_count,
                         disabled=bool(row.disabled))


def _instance(row):
    return Instance(
        uuid=row.uuid, flavor=ser.flavor_from_json(row.flavor), project_id=row.project_id,
        user_id=row.user_id, host=row.host, node=row.node, vm_state=row.vm_state,
        task_state=row.task_state, numa_topology=ser.numa_from_json(row.numa_topology),
        pci_requests=ser.pci_requests_from_json(row.pci_requests),
        pci_devices=ser.strings_from_json(row.pci_devices))


def _migration(row):
    return Migration(
        uuid=row.uuid, instance_uuid=row.instance_uuid, source_compute=row.source_compute,
        source_node=row.source_node, dest_compute=row.dest_compute, dest_node=row.dest_node,
        old_flavor=ser.flavor_from_json(row.old_flavor),
        new_flavor=ser.flavor_from_json(row.new_flavor), status=row.status,
        migration_type=row.migration_type)


def _allocation_resources(row):
    amounts = {rc: getattr(row, col) for rc, col in _STD_COLUMNS if getattr(row, col)}
    if row.other:
        amounts.update(json.loads(row.other))
    return amounts


def _allocation(row):
    return Allocation(
        consumer_uuid=row.consumer_uuid, consumer_type=row.consumer_type,
        instance_uuid=row.instance_uuid, node_uuid=row.node_uuid,
        resources=_allocation_resources(row), flavor=ser.flavor_from_json(row.flavor),
        numa_topology=ser.numa_from_json(row.numa_topology),
        pci_devices=ser.strings_from_json(row.pci_devices))


def _allocation_values(alloc, now):
    values = {col: alloc.resources.get(rc, 0) for rc, col in _STD_COLUMNS}
    other = {rc: n for rc, n in alloc.resources.items() if rc not in models.ALLOCATION_COLUMNS}
    values.update(
        consumer_uuid=alloc.consumer_uuid, node_uuid=alloc.node_uuid,
        consumer_type=alloc.consumer_type, instance_uuid=alloc.instance_uuid,
        other=ser.dumps(other) if other else None, flavor=ser.flavor_to_json(alloc.flavor),
        numa_topology=ser.numa_to_json(alloc.numa_topology),
        pci_devices=ser.strings_to_json(alloc.pci_devices), created_at=now)
    return values


def _instance_values(inst, now):
    return dict(
        host=inst.host, node=inst.node, vm_state=inst.vm_state, task_state=inst.task_state,
        project_id=inst.project_id, user_id=inst.user_id, flavor=ser.flavor_to_json(inst.flavor),
        numa_topology=ser.numa_to_json(inst.numa_topology),
        pci_requests=ser.pci_requests_to_json(inst.pci_requests),
        pci_devices=ser.strings_to_json(inst.pci_devices), updated_at=now)


def _upsert_instance(conn, inst, now):
    values = _instance_values(inst, now)
    if conn.execute(T_INST.update().where(T_INST.c.uuid == inst.uuid).values(**values)).rowcount:
        return
    conn.execute(T_INST.insert().values(uuid=inst.uuid, created_at=now, **values))


def _migration_values(mig, now):
    return dict(
        uuid=mig.uuid, instance_uuid=mig.instance_uuid, source_compute=mig.source_compute,
        source_node=mig.source_node, dest_compute=mig.dest_compute, dest_node=mig.dest_node,
        old_flavor=ser.flavor_to_json(mig.old_flavor),
        new_flavor=ser.flavor_to_json(mig.new_flavor), status=mig.status,
        migration_type=mig.migration_type, created_at=now, updated_at=now)


def _write_plan(sql, cursor, plan):
    """Write a claim's rows with the prepared ``sql`` on a DBAPI ``cursor``."""
    now = time.time()
    if plan.instance is not None:
        values = _instance_values(plan.instance, now)
        if not sql.insert_new(cursor, T_INST, dict(values, uuid=plan.instance.uuid,
                                                    created_at=now)).rowcount:
            # A known instance may already hold a claim (a new one never does).
            _refuse_second_claim(sql, cursor, plan.instance.uuid)
            sql.update(cursor, T_INST, values, uuid=plan.instance.uuid)
    if plan.migration is not None:
        sql.insert(cursor, T_MIG, _migration_values(plan.migration, now))
    sql.insert(cursor, T_ALLOC, _allocation_values(plan.allocation, now))


def _refuse_second_claim(sql, cursor, instance_uuid):
    """An instance holds one claim at a time: a second one would count it twice."""
    held = sql._get(("held-by-consumer",), lambda: sa.select(
        T_NODES.c.host, T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid)).where(
        T_ALLOC.c.consumer_uuid == sa.bindparam("consumer_uuid")))
    rows = held.execute(cursor, {"consumer_uuid": instance_uuid}).fetchall()
    if rows:
        where = ", ".join(f"{host}/{node}" for host, node in rows)
        raise InvalidInput(f"Instance {instance_uuid} already holds a claim on node {where}; "
                           "abort it or free the instance before claiming again")


# -- usage --------------------------------------------------------------------

def _lock_and_load_usage(conn, node_uuid, lock=True):
    query = sa.select(T_NODES.c.generation).where(T_NODES.c.uuid == node_uuid)
    if lock and conn.dialect.name == "postgresql":
        query = query.with_for_update()
    generation = conn.execute(query).scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    amounts, numa, pci = _usage_by_node(conn, T_ALLOC.c.node_uuid == node_uuid).get(
        node_uuid, _NO_USAGE)
    return NodeUsage(generation=generation, amounts=amounts, numa_placements=tuple(numa),
                     pci_in_use=frozenset(pci))


_NO_USAGE = ({}, (), ())


def _usage_by_node(conn, where):
    """``{node_uuid: (amounts, numa_placements, pci_in_use)}`` of the allocations ``where``.

    The standard classes are summed by the database; only the rows with
    other classes, NUMA cells or PCI devices are read one by one.
    """
    usage = {}
    totals = [sa.func.sum(T_ALLOC.c[col]) for _, col in _STD_COLUMNS]
    sums = sa.select(T_ALLOC.c.node_uuid, *totals).where(where).group_by(T_ALLOC.c.node_uuid)
    for node_uuid, *totals in conn.execute(sums):
        amounts = {rc: int(total) for (rc, _), total in zip(_STD_COLUMNS, totals) if total}
        usage[node_uuid] = (amounts, [], set())
    extras = sa.select(T_ALLOC.c.node_uuid, T_ALLOC.c.other, T_ALLOC.c.numa_topology,
                       T_ALLOC.c.pci_devices).where(
        where, sa.or_(T_ALLOC.c.other.is_not(None), T_ALLOC.c.numa_topology.is_not(None),
                      T_ALLOC.c.pci_devices.is_not(None)))
    for node_uuid, other, numa_json, pci_json in conn.execute(extras):
        amounts, numa, pci = usage[node_uuid]
        for rc, n in (json.loads(other) if other else {}).items():
            amounts[rc] = amounts.get(rc, 0) + n
        if numa_json:
            numa.append(ser.numa_from_json(numa_json))
        pci.update(ser.strings_from_json(pci_json))
    return usage


def _load_nodes(conn, host=None, nodename=None):
    """ComputeNode records with inventories and usage, three queries in all."""
    query = T_NODES.select().order_by(T_NODES.c.host, T_NODES.c.nodename)
    if host is not None:
        query = query.where(T_NODES.c.host == host)
    if nodename is not None:
        query = query.where(T_NODES.c.nodename == nodename)
    rows = conn.execute(query).all()
    if not rows:
        return []
    scope = [r.uuid for r in rows] if nodename is not None else None
    node_filter = _scope_filter(host, scope)
    invs = collections.defaultdict(dict)
    for r in conn.execute(T_INV.select().where(node_filter(T_INV.c.node_uuid))):
        invs[r.node_uuid][r.resource_class] = r
    usage = _usage_by_node(conn, node_filter(T_ALLOC.c.node_uuid))
    nodes = []
    for row in rows:
        used, numa, pci = usage.get(row.uuid, _NO_USAGE)
        inventories = {rc: Inventory(
            total=i.total, reserved=i.reserved, min_unit=i.min_unit, max_unit=i.max_unit,
            step_size=i.step_size, allocation_ratio=Fraction(i.allocation_ratio),
            used=used.get(rc, 0))
            for rc, i in invs.get(row.uuid, {}).items()}
        nodes.append(ComputeNode(
            uuid=row.uuid, host=row.host, nodename=row.nodename, generation=row.generation,
            inventories=inventories, usage=used,
            resources=NodeResources.from_dict(json.loads(row.resources))
            if row.resources else None,
            numa_placements=tuple(numa), pci_in_use=pci, last_error=row.last_error))
    return nodes


def _audited_nodes(conn, host, audits):
    """``{nodename: ComputeNode}`` of the audited nodes, as :func:`_load_nodes` gives them.

    The reports and inventories just written are taken as they are, not
    parsed back from their rows (what costs most in a fleet's audit); the
    uuids, generations, errors and usage are read.
    """
    rows = {r.nodename: r for r in conn.execute(
        sa.select(T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.generation,
                  T_NODES.c.last_error).where(T_NODES.c.host == host)).all()}
    usage = _usage_by_node(conn, _scope_filter(host, None)(T_ALLOC.c.node_uuid))
    nodes = {}
    for audit in sorted(audits, key=lambda a: a.nodename):
        row = rows[audit.nodename]
        used, numa, pci = usage.get(row.uuid, _NO_USAGE)
        inventories = {rc: attrs.evolve(inv, used=used[rc]) if used.get(rc) else inv
                       for rc, inv in audit.inventories.items()}
        nodes[audit.nodename] = ComputeNode(
            uuid=row.uuid, host=host, nodename=audit.nodename, generation=row.generation,
            inventories=inventories, usage=used, resources=audit.resources,
            numa_placements=tuple(numa), pci_in_use=pci, last_error=row.last_error)
    return nodes


def _scope_filter(host, node_uuids):
    def node_filter(column):
        if node_uuids is not None:
            return column.in_(node_uuids)
        if host is not None:
            return column.in_(sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host))
        return sa.true()
    return node_filter


# -- the audit's writes ---------------------------------------------------------

def _inventory_values(node_uuid, rc, inv):
    return dict(node_uuid=node_uuid, resource_class=rc, total=inv.total, reserved=inv.reserved,
                min_unit=inv.min_unit, max_unit=inv.max_unit, step_size=inv.step_size,
                allocation_ratio=str(inv.allocation_ratio))


def _chunks(values, size=500):
    """``values`` sorted, in lists of ``size``: databases cap the values one statement binds."""
    values = sorted(values)
    return [values[start:start + size] for start in range(0, len(values), size)]


def _bump_generations(conn, node_uuids):
    """Bump the generation of ``node_uuids``."""
    for chunk in _chunks(node_uuids):
        conn.execute(T_NODES.update().where(T_NODES.c.uuid.in_(chunk))
                     .values(generation=T_NODES.c.generation + 1))


def _records_by_uuid(conn, node_uuids):
    """``{uuid: row(host, nodename)}`` of the node records (of any host) with these uuids."""
    found = {}
    for chunk in _chunks(node_uuids):
        for r in conn.execute(sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename)
                              .where(T_NODES.c.uuid.in_(chunk))).all():
            found[r.uuid] = r
    return found


_INV_FIELDS = (T_INV.c.total, T_INV.c.reserved, T_INV.c.min_unit, T_INV.c.max_unit,
               T_INV.c.step_size, T_INV.c.allocation_ratio)


def _inventory_fields(inv):
    """The :data:`_INV_FIELDS` of an Inventory as stored, to compare with a row."""
    return (inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
            str(inv.allocation_ratio))


def _report_text(audit, known):
    """The JSON text of ``audit``'s report, as stored in its node row.

    ``known`` maps nodename -> (report, text) of the last audit: a report
    equal to the last one has the same text (records are frozen), which
    saves encoding thousands of unchanged reports on every pass.
    """
    last = known.get(audit.nodename)
    if last is not None and last[0] == audit.resources:
        text = last[1]
    else:
        text = ser.dumps(audit.resources.to_dict())
    known[audit.nodename] = (audit.resources, text)
    return text


def _write_nodes(conn, host, audits, known_texts):
    """Create, adopt or update node rows; returns uuids whose inventory changed.

    ``known_texts``: this host's report texts (see :func:`_report_text`).
    New rows and changed inventories are inserted together at the end; a
    node uuid the driver reports twice (a driver bug) is handled one node
    at a time, as it comes.
    """
    now = time.time()
    existing = {r.nodename: r for r in conn.execute(
        sa.select(T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.resources,
                  T_NODES.c.last_error).where(T_NODES.c.host == host)).all()}
    stored_inv = collections.defaultdict(dict)
    for r in conn.execute(sa.select(T_INV.c.node_uuid, T_INV.c.resource_class, *_INV_FIELDS)
                          .where(T_INV.c.node_uuid.in_(
                              sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)))).all():
        stored_inv[r[0]][r[1]] = tuple(r[2:])
    counts = collections.Counter(a.node_uuid for a in audits if a.node_uuid)
    repeated = {node_uuid for node_uuid, n in counts.items() if n > 1}
    # Records of other hosts (or renamed) that new nodes adopt, in a few queries.
    elsewhere = _records_by_uuid(conn, {a.node_uuid for a in audits if a.node_uuid
                                        and a.nodename not in existing} - repeated)
    changed, new_nodes, new_inventories = set(), [], []
    for audit in audits:
        resources_json = _report_text(audit, known_texts)
        row = existing.get(audit.nodename)
        at_once = audit.node_uuid in repeated
        created = False
        if row is None:
            node_uuid, created = _create_or_adopt(
                conn, host, audit, resources_json, now,
                new_nodes=None if at_once else new_nodes, elsewhere=elsewhere)
        else:
            node_uuid = row.uuid
            if row.resources != resources_json or row.last_error is not None:
                conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
                    resources=resources_json, last_error=None, updated_at=now))
        have = stored_inv.get(node_uuid, {})
        if {rc: _inventory_fields(inv) for rc, inv in audit.inventories.items()} != have:
            if not created:   # a new record has no inventory rows yet
                conn.execute(T_INV.delete().where(T_INV.c.node_uuid == node_uuid))
            rows = [_inventory_values(node_uuid, rc, inv)
                    for rc, inv in audit.inventories.items()]
            if at_once and rows:
                conn.execute(T_INV.insert(), rows)
            else:
                new_inventories.extend(rows)
            changed.add(node_uuid)
    for gone in known_texts.keys() - existing.keys() - {a.nodename for a in audits}:
        del known_texts[gone]   # no record any more
    if new_nodes:
        conn.execute(T_NODES.insert(), new_nodes)
    if new_inventories:
        conn.execute(T_INV.insert(), new_inventories)
    return changed


def _create_or_adopt(conn, host, audit, resources_json, now, new_nodes, elsewhere):
    """Adopt the record of the driver's node uuid, or create one.

    ``elsewhere``: records by uuid (see :func:`_records_by_uuid`); with
    ``new_nodes`` None the record is looked up and inserted at once,
    otherwise a new row is added to ``new_nodes``.  Returns ``(node_uuid,
    created)``.
    """
    values = dict(uuid=audit.node_uuid or str(uuidlib.uuid4()), host=host,
                  nodename=audit.nodename, generation=0, resources=resources_json,
                  last_error=None, created_at=now, updated_at=now)
    node_uuid = values["uuid"]
    if new_nodes is None:
        previous = conn.execute(sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
            T_NODES.c.uuid == node_uuid)).first()
    else:
        previous = elsewhere.get(node_uuid)
    if previous is not None:
        LOG.warning("Node %s (uuid %s) moves from host %s to host %s: adopting its record",
                    audit.nodename, node_uuid, previous.host, host)
        conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
            host=host, nodename=audit.nodename, resources=resources_json, last_error=None,
            updated_at=now))
        return node_uuid, False
    if new_nodes is None:
        conn.execute(T_NODES.insert().values(**values))
    else:
        new_nodes.append(values)
    LOG.info("Created compute node record %s/%s (uuid %s)", host, audit.nodename, node_uuid)
    return node_uuid, True


def _reconcile_allocations(conn, host, rebuild_allocation):
    """Drop stale allocations and rebuild missing ones on ``host``'s nodes."""
    changed = set()
    # A shelved-offloaded instance placed on a node is being unshelved: its
    # claim holds (shelve-offload itself clears host and node).
    live = sa.or_(sa.not_(T_INST.c.vm_state.in_(STATES_WITHOUT_RESOURCES)),
                  sa.and_(T_INST.c.vm_state == SHELVED_OFFLOADED,
                          T_INST.c.host.is_not(None), T_INST.c.node.is_not(None)))
    stale_instance = sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid,
                               T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid).outerjoin(
            T_INST, T_INST.c.uuid == T_ALLOC.c.consumer_uuid)).where(
        T_NODES.c.host == host, T_ALLOC.c.consumer_type == "instance",
        sa.or_(T_INST.c.uuid.is_(None), sa.not_(live), T_INST.c.node != T_NODES.c.nodename,
               T_INST.c.host != T_NODES.c.host))
    stale_migration = sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid,
                                T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid).outerjoin(
            T_MIG, T_MIG.c.uuid == T_ALLOC.c.consumer_uuid)).where(
        T_NODES.c.host == host, T_ALLOC.c.consumer_type == "migration",
        sa.or_(T_MIG.c.uuid.is_(None), T_MIG.c.status.not_in(MIGRATION_IN_PROGRESS)))
    for query, kind in ((stale_instance, "instance"), (stale_migration, "migration")):
        for consumer, node_uuid, nodename in conn.execute(query).all():
            LOG.warning("Leaked allocation: %s %s holds resources on node %s but no live "
                        "record backs it; removing it", kind, consumer, nodename)
            conn.execute(T_ALLOC.delete().where(T_ALLOC.c.consumer_uuid == consumer,
                                                T_ALLOC.c.node_uuid == node_uuid))
            changed.add(node_uuid)
    node_join = sa.and_(T_INST.c.host == T_NODES.c.host, T_INST.c.node == T_NODES.c.nodename)
    missing_instances = sa.select(T_INST, T_NODES.c.uuid.label("node_uuid")).select_from(
        T_INST.join(T_NODES, node_join).outerjoin(T_ALLOC, sa.and_(
            T_ALLOC.c.consumer_uuid == T_INST.c.uuid, T_ALLOC.c.node_uuid == T_NODES.c.uuid))
    ).where(T_NODES.c.host == host, live, T_ALLOC.c.consumer_uuid.is_(None))
    mig_join = sa.and_(T_MIG.c.dest_compute == T_NODES.c.host,
                       T_MIG.c.dest_node == T_NODES.c.nodename)
    missing_migrations = sa.select(
        T_MIG, T_NODES.c.uuid.label("node_uuid"),
        T_INST.c.numa_topology.label("instance_numa")).select_from(
        T_MIG.join(T_NODES, mig_join).outerjoin(T_ALLOC, sa.and_(
            T_ALLOC.c.consumer_uuid == T_MIG.c.uuid, T_ALLOC.c.node_uuid == T_NODES.c.uuid))
        .outerjoin(T_INST, T_INST.c.uuid == T_MIG.c.instance_uuid)
    ).where(T_NODES.c.host == host, T_MIG.c.status.in_(MIGRATION_IN_PROGRESS),
            T_ALLOC.c.consumer_uuid.is_(None))
    now = time.time()
    for query, to_record in ((missing_instances, _instance),
                             (missing_migrations, _migration)):
        for row in conn.execute(query).all():
            consumer = to_record(row)
            LOG.warning("Missing allocation: %s %s is on node %s/%s but holds nothing; "
                        "rebuilding it from its flavor", type(consumer).__name__.lower(),
                        consumer.uuid, host, row.node_uuid)
            # A migration's claim asked for its instance's NUMA topology.
            numa = (consumer.numa_topology if isinstance(consumer, Instance)
                    else ser.numa_from_json(row.instance_numa))
            alloc = rebuild_allocation(consumer, row.node_uuid, numa)
            conn.execute(T_ALLOC.insert().values(**_allocation_values(alloc, now)))
            changed.add(row.node_uuid)
    return changed
