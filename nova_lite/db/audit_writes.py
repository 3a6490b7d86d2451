"""The writes of one audit pass: node records, inventories, allocations repaired.

Called by :meth:`nova_lite.db.store.Store.record_audit` inside its one
transaction.  Node rows and inventories are written only where they
changed; stale allocations are removed and missing ones rebuilt, each
logged at WARNING.
"""

import collections
import logging
import time
import uuid as uuidlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa

from nova_lite.db import holds_sql, models, providers as provider_rows, rows, serialize as ser
from nova_lite.objects import (
    Allocation, ComputeNode, Instance, InstanceNUMATopology, Migration, NodeResources)
from nova_lite.resources import Inventory

if TYPE_CHECKING:
    from nova_lite.db.store import AuditedNode

LOG = logging.getLogger(__name__)

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG = models.instances, models.migrations


@attrs.frozen
class MissingAllocation:
    """A consumer on a node that holds no allocation there (an audit repairs it).

    ``consumer`` is the Instance or in-progress Migration; ``node_uuid`` is
    None while its node has no record; ``numa_request`` the NUMA topology
    its claim asked for (the instance's own).
    """

    consumer: Instance | Migration
    node_uuid: str | None
    nodename: str
    numa_request: InstanceNUMATopology | None = None


def serialise_host(conn: sa.Connection, host: str) -> None:
    """Make audits of one host take turns across processes.

    SQLite's BEGIN IMMEDIATE already does; on PostgreSQL two first audits
    would otherwise both insert the same (host, nodename) row.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:h))"),
                     {"h": "nova-lite-audit:" + host})


def audited_nodes(conn: sa.Connection, host: str,
                  audits: Iterable["AuditedNode"]) -> dict[str, ComputeNode]:
    """``{nodename: ComputeNode}`` of the audited nodes, as :func:`rows.load_nodes` gives them.

    The reports and inventories just written are taken as they are, not
    parsed back from their rows (what costs most in a fleet's audit); the
    uuids, generations, errors and usage are read.
    """
    node_rows = {r.nodename: r for r in conn.execute(sa.select(
        T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.generation, T_NODES.c.last_error,
        T_NODES.c.reported).where(T_NODES.c.host == host))}
    usage = rows.usage_by_node(conn, rows.scope_filter(host, None)(T_ALLOC.c.node_uuid))
    nodes: dict[str, ComputeNode] = {}
    for audit in sorted(audits, key=lambda a: a.nodename):
        row = node_rows[audit.nodename]
        used, numa, pci, nested = usage.get(row.uuid, rows.NO_USAGE)
        inventories = {rc: attrs.evolve(inv, used=used[rc]) if used.get(rc) else inv
                       for rc, inv in audit.inventories.items()}
        nodes[audit.nodename] = ComputeNode(
            uuid=row.uuid, host=host, nodename=audit.nodename, generation=row.generation,
            inventories=inventories, usage=used, resources=audit.resources,
            numa_placements=tuple(numa), pci_in_use=pci, provider_usage=nested,
            last_error=row.last_error,
            reported=bool(row.reported))
    return nodes


def inventory_values(node_uuid: str, rc: str, inv: Inventory) -> dict[str, Any]:
    return dict(node_uuid=node_uuid, resource_class=rc, total=inv.total, reserved=inv.reserved,
                min_unit=inv.min_unit, max_unit=inv.max_unit, step_size=inv.step_size,
                allocation_ratio=str(inv.allocation_ratio))


def chunks(values: Iterable[str], size: int = 500) -> list[list[str]]:
    """``values`` sorted, in lists of ``size``: databases cap the values one statement binds."""
    values = sorted(values)
    return [values[start:start + size] for start in range(0, len(values), size)]


def bump_generations(conn: sa.Connection, node_uuids: Iterable[str]) -> None:
    """Bump the generation of ``node_uuids``."""
    for chunk in chunks(node_uuids):
        conn.execute(T_NODES.update().where(T_NODES.c.uuid.in_(chunk))
                     .values(generation=T_NODES.c.generation + 1))


def _locked(conn: sa.Connection, query: sa.Select[Any]) -> Sequence[sa.Row[Any]]:
    """``query`` ordered by uuid, its rows locked on PostgreSQL until the transaction ends.

    Two hosts' audits may both claim one node (a hash ring moving); the
    second waits, then sees the node as the first left it.  Rows are locked
    in uuid order, as releases lock them.
    """
    query = query.order_by(T_NODES.c.uuid)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    return conn.execute(query).all()


def records_by_uuid(conn: sa.Connection, node_uuids: Iterable[str]) -> dict[str, sa.Row[Any]]:
    """``{uuid: row(host, nodename)}`` of the node records (of any host) with these
    uuids, locked."""
    found: dict[str, sa.Row[Any]] = {}
    for chunk in chunks(node_uuids):
        for r in _locked(conn, sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename)
                         .where(T_NODES.c.uuid.in_(chunk))):
            found[r.uuid] = r
    return found


INV_FIELDS = (T_INV.c.total, T_INV.c.reserved, T_INV.c.min_unit, T_INV.c.max_unit,
               T_INV.c.step_size, T_INV.c.allocation_ratio)


def inventory_fields(inv: Inventory) -> tuple[int, int, int, int | None, int, str]:
    """The :data:`INV_FIELDS` of an Inventory as stored, to compare with a row."""
    return (inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
            str(inv.allocation_ratio))


def report_text(audit: "AuditedNode", known: dict[str, tuple[NodeResources, str]]) -> str:
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


def write_nodes(conn: sa.Connection, host: str, audits: Sequence["AuditedNode"],
                known_texts: dict[str, tuple[NodeResources, str]]) -> set[str]:
    """Create, adopt or update node rows; returns the uuids whose generation must move.

    ``known_texts``: this host's report texts (see :func:`report_text`).
    A node's generation moves when anything a claim decides on changed:
    its inventories, its report (NUMA cells, PCI devices), its owner (an
    adopted record) or its reported flag.  New rows and inventories are
    inserted together at the end.  Node uuids are unique per audit (the
    tracker refuses a uuid two nodes report).
    """
    now = time.time()
    existing = {r.nodename: r for r in _locked(conn, sa.select(
        T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.resources, T_NODES.c.last_error,
        T_NODES.c.reported).where(T_NODES.c.host == host))}
    stored_inv: collections.defaultdict[str, dict[str, tuple[Any, ...]]] = \
        collections.defaultdict(dict)
    for r in conn.execute(sa.select(T_INV.c.node_uuid, T_INV.c.resource_class,
                                    *INV_FIELDS).where(T_INV.c.node_uuid.in_(
                                        sa.select(T_NODES.c.uuid).where(
                                            T_NODES.c.host == host)))):
        stored_inv[r[0]][r[1]] = tuple(r[2:])
    # Records of other hosts (or renamed) that new nodes adopt, in a few queries.
    elsewhere = records_by_uuid(conn, {a.node_uuid for a in audits if a.node_uuid
                                        and a.nodename not in existing})
    changed: set[str] = set()
    new_nodes: list[dict[str, Any]] = []
    new_inventories: list[dict[str, Any]] = []
    # (node uuid, audit, whether its last report may have had children) of the
    # reports that changed: their child providers are recorded again.
    new_reports: list[tuple[str, "AuditedNode", bool]] = []
    for audit in audits:
        resources_json = report_text(audit, known_texts)
        row = existing.get(audit.nodename)
        created = False
        if row is None:
            node_uuid, created = create_or_adopt(conn, host, audit, resources_json, now,
                                                 new_nodes, elsewhere)
            new_reports.append((node_uuid, audit, not created))
            if not created:
                changed.add(node_uuid)
        else:
            node_uuid = row.uuid
            if row.resources != resources_json or row.last_error is not None \
                    or not row.reported:
                conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
                    resources=resources_json, last_error=None, reported=True, updated_at=now))
                if row.resources != resources_json or not row.reported:
                    changed.add(node_uuid)
                if row.resources != resources_json:
                    new_reports.append((node_uuid, audit, row.resources is None
                                        or '"providers":' in row.resources))
        have = stored_inv.get(node_uuid, {})
        if {rc: inventory_fields(inv) for rc, inv in audit.inventories.items()} != have:
            if not created:   # a new record has no inventory rows yet
                conn.execute(T_INV.delete().where(T_INV.c.node_uuid == node_uuid))
            new_inventories.extend(inventory_values(node_uuid, rc, inv)
                                   for rc, inv in audit.inventories.items())
            changed.add(node_uuid)
    for gone in known_texts.keys() - existing.keys() - {a.nodename for a in audits}:
        del known_texts[gone]   # no record any more
    if new_nodes:
        conn.execute(T_NODES.insert(), new_nodes)
    if new_inventories:
        conn.execute(T_INV.insert(), new_inventories)
    for node_uuid, audit, had_children in new_reports:
        if audit.resources.providers or had_children:
            provider_rows.sync_children(conn, node_uuid, audit.resources.providers, now)
    return changed


def mark_unreported(conn: sa.Connection, host: str, listed: Collection[str]) -> set[str]:
    """Mark ``host``'s node records the driver did not list as not reported.

    Returns their uuids (their generation must move: claims on them are
    refused from now on).
    """
    query = sa.select(T_NODES.c.uuid, T_NODES.c.nodename).where(
        T_NODES.c.host == host, T_NODES.c.reported == sa.true())
    gone = [r for r in conn.execute(query) if r.nodename not in listed]
    for chunk in chunks([r.uuid for r in gone]):
        conn.execute(T_NODES.update().where(T_NODES.c.uuid.in_(chunk)).values(
            reported=False, updated_at=time.time()))
    for r in gone:
        LOG.warning("Node %s/%s (uuid %s) is no longer listed by its driver: it admits no "
                    "claim until it is listed again", host, r.nodename, r.uuid)
    return {r.uuid for r in gone}


def lock_adopted_consumers(conn: sa.Connection, host: str, audits: Iterable["AuditedNode"]) -> None:
    """Before any node row: lock the instance and migration rows an adoption will move.

    A claim or a release locks instance (and migration) rows before node
    rows; an audit that adopts a node would otherwise hold the node's row
    while it waits for them, and the two would wait on each other.  Only
    nodes whose record belongs to another host (or another name) are
    looked at.
    """
    if conn.dialect.name != "postgresql":
        return   # SQLite's writing transaction holds the whole database
    reported = {a.node_uuid for a in audits if a.node_uuid}
    if not reported:
        return
    mine = set(conn.execute(sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)).scalars())
    moving = reported - mine
    if not moving:
        return
    for chunk in chunks(moving):
        for r in conn.execute(sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
                T_NODES.c.uuid.in_(chunk))):
            conn.execute(sa.select(T_INST.c.uuid).where(
                T_INST.c.host == r.host, T_INST.c.node == r.nodename)
                .order_by(T_INST.c.uuid).with_for_update()).all()
            for end in ("source", "dest"):
                conn.execute(sa.select(T_MIG.c.uuid).where(
                    T_MIG.c[f"{end}_compute"] == r.host, T_MIG.c[f"{end}_node"] == r.nodename,
                    holds_sql.migration_holds())
                    .order_by(T_MIG.c.uuid).with_for_update()).all()


def create_or_adopt(conn: sa.Connection, host: str, audit: "AuditedNode", resources_json: str,
                    now: float, new_nodes: list[dict[str, Any]],
                    elsewhere: Mapping[str, sa.Row[Any]]) -> tuple[str, bool]:
    """Adopt the record of the driver's node uuid, or create one.

    ``elsewhere``: records by uuid (see :func:`records_by_uuid`); a new
    row is added to ``new_nodes``.  An adopted record moves to ``host``
    with what lives on it: its instances and the ends of its in-progress
    migrations move too, so their allocations stay live.  Returns
    ``(node_uuid, created)``.
    """
    values: dict[str, Any] = dict(uuid=audit.node_uuid or str(uuidlib.uuid4()), host=host,
                  nodename=audit.nodename, generation=0, resources=resources_json,
                  last_error=None, reported=True, created_at=now, updated_at=now)
    node_uuid = values["uuid"]
    previous = elsewhere.get(node_uuid)
    if previous is not None:
        LOG.warning("Node %s (uuid %s) moves from host %s to host %s: adopting its record "
                    "and what lives on it", audit.nodename, node_uuid, previous.host, host)
        conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
            host=host, nodename=audit.nodename, resources=resources_json, last_error=None,
            reported=True, updated_at=now))
        carry_consumers(conn, previous.host, previous.nodename, host, audit.nodename, now)
        return node_uuid, False
    new_nodes.append(values)
    LOG.info("Created compute node record %s/%s (uuid %s)", host, audit.nodename, node_uuid)
    return node_uuid, True


def carry_consumers(conn: sa.Connection, old_host: str, old_node: str, new_host: str, new_node: str,
                    now: float) -> None:
    """Move the instances and in-progress migrations of a node to its new owner."""
    conn.execute(T_INST.update().where(T_INST.c.host == old_host, T_INST.c.node == old_node)
                 .values(host=new_host, node=new_node, updated_at=now))
    for end in ("source", "dest"):
        compute, node = T_MIG.c[f"{end}_compute"], T_MIG.c[f"{end}_node"]
        conn.execute(T_MIG.update().where(
            compute == old_host, node == old_node, holds_sql.migration_holds())
            .values({f"{end}_compute": new_host, f"{end}_node": new_node, "updated_at": now}))


def missing_allocations(conn: sa.Connection, host: str,
                        nodenames: Iterable[str] | None = None) -> list[MissingAllocation]:
    """Every consumer on ``host`` (on ``nodenames`` only, if given) with no
    allocation on its node: a list of :class:`MissingAllocation`.

    A consumer whose node has no record yet (it comes back in this audit)
    counts too, with ``node_uuid`` None.
    """
    node_join = sa.and_(T_INST.c.host == T_NODES.c.host, T_INST.c.node == T_NODES.c.nodename)
    missing_instances = sa.select(T_INST, T_NODES.c.uuid.label("node_uuid")).select_from(
        T_INST.outerjoin(T_NODES, node_join).outerjoin(T_ALLOC, sa.and_(
            T_ALLOC.c.consumer_uuid == T_INST.c.uuid, T_ALLOC.c.node_uuid == T_NODES.c.uuid))
    ).where(T_INST.c.host == host, T_INST.c.node.is_not(None), holds_sql.instance_holds(),
            T_ALLOC.c.consumer_uuid.is_(None))
    if nodenames is not None:
        missing_instances = missing_instances.where(T_INST.c.node.in_(list(nodenames)))
    mig_join = sa.and_(T_MIG.c.dest_compute == T_NODES.c.host,
                       T_MIG.c.dest_node == T_NODES.c.nodename)
    missing_migrations = sa.select(
        T_MIG, T_NODES.c.uuid.label("node_uuid"),
        T_INST.c.numa_topology.label("instance_numa")).select_from(
        T_MIG.outerjoin(T_NODES, mig_join).outerjoin(T_ALLOC, sa.and_(
            T_ALLOC.c.consumer_uuid == T_MIG.c.uuid, T_ALLOC.c.node_uuid == T_NODES.c.uuid))
        .outerjoin(T_INST, T_INST.c.uuid == T_MIG.c.instance_uuid)
    ).where(T_MIG.c.dest_compute == host, holds_sql.migration_holds(),
            T_ALLOC.c.consumer_uuid.is_(None))
    if nodenames is not None:
        missing_migrations = missing_migrations.where(T_MIG.c.dest_node.in_(list(nodenames)))
    found: list[MissingAllocation] = []
    for row in conn.execute(missing_instances).all():
        instance = rows.instance_from_row(row)
        # The query reads only instances with a node.
        found.append(MissingAllocation(instance, row.node_uuid, row.node,
                                       instance.numa_topology))
    for row in conn.execute(missing_migrations).all():
        # A migration's claim asked for its instance's NUMA topology.
        found.append(MissingAllocation(rows.migration_from_row(row), row.node_uuid,
                                       row.dest_node, ser.numa_from_json(row.instance_numa)))
    return found


def stale_queries(host: str) -> tuple[sa.Select[Any], sa.Select[Any]]:
    """The allocations on ``host``'s nodes that no live record backs: (those of
    instances, those of migrations), each selecting (consumer_uuid, node_uuid,
    nodename)."""
    stale_instance = sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid,
                               T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid).outerjoin(
            T_INST, T_INST.c.uuid == T_ALLOC.c.consumer_uuid)).where(
        T_NODES.c.host == host, T_ALLOC.c.consumer_type == "instance",
        sa.not_(holds_sql.instance_holds_on(T_NODES)))
    stale_migration = sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid,
                                T_NODES.c.nodename).select_from(
        T_ALLOC.join(T_NODES, T_NODES.c.uuid == T_ALLOC.c.node_uuid).outerjoin(
            T_MIG, T_MIG.c.uuid == T_ALLOC.c.consumer_uuid)).where(
        T_NODES.c.host == host, T_ALLOC.c.consumer_type == "migration",
        sa.or_(T_MIG.c.uuid.is_(None), sa.not_(holds_sql.migration_holds())))
    return stale_instance, stale_migration


def reconcile_allocations(conn: sa.Connection, host: str,
                          rebuilt: Mapping[tuple[str, str], Allocation],
                          nodenames: Iterable[str] | None = None) -> set[str]:
    """Drop stale allocations and restore missing ones on ``host``'s nodes
    (on ``nodenames`` only, if given: a one-node audit touches one node).

    ``rebuilt``: ``{(consumer_uuid, nodename): Allocation}`` worked out
    before the transaction (see :func:`missing_allocations`); a consumer
    found missing that is not in it (it lost its allocation meanwhile) is
    repaired by the next pass.  The missing consumers are read again here,
    in the transaction, only when ``rebuilt`` has something to restore:
    that read keeps a consumer that got its allocation back (or went away)
    meanwhile from being given a second one.  With nothing to restore it
    could only find a consumer that lost its allocation meanwhile, which
    this pass would not restore anyway, so a steady pass reads the missing
    consumers once, before the transaction, and the next pass restores
    such a consumer (and logs it then).
    Returns the uuids of the nodes whose allocations changed.
    """
    changed: set[str] = set()
    for query, kind in zip(stale_queries(host), ("instance", "migration")):
        if nodenames is not None:
            query = query.where(T_NODES.c.nodename.in_(list(nodenames)))
        for consumer, node_uuid, nodename in conn.execute(query).all():
            LOG.warning("Leaked allocation: %s %s holds resources on node %s but no live "
                        "record backs it; removing it", kind, consumer, nodename)
            provider_rows.delete_allocations(conn, sa.and_(
                T_ALLOC.c.consumer_uuid == consumer, T_ALLOC.c.node_uuid == node_uuid))
            changed.add(node_uuid)
    if not rebuilt:
        return changed
    now = time.time()
    for missing in missing_allocations(conn, host, nodenames):
        if missing.node_uuid is None:
            continue   # its node has no record: nothing to hold resources on
        consumer = missing.consumer
        alloc = rebuilt.get((consumer.uuid, missing.nodename))
        if alloc is None:
            LOG.warning("Missing allocation: %s %s on node %s/%s lost its allocation during "
                        "this audit; the next pass restores it", type(consumer).__name__.lower(),
                        consumer.uuid, host, missing.nodename)
            continue
        LOG.warning("Missing allocation: %s %s is on node %s/%s but holds nothing; "
                    "rebuilding it from its flavor", type(consumer).__name__.lower(),
                    consumer.uuid, host, missing.nodename)
        alloc = attrs.evolve(alloc, node_uuid=missing.node_uuid)
        alloc = provider_rows.land_on_children(conn, alloc, now)
        conn.execute(T_ALLOC.insert().values(**rows.allocation_values(alloc, now)))
        changed.add(missing.node_uuid)
    return changed
