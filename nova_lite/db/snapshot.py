"""The records a finding is made of, read at one moment.

A finding compares records with each other (an allocation with its
consumer's record, a migration with its services): read in separate
transactions, a consumer deleted between the two reads is reported as a
leak it never was.  :func:`read` takes everything the leak finder, explain
and the move rule need in ONE read transaction; :meth:`Store.records_snapshot
<nova_lite.db.Store.records_snapshot>` runs it under REPEATABLE READ on
PostgreSQL (one snapshot for every statement) and in one deferred
transaction on SQLite (WAL readers see one snapshot from their first read).
"""

import attrs
import sqlalchemy as sa

from nova_lite.db import holds_sql, models, rows, services
from nova_lite.db.services import ServiceRecord
from nova_lite.objects import Allocation, ComputeNode, Instance, Migration

T_NODES, T_ALLOC = models.compute_nodes, models.allocations
T_INST, T_MIG = models.instances, models.migrations


@attrs.frozen
class RecordsSnapshot:
    """The records of one host (``host`` None: every host) at one moment.

    ``nodes``: every compute node record (existence checks span hosts);
    ``scoped``: the uuids of the nodes of ``host``; ``allocations``: those
    on the scoped nodes and those of the migrations below; ``instances``:
    ``{uuid: Instance}`` of the host's instances (every state), of every
    allocation's consumer and of every migration below; ``migrations``:
    ``{uuid: Migration}`` of the moves in progress that touch the host and
    of every migration allocation's consumer; ``migration_times``:
    ``{uuid: (created_at, updated_at)}`` (epoch s) of those; ``services``:
    ``{host: ServiceRecord}`` of every compute service; ``read_at``: the
    clock (epoch s) when the read began.
    """

    host: str | None
    nodes: tuple[ComputeNode, ...]
    scoped: frozenset[str]
    allocations: tuple[Allocation, ...]
    instances: dict[str, Instance]
    migrations: dict[str, Migration]
    migration_times: dict[str, tuple[float, float]]
    services: dict[str, ServiceRecord]
    read_at: float

    def scoped_nodes(self):
        """The node records of ``host`` (every node if None), sorted by host and name."""
        return [n for n in self.nodes if n.uuid in self.scoped]

    def allocations_on(self, node_uuid):
        """The allocations held on one node."""
        return [a for a in self.allocations if a.node_uuid == node_uuid]


def _chunks(values, size=500):
    values = sorted(values)
    for start in range(0, len(values), size):
        yield values[start:start + size]


def read(conn, host, binary, now):
    """The :class:`RecordsSnapshot` of ``host`` (None: every host), on ``conn``."""
    nodes = tuple(rows.load_nodes(conn, None))
    scoped = frozenset(n.uuid for n in nodes if host is None or n.host == host)
    moving = T_MIG.select().where(holds_sql.migration_holds())
    if host is not None:
        moving = moving.where(sa.or_(T_MIG.c.source_compute == host,
                                     T_MIG.c.dest_compute == host))
    mig_rows = {r.uuid: r for r in conn.execute(moving)}
    alloc_query = T_ALLOC.select()
    if host is not None:
        alloc_query = alloc_query.where(T_ALLOC.c.node_uuid.in_(
            sa.select(T_NODES.c.uuid).where(T_NODES.c.host == host)))
    allocations = {(r.consumer_uuid, r.node_uuid): r for r in conn.execute(alloc_query)}
    if host is not None and mig_rows:
        for chunk in _chunks(mig_rows):
            for r in conn.execute(T_ALLOC.select().where(T_ALLOC.c.consumer_uuid.in_(chunk))):
                allocations[(r.consumer_uuid, r.node_uuid)] = r
    wanted = {r.consumer_uuid for r in allocations.values() if r.consumer_type == "migration"}
    for chunk in _chunks(wanted - set(mig_rows)):
        for r in conn.execute(T_MIG.select().where(T_MIG.c.uuid.in_(chunk))):
            mig_rows[r.uuid] = r
    if host is None:
        inst_query = T_INST.select().where(holds_sql.instance_holds())
    else:
        inst_query = T_INST.select().where(T_INST.c.host == host)
    inst_rows = {r.uuid: r for r in conn.execute(inst_query)}
    wanted = ({r.instance_uuid for r in allocations.values()}
              | {r.instance_uuid for r in mig_rows.values()})
    for chunk in _chunks(wanted - set(inst_rows)):
        for r in conn.execute(T_INST.select().where(T_INST.c.uuid.in_(chunk))):
            inst_rows[r.uuid] = r
    beats = {s.host: s for s in services.list_services(conn, binary)}
    return RecordsSnapshot(
        host=host, nodes=nodes, scoped=scoped,
        allocations=tuple(rows.allocation_from_row(r) for _, r in sorted(allocations.items())),
        instances={u: rows.instance_from_row(r) for u, r in sorted(inst_rows.items())},
        migrations={u: rows.migration_from_row(r) for u, r in sorted(mig_rows.items())},
        migration_times={u: (r.created_at, r.updated_at) for u, r in mig_rows.items()},
        services=beats, read_at=now)
