"""An indexed change sequence on the node and service rows, kept by triggers.

``compute_nodes.change_seq`` and ``services.change_seq`` (BIGINT, indexed)
move whenever a reader of the fleet (the scheduler, the API's node cache,
the metrics) must read the row again: a node on insert and on every change
of its generation or host; a service on insert and on every change of
``disabled`` or ``disabled_reason``, never on a heartbeat (its update stays
a PostgreSQL HOT update).  Deleting a row leaves a tombstone in
``node_deletions`` or ``service_deletions`` (kept an hour, pruned by the
deleting statement).  Triggers of the database write all of it, in the
statement that makes the change, so no writing path can forget it.

- PostgreSQL: the value is the writing transaction's id
  (``pg_current_xact_id()``, 64 bits, never wraps).  A reader remembers the
  ``xmin`` of a snapshot taken before its read and next asks for
  ``change_seq >= xmin``: a transaction it could not see has an id at
  least that, whenever it commits.
- SQLite: writers are serialised; the value is the next value of the
  one-row ``change_counter`` table (it never goes back, whatever is deleted).

Existing rows get the upgrading transaction's value (PostgreSQL) or 1
(SQLite); a reader starts with a full read anyway.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

#: Tombstones are kept this long (s).
_KEEP_S = 3600

_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_SQLITE_NEXT = "UPDATE change_counter SET value = value + 1 WHERE id = 1;"
_SQLITE_VALUE = "(SELECT value FROM change_counter WHERE id = 1)"

_SQLITE = [
    f"""CREATE TRIGGER compute_nodes_change_seq_insert AFTER INSERT ON compute_nodes
    BEGIN
        {_SQLITE_NEXT}
        UPDATE compute_nodes SET change_seq = {_SQLITE_VALUE} WHERE id = NEW.id;
    END""",
    f"""CREATE TRIGGER compute_nodes_change_seq_update
    AFTER UPDATE OF generation, host ON compute_nodes
    WHEN OLD.generation IS NOT NEW.generation OR OLD.host IS NOT NEW.host
    BEGIN
        {_SQLITE_NEXT}
        UPDATE compute_nodes SET change_seq = {_SQLITE_VALUE} WHERE id = NEW.id;
    END""",
    f"""CREATE TRIGGER compute_nodes_deleted AFTER DELETE ON compute_nodes
    BEGIN
        {_SQLITE_NEXT}
        DELETE FROM node_deletions WHERE deleted_at < {_SQLITE_NOW} - {_KEEP_S};
        INSERT INTO node_deletions (change_seq, uuid, deleted_at)
            VALUES ({_SQLITE_VALUE}, OLD.uuid, {_SQLITE_NOW});
    END""",
    f"""CREATE TRIGGER services_change_seq_insert AFTER INSERT ON services
    BEGIN
        {_SQLITE_NEXT}
        UPDATE services SET change_seq = {_SQLITE_VALUE} WHERE id = NEW.id;
    END""",
    f"""CREATE TRIGGER services_change_seq_update
    AFTER UPDATE OF disabled, disabled_reason, host, binary ON services
    WHEN OLD.disabled IS NOT NEW.disabled OR OLD.disabled_reason IS NOT NEW.disabled_reason
        OR OLD.host IS NOT NEW.host OR OLD.binary IS NOT NEW.binary
    BEGIN
        {_SQLITE_NEXT}
        UPDATE services SET change_seq = {_SQLITE_VALUE} WHERE id = NEW.id;
    END""",
    f"""CREATE TRIGGER services_deleted AFTER DELETE ON services
    BEGIN
        {_SQLITE_NEXT}
        DELETE FROM service_deletions WHERE deleted_at < {_SQLITE_NOW} - {_KEEP_S};
        INSERT INTO service_deletions (change_seq, host, binary, deleted_at)
            VALUES ({_SQLITE_VALUE}, OLD.host, OLD.binary, {_SQLITE_NOW});
    END""",
]

_PG_XID = "pg_current_xact_id()::text::bigint"
_PG_NOW = "extract(epoch from clock_timestamp())"

_POSTGRESQL = [
    f"""CREATE FUNCTION nova_lite_change_seq() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.change_seq := {_PG_XID};
        RETURN NEW;
    END $$""",
    f"""CREATE FUNCTION nova_lite_nodes_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM node_deletions WHERE deleted_at < {_PG_NOW} - {_KEEP_S};
        INSERT INTO node_deletions (change_seq, uuid, deleted_at)
            SELECT {_PG_XID}, gone.uuid, {_PG_NOW} FROM gone;
        RETURN NULL;
    END $$""",
    f"""CREATE FUNCTION nova_lite_services_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM service_deletions WHERE deleted_at < {_PG_NOW} - {_KEEP_S};
        INSERT INTO service_deletions (change_seq, host, "binary", deleted_at)
            SELECT {_PG_XID}, gone.host, gone."binary", {_PG_NOW} FROM gone;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER compute_nodes_change_seq_insert BEFORE INSERT ON compute_nodes
    FOR EACH ROW EXECUTE FUNCTION nova_lite_change_seq()""",
    """CREATE TRIGGER compute_nodes_change_seq_update
    BEFORE UPDATE OF generation, host ON compute_nodes FOR EACH ROW
    WHEN (OLD.generation IS DISTINCT FROM NEW.generation OR OLD.host IS DISTINCT FROM NEW.host)
    EXECUTE FUNCTION nova_lite_change_seq()""",
    """CREATE TRIGGER compute_nodes_deleted AFTER DELETE ON compute_nodes
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION nova_lite_nodes_deleted()""",
    """CREATE TRIGGER services_change_seq_insert BEFORE INSERT ON services
    FOR EACH ROW EXECUTE FUNCTION nova_lite_change_seq()""",
    """CREATE TRIGGER services_change_seq_update
    BEFORE UPDATE OF disabled, disabled_reason, host, "binary" ON services FOR EACH ROW
    WHEN (OLD.disabled IS DISTINCT FROM NEW.disabled
          OR OLD.disabled_reason IS DISTINCT FROM NEW.disabled_reason
          OR OLD.host IS DISTINCT FROM NEW.host OR OLD."binary" IS DISTINCT FROM NEW."binary")
    EXECUTE FUNCTION nova_lite_change_seq()""",
    """CREATE TRIGGER services_deleted AFTER DELETE ON services
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION nova_lite_services_deleted()""",
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table in ("compute_nodes", "services"):
        op.add_column(table, sa.Column("change_seq", sa.BigInteger, nullable=False,
                                       server_default="0"))
        op.create_index(f"{table}_change_seq_idx", table, ["change_seq"])
    op.create_table(
        "node_deletions",
        sa.Column("change_seq", sa.BigInteger, primary_key=True),
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("deleted_at", sa.Float, nullable=False),
    )
    op.create_index("node_deletions_deleted_at_idx", "node_deletions", ["deleted_at"])
    op.create_table(
        "service_deletions",
        sa.Column("change_seq", sa.BigInteger, primary_key=True),
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("binary", sa.String(255), primary_key=True),
        sa.Column("deleted_at", sa.Float, nullable=False),
    )
    op.create_index("service_deletions_deleted_at_idx", "service_deletions", ["deleted_at"])
    op.create_table(
        "change_counter",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO change_counter (id, value) VALUES (1, 1)")
    value = _PG_XID if dialect == "postgresql" else "1"
    for table in ("compute_nodes", "services"):
        op.execute(f"UPDATE {table} SET change_seq = {value}")
    for statement in (_POSTGRESQL if dialect == "postgresql" else _SQLITE):
        op.execute(statement)
