"""Deleting a compute service, as Nova's ``openstack compute service delete`` does.

Refused (:class:`~nova_lite.exception.ServiceInUse`, nothing written) while
the host has instances that are not deleted, or moves in progress into or
out of it: Nova's "Unable to delete compute service that is hosting
instances" and "that has in-progress migrations".  Otherwise, in one
writing transaction: the host leaves every host aggregate (Nova removes a
deleted service's host from its aggregates, so it no longer counts in a
zone nor blocks an aggregate's deletion), its compute node records go with
their inventories, usage and allocations, its waiting tasks are cancelled,
its recorded findings go and its service row is deleted.  A compute service still running on that
host records itself (and its nodes) again at its next heartbeat, as
Nova's does: stop it first.
"""

import time

import attrs
import sqlalchemy as sa

from nova_lite import work
from nova_lite.db import holds_sql, models
from nova_lite.db.services import COMPUTE_BINARY
from nova_lite.exception import HostNotFound, ServiceInUse

T_SVC, T_NODES, T_INST, T_MIG = (models.services, models.compute_nodes, models.instances,
                                 models.migrations)
T_AGG, T_HOST, T_TASK = models.aggregates, models.aggregate_hosts, models.tasks

# Any constant works; it is the aggregates' lock (nova_lite.db.aggregates):
# an aggregate change checked at once cannot add the host back unseen.
_PG_AGGREGATE_LOCK = 0x6E6C6167


@attrs.frozen
class DeletedService:
    """What deleting a compute service removed: its ``host``, the names of
    the ``aggregates`` it left, the ``nodes`` whose records went, and how
    many waiting ``tasks`` were cancelled."""

    host: str
    aggregates: tuple[str, ...]
    nodes: tuple[str, ...]
    tasks: int


def delete_compute_service(conn: sa.Connection, host: str) -> DeletedService:
    """Delete the compute service of ``host`` in ``conn``'s transaction (see
    the module's description).

    :raises HostNotFound: no compute service on ``host``.
    :raises ServiceInUse: the host has live instances or moves in progress.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_AGGREGATE_LOCK)))
    found = conn.execute(sa.select(T_SVC.c.id).where(
        T_SVC.c.host == host, T_SVC.c.binary == COMPUTE_BINARY)).first()
    if found is None:
        known = conn.execute(sa.select(T_SVC.c.host).where(
            T_SVC.c.binary == COMPUTE_BINARY)).scalars()
        raise HostNotFound(host, known)
    live = sorted(conn.execute(sa.select(T_INST.c.uuid).where(
        T_INST.c.host == host, T_INST.c.vm_state != "deleted")).scalars())
    if live:
        shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
        raise ServiceInUse(host, f"it is hosting {len(live)} instance(s) ({shown}); "
                                 "migrate or delete the instances first")
    moving = sorted(conn.execute(sa.select(T_MIG.c.uuid).where(
        sa.or_(T_MIG.c.source_compute == host, T_MIG.c.dest_compute == host),
        holds_sql.migration_holds())).scalars())
    if moving:
        raise ServiceInUse(host, f"it has {len(moving)} move(s) in progress "
                                 f"({', '.join(moving[:5])}); confirm or revert them first")
    now = time.time()
    left = conn.execute(sa.select(T_AGG.c.id, T_AGG.c.name).join(
        T_HOST, T_HOST.c.aggregate_id == T_AGG.c.id).where(
        T_HOST.c.host == host).order_by(T_AGG.c.name)).all()
    if left:
        conn.execute(T_HOST.delete().where(T_HOST.c.host == host))
        conn.execute(T_AGG.update().where(T_AGG.c.id.in_([r.id for r in left])).values(
            updated_at=now))
    nodes = conn.execute(sa.select(T_NODES.c.uuid, T_NODES.c.nodename).where(
        T_NODES.c.host == host).order_by(T_NODES.c.nodename)).all()
    uuids = [n.uuid for n in nodes]
    if uuids:
        for table in (models.allocations, models.inventories, models.node_usage):
            conn.execute(table.delete().where(table.c.node_uuid.in_(uuids)))
        conn.execute(T_NODES.delete().where(T_NODES.c.uuid.in_(uuids)))
    cancelled = conn.execute(T_TASK.update().where(
        T_TASK.c.host == host, T_TASK.c.state == work.WAITING).values(
        state=work.CANCELLED, detail="the host's compute service was deleted",
        finished_at=now)).rowcount
    conn.execute(models.host_findings.delete().where(models.host_findings.c.host == host))
    conn.execute(T_SVC.delete().where(T_SVC.c.id == found.id))
    return DeletedService(host=host, aggregates=tuple(r.name for r in left),
                          nodes=tuple(n.nodename for n in nodes), tasks=cancelled)


__all__ = ["DeletedService", "delete_compute_service"]
