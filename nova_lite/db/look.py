"""One look at what changed since a mark, in one statement.

A view that keeps the fleet's records (the scheduler's host view, the
API's node cache) asks on every request what changed since its last look
(see :mod:`nova_lite.db.queries` for the change sequence and the mark).
:func:`look_since` answers it in one statement: the new mark, the node rows
changed and the node tombstones, and, if asked, the service rows of one
binary changed and their tombstones, and the stamps of every host
aggregate.  One statement is one round trip, one parse and one plan on
the server, and one pass of the client's statement machinery, where the
answer used to take three.

The answer's rows share one set of columns: ``kind`` says which each row
is ("n" a node, "d" a node's tombstone, "s" a service, "x" a service's
tombstone, "a" an aggregate's stamp), and the other columns hold that
kind's values (see ``_statement``).  A look at a fleet where nothing
changed returns the mark alone (and the stamps).

A changed node comes with the sums of its allocations' standard classes
and whether any of them holds more (other classes, NUMA cells, PCI
devices, child providers), read in the same snapshot as its generation: a
view that holds the node's description renews the node from the look
alone, where it took a statement more (a claim changes a node's usage and
nothing else).
"""

from collections.abc import Mapping
from typing import Any

import attrs
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from nova_lite.db import models, queries, rows
from nova_lite.db.direct import DirectConnection
from nova_lite.db.services import ServiceRecord

T_NODES, T_GONE = models.compute_nodes, models.node_deletions
T_SVC, T_SVC_GONE = models.services, models.service_deletions
T_AGG = models.aggregates
T_ALLOC = models.allocations


@attrs.frozen
class Look:
    """One look since a mark: ``mark``, the mark to ask from next time;
    ``versions``, the node rows changed at or after the old mark;
    ``deleted``, the uuids of the nodes deleted (a node recorded again since
    is among them too: check :func:`~nova_lite.db.queries.existing_nodes`);
    ``services``, the service rows of the binary asked for that were
    added, enabled or disabled (heartbeats do not move the sequence);
    ``gone_services``, the hosts whose service row of that binary was
    deleted (one recorded again since is in ``services`` too); ``stamps``,
    ``((aggregate id, updated_at), ...)`` of every aggregate sorted by id,
    or None when not asked for."""

    mark: int
    versions: tuple[queries.NodeVersion, ...] = ()
    #: ``{uuid: NodeUsage}`` of each node in ``versions``.
    usage: Mapping[str, "NodeUsage"] = attrs.field(factory=dict)
    deleted: frozenset[str] = frozenset()
    services: tuple[ServiceRecord, ...] = ()
    gone_services: frozenset[str] = frozenset()
    stamps: tuple[tuple[int, float], ...] | None = None


@attrs.frozen
class NodeUsage:
    """A changed node's allocations as the look read them: ``amounts``, the
    sums of their standard classes (``{class: amount}``, classes with none
    left out), and ``has_extras``: whether any of them holds more than the
    standard classes (it must then be read whole)."""

    amounts: Mapping[str, int]
    has_extras: bool


def _node_sums(dialect: str, changed: sa.ColumnElement[bool]
               ) -> tuple[sa.FromClause, list[sa.ColumnElement[Any]]]:
    """The node rows ``changed`` picks, joined to the sums of their
    allocations: ``(from clause, [has_extras, sum of each standard class])``.

    On PostgreSQL a lateral join: one lookup of the allocations' node index
    per changed node, whatever plan the statement is given.  SQLite has no
    lateral join: the allocations of the changed nodes, grouped."""
    per_node: sa.FromClause
    if dialect == "postgresql":
        per_node = rows.allocation_sums(T_ALLOC.c.node_uuid == T_NODES.c.uuid).lateral("used")
        joined = T_NODES.join(per_node, sa.true())
    else:
        per_node = rows.sums_by_node(
            lambda column: column.in_(sa.select(T_NODES.c.uuid).where(changed)))
        joined = T_NODES.outerjoin(per_node, per_node.c.allocated == T_NODES.c.uuid)
    return joined, [sa.cast(per_node.c.has_extras, _BIG).label("extras"),
                    *[sa.cast(per_node.c[f"used_{col}"], _BIG).label(f"used_{col}")
                      for _, col in rows.STD_COLUMNS]]


def _nulls(*types: Any) -> list[sa.ColumnElement[Any]]:
    return [sa.cast(sa.null(), t) for t in types]


_TEXT, _BIG, _FLOAT = sa.String, sa.BigInteger, sa.Float


def _statement(dialect: str, services: bool, aggregates: bool) -> sa.Select[Any]:
    """The statement of :func:`look_since` on ``dialect``: the new mark,
    left-joined to the rows of each kind asked for, so the mark comes back
    even when nothing changed.  Columns after ``mark``: ``kind``, ``key``
    (node uuid, or service binary), ``host``, ``name`` (node name, or a
    service's disabled reason), ``num`` (generation, report count or
    aggregate id), ``seq`` (change sequence, or 1 for a disabled service),
    ``described`` (a node's described_seq), ``t1`` and ``t2`` (a service's
    created_at and updated_at; an aggregate's updated_at in ``t2``)."""
    if dialect == "postgresql":
        mark: sa.ColumnElement[Any] = sa.literal_column(queries.PG_MARK_SQL)
    else:
        mark = queries.SQLITE_MARK.scalar_subquery()
    look = sa.select(mark.label("mark")).subquery("look")
    changed_nodes = queries.since(T_NODES.c.change_seq)
    nodes, usage = _node_sums(dialect, changed_nodes)
    no_usage = _nulls(*[_BIG] * len(usage))
    parts = [
        sa.select(sa.literal_column("'n'").label("kind"), T_NODES.c.uuid.label("key"),
                  T_NODES.c.host.label("host"), T_NODES.c.nodename.label("name"),
                  sa.cast(T_NODES.c.generation, _BIG).label("num"),
                  T_NODES.c.change_seq.label("seq"), T_NODES.c.described_seq.label("described"),
                  *[n.label(c) for n, c in zip(_nulls(_FLOAT, _FLOAT), ("t1", "t2"))],
                  *usage).select_from(nodes).where(changed_nodes),
        sa.select(sa.literal_column("'d'"), T_GONE.c.uuid, *_nulls(_TEXT, _TEXT, _BIG),
                  T_GONE.c.change_seq, *_nulls(_BIG, _FLOAT, _FLOAT), *no_usage).where(
            queries.since(T_GONE.c.change_seq)),
    ]
    if services:
        parts += [
            # Every binary's changed rows (few), told apart by the reader: with
            # the binary in WHERE, SQLite reads the (binary, updated_at) index,
            # every service of the binary, instead of the change_seq one.
            sa.select(sa.literal_column("'s'"), T_SVC.c.binary, T_SVC.c.host,
                      T_SVC.c.disabled_reason, sa.cast(T_SVC.c.report_count, _BIG),
                      sa.cast(sa.cast(T_SVC.c.disabled, sa.Integer), _BIG), *_nulls(_BIG),
                      T_SVC.c.created_at, T_SVC.c.updated_at, *no_usage).where(
                queries.since(T_SVC.c.change_seq)),
            sa.select(sa.literal_column("'x'"), T_SVC_GONE.c.binary, T_SVC_GONE.c.host,
                      *_nulls(_TEXT, _BIG, _BIG, _BIG, _FLOAT, _FLOAT), *no_usage).where(
                T_SVC_GONE.c.binary == sa.bindparam("binary"),
                queries.since(T_SVC_GONE.c.change_seq)),
        ]
    if aggregates:
        parts.append(sa.select(sa.literal_column("'a'"), *_nulls(_TEXT, _TEXT, _TEXT),
                               sa.cast(T_AGG.c.id, _BIG), *_nulls(_BIG, _BIG, _FLOAT),
                               T_AGG.c.updated_at, *no_usage))
    changed = sa.union_all(*parts).subquery("changed")
    return sa.select(look.c.mark, changed.c.kind, changed.c.key, changed.c.host,
                     changed.c.name, changed.c.num, changed.c.seq, changed.c.described,
                     changed.c.t1, changed.c.t2, changed.c.extras,
                     *[changed.c[f"used_{col}"] for _, col in rows.STD_COLUMNS]).select_from(
        look.outerjoin(changed, sa.true()))


# Built once per dialect and kind of look: every view asks on every request.
_STATEMENTS = {(dialect, services, aggregates): _statement(dialect, services, aggregates)
               for dialect in ("postgresql", "sqlite")
               for services in (False, True) for aggregates in (False, True)}


def look_since(conn: Connection | DirectConnection, mark: int, binary: str | None = None,
               aggregates: bool = False) -> Look:
    """What changed at or after ``mark``, and the mark to ask from next time,
    in one statement: on PostgreSQL its one snapshot gives all of it, so
    nothing committed out of order is missed; on SQLite the reader's
    transaction does.  ``binary``: also the service rows of that binary;
    ``aggregates``: also every aggregate's stamp."""
    dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
    statement = _STATEMENTS[(dialect, binary is not None, aggregates)]
    params: dict[str, Any] = {"mark": mark}
    if binary is not None:
        params["binary"] = binary
    new_mark = None
    versions: list[queries.NodeVersion] = []
    usage: dict[str, NodeUsage] = {}
    deleted: set[str] = set()
    found: list[ServiceRecord] = []
    gone: set[str] = set()
    stamps: list[tuple[int, float]] = []
    classes = [rc for rc, _ in rows.STD_COLUMNS]
    for look, kind, key, host, name, num, seq, described, t1, t2, extras, *sums in \
            conn.execute(statement, params).all():
        new_mark = int(look)
        if kind == "n":
            versions.append(queries.NodeVersion(key, host, name, num, seq, described))
            usage[key] = NodeUsage({rc: int(total) for rc, total in zip(classes, sums) if total},
                                   bool(extras))
        elif kind == "d":
            deleted.add(key)
        elif kind == "s":
            if key == binary:
                found.append(ServiceRecord(host, key, t1, t2, num, bool(seq), name))
        elif kind == "x":
            gone.add(host)
        elif kind == "a":
            stamps.append((num, t2))
    if new_mark is None:   # the one-row look always answers
        raise RuntimeError("the change look returned no row")
    return Look(mark=new_mark, versions=tuple(versions), usage=usage,
                deleted=frozenset(deleted),
                services=tuple(found), gone_services=frozenset(gone),
                stamps=tuple(sorted(stamps)) if aggregates else None)


__all__ = ["Look", "NodeUsage", "look_since"]
