"""Schema migrations: numbered steps, applied in order, recorded in the database.

Every schema change is a new step appended to :data:`STEPS`; a step never
changes once released.  ``upgrade`` is idempotent and safe to run from
several processes at once (each step runs in one transaction).
"""

import logging

import sqlalchemy as sa

from nova_lite.db import models

LOG = logging.getLogger(__name__)


def _initial_schema(conn):
    models.metadata.create_all(conn, checkfirst=True)


def _node_reported(conn):
    columns = {c["name"] for c in sa.inspect(conn).get_columns("compute_nodes")}
    if "reported" not in columns:
        conn.execute(sa.text("ALTER TABLE compute_nodes ADD COLUMN reported BOOLEAN "
                             "NOT NULL DEFAULT TRUE"))


def _service_disabled_reason(conn):
    columns = {c["name"] for c in sa.inspect(conn).get_columns("services")}
    if "disabled_reason" not in columns:
        conn.execute(sa.text("ALTER TABLE services ADD COLUMN disabled_reason VARCHAR(255)"))


#: (version, description, function(connection)) in order.
STEPS = (
    (1, "initial schema: services, compute_nodes, inventories, instances, "
        "migrations, allocations", _initial_schema),
    (2, "compute_nodes.reported: whether the driver still lists the node", _node_reported),
    (3, "services.disabled_reason: why an operator disabled the service",
     _service_disabled_reason),
)
LATEST = STEPS[-1][0]


def current_version(conn):
    """The schema version recorded in the database (0 for an empty one)."""
    if not sa.inspect(conn).has_table("schema_version"):
        return 0
    value = conn.execute(sa.select(sa.func.max(models.schema_version.c.version))).scalar()
    return value or 0


# Any constant works; it only has to be the same in every nova-lite process.
_PG_MIGRATION_LOCK = 0x6E6F7661


def _serialise(conn):
    # SQLite transactions here start with BEGIN IMMEDIATE already; on
    # PostgreSQL concurrent first starts must not race on CREATE TABLE.
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})


def upgrade(engine):
    """Apply every pending step; returns the resulting version."""
    with engine.begin() as conn:
        _serialise(conn)
        models.schema_version.create(conn, checkfirst=True)
    for version, description, step in STEPS:
        with engine.begin() as conn:
            _serialise(conn)
            if current_version(conn) >= version:
                continue
            LOG.info("Applying schema migration %d: %s", version, description)
            step(conn)
            conn.execute(models.schema_version.insert().values(version=version))
    with engine.connect() as conn:
        return current_version(conn)
