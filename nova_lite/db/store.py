"""``Store``: the records, and the transactions that change them.

Every change that affects a node's capacity or usage is one transaction
that bumps the node's ``generation``.  A claim first tries a
compare-and-swap on the generation it last saw, deciding on the usage it
has; if another process got there first (nothing was written), a second
transaction locks the node row, re-reads the usage and decides on fresh
numbers.  The claim's statements are prepared once (:mod:`.prepared`).
"""

import collections
import logging
import time

import attrs
import sqlalchemy as sa

from nova_lite.db import audit_writes, migrations, models, rows
from nova_lite.db.engine import Database
from nova_lite.db.prepared import Statements
from nova_lite.exception import InstanceNotFound, InvalidInput, NodeNotFound, StoreError
from nova_lite.objects import (
    MIGRATION_IN_PROGRESS, STATES_WITHOUT_RESOURCES, Allocation,
    Instance, Migration, NodeResources)

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
        self._report_texts = collections.defaultdict(dict)   # see audit_writes.report_text()

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
            found = conn.execute(T_SVC.select().where(T_SVC.c.binary == binary)
                                 .order_by(T_SVC.c.host))
            return [_service(r) for r in found]
        return self.db.read("list services", op)

    # -- compute nodes --------------------------------------------------------
    def get_compute_nodes(self, host=None):
        """Live compute node records (of ``host``, or all), sorted by host and name."""
        return self.db.read("list compute nodes", lambda conn: rows.load_nodes(conn, host))

    def get_compute_node(self, host, nodename):
        """One node record; raises :class:`NodeNotFound` naming it."""
        for node in self.db.read(f"get compute node {nodename}",
                                 lambda conn: rows.load_nodes(conn, host, nodename)):
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
            audit_writes.serialise_host(conn, host)
            changed = audit_writes.write_nodes(conn, host, audits, self._report_texts[host])
            changed |= audit_writes.reconcile_allocations(conn, host, rebuild_allocation)
            audit_writes.bump_generations(conn, changed)
            return audit_writes.audited_nodes(conn, host, audits)
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
            if not sql.bump_generation(cursor, T_NODES, node_uuid, seen).rowcount:
                return None   # lost the race: nothing was written
            _write_plan(sql, cursor, cached_plan)
            return cached_usage, cached_plan, seen + 1

        def locked(conn):
            usage = rows.lock_and_load_usage(conn, node_uuid)
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
            stored = rows.instance_from_row(row)
            if instance.holds_resources:
                rows.upsert_instance(conn, attrs.evolve(
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
                            lambda conn: rows.lock_and_load_usage(conn, node_uuid, lock=False))

    # -- instances, migrations, allocations ------------------------------------
    def save_instance(self, instance):
        """Insert or update an instance row."""
        self.db.write(f"save instance {instance.uuid}",
                      lambda conn: rows.upsert_instance(conn, instance, time.time()))

    def get_instance(self, instance_uuid):
        """The instance row as an Instance; raises :class:`InstanceNotFound`."""
        def op(conn):
            row = conn.execute(T_INST.select().where(T_INST.c.uuid == instance_uuid)).first()
            if row is None:
                raise InstanceNotFound(instance_uuid, "in the records")
            return rows.instance_from_row(row)
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
            query = query.order_by(T_INST.c.uuid)
            return [rows.instance_from_row(r) for r in conn.execute(query)]
        return self.db.read("list instances", op)

    def list_migrations(self, instance_uuid=None, in_progress_only=False):
        """Migration rows (of one instance, or all)."""
        def op(conn):
            query = T_MIG.select()
            if instance_uuid is not None:
                query = query.where(T_MIG.c.instance_uuid == instance_uuid)
            if in_progress_only:
                query = query.where(T_MIG.c.status.in_(MIGRATION_IN_PROGRESS))
            query = query.order_by(T_MIG.c.created_at)
            return [rows.migration_from_row(r) for r in conn.execute(query)]
        return self.db.read("list migrations", op)

    def list_allocations(self, node_uuid=None, instance_uuid=None):
        """Allocation records, filtered by node and/or instance."""
        def op(conn):
            query = T_ALLOC.select()
            if node_uuid is not None:
                query = query.where(T_ALLOC.c.node_uuid == node_uuid)
            if instance_uuid is not None:
                query = query.where(T_ALLOC.c.instance_uuid == instance_uuid)
            return [rows.allocation_from_row(r) for r in conn.execute(
                query.order_by(T_ALLOC.c.consumer_uuid))]
        return self.db.read("list allocations", op)


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
        rows.upsert_instance(conn, instance, now)
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
        fresh[node_uuid] = rows.lock_and_load_usage(conn, node_uuid, lock=False)
    return fresh


def _service(row):
    return ServiceRecord(host=row.host, binary=row.binary, created_at=row.created_at,
                         updated_at=row.updated_at, report_count=row.report_count,
                         disabled=bool(row.disabled))


def _write_plan(sql, cursor, plan):
    """Write a claim's rows with the prepared ``sql`` on a DBAPI ``cursor``."""
    now = time.time()
    if plan.instance is not None:
        if not sql.insert_row(cursor, T_INST, rows.INSTANCE_ROW,
                              rows.new_instance_row(plan.instance, now),
                              new_only=True).rowcount:
            # A known instance may already hold a claim (a new one never does).
            _refuse_second_claim(sql, cursor, plan.instance.uuid)
            sql.update(cursor, T_INST, rows.instance_values(plan.instance, now),
                       uuid=plan.instance.uuid)
    if plan.migration is not None:
        sql.insert(cursor, T_MIG, rows.migration_values(plan.migration, now))
    sql.insert_row(cursor, T_ALLOC, rows.ALLOCATION_ROW, rows.allocation_row(plan.allocation, now))


def _refuse_second_claim(sql, cursor, instance_uuid):
    """An instance holds one claim at a time: a second one would count it twice."""
    held = sql._get(("held-by-consumer",), lambda: sa.select(
        T_NODES.c.host, T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid)).where(
        T_ALLOC.c.consumer_uuid == sa.bindparam("consumer_uuid")))
    holders = held.execute(cursor, {"consumer_uuid": instance_uuid}).fetchall()
    if holders:
        where = ", ".join(f"{host}/{node}" for host, node in holders)
        raise InvalidInput(f"Instance {instance_uuid} already holds a claim on node {where}; "
                           "abort it or free the instance before claiming again")


# -- usage --------------------------------------------------------------------


# -- the audit's writes ---------------------------------------------------------


