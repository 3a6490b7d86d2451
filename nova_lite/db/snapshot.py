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

import collections
import functools
from collections.abc import Iterable, Iterator

import attrs
import sqlalchemy as sa

from nova_lite.db import holds_sql, models, rows, services
from nova_lite.db.services import ServiceRecord
from nova_lite.objects import Allocation, ComputeNode, Instance, Migration

T_NODES, T_ALLOC = models.compute_nodes, models.allocations
T_INST, T_MIG = models.instances, models.migrations


@attrs.frozen(slots=False)   # not slotted: the indexes below are cached on it
class RecordsSnapshot:
    """The records of one host (``host`` None: every host) at one moment.

    ``nodes``: the compute node records of ``host`` (every host's if None)
    and of the other end of each of its moves; ``scoped``: the uuids of the
    nodes of ``host``; ``allocations``: those
    on the scoped nodes and those of the migrations below; ``instances``:
    ``{uuid: Instance}`` of the host's instances (every state), of every
    allocation's consumer and of every migration below; ``migrations``:
    ``{uuid: Migration}`` of the moves in progress that touch the host and
    of every migration allocation's consumer; ``migration_times``:
    ``{uuid: (created_at, updated_at)}`` (epoch s) of those; ``services``:
    ``{host: ServiceRecord}`` of the compute services of ``host`` and of
    both ends of each migration above (of every compute service if
    ``host`` is None): the ones the rules ask about, whatever their
    heartbeat; ``read_at``: the clock (epoch s) when the read began.
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

    def scoped_nodes(self) -> list[ComputeNode]:
        """The node records of ``host`` (every node if None), sorted by host and name."""
        return [n for n in self.nodes if n.uuid in self.scoped]

    def allocations_on(self, node_uuid: str) -> list[Allocation]:
        """The allocations held on one node."""
        return self._allocations_by_node.get(node_uuid, [])

    def holding_instances_of(self, host: str) -> list[Instance]:
        """The instances recorded on ``host`` that hold resources."""
        return self._holding_by_host.get(host, [])

    def moves_touching(self, host: str, nodename: str) -> list[Migration]:
        """The migrations in progress whose source or destination is this node."""
        return self._moves_by_node.get((host, nodename), [])

    @functools.cached_property
    def _allocations_by_node(self) -> dict[str, list[Allocation]]:
        index: dict[str, list[Allocation]] = collections.defaultdict(list)
        for alloc in self.allocations:
            index[alloc.node_uuid].append(alloc)
        return index

    @functools.cached_property
    def _holding_by_host(self) -> dict[str | None, list[Instance]]:
        index: dict[str | None, list[Instance]] = collections.defaultdict(list)
        for inst in self.instances.values():
            if inst.holds_resources:
                index[inst.host].append(inst)
        return index

    @functools.cached_property
    def _moves_by_node(self) -> dict[tuple[str, str], list[Migration]]:
        index: dict[tuple[str, str], list[Migration]] = collections.defaultdict(list)
        for mig in self.migrations.values():
            if mig.in_progress:
                for end in {(mig.source_compute, mig.source_node),
                            (mig.dest_compute, mig.dest_node)}:
                    index[end].append(mig)
        return index


def _chunks(values: Iterable[str], size: int = 500) -> Iterator[list[str]]:
    values = sorted(values)
    for start in range(0, len(values), size):
        yield values[start:start + size]


def read(conn: sa.Connection, host: str | None, binary: str, now: float) -> RecordsSnapshot:
    """The :class:`RecordsSnapshot` of ``host`` (None: every host), on ``conn``."""
    loaded = list(rows.load_nodes(conn, host))
    scoped = frozenset(n.uuid for n in loaded)
    moving = T_MIG.select().where(holds_sql.migration_holds())
    if host is not None:
        moving = moving.where(sa.or_(T_MIG.c.source_compute == host,
                                     T_MIG.c.dest_compute == host))
    mig_rows = {r.uuid: r for r in conn.execute(moving)}
    if host is not None:
        # The other end of each move: its record (or its absence) is part of the finding.
        ends = sorted({(r.source_compute, r.source_node) for r in mig_rows.values()}
                      | {(r.dest_compute, r.dest_node) for r in mig_rows.values()})
        for end_host, end_node in ends:
            if end_host != host:
                loaded.extend(rows.load_nodes(conn, end_host, end_node))
    nodes = tuple(sorted(loaded, key=lambda n: (n.host, n.nodename)))
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
    if host is None:
        beats = {s.host: s for s in services.list_services(conn, binary)}
    else:
        # Not every service: only those of the host and of its moves' ends
        # (a fleet's every pass would otherwise read every service row).
        named = ({host} | {r.source_compute for r in mig_rows.values()}
                 | {r.dest_compute for r in mig_rows.values()}) - {None}
        beats = {s.host: s for s in services.services_of_hosts(conn, binary, sorted(named))}
    return RecordsSnapshot(
        host=host, nodes=nodes, scoped=scoped,
        allocations=tuple(rows.allocation_from_row(r) for _, r in sorted(allocations.items())),
        instances={u: rows.instance_from_row(r) for u, r in sorted(inst_rows.items())},
        migrations={u: rows.migration_from_row(r) for u, r in sorted(mig_rows.items())},
        migration_times={u: (r.created_at, r.updated_at) for u, r in mig_rows.items()},
        services=beats, read_at=now)
