"""Host aggregates and availability zones in the records, as Nova keeps them.

:class:`Aggregates` is reached as ``store.aggregates``.  An aggregate is a
named group of compute hosts with metadata (string keys and values); the
key ``availability_zone`` (:data:`AVAILABILITY_ZONE`) makes it an
availability zone.  A host in no zoned aggregate is in the default zone
(``default_availability_zone``, ``nova``).

The changes Nova refuses are refused here, before anything is written
(:class:`~nova_lite.exception.InvalidAggregateAction`): a host in two
aggregates of different zones, an empty zone name, deleting an aggregate
that still has hosts, and changing the zone of a host that has instances
(they would move between zones without moving).

Every change is one writing transaction; on PostgreSQL it first takes a
transaction-level advisory lock, so two changes checked at once (two
hosts added to two zones) cannot both pass their checks on what the
other has not yet written.  SQLite writers already hold the database's
write lock.
"""

import time
import types
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa

from nova_lite import validators as v
from nova_lite.db import models
from nova_lite.db.services import COMPUTE_BINARY
from nova_lite.exception import (
    AggregateNameExists, AggregateNotFound, HostNotFound, InvalidAggregateAction)

T_AGG = models.aggregates
T_HOST = models.aggregate_hosts
T_META = models.aggregate_metadata

#: The metadata key naming an aggregate's availability zone (Nova's).
AVAILABILITY_ZONE = "availability_zone"
#: Nova's default ``default_availability_zone``: the zone of a host in no
#: zoned aggregate.
DEFAULT_AVAILABILITY_ZONE = "nova"

# Any constant works; it only has to be the same in every nova-lite process.
_PG_AGGREGATE_LOCK = 0x6E6C6167

_T = TypeVar("_T")
_Run = Callable[[str, Callable[[sa.Connection], _T]], _T]


def _frozen_hosts(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return types.MappingProxyType(dict(sorted(value.items())))


@attrs.frozen(eq=True, hash=False)
class Aggregate:
    """One host aggregate as recorded.

    ``hosts`` are compute host names; ``metadata`` maps keys to values
    (strings, at most 255 characters each); ``created_at`` and
    ``updated_at`` are epoch seconds.
    """

    id: int
    uuid: str
    name: str
    hosts: frozenset[str] = attrs.field(converter=_frozen_hosts)
    metadata: Mapping[str, str] = attrs.field(converter=_frozen_mapping)
    created_at: float
    updated_at: float

    @property
    def availability_zone(self) -> str | None:
        """The zone this aggregate makes (its ``availability_zone``
        metadata), or None if it makes none."""
        return self.metadata.get(AVAILABILITY_ZONE)

    def to_dict(self) -> dict[str, Any]:
        """The aggregate as plain data (sorted hosts), for output."""
        return {"id": self.id, "uuid": self.uuid, "name": self.name,
                "availability_zone": self.availability_zone,
                "hosts": sorted(self.hosts), "metadata": dict(self.metadata),
                "created_at": self.created_at, "updated_at": self.updated_at}


def host_zone(aggregates: Iterable[Aggregate], default: str = DEFAULT_AVAILABILITY_ZONE
              ) -> str:
    """The availability zone of a host in ``aggregates`` (its aggregates):
    the zone of its zoned aggregates (several names joined by ``,``, as Nova
    shows a host the records left in two), else ``default``."""
    zones = sorted({a.availability_zone for a in aggregates if a.availability_zone})
    return ",".join(zones) if zones else default


def read_all(conn: sa.Connection, names: Iterable[str] | None = None,
             uuids: Iterable[str] | None = None) -> list[Aggregate]:
    """Every aggregate (or those named in ``names``, or with the uuids
    ``uuids``), sorted by name: three reads in ``conn``'s transaction."""
    query = sa.select(T_AGG).order_by(T_AGG.c.name)
    if names is not None:
        query = query.where(T_AGG.c.name.in_(sorted(names)))
    if uuids is not None:
        query = query.where(T_AGG.c.uuid.in_(sorted(uuids)))
    rows = conn.execute(query).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    hosts: dict[int, set[str]] = {i: set() for i in ids}
    meta: dict[int, dict[str, str]] = {i: {} for i in ids}
    for agg_id, host in conn.execute(sa.select(T_HOST.c.aggregate_id, T_HOST.c.host).where(
            T_HOST.c.aggregate_id.in_(ids))):
        hosts[agg_id].add(host)
    for agg_id, key, value in conn.execute(sa.select(
            T_META.c.aggregate_id, T_META.c.key, T_META.c.value).where(
            T_META.c.aggregate_id.in_(ids))):
        meta[agg_id][key] = value
    return [Aggregate(id=r.id, uuid=r.uuid, name=r.name, hosts=hosts[r.id],
                      metadata=meta[r.id], created_at=r.created_at,
                      updated_at=r.updated_at) for r in rows]


def by_host(conn: sa.Connection) -> dict[str, tuple[Aggregate, ...]]:
    """``{host: its aggregates}`` for every host in an aggregate."""
    found: dict[str, list[Aggregate]] = {}
    for agg in read_all(conn):
        for host in agg.hosts:
            found.setdefault(host, []).append(agg)
    return {host: tuple(aggs) for host, aggs in sorted(found.items())}


def _check_metadata(metadata: Mapping[str, str | None]) -> None:
    v.check_type(metadata, Mapping, "aggregate metadata")
    for key, value in metadata.items():
        v.check_text(key, "aggregate metadata key")
        if value is not None:
            v.check_text(value, f"aggregate metadata {key!r} value", empty=True)


def _lock(conn: sa.Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_AGGREGATE_LOCK)))


def _one(conn: sa.Connection, name: str) -> Aggregate:
    """The aggregate named ``name``, else the one whose uuid it is."""
    found = read_all(conn, [name])
    if not found:
        found = read_all(conn, uuids=[name.strip().lower()])
    if not found:
        raise AggregateNotFound(name)
    return found[0]


def _zones_of(conn: sa.Connection, hosts: Iterable[str], but: int | None = None
              ) -> dict[str, set[str]]:
    """``{host: the zones of its zoned aggregates}`` (other than aggregate ``but``)."""
    hosts = sorted(hosts)
    if not hosts:
        return {}
    query = sa.select(T_HOST.c.host, T_META.c.value).join(
        T_META, T_META.c.aggregate_id == T_HOST.c.aggregate_id).where(
        T_META.c.key == AVAILABILITY_ZONE, T_HOST.c.host.in_(hosts))
    if but is not None:
        query = query.where(T_HOST.c.aggregate_id != but)
    zones: dict[str, set[str]] = {}
    for host, zone in conn.execute(query):
        zones.setdefault(host, set()).add(zone)
    return zones


def _hosts_with_instances(conn: sa.Connection, hosts: Iterable[str]) -> list[str]:
    hosts = sorted(hosts)
    if not hosts:
        return []
    inst = models.instances
    return sorted(conn.execute(sa.select(inst.c.host).distinct().where(
        inst.c.host.in_(hosts), inst.c.vm_state != "deleted")).scalars())


def _check_zone_change(conn: sa.Connection, agg: Aggregate, action: str,
                       metadata: Mapping[str, str | None]) -> None:
    """Nova's ``is_safe_to_update_az`` for a metadata change of ``agg``."""
    if AVAILABILITY_ZONE not in metadata:
        return
    zone = metadata[AVAILABILITY_ZONE]
    if not zone:
        # Nova refuses an empty zone; taking the key away is allowed.
        if zone is None:
            new_zone = None
        else:
            raise InvalidAggregateAction(
                agg.name, action, "an empty availability zone name is not supported")
    else:
        v.check_text(zone, "availability zone")
        new_zone = zone
        others = _zones_of(conn, agg.hosts, but=agg.id)
        conflicting = sorted({z for zs in others.values() for z in zs if z != zone})
        if conflicting:
            raise InvalidAggregateAction(
                agg.name, action,
                f"one or more hosts already in availability zone(s) {conflicting}")
    if new_zone != agg.availability_zone:
        busy = _hosts_with_instances(conn, agg.hosts)
        if busy:
            raise InvalidAggregateAction(
                agg.name, action,
                f"host(s) {', '.join(busy)} have instances in this zone; changing the zone "
                "of an existing instance is not supported: move them away first")


def _write_metadata(conn: sa.Connection, agg_id: int,
                    metadata: Mapping[str, str | None], now: float) -> None:
    for key, value in sorted(metadata.items()):
        conn.execute(T_META.delete().where(T_META.c.aggregate_id == agg_id,
                                           T_META.c.key == key))
        if value is not None:
            conn.execute(T_META.insert().values(aggregate_id=agg_id, key=key, value=value))
    conn.execute(T_AGG.update().where(T_AGG.c.id == agg_id).values(updated_at=now))


class Aggregates:
    """The host aggregates in the records (``store.aggregates``).

    ``write`` and ``read`` run a function in a writing or reading
    transaction of the store (its retries, busy timeout and errors).
    Aggregates are named by their name, unique in the records, or by their
    uuid (a name is looked up first).
    """

    def __init__(self, write: _Run[Any], read: _Run[Any]) -> None:
        self._write = write
        self._read = read

    # -- reading --------------------------------------------------------------
    def list(self) -> "list[Aggregate]":
        """Every aggregate, sorted by name."""
        return self._read("list aggregates", read_all)  # type: ignore[no-any-return]

    def get(self, name: str) -> Aggregate:
        """The aggregate named ``name`` (or whose uuid it is).

        :raises nova_lite.exception.AggregateNotFound: if there is none.
        """
        v.check_type(name, str, "aggregate name")
        return self._read(f"show aggregate {name}",  # type: ignore[no-any-return]
                          lambda conn: _one(conn, name))

    def by_host(self) -> dict[str, tuple[Aggregate, ...]]:
        """``{host: its aggregates}`` for every host in an aggregate (one read
        transaction): what a scheduler loads with the services."""
        return self._read("aggregates by host", by_host)  # type: ignore[no-any-return]

    def host_zones(self, default: str = DEFAULT_AVAILABILITY_ZONE
                   ) -> dict[str, str]:
        """``{host: its zone}`` for every host in an aggregate (see
        :func:`host_zone`); a host not listed is in ``default``."""
        return {host: host_zone(aggs, default) for host, aggs in self.by_host().items()}

    # -- changing -------------------------------------------------------------
    def create(self, name: str, availability_zone: str | None = None,
               metadata: Mapping[str, str] | None = None) -> Aggregate:
        """Record a new aggregate without hosts; returns it.

        :param name: its name (unique, at most 255 characters).
        :param availability_zone: the zone it makes (the metadata key
            ``availability_zone``); None: none.
        :param metadata: more metadata (keys and values at most 255 characters).
        :raises nova_lite.exception.AggregateNameExists: if the name is taken.
        :raises nova_lite.exception.InvalidInput: for a name, zone or metadata
            that cannot be recorded (an empty zone name among them).
        """
        v.check_text(name, "aggregate name")
        meta: dict[str, str] = dict(metadata or {})
        _check_metadata(meta)
        if availability_zone is not None:
            meta[AVAILABILITY_ZONE] = availability_zone
        if AVAILABILITY_ZONE in meta:
            if not meta[AVAILABILITY_ZONE].strip():
                raise InvalidAggregateAction(
                    name, "create", "an empty availability zone name is not supported")
            v.check_text(meta[AVAILABILITY_ZONE], "availability zone")
        now = time.time()

        def op(conn: sa.Connection) -> Aggregate:
            _lock(conn)
            if conn.execute(sa.select(T_AGG.c.id).where(T_AGG.c.name == name)).first():
                raise AggregateNameExists(name)
            agg_id = conn.execute(T_AGG.insert().values(
                uuid=str(uuidlib.uuid4()), name=name, created_at=now,
                updated_at=now).returning(T_AGG.c.id)).scalar_one()
            _write_metadata(conn, agg_id, meta, now)
            return _one(conn, name)
        return self._write(f"create aggregate {name}", op)  # type: ignore[no-any-return]

    def delete(self, name: str) -> None:
        """Delete the aggregate ``name`` and its metadata.

        :raises nova_lite.exception.AggregateNotFound: if there is none.
        :raises nova_lite.exception.InvalidAggregateAction: while it has
            hosts (Nova's "Host aggregate is not empty").
        """
        v.check_type(name, str, "aggregate name")

        def op(conn: sa.Connection) -> None:
            _lock(conn)
            agg = _one(conn, name)
            if agg.hosts:
                raise InvalidAggregateAction(
                    name, "delete", f"host aggregate is not empty (hosts: "
                    f"{', '.join(sorted(agg.hosts))}); remove its hosts first")
            conn.execute(T_META.delete().where(T_META.c.aggregate_id == agg.id))
            conn.execute(T_AGG.delete().where(T_AGG.c.id == agg.id))
        self._write(f"delete aggregate {name}", op)

    def set_metadata(self, name: str, metadata: Mapping[str, str | None]) -> Aggregate:
        """Set (a value) or unset (None) metadata keys of ``name``; returns it.

        The key ``availability_zone`` changes its zone, as Nova allows it: not
        to an empty name, not to a zone other than another zone of one of its
        hosts, and not while one of its hosts has instances.

        :raises nova_lite.exception.AggregateNotFound: if there is none.
        :raises nova_lite.exception.InvalidAggregateAction: for a zone change
            Nova refuses; nothing is written.
        """
        v.check_type(name, str, "aggregate name")
        _check_metadata(metadata)
        meta = dict(metadata)

        def op(conn: sa.Connection) -> Aggregate:
            _lock(conn)
            agg = _one(conn, name)
            _check_zone_change(conn, agg, "update metadata of", meta)
            _write_metadata(conn, agg.id, meta, time.time())
            return _one(conn, name)
        return self._write(f"set metadata of aggregate {name}",  # type: ignore[no-any-return]
                           op)

    def add_host(self, name: str, host: str) -> Aggregate:
        """Add compute host ``host`` to aggregate ``name``; returns it.

        :raises nova_lite.exception.AggregateNotFound: if there is no such
            aggregate.
        :raises nova_lite.exception.HostNotFound: if ``host`` has no compute
            service.
        :raises nova_lite.exception.InvalidAggregateAction: if the host is
            already in it, is in another zone than the aggregate's, or has
            instances and would change zone; nothing is written.
        """
        v.check_type(name, str, "aggregate name")
        v.check_text(host, "host")

        def op(conn: sa.Connection) -> Aggregate:
            _lock(conn)
            svc = models.services
            known = set(conn.execute(sa.select(svc.c.host).where(
                svc.c.binary == COMPUTE_BINARY)).scalars())
            if host not in known:
                raise HostNotFound(host, known)
            agg = _one(conn, name)
            action = "add host to"
            if host in agg.hosts:
                raise InvalidAggregateAction(name, action, f"it already has host {host!r}")
            zone = agg.availability_zone
            if zone:
                old = _zones_of(conn, [host]).get(host, set())
                other = sorted(old - {zone})
                if other:
                    raise InvalidAggregateAction(
                        name, action, f"host {host!r} is already in availability zone(s) "
                        f"{other}")
                if not old and _hosts_with_instances(conn, [host]):
                    raise InvalidAggregateAction(
                        name, action, f"the availability zone of host {host!r} would change "
                        f"to {zone!r} but the host has instances: move them away first")
            conn.execute(T_HOST.insert().values(aggregate_id=agg.id, host=host))
            conn.execute(T_AGG.update().where(T_AGG.c.id == agg.id).values(
                updated_at=time.time()))
            return _one(conn, name)
        return self._write(f"add host {host} to aggregate {name}",  # type: ignore[no-any-return]
                           op)

    def remove_host(self, name: str, host: str) -> Aggregate:
        """Remove ``host`` from aggregate ``name``; returns it.

        :raises nova_lite.exception.AggregateNotFound: if there is no such
            aggregate.
        :raises nova_lite.exception.InvalidAggregateAction: if the host is not
            in it, or has instances and would change zone; nothing is written.
        """
        v.check_type(name, str, "aggregate name")
        v.check_type(host, str, "host")

        def op(conn: sa.Connection) -> Aggregate:
            _lock(conn)
            agg = _one(conn, name)
            action = "remove host from"
            if host not in agg.hosts:
                raise InvalidAggregateAction(name, action, f"it has no host {host!r}")
            zone = agg.availability_zone
            if zone and zone not in _zones_of(conn, [host], but=agg.id).get(host, set()) \
                    and _hosts_with_instances(conn, [host]):
                raise InvalidAggregateAction(
                    name, action, f"the availability zone of host {host!r} would change "
                    f"from {zone!r} but the host has instances: move them away first")
            conn.execute(T_HOST.delete().where(T_HOST.c.aggregate_id == agg.id,
                                               T_HOST.c.host == host))
            conn.execute(T_AGG.update().where(T_AGG.c.id == agg.id).values(
                updated_at=time.time()))
            return _one(conn, name)
        return self._write(  # type: ignore[no-any-return]
            f"remove host {host} from aggregate {name}", op)


__all__ = ["AVAILABILITY_ZONE", "DEFAULT_AVAILABILITY_ZONE", "Aggregate", "Aggregates",
           "by_host", "host_zone", "read_all"]
