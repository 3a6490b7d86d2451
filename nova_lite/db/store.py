"""``Store``: the records, and the transactions that change them.

Every change to what a claim decides on (a node's inventories, its owner,
whether its driver still reports it, its usage) is one transaction that
bumps the node's ``generation``.  A claim first decides on the node as the
caller last saw it; its transaction bumps the generation, which locks the
node row, and writes that decision if the generation moved from the one
decided on (a compare-and-swap) or, on PostgreSQL, if the database finds
that only usage changed since and the plan still fits.  Otherwise the same
transaction re-reads all of the node under that lock and decides on fresh
records (see :meth:`Store.claim`).  Guards on the instance rows (deleted is
final, one move at a time) run inside the same transactions.
"""

import collections
import functools
import json
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
import sqlalchemy as sa

from nova_lite import holds
from nova_lite import validators as v
from nova_lite.db import providers as provider_rows
from nova_lite.db import (
    archive, arguments, audit_writes, claim_writes, heal_writes, holds_sql, migrations, models,
    rows, services, snapshot, task_writes)
from nova_lite.db import pass_records as pass_read
from nova_lite.findings import Finding, RecordedFindings
from nova_lite.db.direct import DirectConnection
from nova_lite.db.engine import (
    DEFAULT_BUSY_TIMEOUT_S, Database, cause, is_unique_violation, sqlite_file_path)
from nova_lite.exception import ComputeResourcesUnavailable
from nova_lite.db.services import COMPUTE_BINARY, ServiceRecord
from nova_lite.db.snapshot import RecordsSnapshot
from nova_lite.db.aggregates import Aggregates
from nova_lite.db import server_checks, service_delete
from nova_lite.db.service_delete import DeletedService
from nova_lite.db.swap_streaks import SwapStreaks
from nova_lite.db.tasks import TaskQueue
from nova_lite.work import Task, WorkRequest
from nova_lite.db.audit_writes import MissingAllocation
from nova_lite.exception import (
    InstanceNotFound, InstanceStateConflict, InvalidInput, MarkerNotFound, MigrationNotFound,
    NodeNotFound, SchemaOutdated, StoreError)
from nova_lite.model.plans import ClaimPlan, ClaimRequest
from nova_lite.model.usage import with_allocations
from nova_lite.objects import (
    DELETED, Allocation, ComputeNode, Instance, Migration, NodeResources)
from nova_lite.resources import Inventory

LOG = logging.getLogger(__name__)

T_NODES, T_INV, T_ALLOC = models.compute_nodes, models.inventories, models.allocations
T_INST, T_MIG = models.instances, models.migrations
T_FIND, T_SVC = models.host_findings, models.services

#: A claim's decision (see :meth:`Store.claim`): a pure function of the node
#: record, one plan per request, or ComputeResourcesUnavailable.
Decide = Callable[[ComputeNode], Iterable[ClaimPlan]]

_T = TypeVar("_T")

#: ``migration_status`` of :meth:`Store.release`: one ``(migration_uuid,
#: status)`` pair, or a list of them.
MigrationStatus = tuple[str, str] | list[tuple[str, str]]

#: ``last`` of :meth:`Store.record_findings` when the caller did not read it.
UNREAD = object()

#: On SQLite, the claims on a node whose compare-and-swap holds that still
#: record its ``node_usage`` row after a claim of this store on the node did
#: not (it lost its race): the store presumes it alone writes a node until
#: then (see :meth:`Store.claim` and
#: :class:`~nova_lite.db.swap_streaks.SwapStreaks`).
USAGE_ROW_CLAIMS_AFTER_RACE = 64

#: On PostgreSQL: once this many of a store's claims on a node in a row were
#: compare-and-swaps, its one-statement claims there leave out the node's
#: ``node_usage`` row (``claim_writes.PG_PLAIN_CLAIM``), until one is not: the
#: store presumes another writer until then (see :meth:`Store.claim`).
PLAIN_CLAIM_AFTER_SWAPS = 16
#: The most nodes whose compare-and-swap streaks a store keeps at once (all
#: are forgotten when a new node would pass it).
MOST_SWAP_COUNTS = 4096


@attrs.frozen
class AuditedNode:
    """One node's audit outcome for :meth:`Store.record_audit`."""

    nodename: str
    resources: NodeResources
    inventories: Mapping[str, Inventory]
    node_uuid: str | None = None  # the driver's stable uuid, if it has one


class Store:
    """Record store on SQLAlchemy: ``Store("sqlite:///path.db")``,
    ``Store("sqlite://")`` (in memory) or ``Store("postgresql://...")``.

    ``claim_retries`` bounds the retries of a transaction that lost a race
    on PostgreSQL (serialisation failure, deadlock).  ``busy_timeout`` (s)
    bounds every wait for another writer's lock: past it the operation
    fails with :class:`~nova_lite.exception.DatabaseBusy` and writes
    nothing.  ``readonly`` opens the database for reading only: it must
    exist with a current schema, and no lock a writer needs is ever taken.

    An empty database gets the schema when opened for writing; an older
    schema is upgraded by the first write (or ``nova-lite db sync``), never
    by a read.  A SQLite file that exists but is empty (0 bytes) is refused
    unless ``initialise`` is set: an empty file where a database was
    expected is more likely a truncated one than a new one.

    A ``url`` that is not a non-empty string, or ``claim_retries`` /
    ``busy_timeout`` that are not numbers >= 0, raise
    :class:`~nova_lite.exception.InvalidInput` naming the argument
    (:class:`~nova_lite.exception.InvalidType` for a wrong type).

    Every method that reads or writes the records raises
    :class:`~nova_lite.exception.StoreError` (or its
    :class:`~nova_lite.exception.DatabaseBusy`) when the database fails
    or stays locked past ``busy_timeout``, and a read on a schema older
    than this nova-lite's raises
    :class:`~nova_lite.exception.SchemaOutdated`; the methods below name
    only the errors of their own.

    :param url: the database URL: ``sqlite:///PATH``, ``sqlite://`` or
        ``postgresql://...``.
    :param claim_retries: how many times a transaction that lost a race on
        PostgreSQL is retried (a count, >= 0).
    :param busy_timeout: the longest wait for another writer's lock, in
        seconds (>= 0).
    :param readonly: open for reading only (the schema must be current).
    :param initialise: accept an empty (0 byte) SQLite file and create
        the schema in it.
    :param pooler: what is between nova-lite and a PostgreSQL server:
        ``none``, ``session`` or ``transaction`` (PgBouncer's pool modes;
        as :data:`nova_lite.conf.DATABASE_POOLERS` lists them).
    :raises nova_lite.exception.InvalidInput: for a wrong argument, named.
    :raises nova_lite.exception.SchemaOutdated: for a schema newer than
        this nova-lite's, or (``readonly``) older.
    :raises nova_lite.exception.StoreError: when the database cannot be
        opened, or is an empty SQLite file without ``initialise``.
    """

    def __init__(self, url: str, claim_retries: int = 10,
                 busy_timeout: float = DEFAULT_BUSY_TIMEOUT_S,
                 readonly: bool = False, initialise: bool = False,
                 pooler: str = "none") -> None:
        arguments.check_store(url, claim_retries, busy_timeout, pooler)
        path, _ = sqlite_file_path(url)
        if path and not initialise and os.path.exists(path) and \
                os.path.getsize(path) == 0 and _sqlite_sidecars_empty(path):
            raise StoreError(
                f"Database file {path} exists but is empty (0 bytes): refusing to treat it "
                "as a new database (was it truncated?). Restore it from a backup, remove it, "
                "or run 'nova-lite db sync' to initialise it")
        self.db = Database(url, retries=claim_retries, busy_timeout_s=busy_timeout,
                           readonly=readonly, initialise=migrations.upgrade, pooler=pooler)
        self.url = self.db.url
        self.readonly = readonly
        #: What is between nova-lite and the server (``[database] pooler``).
        self.pooler = pooler
        try:
            state = self.db.read("read schema revision", migrations.schema_state)
            #: The schema as found when the store was opened (before any upgrade).
            self.schema_before_open = migrations.empty_state() if self.db.created else state
            if state.newer:
                raise SchemaOutdated(
                    f"Database {self.db.redacted_url} has schema revision {state.revision}, "
                    f"newer than this nova-lite's {state.head}: upgrade nova-lite")
            if not readonly and (state.empty or initialise):
                migrations.upgrade(self.db.engine)
                state = self.db.read("read schema revision", migrations.schema_state)
        except SchemaOutdated:
            self.db.dispose()
            raise
        except migrations.UnknownSchema as exc:
            self.db.dispose()
            raise StoreError(f"Cannot open database {self.db.redacted_url}: {exc}") from exc
        except StoreError as exc:
            self.db.dispose()
            reason = exc.__cause__ if exc.__cause__ is not None else exc
            raise StoreError(f"Cannot open database {self.db.redacted_url}: "
                             f"{cause(reason)}") from exc
        except sa.exc.SQLAlchemyError as exc:
            self.db.dispose()
            raise StoreError(f"Cannot open database {self.db.redacted_url}: "
                             f"{cause(exc)}") from exc
        self.schema = state
        if readonly and not state.current:
            self.db.dispose()
            raise SchemaOutdated(
                f"Database {self.db.redacted_url} has schema {state.describe()}, this "
                f"nova-lite needs {state.head}; a read-only command never migrates: run "
                "'nova-lite db sync'")
        #: The work addressed to each host (:class:`~nova_lite.db.tasks.TaskQueue`).
        self.tasks = TaskQueue(self._write, self._read, self._write_direct)
        #: The host aggregates and availability zones
        #: (:class:`~nova_lite.db.aggregates.Aggregates`).
        self.aggregates = Aggregates(self._write, self._read)
        # report_text(): {host: {node uuid: (report, its text)}}
        self._report_texts: dict[str, dict[str, tuple[NodeResources, str]]] = \
            collections.defaultdict(dict)
        # The nodes this store alone writes of late: its claims there leave
        # out the node's usage row.
        sqlite = self.db.dialect == "sqlite"
        self._streaks = SwapStreaks(
            USAGE_ROW_CLAIMS_AFTER_RACE if sqlite else PLAIN_CLAIM_AFTER_SWAPS,
            presumed_alone=sqlite, most_nodes=MOST_SWAP_COUNTS)

    def _write(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """A writing transaction; the first one upgrades an older schema."""
        if not self.schema.current:
            migrations.upgrade(self.db.engine)
            self.schema = self.db.read("read schema revision", migrations.schema_state)
        return self.db.write(op, fn)

    def _write_direct(self, op: str, fn: Callable[[DirectConnection], _T]) -> _T:
        """:meth:`_write` on the DBAPI cursor (:meth:`Database.write_direct`)."""
        if not self.schema.current:
            self._write("upgrade schema", lambda conn: None)
        return self.db.write_direct(op, fn)

    def _read(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        if not self.schema.current:
            raise SchemaOutdated(
                f"Database {self.db.redacted_url} has schema {self.schema.describe()}, "
                f"this nova-lite needs {self.schema.head}: run 'nova-lite db sync' (or any "
                "command that writes) first")
        return self.db.read(op, fn)

    def _read_snapshot(self, op: str, fn: Callable[[sa.Connection], _T]) -> _T:
        """:meth:`_read` with every statement seeing one snapshot (a node's
        usage is summed in one statement and its extras read in another: a
        claim committing between them must not be half seen)."""
        if not self.schema.current:
            return self._read(op, fn)   # refuses, naming the schema
        return self.db.read_snapshot(op, fn)

    def __repr__(self) -> str:
        return f"Store({self.db.redacted_url!r})"

    def close(self) -> None:
        """Release the database connections."""
        self.db.dispose()

    # -- services -----------------------------------------------------------
    def heartbeat(self, host: str, binary: str = COMPUTE_BINARY) -> ServiceRecord:
        """Create or refresh the (host, binary) service row; returns it.

        ``host`` and ``binary`` are checked first
        (:func:`nova_lite.validators.check_text`): a name no backend can
        record raises InvalidInput and writes nothing.

        :param host: the service's host name.
        :param binary: the service's binary (``nova-lite-compute``).
        :returns: the service row as recorded, its heartbeat now.
        :raises nova_lite.exception.InvalidInput: for a name no backend can
            record; nothing is written.
        """
        arguments.check_names(host=host, binary=binary)
        if not self.schema.current:
            return self._write(f"heartbeat of service {host}/{binary}",
                               lambda conn: services.beat(conn, host, binary, time.time()))
        # One statement, alone in its transaction (Database.write_alone).
        return self.db.write_alone(
            f"heartbeat of service {host}/{binary}",
            lambda conn: services.beat(conn, host, binary, time.time()))

    def server_advice(self) -> "list[server_checks.ServerAdvice]":
        """What the database server's own settings work against (see
        :mod:`nova_lite.db.server_checks`): PostgreSQL's autovacuum off, say.
        Always empty on SQLite.

        :returns: one :class:`~nova_lite.db.server_checks.ServerAdvice` per
            setting to change.
        """
        return self.db.read("read the database server's settings", server_checks.server_advice)

    def list_services(self, host: str | None = None, *,
                      binary: str = COMPUTE_BINARY) -> list[ServiceRecord]:
        """The :class:`~nova_lite.db.services.ServiceRecord` of every service of
        ``binary`` (of ``host`` only, if given), sorted by host.

        :param host: the host whose services to list; None: every host.
        :param binary: the services' binary.
        :returns: the service records, sorted by host.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up (not a string, or holding a NUL byte).
        """
        arguments.check_lookup(optional=True, host=host)
        arguments.check_lookup(binary=binary)
        return self._read("list services",
                          lambda conn: services.list_services(conn, binary, host))

    def set_service_disabled(self, host: str, disabled: bool, reason: str | None = None, *,
                             binary: str = COMPUTE_BINARY) -> ServiceRecord | None:
        """Disable (``disabled`` True) or enable the (host, binary) service.

        Returns the :class:`~nova_lite.db.services.ServiceRecord` as changed,
        or None (nothing written) if there is no such service.  ``reason``
        (shown beside a disabled service) is kept only while disabled; a
        reason the records cannot hold (over 255 characters, a control
        character) raises :class:`~nova_lite.exception.InvalidInput` before
        any statement, on every backend.

        :param host: the service's host name.
        :param disabled: True to disable the service, False to enable it.
        :param reason: why it is disabled (at most 255 characters); None:
            no reason.
        :param binary: the service's binary.
        :returns: the service record as changed, or None if there is no
            such service.
        :raises nova_lite.exception.InvalidInput: for a wrong argument;
            nothing is written.
        """
        arguments.check_lookup(host=host, binary=binary)
        v.check_type(disabled, bool, "set_service_disabled disabled")
        if reason is not None:
            v.check_text(reason, "disabled reason")
        return self._write(
            f"set service {host}/{binary} disabled={disabled}",
            lambda conn: services.set_disabled(conn, host, binary, disabled, reason))

    def delete_compute_service(self, host: str) -> DeletedService:
        """Delete the compute service of ``host``, as Nova's service delete
        does: the host leaves its aggregates, its node records and its
        waiting tasks go, in one transaction
        (:mod:`nova_lite.db.service_delete`).

        :param host: the service's host name.
        :returns: a :class:`~nova_lite.db.service_delete.DeletedService`.
        :raises nova_lite.exception.HostNotFound: no compute service there.
        :raises nova_lite.exception.ServiceInUse: the host has instances or
            moves in progress; nothing is written.
        """
        arguments.check_lookup(host=host)
        return self._write(f"delete compute service {host}",  # type: ignore[no-any-return]
                           lambda conn: service_delete.delete_compute_service(conn, host))

    # -- compute nodes --------------------------------------------------------
    def get_compute_nodes(self, host: str | None = None, *, limit: int | None = None,
                          marker: str | None = None) -> list[ComputeNode]:
        """Live compute node records (of ``host``, or all), sorted by host and name.

        With ``limit`` and/or ``marker``, one page of them, read alone (a
        keyset ``WHERE`` on (host, nodename) and ``LIMIT``).

        :param host: the host whose nodes to read; None: every host.
        :param limit: at most this many nodes (>= 1); None: all of them.
        :param marker: the uuid of the last node of the previous page: only
            the nodes sorted after it; None: from the first.
        :returns: the :class:`~nova_lite.objects.ComputeNode` records.
        :raises nova_lite.exception.MarkerNotFound: if no node (of ``host``,
            if given) has the uuid ``marker``.
        :raises nova_lite.exception.InvalidInput: for a ``host`` or
            ``marker`` that cannot be looked up, or a ``limit`` below 1.
        """
        arguments.check_lookup(optional=True, host=host, marker=marker)
        _check_limit(limit)

        def op(conn: sa.Connection) -> list[ComputeNode]:
            after = None
            if marker is not None:
                query = sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
                    T_NODES.c.uuid == marker)
                if host is not None:
                    query = query.where(T_NODES.c.host == host)
                found = conn.execute(query).first()
                if found is None:
                    raise MarkerNotFound(marker, "compute node uuid" + (
                        f" on host {host}" if host is not None else ""))
                after = (found.host, found.nodename)
            return rows.load_nodes(conn, host, limit=limit, after=after)
        return self._read_snapshot("list compute nodes", op)

    def count_live_instances(self, hosts: Collection[str]
                             ) -> dict[tuple[str | None, str | None], int]:
        """How many instances that hold resources each node of ``hosts`` has
        (one grouped count, for a page of nodes).

        :param hosts: the hosts whose nodes to count.
        :returns: ``{(host, nodename): count}``; nodes with none are absent.
        """
        wanted = sorted(set(hosts))
        for host in wanted:
            arguments.check_lookup(host=host)

        def op(conn: sa.Connection) -> dict[tuple[str | None, str | None], int]:
            counts: dict[tuple[str | None, str | None], int] = {}
            for i in range(0, len(wanted), 500):
                query = sa.select(T_INST.c.host, T_INST.c.node, sa.func.count()).where(
                    T_INST.c.host.in_(wanted[i:i + 500]), holds_sql.instance_holds()
                ).group_by(T_INST.c.host, T_INST.c.node)
                counts.update({(h, n): int(c) for h, n, c in conn.execute(query)})
            return counts
        return self._read("count instances", op) if wanted else {}

    def get_compute_node(self, host: str, nodename: str) -> ComputeNode:
        """One node record; raises :class:`NodeNotFound` naming it.

        :param host: the host that owns the node.
        :param nodename: the node's name.
        :returns: the node's :class:`~nova_lite.objects.ComputeNode`.
        :raises nova_lite.exception.NodeNotFound: if ``host`` has no live
            record of ``nodename``.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up.
        """
        arguments.check_lookup(host=host, nodename=nodename)
        for node in self._read_snapshot(f"get compute node {nodename}",
                                        lambda conn: rows.load_nodes(conn, host, nodename)):
            return node
        raise NodeNotFound(nodename, host)

    def child_providers(self, node_uuids: Iterable[str]
                        ) -> dict[str, list[provider_rows.ChildRecord]]:
        """The child providers of each node as recorded (its audit keeps them
        as its driver reports them): ``{node uuid: [ChildRecord, ...]}``, by
        name, with each child's uuid, parent and generation; a node without
        children is left out.

        :param node_uuids: the nodes' uuids.
        """
        uuids = list(node_uuids)
        return self._read("read child providers",
                          lambda conn: provider_rows.children_of(conn, uuids))

    def delete_compute_node(self, host: str, nodename: str) -> None:
        """Delete a node record with its inventories and allocations.

        :param host: the host that owns the node.
        :param nodename: the node's name.
        :raises nova_lite.exception.NodeNotFound: if there is no such record;
            nothing is written.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up.
        """
        arguments.check_lookup(host=host, nodename=nodename)

        def op(conn: sa.Connection) -> None:
            row = conn.execute(sa.select(T_NODES.c.uuid).where(
                T_NODES.c.host == host, T_NODES.c.nodename == nodename)).first()
            if row is None:
                raise NodeNotFound(nodename, host)
            for table in (T_ALLOC, T_INV, models.node_usage):
                conn.execute(table.delete().where(table.c.node_uuid == row.uuid))
            conn.execute(T_NODES.delete().where(T_NODES.c.uuid == row.uuid))
        self._write(f"delete compute node {host}/{nodename}", op)

    def set_node_error(self, host: str, nodename: str, error: str | None) -> None:
        """Record (or clear, with None) why the last audit of a node failed.

        A NUL byte in ``error`` (a driver's exception text) is recorded as
        ``\\x00`` on every backend: PostgreSQL holds no NUL in text.

        :param host: the host that owns the node.
        :param nodename: the node's name (no record: nothing is written).
        :param error: why the audit failed; None clears it.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up, or an ``error`` that is not a string
            (:class:`~nova_lite.exception.InvalidType`).
        """
        arguments.check_lookup(host=host, nodename=nodename)
        if error is not None:
            error = v.check_type(error, str, "error").replace("\x00", "\\x00")

        def op(conn: sa.Connection) -> None:
            conn.execute(T_NODES.update().where(
                T_NODES.c.host == host, T_NODES.c.nodename == nodename,
                T_NODES.c.last_error.is_distinct_from(error)).values(last_error=error))
        self._write(f"mark compute node {host}/{nodename}", op)

    def missing_allocations(self, host: str, nodenames: Iterable[str] | None = None
                            ) -> list[MissingAllocation]:
        """Consumers on ``host``'s nodes that hold no allocation there, for an audit's repair.

        A list of :class:`~nova_lite.db.audit_writes.MissingAllocation`; the
        audit works out what each would hold (the driver's overhead
        estimate is a driver call: never inside a write transaction) and
        hands the result to :meth:`record_audit`.

        :param host: the host whose nodes to search.
        :param nodenames: search these of its nodes only; None: every one.
        :returns: the consumers with no allocation on their node.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up.
        """
        arguments.check_lookup(host=host)
        for nodename in nodenames or ():
            arguments.check_lookup(nodename=nodename)
        return self._read(f"find missing allocations of host {host}",
                          lambda conn: audit_writes.missing_allocations(conn, host, nodenames))

    def pass_records(self, host: str, *, service: bool = False,
                     service_down_time: float | None = None) -> pass_read.PassRecords:
        """What one periodic pass of ``host`` compares against, read in one
        read-only transaction of six statements (five without ``service``,
        which read no row of a steady node's consumers): a
        :class:`~nova_lite.db.pass_records.PassRecords`.

        A pass that finds these records agree with what its driver reports
        writes nothing (see :meth:`audit_differs`); only a difference opens a
        writing transaction, which locks and checks again.

        :param host: the host whose pass it is.
        :param service: also read what a compute service's pass needs (the
            compute services it needs with their recorded findings, the
            host's builds and whether it has work waiting).
        :param service_down_time: with ``service``, the seconds without a
            heartbeat after which a service is down: the services read are
            then the host's, those at the ends of its migrations and those
            down (a pass with every service up reads one service row); None:
            every compute service.
        :returns: the records, read at one moment.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up.
        """
        arguments.check_lookup(host=host)
        if not self.schema.current:
            self._read("records of a pass", lambda conn: None)   # SchemaOutdated, named
        now = time.time()
        op = f"read the records of a pass of host {host}"
        if not service:
            return self.db.read_snapshot(op, lambda conn: pass_read.read(conn, host, now))
        return self.db.read_direct(op, lambda conn: pass_read.read_for_service(
            conn, host, now, COMPUTE_BINARY, service_down_time))

    def audit_differs(self, records: pass_read.PassRecords, audits: Sequence[AuditedNode],
                      listed: Collection[str] | None = None,
                      only: Iterable[str] | None = None) -> str | None:
        """Whether :meth:`record_audit` of these arguments would change ``records``
        (read by :meth:`pass_records`): a short reason, or None when it would
        write nothing.  No I/O.

        :param records: the host's records, as read.
        :param audits: as for :meth:`record_audit`.
        :param listed: as for :meth:`record_audit`.
        :param only: as for :meth:`record_audit`.
        :returns: why the records differ, or None.
        """
        return records.audit_differs(audits, self._report_texts[records.host], listed,
                                     None if only is None else list(only))

    def record_audit(self, host: str, audits: Sequence[AuditedNode],
                     rebuilt: Mapping[tuple[str, str], Allocation] | None = None,
                     listed: Collection[str] | None = None,
                     only: Iterable[str] | None = None) -> dict[str, ComputeNode]:
        """Write one audit pass of ``host`` in one transaction.

        ``audits``: :class:`AuditedNode` per node that reported well.  Node
        rows and inventories are written only where they changed; a node
        listed by the driver is marked reported, and with ``listed`` (every
        node name the driver listed in a full pass) the host's other
        records are marked not reported.  Stale allocations (deleted
        instances, finished migrations) are removed and missing ones
        restored from ``rebuilt`` (``{(consumer_uuid, nodename):
        Allocation}``, see :meth:`missing_allocations`), each logged at
        WARNING.  Every change a claim decides on bumps the node's
        generation.  Returns ``{nodename: ComputeNode}`` for the audited
        nodes.  ``host`` and every node name are checked first
        (:func:`nova_lite.validators.check_text`): a name no backend can
        record raises InvalidInput and writes nothing.

        :param host: the audited host.
        :param audits: one :class:`AuditedNode` per node that reported well.
        :param rebuilt: the allocations to restore, ``{(consumer_uuid,
            nodename): Allocation}``; None: none.
        :param listed: every node name the driver listed, in a full pass;
            None: a pass of some nodes only.
        :param only: reconcile the allocations of these node names only;
            None: of every node of ``host``.
        :returns: ``{nodename: ComputeNode}`` of the audited nodes.
        :raises nova_lite.exception.InvalidInput: for a name no backend can
            record; nothing is written.
        """
        arguments.check_names(host=host)
        for audit in audits:
            arguments.check_names(nodename=audit.nodename)

        def op(conn: sa.Connection) -> dict[str, ComputeNode]:
            audit_writes.serialise_host(conn, host)
            audit_writes.lock_adopted_consumers(conn, host, audits)
            changed = audit_writes.write_nodes(conn, host, audits, self._report_texts[host])
            if listed is not None:
                changed |= audit_writes.mark_unreported(conn, host, listed)
            changed |= audit_writes.reconcile_allocations(conn, host, rebuilt or {}, only)
            audit_writes.bump_generations(conn, changed)
            return audit_writes.audited_nodes(conn, host, audits)
        return self._write(f"record audit of host {host}", op)

    # -- claims -------------------------------------------------------------
    @property
    def checks_stale_claims(self) -> bool:
        """True where the database itself checks a claim decided on a stale
        record (PostgreSQL, see :meth:`claim`): deciding on the caller's
        record first then costs no transaction of its own, even when
        another process has moved the node on since."""
        return self.db.dialect == "postgresql"

    def claim(self, node: ComputeNode, requests: Sequence[ClaimRequest], decide: Decide,
              optimistic: bool = True) -> tuple[ComputeNode, tuple[ClaimPlan, ...]]:
        """Admit claims on one node in one transaction: all of them or none.

        ``node`` is the :class:`~nova_lite.objects.ComputeNode` as the caller
        last saw it; ``requests`` the
        :class:`~nova_lite.model.plans.ClaimRequest` of each claim;
        ``decide(node) -> tuple[ClaimPlan]`` (one
        :class:`~nova_lite.model.plans.ClaimPlan` per request, in order) is
        a pure function of the node record, such as
        :meth:`nova_lite.model.decide.NodeClaims.decide`, and raises
        :class:`~nova_lite.exception.ComputeResourcesUnavailable` to refuse.
        The store never calls back into code that does I/O.

        One transaction.  The guards of moves run first; then the
        node's generation is bumped, which takes the node row's lock (a
        concurrent claim waits for it rather than retrying).  If the
        generation it moved from is ``node``'s, nothing a claim decides on
        (inventories, owner, reported flag, usage) changed since ``node``
        was read, and the plans decided on it before the transaction are
        written: a compare-and-swap.  On PostgreSQL, a new instance's claim
        is one statement (``claim_writes.PG_SINGLE_CLAIM``), sent alone in
        autocommit mode (it writes the claim whole or nothing), that also
        admits a plan decided on an older record when only usage
        changed since and the plan still fits its bounds
        (``ClaimPlan.bounds``), checked by the database on the node's
        current usage (the ``node_usage`` row, which that statement
        records from ``node`` when its compare-and-swap holds and keeps
        while claims queue on the node).  Otherwise (or if the possibly stale ``node``
        refused) the node is read again under that lock (on PostgreSQL
        sent with the bump, in its round trip) and decided on: that
        decision is final.  That re-read takes the usage from the
        ``node_usage`` row the claims keep, if it is of exactly the
        generation the node moved from (else it sums the allocations), and
        records the usage it commits at, so claims that queue on one node
        never sum all of its allocations while they hold its lock.  A
        compare-and-swap records that row too, from ``node``: on PostgreSQL
        until :data:`PLAIN_CLAIM_AFTER_SWAPS` of this store's claims on the
        node in a row were compare-and-swaps (then its one statement leaves
        the row out, ``claim_writes.PG_PLAIN_CLAIM``, until a claim is not),
        and on SQLite only for the next
        :data:`USAGE_ROW_CLAIMS_AFTER_RACE` claims on the node after one of
        this store's claims there lost its race (both counted by
        :class:`~nova_lite.db.swap_streaks.SwapStreaks`).  A writer whose claims
        never lose one has no other writer on the node to read the row (the
        races are mutual: the other's claims would move the generation under
        this one's), and skipping the row spares each of its claims a
        statement and a page (on PostgreSQL, a row lock and an upsert).
        Returns ``(node_after, plans)``: the node as
        recorded after the claims, and the plans written.

        ``optimistic=False`` skips the decision on ``node`` (a caller whose
        last claim on the node lost its race expects to lose again): the
        claim then decides only on the node re-read under the lock.

        :param node: the node as the caller last saw it.
        :param requests: one request per claim.
        :param decide: the decision: one plan per request, in order, or
            ComputeResourcesUnavailable.
        :param optimistic: decide on ``node`` before the transaction.
        :returns: ``(node_after, plans)``: the node as recorded after the
            claims, and the plans written.
        :raises nova_lite.exception.ComputeResourcesUnavailable: when the
            decision on the records refuses; nothing is written (on
            PostgreSQL, a node that never had a ``node_usage`` row may be
            left one of generation -1, which vouches for nothing: see
            ``claim_writes.PG_SINGLE_CLAIM``).
        :raises nova_lite.exception.InvalidInput: when a guard of a move or
            of an instance's state refuses
            (:class:`~nova_lite.exception.InstanceStateConflict`); nothing
            is written.
        """
        after, plans, _ = self.claim_with_tasks(node, requests, decide, optimistic)
        return after, plans

    def claim_with_tasks(self, node: ComputeNode, requests: Sequence[ClaimRequest],
                         decide: Decide, optimistic: bool = True,
                         tasks: Sequence[WorkRequest] = ()
                         ) -> tuple[ComputeNode, tuple[ClaimPlan, ...], list[Task]]:
        """:meth:`claim`, and ``tasks`` recorded waiting in the same
        transaction: the claims and the tasks are committed together or not
        at all (a build's claim and its host's build task).

        One transaction still: on PostgreSQL one task (a build's) is
        recorded, and its host notified, by the claim's one statement
        itself, only if it writes the claim; several are sent with that
        statement, in its round trip and its transaction (a claim that
        takes the transaction's steps sends them after its writes, in one
        more).  A notification is delivered at the COMMIT,
        so a host never wakes for a task it cannot see yet.

        :param tasks: the work to record with the claims, in order.
        :returns: ``(node_after, plans, tasks)``: as :meth:`claim`, and the
            tasks as recorded, in order (``[]`` for none).
        :raises: as :meth:`claim`; nothing is written, no task either.
        """
        plans: tuple[ClaimPlan, ...] | None = None
        if optimistic:
            try:
                plans = tuple(decide(node))
            except ComputeResourcesUnavailable:   # perhaps stale: decided again on fresh records
                plans = None
        sqlite = self.db.dialect == "sqlite"
        # Whether this store alone has written the node of late (see
        # SwapStreaks): then PostgreSQL's one statement leaves out the node's
        # usage row, and so does SQLite's swap.
        alone = self._streaks.alone(node.uuid)
        plain = not sqlite and len(tasks) <= 1 and alone
        one = plans is not None and len(plans) == 1 and not sqlite and self.schema.current \
            and claim_writes.one_statement_plan(plans[0])
        single = claim_writes.single_claim_values(node, plans[0], time.time()) \
            if one and plans is not None and not plain else None
        op = f"claim on node {node.host}/{node.nodename}"
        done = None
        if one and plans is not None and len(tasks) <= 1:
            # The one statement writes the claim or nothing: alone in its
            # transaction, in autocommit mode (one round trip where BEGIN
            # and COMMIT around it made three).
            try:
                done = self.db.write_alone(op, functools.partial(
                    _one_statement_claim, node=node, plans=plans, tasks=tuple(tasks),
                    single=single))
            except StoreError as exc:
                if not is_unique_violation(exc):
                    raise
                # The instance was recorded by another request while the
                # statement ran, and nothing was written: decided below.
            single = None
        usage_row = not alone
        if done is None and sqlite and not usage_row and plans is not None \
                and len(plans) == 1 and not tasks and claim_writes.plain_rows(plans[0]):
            # A plain claim decided on the record, with no usage row to record:
            # its rows written as tuples (the claim's Python is most of its
            # cost on SQLite).
            done = self._write_direct(op, functools.partial(
                _sqlite_plain_claim, node=node, plan=plans[0], decide=decide))
        if done is not None:
            after, written, made = done
        else:
            # A claim the one statement did not write (not admitted, or of a
            # known instance): the steps that guard and decide, in a
            # transaction.
            if not sqlite:
                # On PostgreSQL a claim that needs these steps is taken for a
                # sign of another writer (a stale record, say): this one
                # records the usage row, and so do the next ones until a
                # streak of swaps again.
                self._streaks.count(node.uuid, swapped=False)
            transaction = functools.partial(
                _claim_transaction, node=node, requests=requests, decide=decide, plans=plans,
                tasks=tuple(tasks), usage_row=usage_row or not sqlite)
            try:
                after, written, made = self._write_direct(
                    op, functools.partial(transaction, single=single))
            except StoreError as exc:
                if single is None or not is_unique_violation(exc):
                    raise
                after, written, made = self._write_direct(
                    op, functools.partial(transaction, single=None))
        swapped = after.generation == node.generation + 1
        self._streaks.count(node.uuid, swapped)
        if isinstance(after, ComputeNode):
            return after, written, made
        # The one statement wrote the plans (``after`` is its answer); the node
        # after them is worked out now that the COMMIT has released the node row.
        if swapped:
            return with_allocations(node, [p.allocation for p in written], after.generation), \
                written, made
        return claim_writes.node_with_usage_row(node, after), written, made

    def release(self, node_uuids: Collection[str], consumer_uuids: Collection[str],
                instance: Instance | None = None,
                migration_status: MigrationStatus | None = None,
                transfer: tuple[str, str] | None = None) -> dict[str, ComputeNode]:
        """Drop allocations and update rows in one transaction.

        Removes the allocations of ``consumer_uuids`` on ``node_uuids``;
        records ``instance`` if given (refused if the records say it is
        deleted: deleted is final); sets ``migration_status`` as
        ``(migration_uuid, status)`` (or a list of them), each only if that
        migration is still in progress (else nothing changes and
        InvalidInput says so); ``transfer`` = ``(migration_uuid,
        instance_uuid)`` re-labels a migration's allocation as the
        instance's (a confirmed resize).  Bumps each node's generation and
        returns ``{node_uuid: ComputeNode}`` fresh from the records.

        :param node_uuids: the nodes whose allocations to drop.
        :param consumer_uuids: the consumers (instances, migrations) whose
            allocations to drop.
        :param instance: the instance to record; None: none.
        :param migration_status: ``(migration_uuid, status)``, or a list
            of them; None: none.
        :param transfer: ``(migration_uuid, instance_uuid)``; None: none.
        :returns: ``{node_uuid: ComputeNode}`` of ``node_uuids``.
        :raises nova_lite.exception.InstanceStateConflict: if the records
            say ``instance`` is deleted and it is not; nothing is written.
        :raises nova_lite.exception.InvalidInput: if a migration of
            ``migration_status`` is no longer in progress; nothing is
            written.
        """
        def op(conn: sa.Connection) -> dict[str, ComputeNode]:
            if instance is not None:
                _guard_instance_update(conn, instance)
            return _release(conn, node_uuids, consumer_uuids, instance=instance,
                            migration_status=migration_status, transfer=transfer)
        return self._write("release allocations", op)

    def record_instance_state(self, instance: Instance) -> dict[str, ComputeNode]:
        """Record ``instance``'s new state in one transaction; frees it if it holds nothing now.

        A live instance keeps the placement of its record (host, node, NUMA
        pinning, PCI devices).  A deleted or shelve-offloaded one gives back
        every allocation it holds at once, its in-progress migrations are
        marked "error", and (offloaded) it leaves its host and node.

        The records' state is checked under the row's lock: deleted is
        final, and an offloaded instance that holds no claim becomes live
        only through a claim.  A change decided on an older state is
        refused with :class:`~nova_lite.exception.InstanceStateConflict`
        naming both states, and the records keep theirs.  Returns
        ``{node_uuid: ComputeNode}`` of the nodes whose usage changed.
        Raises :class:`InstanceNotFound` if the instance has no record.

        :param instance: the instance in its new state.
        :returns: ``{node_uuid: ComputeNode}`` of the nodes whose usage
            changed.
        :raises nova_lite.exception.InstanceNotFound: if the instance has no
            record.
        :raises nova_lite.exception.InstanceStateConflict: for a change
            decided on an older state; nothing is written.
        :raises nova_lite.exception.InvalidType: if ``instance`` is not an
            :class:`~nova_lite.objects.Instance`.
        """
        v.check_type(instance, Instance, "record_instance_state instance")

        def op(conn: sa.Connection) -> dict[str, ComputeNode]:
            stored = _guard_instance_update(conn, instance)
            if stored is None:
                raise InstanceNotFound(instance.uuid, "in the records")
            if holds.instance_holds(instance.vm_state, instance.task_state, placed=False):
                if not stored.holds_resources:
                    raise InstanceStateConflict(
                        instance.uuid, stored.vm_state, instance.vm_state,
                        "it holds no claim on any node; claim it (unshelve) first")
                rows.upsert_instance(conn, attrs.evolve(
                    instance, host=stored.host, node=stored.node,
                    numa_topology=stored.numa_topology, pci_devices=stored.pci_devices),
                    time.time())
                return {}
            held = conn.execute(sa.select(T_ALLOC.c.consumer_uuid, T_ALLOC.c.node_uuid).where(
                T_ALLOC.c.instance_uuid == instance.uuid)).all()
            moving = conn.execute(sa.select(T_MIG.c.uuid).where(
                T_MIG.c.instance_uuid == instance.uuid,
                holds_sql.migration_holds())).scalars().all()
            offloaded = instance.vm_state != DELETED
            gone = attrs.evolve(instance, host=None if offloaded else stored.host,
                                node=None if offloaded else stored.node, pci_devices=())
            return _release(conn, sorted({r.node_uuid for r in held}),
                            [r.consumer_uuid for r in held], instance=gone,
                            migration_status=[(m, "error") for m in moving])
        return self._write(f"record state of instance {instance.uuid}", op)

    def records_snapshot(self, host: str | None = None) -> RecordsSnapshot:
        """The records the leak finder and explain need, read at one moment: a
        :class:`~nova_lite.db.snapshot.RecordsSnapshot` of ``host`` (None: every host).

        :param host: the host whose records to read; None: every host.
        :returns: the snapshot.
        """
        if not self.schema.current:
            self._read("records snapshot", lambda conn: None)   # SchemaOutdated, named
        now = time.time()
        return self.db.read_snapshot(
            f"read the records of {'every host' if host is None else f'host {host}'}",
            lambda conn: snapshot.read(conn, host, COMPUTE_BINARY, now))

    # -- findings -------------------------------------------------------------
    def record_findings(self, host: str, findings: Iterable[Finding],
                        recorded_at: float | None = None,
                        recorded_by: str | None = None,
                        refresh_after: float | None = None,
                        last: "pass_read.FindingsRow | None | object" = UNREAD) -> bool:
        """Record ``host``'s findings (:class:`~nova_lite.findings.Finding` records)
        as found at ``recorded_at`` (epoch s, default now) by the service of host
        ``recorded_by`` (default ``host`` itself), replacing the last record.

        Nothing is written when they are the ones recorded already (by the
        same host): ``recorded_at`` is then when they were first found, and a
        pass that finds nothing new costs one read.  Returns True if written.

        :param host: the host the findings are of.
        :param findings: the findings of its last search.
        :param recorded_at: when they were found, in epoch seconds; None: now.
        :param recorded_by: the host whose service searched; None: ``host``.
        :param refresh_after: seconds after which unchanged findings are
            written again anyway (their time moves on); None: never.
        :param last: the record as a pass read it already (a
            :class:`~nova_lite.db.pass_records.FindingsRow` with its text, or
            None: no record); default: read it here.
        :returns: True if written, False if unchanged.
        """
        recorded_at = time.time() if recorded_at is None else recorded_at
        recorded_by = host if recorded_by is None else recorded_by
        text = pass_read.findings_text(findings)
        if last is UNREAD or (isinstance(last, pass_read.FindingsRow) and last.text is None):
            found = self._read(f"read the findings of host {host}", lambda conn: conn.execute(
                sa.select(T_FIND.c.findings, T_FIND.c.recorded_by, T_FIND.c.recorded_at)
                .where(T_FIND.c.host == host)).first())
            last = None if found is None else pass_read.FindingsRow(*found)
        if isinstance(last, pass_read.FindingsRow) and \
                (last.text, last.recorded_by) == (text, recorded_by) and (
                refresh_after is None or recorded_at - last.recorded_at < refresh_after):
            return False   # unchanged: a steady pass writes nothing

        def op(conn: sa.Connection) -> None:
            values = dict(recorded_at=recorded_at, findings=text, recorded_by=recorded_by)
            if not conn.execute(T_FIND.update().where(T_FIND.c.host == host)
                                .values(**values)).rowcount:
                conn.execute(T_FIND.insert().values(host=host, **values))
        self._write(f"record the findings of host {host}", op)
        return True

    def hosts_needing_findings(self, peer: str, service_down_time: float, interval: float,
                               now: float | None = None, *,
                               binary: str = COMPUTE_BINARY) -> list[str]:
        """The hosts whose compute service is down and whose findings a live peer
        should record now, sorted: their last record is their own (from before
        they went down), or none, or a peer's older than ``interval``.

        One statement that returns only those hosts.

        :param peer: the asking host (never listed).
        :param service_down_time: seconds without a heartbeat after which a
            service is down.
        :param interval: seconds a peer's record stays fresh.
        :param now: the clock (epoch s; default now).
        :param binary: the services' binary.
        :returns: host names.
        """
        now = time.time() if now is None else now
        query = sa.select(T_SVC.c.host).select_from(T_SVC.outerjoin(
            T_FIND, T_FIND.c.host == T_SVC.c.host)).where(
            T_SVC.c.binary == binary, T_SVC.c.host != peer,
            services.heartbeat_outside(service_down_time, now),
            sa.or_(T_FIND.c.host.is_(None), T_FIND.c.recorded_by == T_FIND.c.host,
                   T_FIND.c.recorded_at <= now - interval)).order_by(T_SVC.c.host)
        return self._read("list the hosts that are down",
                          lambda conn: list(conn.execute(query).scalars()))

    def recorded_findings(self, host: str | None = None) -> list[RecordedFindings]:
        """The :class:`~nova_lite.findings.RecordedFindings` of every host (or
        ``host``) that recorded some, sorted by host.

        :param host: the host whose findings to read; None: every host.
        :returns: the recorded findings, sorted by host.
        """
        def op(conn: sa.Connection) -> list[RecordedFindings]:
            query = T_FIND.select().order_by(T_FIND.c.host)
            if host is not None:
                query = query.where(T_FIND.c.host == host)
            return [RecordedFindings(r.host, r.recorded_at, tuple(
                Finding.from_dict(d) for d in json.loads(r.findings)), r.recorded_by)
                for r in conn.execute(query)]
        return self._read("read the recorded findings", op)

    # -- heal -----------------------------------------------------------------
    def heal(self, change: heal_writes.HealChange) -> heal_writes.HealResult:
        """Apply one :class:`~nova_lite.db.heal_writes.HealChange` in its own transaction.

        Applied only if every node it guards is still at the generation the
        plan read (each is bumped); otherwise nothing is written.  Returns
        a :class:`~nova_lite.db.heal_writes.HealResult`.

        :param change: the change to apply.
        :returns: whether it was applied, and if not why.
        """
        try:
            return self._write(f"heal: {change.kind} {change.subject}",
                               lambda conn: heal_writes.apply(conn, change))
        except heal_writes.HealSkipped as exc:
            return heal_writes.HealResult(applied=False, reason=str(exc))

    def set_migration_status(self, migration_uuid: str, status: str) -> Migration:
        """Record that a move in progress reached ``status`` (one of
        :data:`nova_lite.holds.MIGRATION_IN_PROGRESS`), now; returns the
        :class:`~nova_lite.objects.Migration` as recorded.

        Raises :class:`~nova_lite.exception.MigrationNotFound` for an
        unknown migration and InvalidInput (nothing changed) for a status
        that is not a step of a move in progress, or a migration that is
        over: confirm, revert or abort it through the tracker instead.

        :param migration_uuid: the migration's uuid.
        :param status: its new status.
        :returns: the migration as recorded.
        :raises nova_lite.exception.MigrationNotFound: for an unknown
            migration.
        :raises nova_lite.exception.InvalidInput: for a status that is not a
            step of a move in progress, or a migration that is over;
            nothing is written.
        """
        if status not in holds.MIGRATION_IN_PROGRESS:
            raise InvalidInput(
                f"Migration status {status!r} is not a step of a move in progress (one of "
                f"{', '.join(sorted(holds.MIGRATION_IN_PROGRESS))}); confirm, revert or "
                "abort the move to end it")

        def op(conn: sa.Connection) -> Migration:
            row = conn.execute(T_MIG.select().where(T_MIG.c.uuid == migration_uuid)).first()
            if row is None:
                raise MigrationNotFound(migration_uuid, "in the records")
            if not conn.execute(T_MIG.update().where(
                    T_MIG.c.uuid == migration_uuid, holds_sql.migration_holds())
                    .values(status=status, updated_at=time.time())).rowcount:
                raise InvalidInput(f"Migration {migration_uuid} is {row.status}: it is over "
                                   f"and cannot become {status!r}; nothing changed")
            return rows.migration_from_row(conn.execute(
                T_MIG.select().where(T_MIG.c.uuid == migration_uuid)).one())
        return self._write(f"set migration {migration_uuid} {status}", op)

    def node_generation(self, node_uuid: str) -> int:
        """The node's generation as recorded now (one small read).

        :param node_uuid: the node's uuid.
        :returns: its generation.
        :raises nova_lite.exception.NodeNotFound: if it has no record.
        :raises nova_lite.exception.InvalidInput: for a uuid that cannot be
            looked up.
        """
        arguments.check_lookup(node_uuid=node_uuid)
        return self._read(f"generation of node {node_uuid}",
                          lambda conn: rows.node_generation(conn, node_uuid))

    def load_node(self, node_uuid: str) -> ComputeNode:
        """The :class:`~nova_lite.objects.ComputeNode` with this uuid, as recorded now.

        :param node_uuid: the node's uuid.
        :returns: the node.
        :raises nova_lite.exception.NodeNotFound: if it has no record.
        :raises nova_lite.exception.InvalidInput: for a uuid that cannot be
            looked up.
        """
        arguments.check_lookup(node_uuid=node_uuid)
        return self._read(f"load node {node_uuid}", lambda conn: rows.load_node(conn, node_uuid))

    # -- instances, migrations, allocations ------------------------------------
    def get_instance(self, instance_uuid: str) -> Instance:
        """The instance row as an Instance; raises :class:`InstanceNotFound`.

        :param instance_uuid: the instance's uuid.
        :returns: the :class:`~nova_lite.objects.Instance` as recorded.
        :raises nova_lite.exception.InstanceNotFound: if it has no record.
        :raises nova_lite.exception.InvalidInput: for a uuid that cannot be
            looked up.
        """
        arguments.check_lookup(instance_uuid=instance_uuid)

        def op(conn: sa.Connection) -> Instance:
            row = conn.execute(T_INST.select().where(T_INST.c.uuid == instance_uuid)).first()
            if row is None:
                raise InstanceNotFound(instance_uuid, "in the records")
            return rows.instance_from_row(row)
        return self._read(f"get instance {instance_uuid}", op)

    def list_instances(self, host: str | None = None, node: str | None = None,
                       live_only: bool = True, *, limit: int | None = None,
                       marker: str | None = None) -> list[Instance]:
        """Instances on ``host``/``node``; ``live_only`` keeps those that hold resources
        (:func:`nova_lite.holds.instance_holds`).

        With ``limit`` and/or ``marker``, one page of them, read alone (a
        keyset ``WHERE uuid > marker`` and ``LIMIT``).

        :param host: the instances of this host only; None: of every host.
        :param node: the instances of this node name only; None: of every
            node.
        :param live_only: only the instances that hold resources.
        :param limit: at most this many instances (>= 1); None: all.
        :param marker: the uuid of the last instance of the previous page;
            it must be a recorded instance.  None: from the first.
        :returns: the instances, sorted by uuid.
        :raises nova_lite.exception.MarkerNotFound: if no instance is
            recorded with the uuid ``marker``.
        :raises nova_lite.exception.InvalidInput: for a name that cannot be
            looked up, or a ``limit`` below 1.
        """
        arguments.check_lookup(optional=True, host=host, node=node, marker=marker)
        _check_limit(limit)

        def op(conn: sa.Connection) -> list[Instance]:
            query = T_INST.select()
            if marker is not None:
                if conn.execute(sa.select(T_INST.c.uuid).where(
                        T_INST.c.uuid == marker)).first() is None:
                    raise MarkerNotFound(marker, "instance uuid")
                query = query.where(T_INST.c.uuid > marker)
            if limit is not None:
                query = query.limit(limit)
            if host is not None:
                query = query.where(T_INST.c.host == host)
            if node is not None:
                query = query.where(T_INST.c.node == node)
            if live_only:
                query = query.where(holds_sql.instance_holds())
            query = query.order_by(T_INST.c.uuid)
            return [rows.instance_from_row(r) for r in conn.execute(query)]
        return self._read("list instances", op)

    def list_migrations(self, instance_uuid: str | None = None,
                        in_progress_only: bool = False) -> list[Migration]:
        """Migration rows (of one instance, or all).

        :param instance_uuid: the migrations of this instance only; None:
            of every instance.
        :param in_progress_only: only the migrations still in progress.
        :returns: the :class:`~nova_lite.objects.Migration` records, oldest
            first.
        :raises nova_lite.exception.InvalidInput: for a uuid that cannot be
            looked up.
        """
        arguments.check_lookup(optional=True, instance_uuid=instance_uuid)

        def op(conn: sa.Connection) -> list[Migration]:
            query = T_MIG.select()
            if instance_uuid is not None:
                query = query.where(T_MIG.c.instance_uuid == instance_uuid)
            if in_progress_only:
                query = query.where(holds_sql.migration_holds())
            query = query.order_by(T_MIG.c.created_at)
            return [rows.migration_from_row(r) for r in conn.execute(query)]
        return self._read("list migrations", op)

    def list_allocations(self, node_uuid: str | None = None,
                         instance_uuid: str | None = None) -> list[Allocation]:
        """Allocation records, filtered by node and/or instance.

        :param node_uuid: the allocations on this node only; None: on every
            node.
        :param instance_uuid: the allocations held for this instance only;
            None: of every consumer.
        :returns: the :class:`~nova_lite.objects.Allocation` records, sorted
            by consumer uuid.
        :raises nova_lite.exception.InvalidInput: for a uuid that cannot be
            looked up.
        """
        arguments.check_lookup(optional=True, node_uuid=node_uuid, instance_uuid=instance_uuid)

        def op(conn: sa.Connection) -> list[Allocation]:
            query = T_ALLOC.select()
            if node_uuid is not None:
                query = query.where(T_ALLOC.c.node_uuid == node_uuid)
            if instance_uuid is not None:
                query = query.where(T_ALLOC.c.instance_uuid == instance_uuid)
            return [rows.allocation_from_row(r) for r in conn.execute(
                query.order_by(T_ALLOC.c.consumer_uuid))]
        return self._read("list allocations", op)

    # -- history --------------------------------------------------------------
    def archive_deleted_rows(self, before: float | None = None, max_rows: int = 1000,
                             dry_run: bool = False) -> list[archive.TableCount]:
        """Move deleted instances, finished migrations and tasks that are over
        into the shadow tables.

        What may move is the rule of :mod:`nova_lite.db.archive` (a deleted
        instance holding no allocation and no migration in progress; a
        finished migration holding no allocation whose instance is not
        live; a task that is over whose instance is not live), last updated
        (a task: finished) before ``before``.  Rows move in batches of at
        most ``max_rows`` of one table, each batch its own transaction,
        until none is left.

        :param before: only rows whose ``updated_at`` is before this time,
            in epoch seconds; None: every row that may move.
        :param max_rows: the most rows one batch (one transaction) moves
            (an integer >= 1).
        :param dry_run: count the rows that would move, write nothing.
        :returns: one :class:`~nova_lite.db.archive.TableCount` per table
            (``tasks``, ``migrations``, then ``instances``): the rows moved,
            or that would move.
        :raises nova_lite.exception.InvalidInput: for a ``max_rows`` below 1
            or a ``before`` that is not a number; nothing is written.
        """
        _check_history_args(before, max_rows)
        if dry_run:
            return self._read("count archivable rows",
                              lambda conn: archive.count_eligible(conn, before))
        counts = []
        for table, _ in archive.SHADOWS:
            moved = batch = 0
            while True:
                n = self._write(f"archive {table.name} (batch {batch + 1})", functools.partial(
                    archive.archive_batch, table=table, before=before, max_rows=max_rows))
                moved, batch = moved + n, batch + 1
                if n < max_rows:
                    break
            LOG.info("Archived %d %s row(s) in %d batch(es)", moved, table.name, batch)
            counts.append(archive.TableCount(table.name, moved))
        return counts

    def purge_archived_rows(self, before: float | None = None,
                            dry_run: bool = False) -> list[archive.TableCount]:
        """Delete for good the rows of the shadow tables archived before ``before``.

        :param before: only rows whose ``archived_at`` is before this time,
            in epoch seconds; None: every archived row.
        :param dry_run: count the rows that would be deleted, write nothing.
        :returns: one :class:`~nova_lite.db.archive.TableCount` per shadow
            table (``shadow_tasks``, ``shadow_migrations``, then
            ``shadow_instances``).
        :raises nova_lite.exception.InvalidInput: for a ``before`` that is
            not a number; nothing is written.
        """
        _check_history_args(before, 1)
        if dry_run:
            return self._read("count archived rows",
                              lambda conn: archive.count_archived(conn, before))
        counts = self._write("purge archived rows", lambda conn: archive.purge(conn, before))
        LOG.info("Purged %s", ", ".join(f"{c.rows} {c.table} row(s)" for c in counts))
        return counts


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise InvalidInput(f"limit must be a whole number of at least 1, got {limit!r}")


def _check_history_args(before: float | None, max_rows: int) -> None:
    """InvalidInput for a ``before`` that is not a number, or ``max_rows`` below 1."""
    if before is not None and (isinstance(before, bool) or
                               not isinstance(before, (int, float))):
        raise InvalidInput(f"before must be a time in epoch seconds, not {before!r}")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise InvalidInput(f"max_rows must be an integer >= 1, not {max_rows!r}")


def _sqlite_sidecars_empty(path: str) -> bool:
    """True unless a write-ahead log beside ``path`` holds data."""
    wal = path + "-wal"
    return not (os.path.exists(wal) and os.path.getsize(wal) > 0)


def _claim_transaction(conn: DirectConnection, *, node: ComputeNode,
                       requests: Sequence[ClaimRequest], decide: Decide,
                       plans: tuple[ClaimPlan, ...] | None,
                       single: dict[str, Any] | None, tasks: Sequence[WorkRequest] = (),
                       usage_row: bool = True
                       ) -> tuple[Any, tuple[ClaimPlan, ...], list[Task]]:
    """The statements of :meth:`Store.claim_with_tasks`, in its one transaction.

    ``plans``: decided on ``node`` before the transaction (None: refused
    there, or not decided); ``single``: the values of PostgreSQL's one
    statement (:data:`~nova_lite.db.claim_writes.PG_SINGLE_CLAIM`) for
    ``plans``, or None.  Returns ``(node_after, plans_written, tasks)``: the
    node as recorded after the claims, or, when the one statement wrote
    ``plans``, its answer row (the node after it is worked out once the
    COMMIT has released the node row for the next claim); and the tasks as
    recorded.  ``usage_row``: whether a compare-and-swap that holds records the
    node's ``node_usage`` row (a claim that re-read the node always does).
    """
    made: list[Task] | None = None
    if single is not None and plans is not None and tasks:
        # Several tasks (one or none go alone: :func:`_one_statement_claim`):
        # their INSERTs and NOTIFY travel with the one statement, in its
        # round trip, and BEGIN with them.
        now = time.time()
        results = conn.execute_together([(claim_writes.PG_SINGLE_CLAIM, single),
                                          *task_writes.insert_statements(conn, tasks, now)])
        row, made = results[0].first(), task_writes.inserted(tasks, results[1:])
        if row is not None:
            return row, plans, made
        # Not admitted, or the instance is known: the statement wrote
        # nothing, and the steps below guard and decide.
    claim_writes.guard_requests(conn, requests)
    if conn.dialect.name == "postgresql":
        # The re-read travels with the bump: the lock's holder does
        # not wait a round trip before the read is even sent.
        generation, found = claim_writes.bump_and_reread(conn, node.uuid)
    else:
        # SQLite: the transaction holds the whole file already, and a
        # statement costs no round trip.
        generation, found = claim_writes.bump_and_lock(conn, node.uuid), None
    if plans is not None and generation == node.generation + 1:
        # ``node`` is the node at exactly the generation moved from: its
        # usage, if known, is recorded with the plans, for the claims that
        # queue behind this one.
        usage = (node.uuid, generation, claim_writes.recorded_usage(node)) \
            if usage_row and claim_writes.usage_known(node) else None
        claim_writes.write_plans(conn, plans, time.time(), usage=usage)
        after: ComputeNode = with_allocations(node, [p.allocation for p in plans], generation)
        written = plans
    else:
        after, written = _decide_locked(conn, node, decide, generation, found)
    if made is None:
        made = task_writes.insert(conn, tasks, time.time()) if tasks else []
    return after, written, made


def _sqlite_plain_claim(conn: DirectConnection, *, node: ComputeNode, plan: ClaimPlan,
                        decide: Decide) -> tuple[ComputeNode, tuple[ClaimPlan, ...], list[Task]]:
    """:func:`_claim_transaction` of one plain claim (see
    :func:`~nova_lite.db.claim_writes.plain_rows`) on SQLite, decided on
    ``node``: the same statements, its rows written by
    :func:`~nova_lite.db.claim_writes.write_plain_rows`.  A node moved on
    since ``node``, or an instance recorded already, takes the general steps
    (in the same transaction: nothing was written yet)."""
    generation = claim_writes.bump_and_lock(conn, node.uuid)
    if generation != node.generation + 1:
        after, written = _decide_locked(conn, node, decide, generation)
        return after, written, []
    now = time.time()
    if not claim_writes.write_plain_rows(conn, plan, now):
        claim_writes.write_plans(conn, (plan,), now)
    return with_allocations(node, (plan.allocation,), generation), (plan,), []


def _one_statement_claim(conn: DirectConnection, *, node: ComputeNode,
                         plans: tuple[ClaimPlan, ...], tasks: Sequence[WorkRequest],
                         single: dict[str, Any] | None
                         ) -> tuple[Any, tuple[ClaimPlan, ...], list[Task]] | None:
    """PostgreSQL's one statement of a claim of ``plans`` (one plan) decided
    on ``node``: :data:`~nova_lite.db.claim_writes.PG_SINGLE_CLAIM` with
    values ``single``, or, if ``single`` is None (a node this store alone
    writes of late), :data:`~nova_lite.db.claim_writes.PG_PLAIN_CLAIM`, its
    values built as a row (:func:`~nova_lite.db.claim_writes.plain_claim_row`);
    with its one task if ``tasks`` holds one (a build's: its INSERT and
    NOTIFY are part of the statement).  Returns ``(row, plans, tasks)`` as
    :func:`_claim_transaction` does if the statement wrote the claim, else
    None: it wrote nothing, and the claim is decided by
    :func:`_claim_transaction` without it."""
    now = time.time()
    if single is not None:
        result = conn.execute(
            claim_writes.PG_SINGLE_CLAIM_WITH_TASK if tasks else claim_writes.PG_SINGLE_CLAIM,
            dict(single, **task_writes.one_values(tasks[0], now)) if tasks else single)
    else:
        row = claim_writes.plain_claim_row(node, plans[0], now)
        if tasks:
            statement, names = (claim_writes.PG_PLAIN_CLAIM_WITH_TASK,
                                claim_writes.PG_PLAIN_WITH_TASK_NAMES)
            row += task_writes.one_row(tasks[0], now)
        else:
            statement, names = claim_writes.PG_PLAIN_CLAIM, claim_writes.PG_PLAIN_NAMES
        # Numbered parameters take the row as it is; named ones, a dict.
        result = conn.execute_row(statement, names, row) if conn.takes_row(statement, names) \
            else conn.execute(statement, dict(zip(names, row)))
    if not result.rows:
        return None
    return result.rows[0], plans, task_writes.inserted(tasks, [result], prefix="t_") \
        if tasks else []


def _decide_locked(conn: DirectConnection, node: ComputeNode, decide: Decide, generation: int,
                   found: Sequence[Any] | None = None
                   ) -> tuple[ComputeNode, tuple[ClaimPlan, ...]]:
    """Under the node's lock, moved to ``generation``: decide on the records
    (``found``: the rows of its re-read, if sent with the bump) and write.

    A refusal raises ComputeResourcesUnavailable naming the generation it
    was decided at, and the transaction writes nothing.
    """
    if found is None:
        found = rows.locked_node_rows(conn, node.uuid, generation - 1)
    fresh, usage = rows.load_node_locked(conn, node.uuid, found)
    fresh = attrs.evolve(fresh, generation=generation - 1)
    try:
        plans = tuple(decide(fresh))
    except ComputeResourcesUnavailable as exc:
        exc.generation = fresh.generation
        raise
    claim_writes.write_plans(conn, plans, time.time(), usage=(node.uuid, generation, usage))
    return with_allocations(fresh, [p.allocation for p in plans], generation), plans


def _guard_instance_update(conn: sa.Connection, instance: Instance) -> Instance | None:
    """Lock the instance's row; refuse to bring a deleted instance back.

    Returns the recorded Instance (None if it has no row).
    """
    query = T_INST.select().where(T_INST.c.uuid == instance.uuid)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        return None
    stored = rows.instance_from_row(row)
    if stored.vm_state == DELETED and instance.vm_state != DELETED:
        raise InstanceStateConflict(instance.uuid, DELETED, instance.vm_state,
                                    "deleted is final")
    return stored


def _release(conn: sa.Connection, node_uuids: Collection[str], consumer_uuids: Collection[str],
             instance: Instance | None = None,
             migration_status: MigrationStatus | None = None,
             transfer: tuple[str, str] | None = None) -> dict[str, ComputeNode]:
    """The statements of :meth:`Store.release`, on ``conn`` inside its transaction."""
    now = time.time()
    for node_uuid in node_uuids:
        provider_rows.delete_allocations(conn, sa.and_(
            T_ALLOC.c.node_uuid == node_uuid,
            T_ALLOC.c.consumer_uuid.in_(list(consumer_uuids))), now)
    if transfer is not None:
        # The destination's row is locked while its owner is read: an audit
        # adopting that node meanwhile either waits for this transaction (and
        # then carries the instance) or has committed (and its host is read).
        query = sa.select(T_NODES.c.host, T_NODES.c.nodename).where(
            T_NODES.c.uuid.in_(sa.select(T_ALLOC.c.node_uuid).where(
                T_ALLOC.c.consumer_uuid == transfer[0])))
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()
        target = conn.execute(query).first()
        conn.execute(T_ALLOC.update().where(T_ALLOC.c.consumer_uuid == transfer[0])
                     .values(consumer_uuid=transfer[1], consumer_type="instance"))
        if target is not None and instance is not None:
            # The destination as recorded now: its node may have moved to
            # another host since the caller read the migration.
            instance = attrs.evolve(instance, host=target.host, node=target.nodename)
    if instance is not None:
        rows.upsert_instance(conn, instance, now)
    statuses = migration_status or []
    if isinstance(statuses, tuple):
        statuses = [statuses]
    for mig_uuid, status in statuses:
        if not conn.execute(T_MIG.update().where(
                T_MIG.c.uuid == mig_uuid, holds_sql.migration_holds())
                .values(status=status, updated_at=now)).rowcount:
            found = conn.execute(sa.select(T_MIG.c.status).where(
                T_MIG.c.uuid == mig_uuid)).scalar()
            raise InvalidInput(
                f"Migration {mig_uuid} is no longer in progress ({found or 'no record'}); "
                f"it cannot become {status!r} and nothing changed")
    fresh = {}
    for node_uuid in sorted(node_uuids):
        conn.execute(T_NODES.update().where(T_NODES.c.uuid == node_uuid)
                     .values(generation=T_NODES.c.generation + 1))
        fresh[node_uuid] = rows.load_node(conn, node_uuid)
    return fresh

