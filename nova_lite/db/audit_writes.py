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

import attrs
import sqlalchemy as sa

from nova_lite.db import models, rows, serialize as ser
from nova_lite.objects import (
    MIGRATION_IN_PROGRESS, SHELVED_OFFLOADED, STATES_WITHOUT_RESOURCES, ComputeNode, Instance)

LOG = logging.getLogger(__name__)

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG = models.instances, models.migrations


# The node columns an audit reads, as named tuples over plain DBAPI rows.
_AuditedRow = collections.namedtuple("_AuditedRow", "uuid nodename generation last_error")
_ExistingRow = collections.namedtuple("_ExistingRow", "uuid nodename resources last_error")


def serialise_host(conn, host):
    """Make audits of one host take turns across processes.

    SQLite's BEGIN IMMEDIATE already does; on PostgreSQL two first audits
    would otherwise both insert the same (host, nodename) row.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:h))"),
                     {"h": "nova-lite-audit:" + host})


def audited_nodes(conn, host, audits):
    """``{nodename: ComputeNode}`` of the audited nodes, as :func:`rows.load_nodes` gives them.

    The reports and inventories just written are taken as they are, not
    parsed back from their rows (what costs most in a fleet's audit); the
    uuids, generations, errors and usage are read.
    """
    node_rows = {r.nodename: r for r in map(_AuditedRow._make, rows.plain_rows(conn, sa.select(
        T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.generation,
        T_NODES.c.last_error).where(T_NODES.c.host == host)))}
    usage = rows.usage_by_node(conn, rows.scope_filter(host, None)(T_ALLOC.c.node_uuid))
    nodes = {}
    for audit in sorted(audits, key=lambda a: a.nodename):
        row = node_rows[audit.nodename]
        used, numa, pci = usage.get(row.uuid, rows.NO_USAGE)
        inventories = {rc: attrs.evolve(inv, used=used[rc]) if used.get(rc) else inv
                       for rc, inv in audit.inventories.items()}
        nodes[audit.nodename] = ComputeNode(
            uuid=row.uuid, host=host, nodename=audit.nodename, generation=row.generation,
            inventories=inventories, usage=used, resources=audit.resources,
            numa_placements=tuple(numa), pci_in_use=pci, last_error=row.last_error)
    return nodes


def inventory_values(node_uuid, rc, inv):
    return dict(node_uuid=node_uuid, resource_class=rc, total=inv.total, reserved=inv.reserved,
                min_unit=inv.min_unit, max_unit=inv.max_unit, step_size=inv.step_size,
                allocation_ratio=str(inv.allocation_ratio))


def chunks(values, size=500):
    """``values`` sorted, in lists of ``size``: databases cap the values one statement binds."""
    values = sorted(values)
    return [values[start:start + size] for start in range(0, len(values), size)]


def bump_generations(conn, node_uuids):
    """Bump the generation of ``node_uuids``."""
    for chunk in chunks(node_uuids):
        conn.execute(T_NODES.update().where(T_NODES.c.uuid.in_(chunk))
                     .values(generation=T_NODES.c.generation + 1))


def records_by_uuid(conn, node_uuids):
    """``{uuid: row(host, nodename)}`` of the node records (of any host) with these uuids."""
    found = {}
    for chunk in chunks(node_uuids):
        for r in conn.execute(sa.select(T_NODES.c.uuid, T_NODES.c.host, T_NODES.c.nodename)
                              .where(T_NODES.c.uuid.in_(chunk))).all():
            found[r.uuid] = r
    return found


INV_FIELDS = (T_INV.c.total, T_INV.c.reserved, T_INV.c.min_unit, T_INV.c.max_unit,
               T_INV.c.step_size, T_INV.c.allocation_ratio)


def inventory_fields(inv):
    """The :data:`INV_FIELDS` of an Inventory as stored, to compare with a row."""
    return (inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
            str(inv.allocation_ratio))


def report_text(audit, known):
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


def write_nodes(conn, host, audits, known_texts):
    """Create, adopt or update node rows; returns uuids whose inventory changed.

    ``known_texts``: this host's report texts (see :func:`report_text`).
    New rows and changed inventories are inserted together at the end; a
    node uuid the driver reports twice (a driver bug) is handled one node
    at a time, as it comes.
    """
    now = time.time()
    existing = {r.nodename: r for r in map(_ExistingRow._make, rows.plain_rows(conn, sa.select(
        T_NODES.c.uuid, T_NODES.c.nodename, T_NODES.c.resources,
        T_NODES.c.last_error).where(T_NODES.c.host == host)))}
    stored_inv = collections.defaultdict(dict)
    for r in rows.plain_rows(conn, sa.select(T_INV.c.node_uuid, T_INV.c.resource_class,
                                             *INV_FIELDS).where(T_INV.c.node_uuid.in_(
                                                 sa.select(T_NODES.c.uuid).where(
                                                     T_NODES.c.host == host)))):
        stored_inv[r[0]][r[1]] = r[2:]
    counts = collections.Counter(a.node_uuid for a in audits if a.node_uuid)
    repeated = {node_uuid for node_uuid, n in counts.items() if n > 1}
    # Records of other hosts (or renamed) that new nodes adopt, in a few queries.
    elsewhere = records_by_uuid(conn, {a.node_uuid for a in audits if a.node_uuid
                                        and a.nodename not in existing} - repeated)
    changed, new_nodes, new_inventories = set(), [], []
    for audit in audits:
        resources_json = report_text(audit, known_texts)
        row = existing.get(audit.nodename)
        at_once = audit.node_uuid in repeated
        created = False
        if row is None:
            node_uuid, created = create_or_adopt(
                conn, host, audit, resources_json, now,
                new_nodes=None if at_once else new_nodes, elsewhere=elsewhere)
        else:
            node_uuid = row.uuid
            if row.resources != resources_json or row.last_error is not None:
                conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid).values(
                    resources=resources_json, last_error=None, updated_at=now))
        have = stored_inv.get(node_uuid, {})
        if {rc: inventory_fields(inv) for rc, inv in audit.inventories.items()} != have:
            if not created:   # a new record has no inventory rows yet
                conn.execute(T_INV.delete().where(T_INV.c.node_uuid == node_uuid))
            inventory_rows = [inventory_values(node_uuid, rc, inv)
                              for rc, inv in audit.inventories.items()]
            if at_once and inventory_rows:
                conn.execute(T_INV.insert(), inventory_rows)
            else:
                new_inventories.extend(inventory_rows)
            changed.add(node_uuid)
    for gone in known_texts.keys() - existing.keys() - {a.nodename for a in audits}:
        del known_texts[gone]   # no record any more
    if new_nodes:
        conn.execute(T_NODES.insert(), new_nodes)
    if new_inventories:
        conn.execute(T_INV.insert(), new_inventories)
    return changed


def create_or_adopt(conn, host, audit, resources_json, now, new_nodes, elsewhere):
    """Adopt the record of the driver's node uuid, or create one.

    ``elsewhere``: records by uuid (see :func:`records_by_uuid`); with
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


def reconcile_allocations(conn, host, rebuild_allocation):
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
    for query, to_record in ((missing_instances, rows.instance_from_row),
                             (missing_migrations, rows.migration_from_row)):
        for row in conn.execute(query).all():
            consumer = to_record(row)
            LOG.warning("Missing allocation: %s %s is on node %s/%s but holds nothing; "
                        "rebuilding it from its flavor", type(consumer).__name__.lower(),
                        consumer.uuid, host, row.node_uuid)
            # A migration's claim asked for its instance's NUMA topology.
            numa = (consumer.numa_topology if isinstance(consumer, Instance)
                    else ser.numa_from_json(row.instance_numa))
            alloc = rebuild_allocation(consumer, row.node_uuid, numa)
            conn.execute(T_ALLOC.insert().values(**rows.allocation_values(alloc, now)))
            changed.add(row.node_uuid)
    return changed

