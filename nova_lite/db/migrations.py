"""Schema migrations, with alembic.

The revisions live in ``nova_lite/db/alembic/versions``; the first one is
the schema of nova-lite 0.1.0, frozen.  A schema change is a new revision
written by hand (``alembic revision`` with the ``script.py.mako`` there);
a released revision never changes.

Before alembic, nova-lite 0.1.0 recorded numbered steps (1 to 3) in a
``schema_version`` table.  Such a database is adopted by :func:`upgrade`:
its missing steps are applied, it is stamped with revision ``0001`` (the
same schema) and the old table is dropped; then the newer revisions run.

:func:`upgrade` runs everything in one transaction, serialised across
processes (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL),
so concurrent first starts and ``nova-lite db sync`` runs are safe.
"""

import functools
import logging
import os

import attrs
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from nova_lite.exception import UnknownSchema

LOG = logging.getLogger(__name__)

_SCRIPT_LOCATION = os.path.join(os.path.dirname(__file__), "alembic")

#: The revision a database of the pre-alembic numbered schema (step 3) equals.
LEGACY_REVISION = "0001"
#: The last numbered step nova-lite 0.1.0 knew.
LEGACY_LATEST = 3
_LEGACY_TABLE = "schema_version"
_ALEMBIC_TABLE = "alembic_version"
_NOVA_LITE_TABLES = ("services", "compute_nodes", "inventories", "instances",
                     "migrations", "allocations")

# Any constant works; it only has to be the same in every nova-lite process.
_PG_MIGRATION_LOCK = 0x6E6F7661


@attrs.frozen
class Revision:
    """One schema revision: its id and what it changes."""

    revision: str
    description: str


@attrs.frozen
class SchemaState:
    """Where a database's schema stands against this nova-lite's revisions.

    ``revision`` is the alembic revision recorded in the database (None
    when there is none); ``legacy_version`` is the numbered step of a
    database made before alembic (None otherwise); ``head`` is the newest
    revision this nova-lite knows; ``pending`` lists the revisions an
    upgrade would apply, oldest first.
    """

    revision: str | None
    legacy_version: int | None
    head: str
    pending: tuple[Revision, ...]
    empty: bool

    @property
    def current(self) -> bool:
        """True when the schema is exactly this nova-lite's."""
        return self.revision == self.head and self.legacy_version is None

    @property
    def newer(self) -> bool:
        """True when the database has a revision this nova-lite does not know."""
        return self.revision is not None and not _known(self.revision)

    def describe(self) -> str:
        """The recorded revision in words, e.g. ``0001`` or ``legacy step 2``."""
        if self.legacy_version is not None:
            return f"legacy step {self.legacy_version} (before alembic)"
        if self.revision is None:
            return "empty (no schema)"
        return self.revision


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", _SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


@functools.lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision this nova-lite knows."""
    current = _script().get_current_head()
    if current is None:   # the package's revision scripts are missing
        raise UnknownSchema(f"no schema revision found in {_SCRIPT_LOCATION}")
    return current


def _known(revision: str) -> bool:
    try:
        return _script().get_revision(revision) is not None
    except Exception:   # alembic raises several kinds for an unknown id
        return False


def revisions() -> tuple[Revision, ...]:
    """Every revision this nova-lite knows, oldest first."""
    walked = list(_script().walk_revisions("base", "heads"))
    return tuple(Revision(script.revision, _description(script)) for script in reversed(walked))


def _description(script: Script) -> str:
    doc = (script.doc or "").strip()
    return " ".join(doc.split())


def _pending(revision: str | None) -> tuple[Revision, ...]:
    known = revisions()
    if revision is None:
        return known
    ids = [r.revision for r in known]
    if revision not in ids:
        return ()
    return known[ids.index(revision) + 1:]


def empty_state() -> SchemaState:
    """The state of a database with no schema yet."""
    return SchemaState(revision=None, legacy_version=None, head=head(), pending=revisions(),
                       empty=True)


def schema_state(conn: sa.Connection) -> SchemaState:
    """Read where the schema of the database behind ``conn`` stands."""
    inspector = sa.inspect(conn)
    tables = set(inspector.get_table_names())
    revision = None
    legacy = None
    if _ALEMBIC_TABLE in tables:
        revision = conn.execute(sa.text(f"SELECT version_num FROM {_ALEMBIC_TABLE}")).scalar()
    elif _LEGACY_TABLE in tables:
        legacy = conn.execute(sa.text(f"SELECT max(version) FROM {_LEGACY_TABLE}")).scalar() \
            or 0
    empty = not (tables & (set(_NOVA_LITE_TABLES) | {_ALEMBIC_TABLE, _LEGACY_TABLE}))
    if revision is None and legacy is None and not empty:
        raise UnknownSchema(
            f"the database has nova-lite tables ({', '.join(sorted(tables))}) but no "
            "recorded schema revision; it was not made by nova-lite, or its "
            f"{_ALEMBIC_TABLE} table was lost")
    if legacy is not None:
        pending = _pending(LEGACY_REVISION)
        if legacy < LEGACY_LATEST:
            pending = (Revision("legacy", f"numbered steps {legacy + 1} to "
                                f"{LEGACY_LATEST}"),) + pending
    else:
        pending = _pending(revision)
    return SchemaState(revision=revision, legacy_version=legacy, head=head(),
                       pending=pending, empty=empty)


def _serialise(conn: sa.Connection) -> None:
    # SQLite transactions here start with BEGIN IMMEDIATE already; on
    # PostgreSQL concurrent first starts must not race on CREATE TABLE.
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})


def _columns(conn: sa.Connection, table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(conn).get_columns(table)}


def _adopt_legacy(conn: sa.Connection, version: int) -> None:
    """Bring a pre-alembic database to step 3 and stamp it as revision 0001."""
    LOG.info("Adopting a schema of numbered step %d (before alembic) as revision %s",
             version, LEGACY_REVISION)
    if "reported" not in _columns(conn, "compute_nodes"):
        conn.execute(sa.text("ALTER TABLE compute_nodes ADD COLUMN reported BOOLEAN "
                             "NOT NULL DEFAULT TRUE"))
    if "disabled_reason" not in _columns(conn, "services"):
        conn.execute(sa.text("ALTER TABLE services ADD COLUMN disabled_reason VARCHAR(255)"))
    MigrationContext.configure(conn).stamp(_script(), LEGACY_REVISION)
    conn.execute(sa.text(f"DROP TABLE {_LEGACY_TABLE}"))


def upgrade_connection(conn: sa.Connection, revision: str = "head") -> None:
    """Upgrade the schema on ``conn``, inside the caller's transaction."""
    _serialise(conn)
    state = schema_state(conn)
    if state.newer:
        raise UnknownSchema(
            f"the database has schema revision {state.revision}, which this nova-lite "
            f"does not know (its newest is {state.head}): it was upgraded by a newer "
            "nova-lite")
    if state.legacy_version is not None:
        _adopt_legacy(conn, state.legacy_version)
    if state.pending:
        LOG.info("Upgrading the database schema from %s to %s", state.describe(), revision)
    command.upgrade(_config(conn), revision)


def upgrade(engine: sa.Engine, revision: str = "head") -> str | None:
    """Apply every pending revision in one transaction; returns the resulting revision."""
    with engine.begin() as conn:
        upgrade_connection(conn, revision)
    with engine.connect() as conn:
        return schema_state(conn).revision
