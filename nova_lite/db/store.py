"""``Store``: the records, and the transactions that change them.

Every change that affects a node's capacity or usage is one transaction
that bumps the node's ``generation``.  A claim first tries a
compare-and-swap on the generation it last saw; if another process got
there first it locks the node row, re-reads the usage and decides on
fresh numbers, all inside the same transaction.
"""

import collections
import json
import logging
import time
import uuid as uuidlib

import attrs
import sqlalchemy as sa

from nova_lite.db import migrations, models, serialize as ser
from nova_lite.db.engine import Database
from nova_lite.exception import InstanceNotFound, NodeNotFound
from nova_lite.objects import (
    MIGRATION_IN_PROGRESS, STATES_WITHOUT_RESOURCES, Allocation, ComputeNode, Instance,
    Migration, NodeResources, NodeUsage)
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
        self.schema_version = migrations.upgrade(self.db.engine)

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
        node_uuid)`` (consumer: Instance or Migration), each logged at
        WARNING.  Returns ``{nodename: ComputeNode}`` for the audited nodes.
        """
        def op(conn):
            _serialise_host(conn, host)
            changed = _write_nodes(conn, host, audits)
            changed |= _reconcile_allocations(conn, host, rebuild_allocation)
            if changed:
                conn.execute(T_NODES.update().where(T_NODES.c.uuid.in_(changed))
                             .values(generation=T_NODES.c.generation + 1))
            names = {a.nodename for a in audits}
            return {n.nodename: n for n in _load_nodes(conn, host) if n.nodename in names}
        return self.db.write(f"record audit of host {host}", op)

    # -- claims -------------------------------------------------------------
    def claim(self, node_uuid, cached_usage, decide):
        """Admit one claim on a node in one transaction.

        ``decide(usage) -> ClaimPlan`` sees the node's current
        :class:`NodeUsage` (``cached_usage`` if its generation is still
        current, else a fresh read under the node's row lock) and raises to
        refuse.  Returns ``(usage_seen, plan, new_generation)``.
        """
        def op(conn):
            usage = cached_usage
            swapped = conn.execute(T_NODES.update().where(
                T_NODES.c.uuid == node_uuid, T_NODES.c.generation == usage.generation)
                .values(generation=usage.generation + 1)).rowcount
            if not swapped:
                usage = _lock_and_load_usage(conn, node_uuid)
                conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid)
                             .values(generation=usage.generation + 1))
            plan = decide(usage)
            _write_plan(conn, plan)
            return usage, plan, usage.generation + 1
        return self.db.write(f"claim on node {node_uuid}", op)

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
        return self.db.write("release allocations", op)

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


# -- row <-> record ---------------------------------------------------------

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


def _write_plan(conn, plan):
    now = time.time()
    if plan.instance is not None:
        _upsert_instance(conn, plan.instance, now)
    if plan.migration is not None:
        mig = plan.migration
        conn.execute(T_MIG.insert().values(
            uuid=mig.uuid, instance_uuid=mig.instance_uuid, source_compute=mig.source_compute,
            source_node=mig.source_node, dest_compute=mig.dest_compute, dest_node=mig.dest_node,
            old_flavor=ser.flavor_to_json(mig.old_flavor),
            new_flavor=ser.flavor_to_json(mig.new_flavor), status=mig.status,
            migration_type=mig.migration_type, created_at=now, updated_at=now))
    conn.execute(T_ALLOC.insert().values(**_allocation_values(plan.allocation, now)))


# -- usage --------------------------------------------------------------------

def _lock_and_load_usage(conn, node_uuid, lock=True):
    query = sa.select(T_NODES.c.generation).where(T_NODES.c.uuid == node_uuid)
    if lock and conn.dialect.name == "postgresql":
        query = query.with_for_update()
    generation = conn.execute(query).scalar()
    if generation is None:
        raise NodeNotFound(node_uuid)
    sums = conn.execute(sa.select(*[sa.func.coalesce(sa.func.sum(T_ALLOC.c[col]), 0)
                                    for _, col in _STD_COLUMNS])
                        .where(T_ALLOC.c.node_uuid == node_uuid)).one()
    amounts = {rc: int(total) for (rc, _), total in zip(_STD_COLUMNS, sums) if total}
    numa, pci = [], set()
    extras = conn.execute(sa.select(T_ALLOC.c.other, T_ALLOC.c.numa_topology,
                                    T_ALLOC.c.pci_devices).where(
        T_ALLOC.c.node_uuid == node_uuid,
        sa.or_(T_ALLOC.c.other.is_not(None), T_ALLOC.c.numa_topology.is_not(None),
               T_ALLOC.c.pci_devices.is_not(None))))
    for other, numa_json, pci_json in extras:
        for rc, n in (json.loads(other) if other else {}).items():
            amounts[rc] = amounts.get(rc, 0) + n
        if numa_json:
            numa.append(ser.numa_from_json(numa_json))
        pci.update(ser.strings_from_json(pci_json))
    return NodeUsage(generation=generation, amounts=amounts, numa_placements=tuple(numa),
                     pci_in_use=frozenset(pci))


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
    usage = collections.defaultdict(dict)
    numa = collections.defaultdict(list)
    pci = collections.defaultdict(set)
    for r in conn.execute(T_ALLOC.select().where(node_filter(T_ALLOC.c.node_uuid))):
        amounts = usage[r.node_uuid]
        for rc, n in _allocation_resources(r).items():
            amounts[rc] = amounts.get(rc, 0) + n
        if r.numa_topology:
            numa[r.node_uuid].append(ser.numa_from_json(r.numa_topology))
        pci[r.node_uuid].update(ser.strings_from_json(r.pci_devices))
    nodes = []
    for row in rows:
        used = usage.get(row.uuid, {})
        inventories = {rc: Inventory(
            total=i.total, reserved=i.reserved, min_unit=i.min_unit, max_unit=i.max_unit,
            step_size=i.step_size, allocation_ratio=i.allocation_ratio, used=used.get(rc, 0))
            for rc, i in invs.get(row.uuid, {}).items()}
        nodes.append(ComputeNode(
            uuid=row.uuid, host=row.host, nodename=row.nodename, generation=row.generation,
            inventories=inventories, usage=used,
            resources=NodeResources.from_dict(json.loads(row.resources))
            if row.resources else None,
            numa_placements=tuple(numa.get(row.uuid, ())), pci_in_use=pci.get(row.uuid, ()),
            last_error=row.last_error))
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


def _write_nodes(conn, host, audits):
    """Create, adopt or update node rows; returns uuids whose inventory changed."""
    now = time.time()
    existing = {r.nodename: r for r in conn.execute(
        sa.select(T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.resources,
                  T_NODES.c.last_error).where(T_NODES.c.host == host))}
    stored_inv = collections.defaultdict(dict)
    for r in conn.execute(T_INV.select().where(
            T_INV.c.node_uuid.in_([r.uuid for r in existing.values()]))):
        stored_inv[r.node_uuid][r.resource_class] = _inventory_values(
            r.node_uuid, r.resource_class, r)
    changed = set()
    for audit in audits:
        resources_json = ser.dumps(audit.resources.to_dict())
        row = existing.get(audit.nodename)
        if row is None:
            node_uuid = _create_or_adopt(conn, host, audit, resources_json, now)
        else:
            node_uuid = row.uuid
            if row.resources != resources_json or row.last_error is not None:
                conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
                    resources=resources_json, last_error=None, updated_at=now))
        wanted = {rc: _inventory_values(node_uuid, rc, inv)
                  for rc, inv in audit.inventories.items()}
        have = stored_inv.get(node_uuid, {})
        if wanted != have:
            conn.execute(T_INV.delete().where(T_INV.c.node_uuid == node_uuid))
            if wanted:
                conn.execute(T_INV.insert(), list(wanted.values()))
            changed.add(node_uuid)
    return changed


def _create_or_adopt(conn, host, audit, resources_json, now):
    node_uuid = audit.node_uuid or str(uuidlib.uuid4())
    previous = conn.execute(sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
        T_NODES.c.uuid == node_uuid)).first()
    if previous is not None:
        LOG.warning("Node %s (uuid %s) moves from host %s to host %s: adopting its record",
                    audit.nodename, node_uuid, previous.host, host)
        conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
            host=host, nodename=audit.nodename, resources=resources_json, last_error=None,
            updated_at=now))
        return node_uuid
    conn.execute(T_NODES.insert().values(
        uuid=node_uuid, host=host, nodename=audit.nodename, generation=0,
        resources=resources_json, created_at=now, updated_at=now))
    LOG.info("Created compute node record %s/%s (uuid %s)", host, audit.nodename, node_uuid)
    return node_uuid


def _reconcile_allocations(conn, host, rebuild_allocation):
    """Drop stale allocations and rebuild missing ones on ``host``'s nodes."""
    changed = set()
    live = sa.not_(T_INST.c.vm_state.in_(STATES_WITHOUT_RESOURCES))
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
    missing_migrations = sa.select(T_MIG, T_NODES.c.uuid.label("node_uuid")).select_from(
        T_MIG.join(T_NODES, mig_join).outerjoin(T_ALLOC, sa.and_(
            T_ALLOC.c.consumer_uuid == T_MIG.c.uuid, T_ALLOC.c.node_uuid == T_NODES.c.uuid))
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
            alloc = rebuild_allocation(consumer, row.node_uuid)
            conn.execute(T_ALLOC.insert().values(**_allocation_values(alloc, now)))
            changed.add(row.node_uuid)
    return changed
