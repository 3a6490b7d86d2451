"""The record tables (SQLAlchemy Core), with Nova's keys.

- ``services``: one row per (host, binary), with a heartbeat.
- ``compute_nodes``: one row per (host, nodename), a stable ``uuid`` and a
  ``generation`` bumped by every change to its inventory or allocations.
- ``inventories``: one row per (node, resource class).
- ``instances``, ``migrations``: what consumes resources.
- ``allocations``: what each consumer holds on a node (one row per
  consumer and node); usage is their sum.
- ``node_usage``: that sum as a claim last recorded it, for one generation.
- ``tasks``: work addressed to a host, taken by its compute service
  (:mod:`nova_lite.work`).
- ``aggregates``, ``aggregate_hosts``, ``aggregate_metadata``: Nova's host
  aggregates, their member hosts and their metadata (the key
  ``availability_zone`` makes an aggregate an availability zone).
- ``shadow_instances``, ``shadow_migrations``: history archived out of
  ``instances`` and ``migrations`` (the same columns, plus ``archived_at``).
- ``node_deletions``, ``service_deletions``, ``change_counter``: the change
  sequence the fleet's readers follow (see :mod:`nova_lite.db.queries`).

``compute_nodes.change_seq`` and ``services.change_seq`` are written by
triggers of the database itself (revision 0010), never by nova-lite's own
statements, so no writer can forget them: a node's moves with every
change of its generation or host and on insert, a service's on insert and
on every change of ``disabled`` or ``disabled_reason`` (never on a
heartbeat); deleting either row leaves a tombstone.  The value is the
writing transaction's id on PostgreSQL and the next value of
``change_counter`` on SQLite.  ``compute_nodes.described_seq`` takes the
same kind of value whenever the node's description changes (its report,
host, name, reported flag or last error, or any of its inventory rows;
revision 0012), so a reader can tell a change of usage alone.

``services.updated_floor`` is the last heartbeat rounded down to a whole
:data:`HEARTBEAT_GRAIN_S` (epoch s), a column the database computes from
``updated_at`` (revision 0013).  The services that look down are found
by its index: it moves once a grain, so most heartbeats change no indexed
column (on PostgreSQL they stay HOT updates: no index entry, about half
the WAL, no bloat for vacuum to clean).

The moves in progress from and to each node have partial indexes of their
own (revision 0014), which hold those rows alone however long the history
of finished moves grows; a statement uses them when it names the statuses
as literals (:func:`in_progress_statuses`), as
``nova_lite.db.holds_sql.migration_holds`` does for every statement.
"""

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement, FunctionElement

from nova_lite.holds import MIGRATION_IN_PROGRESS

#: The width (s) of ``services.updated_floor``'s steps.  A service beating
#: every ``report_interval`` (10 s by default) moves it once in three beats,
#: and its floor is never older than ``report_interval`` plus a grain (40 s):
#: newer than the deadline of ``service_down_time`` (60 s), so the index's
#: range below the deadline holds the services down alone.
HEARTBEAT_GRAIN_S = 30

metadata = sa.MetaData()


class heartbeat_floor(FunctionElement[float]):  # noqa: N801 - a SQL function's name
    """``updated_at`` rounded down to a whole :data:`HEARTBEAT_GRAIN_S`, in
    each backend's SQL: ``floor()`` on PostgreSQL, an integer cast (which
    truncates: heartbeats are never before the epoch) on SQLite, whose
    builds need not have ``floor()``."""

    type = sa.Float()
    name = "heartbeat_floor"
    inherit_cache = True


@compiles(heartbeat_floor)
def _heartbeat_floor_default(element: heartbeat_floor, compiler: Any, **kw: Any) -> str:
    (column,) = element.clauses
    text = compiler.process(column, **kw)
    return f"floor({text} / {HEARTBEAT_GRAIN_S}) * {HEARTBEAT_GRAIN_S}"


@compiles(heartbeat_floor, "sqlite")
def _heartbeat_floor_sqlite(element: heartbeat_floor, compiler: Any, **kw: Any) -> str:
    (column,) = element.clauses
    text = compiler.process(column, **kw)
    return f"CAST({text} / {HEARTBEAT_GRAIN_S} AS INTEGER) * {HEARTBEAT_GRAIN_S}"


def _floor_of(column: str) -> ColumnElement[float]:
    return heartbeat_floor(sa.column(column))

services = sa.Table(
    "services", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("binary", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("report_count", sa.Integer, nullable=False, default=0),
    sa.Column("disabled", sa.Boolean, nullable=False, default=False),
    sa.Column("disabled_reason", sa.String(255)),
    # Written by the database's triggers (0010): see the module docstring.
    sa.Column("change_seq", sa.BigInteger, nullable=False, server_default="0"),
    # Computed by the database (0013): see the module docstring.
    sa.Column("updated_floor", sa.Float, sa.Computed(_floor_of("updated_at"), persisted=True)),
    sa.UniqueConstraint("host", "binary", name="uniq_services0host0binary"),
    sa.Index("services_change_seq_idx", "change_seq"),
    # The services that look down, which every pass reads (0013).
    sa.Index("services_binary_updated_floor_idx", "binary", "updated_floor"),
)

compute_nodes = sa.Table(
    "compute_nodes", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("uuid", sa.String(36), nullable=False, unique=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("nodename", sa.String(255), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("resources", sa.Text),          # last NodeResources, as JSON
    sa.Column("last_error", sa.Text),
    # False while the driver does not list the node: no claim is admitted.
    sa.Column("reported", sa.Boolean, nullable=False, default=True,
              server_default=sa.true()),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    # Written by the database's triggers (0010): see the module docstring.
    sa.Column("change_seq", sa.BigInteger, nullable=False, server_default="0"),
    # The change sequence's value when the description (this row's report,
    # host, name, reported flag, last error, or its inventories) last
    # changed; written by the database's triggers (0012).
    sa.Column("described_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.UniqueConstraint("host", "nodename", name="uniq_compute_nodes0host0nodename"),
    sa.Index("compute_nodes_change_seq_idx", "change_seq"),
)

#: A compute node row deleted (by any statement: the trigger writes it), at
#: ``change_seq``, ``deleted_at`` epoch s; pruned after an hour.
node_deletions = sa.Table(
    "node_deletions", metadata,
    sa.Column("change_seq", sa.BigInteger, primary_key=True),
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("deleted_at", sa.Float, nullable=False),
    sa.Index("node_deletions_deleted_at_idx", "deleted_at"),
)

#: A service row deleted, as ``node_deletions``.
service_deletions = sa.Table(
    "service_deletions", metadata,
    sa.Column("change_seq", sa.BigInteger, primary_key=True),
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("binary", sa.String(255), primary_key=True),
    sa.Column("deleted_at", sa.Float, nullable=False),
    sa.Index("service_deletions_deleted_at_idx", "deleted_at"),
)

#: SQLite's change sequence: one row whose ``value`` the triggers move by one
#: for each change (PostgreSQL uses transaction ids and leaves it alone).
change_counter = sa.Table(
    "change_counter", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("value", sa.BigInteger, nullable=False),
)

inventories = sa.Table(
    "inventories", metadata,
    sa.Column("node_uuid", sa.String(36), sa.ForeignKey("compute_nodes.uuid",
                                                        ondelete="CASCADE"),
              primary_key=True),
    sa.Column("resource_class", sa.String(255), primary_key=True),
    sa.Column("total", sa.BigInteger, nullable=False),
    sa.Column("reserved", sa.BigInteger, nullable=False),
    sa.Column("min_unit", sa.BigInteger, nullable=False),
    sa.Column("max_unit", sa.BigInteger),
    sa.Column("step_size", sa.BigInteger, nullable=False),
    sa.Column("allocation_ratio", sa.String(64), nullable=False),  # exact, "7/10"
)

instances = sa.Table(
    "instances", metadata,
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("host", sa.String(255)),
    sa.Column("node", sa.String(255)),
    sa.Column("vm_state", sa.String(255), nullable=False),
    sa.Column("task_state", sa.String(255)),
    sa.Column("project_id", sa.String(255), nullable=False, default=""),
    sa.Column("user_id", sa.String(255), nullable=False, default=""),
    sa.Column("flavor", sa.Text, nullable=False),
    sa.Column("numa_topology", sa.Text),
    sa.Column("pci_requests", sa.Text),
    sa.Column("pci_devices", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    # The zone it was built in (0008); NULL for rows written before.
    sa.Column("availability_zone", sa.String(255)),
    sa.Index("instances_host_node_idx", "host", "node"),
)

migrations = sa.Table(
    "migrations", metadata,
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("instance_uuid", sa.String(36), nullable=False, index=True),
    sa.Column("source_compute", sa.String(255), nullable=False),
    sa.Column("source_node", sa.String(255), nullable=False),
    sa.Column("dest_compute", sa.String(255), nullable=False),
    sa.Column("dest_node", sa.String(255), nullable=False),
    sa.Column("old_flavor", sa.Text, nullable=False),
    sa.Column("new_flavor", sa.Text, nullable=False),
    sa.Column("status", sa.String(255), nullable=False),
    sa.Column("migration_type", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    # The PCI requests claimed on the destination (0008): JSON, NULL: the
    # instance's own.
    sa.Column("new_pci_requests", sa.Text),
    # The moves into and out of a node, by status: the audit and the leak finder.
    sa.Index("migrations_dest_status_idx", "dest_compute", "dest_node", "status"),
    sa.Index("migrations_source_status_idx", "source_compute", "source_node", "status"),
)


def in_progress_statuses() -> list[ColumnElement[str]]:
    """The statuses of a move in progress (``nova_lite.holds.MIGRATION_IN_PROGRESS``),
    sorted, as SQL string literals: a condition ``status IN`` these is the
    predicate of the partial indexes below, and a statement that names them
    so (not as bound parameters) is one the database can prove reads only
    those rows, a prepared statement's generic plan included."""
    return [sa.literal_column(f"'{status}'", sa.String) for status in
            sorted(MIGRATION_IN_PROGRESS)]


# The moves in progress from and to each node (0014): a few rows, however
# long the history of finished moves grows.  A pass, the audit and heal look
# moves up by host this way on every pass.
for _end in ("source", "dest"):
    sa.Index(f"migrations_{_end}_in_progress_idx", migrations.c[f"{_end}_compute"],
             migrations.c[f"{_end}_node"],
             postgresql_where=migrations.c.status.in_(in_progress_statuses()),
             sqlite_where=migrations.c.status.in_(in_progress_statuses()))

#: The allocations a node's usage cannot be summed from in SQL alone.
EXTRAS_PREDICATE = ("other IS NOT NULL OR numa_topology IS NOT NULL OR pci_devices IS NOT NULL"
                    " OR providers IS NOT NULL")

allocations = sa.Table(
    "allocations", metadata,
    sa.Column("consumer_uuid", sa.String(36), primary_key=True),
    sa.Column("node_uuid", sa.String(36), sa.ForeignKey("compute_nodes.uuid",
                                                        ondelete="CASCADE"),
              primary_key=True),
    sa.Column("consumer_type", sa.String(16), nullable=False),   # instance | migration
    sa.Column("instance_uuid", sa.String(36), nullable=False, index=True),
    sa.Column("vcpu", sa.BigInteger, nullable=False, default=0),
    sa.Column("pcpu", sa.BigInteger, nullable=False, default=0),
    sa.Column("memory_mb", sa.BigInteger, nullable=False, default=0),
    sa.Column("disk_gb", sa.BigInteger, nullable=False, default=0),
    sa.Column("other", sa.Text),            # JSON {class: amount} for the rest
    sa.Column("flavor", sa.Text, nullable=False),
    sa.Column("numa_topology", sa.Text),
    sa.Column("pci_devices", sa.Text),
    sa.Column("created_at", sa.Float, nullable=False),
    # JSON {child provider name: {class: amount}}: the amounts of classes
    # only the node's children offer, by the child that holds them (not in
    # ``other``, which holds the node's own).
    sa.Column("providers", sa.Text),
    sa.Index("allocations_node_idx", "node_uuid"),
    # The few allocations a node's usage cannot be summed from in SQL alone.
    sa.Index("allocations_node_extras_idx", "node_uuid",
             postgresql_where=sa.text(EXTRAS_PREDICATE), sqlite_where=sa.text(EXTRAS_PREDICATE)),
)

#: A node's usage of the standard classes as of ``generation``, written by
#: the claims (see :mod:`nova_lite.db.claim_writes`).  Valid only while the
#: node is still at that generation: every other change to what a claim
#: decides on bumps it without touching this row, so a row left behind is
#: never trusted.
node_usage = sa.Table(
    "node_usage", metadata,
    sa.Column("node_uuid", sa.String(36), sa.ForeignKey("compute_nodes.uuid",
                                                        ondelete="CASCADE"),
              primary_key=True),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("vcpu", sa.BigInteger, nullable=False),
    sa.Column("pcpu", sa.BigInteger, nullable=False),
    sa.Column("memory_mb", sa.BigInteger, nullable=False),
    sa.Column("disk_gb", sa.BigInteger, nullable=False),
    # How many of the allocations have other classes, NUMA cells or PCI devices.
    sa.Column("extras", sa.Integer, nullable=False),
    # The generation since which the node changed only by claims that kept
    # this row current: what a claim decides on besides usage (inventories,
    # owner, reported flag) is as it was then (None: unknown).
    sa.Column("since", sa.Integer),
)

#: The child providers of each node (:mod:`nova_lite.providers`), as its
#: audit last recorded them: a tree under the compute node, each with its
#: own generation, moved by every change of its inventories, traits or
#: allocations.  ``parent_uuid`` is the node's uuid for a direct child.
resource_providers = sa.Table(
    "resource_providers", metadata,
    sa.Column("uuid", sa.String(36), primary_key=True),
    sa.Column("root_uuid", sa.String(36), sa.ForeignKey("compute_nodes.uuid",
                                                        ondelete="CASCADE"),
              nullable=False),
    sa.Column("parent_uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("inventories", sa.Text, nullable=False),   # JSON {class: inventory}
    sa.Column("traits", sa.Text, nullable=False),        # JSON list of names
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.UniqueConstraint("root_uuid", "name", name="uniq_resource_providers0root_uuid0name"),
)

#: Resource classes stored in their own allocation columns.
ALLOCATION_COLUMNS = {"VCPU": "vcpu", "PCPU": "pcpu", "MEMORY_MB": "memory_mb",
                      "DISK_GB": "disk_gb"}


# The findings of each host's last leak search, recorded by its compute service.
host_findings = sa.Table(
    "host_findings", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("recorded_at", sa.Float, nullable=False),
    # The host whose compute service searched (a live peer, for a host that is down).
    sa.Column("recorded_by", sa.String(255), nullable=False),
    # JSON: a list of finding objects (nova_lite.leaks.Finding as a dict).
    sa.Column("findings", sa.Text, nullable=False),
)


# Work addressed to a host (nova_lite.work.Task): recorded by whoever asks,
# taken and carried out by that host's compute service.
tasks = sa.Table(
    "tasks", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("instance_uuid", sa.String(36)),
    sa.Column("migration_uuid", sa.String(36)),
    sa.Column("params", sa.Text, nullable=False),        # JSON object
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("taken_by", sa.String(512)),
    sa.Column("lease_until", sa.Float),
    sa.Column("detail", sa.Text),
    sa.Column("result", sa.Text),                        # JSON object
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float),
    sa.Column("finished_at", sa.Float),
    sa.Index("tasks_host_state_idx", "host", "state", "id"),
    sa.Index("tasks_instance_state_idx", "instance_uuid", "state"),
)


# Nova's host aggregates (nova_lite.db.aggregates): a named group of hosts
# with metadata; the key "availability_zone" names the hosts' zone.
aggregates = sa.Table(
    "aggregates", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False, unique=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.UniqueConstraint("name", name="uniq_aggregate0name"),
)

aggregate_hosts = sa.Table(
    "aggregate_hosts", metadata,
    sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("aggregates.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("host", sa.String(255), primary_key=True),
    # A host's aggregates, for the scheduler and the zone of a host.
    sa.Index("aggregate_hosts_host_idx", "host"),
)

aggregate_metadata = sa.Table(
    "aggregate_metadata", metadata,
    sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("aggregates.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("value", sa.String(255), nullable=False),
    sa.Index("aggregate_metadata_key_idx", "key"),
)


def _shadow(table: sa.Table) -> sa.Table:
    """The shadow table of ``table``: its columns (no keys, no defaults), plus
    ``archived_at`` (epoch seconds) with an index for the purge."""
    name = f"shadow_{table.name}"
    cols = [sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
            for c in table.columns]
    return sa.Table(name, metadata, *cols,
                    sa.Column("archived_at", sa.Float, nullable=False),
                    sa.Index(f"{name}_archived_at_idx", "archived_at"))


#: Deleted instances archived by ``nova-lite db archive`` (see
#: :mod:`nova_lite.db.archive`), until ``nova-lite db purge`` removes them.
shadow_instances = _shadow(instances)
#: Finished migrations archived by ``nova-lite db archive``.
shadow_migrations = _shadow(migrations)
#: Finished tasks archived by ``nova-lite db archive``.
shadow_tasks = _shadow(tasks)
