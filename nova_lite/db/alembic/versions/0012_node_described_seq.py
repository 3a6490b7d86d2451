"""Where a node's description last changed, kept by triggers: compute_nodes.described_seq.

A node's record is its description (its row's report, host, name, reported
flag and last error, and its inventories) and its usage (summed from its
allocations).  A claim changes only the usage, yet moves the node's
generation, and so its ``change_seq``: a reader that follows the change
sequence read the whole node again, report and inventories included.

``compute_nodes.described_seq`` (BIGINT) takes the value the change
sequence takes (revision 0010: the writing transaction's id on
PostgreSQL, the next value of ``change_counter`` on SQLite) whenever the
description changes: on insert, on a change of ``resources``, ``host``,
``nodename``, ``reported`` or ``last_error``, and on any insert, update or
delete of the node's inventory rows; ``change_seq`` moves with it, so a
change of the description alone (a last error recorded or cleared) is
seen by the readers too.  Triggers write both, in the statement that
makes the change, so no writing path can forget them.  A reader whose
last look had mark M, seeing a changed node with ``described_seq < M``,
holds its description already (every transaction at or past M was
invisible to that look, and one before it was visible) and reads only the
node's usage and generation again.

Existing rows get the upgrading transaction's value (PostgreSQL) or the
next counter value (SQLite), so a reader reads each of them whole once.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SQLITE_NEXT = "UPDATE change_counter SET value = value + 1 WHERE id = 1;"
_SQLITE_VALUE = "(SELECT value FROM change_counter WHERE id = 1)"
#: The node columns of its description (the inventories are the rest).
_DESCRIPTION = ("resources", "host", "nodename", "reported", "last_error")


def _sqlite_changed(old: str, new: str) -> str:
    return " OR ".join(f"{old}.{c} IS NOT {new}.{c}" for c in _DESCRIPTION)


def _sqlite_inventory_trigger(event: str, row: str) -> str:
    return f"""CREATE TRIGGER inventories_described_{event.lower()}
    AFTER {event} ON inventories
    BEGIN
        {_SQLITE_NEXT}
        UPDATE compute_nodes SET described_seq = {_SQLITE_VALUE}, change_seq = {_SQLITE_VALUE}
            WHERE uuid = {row}.node_uuid;
    END"""


_SQLITE = [
    f"""CREATE TRIGGER compute_nodes_described_insert AFTER INSERT ON compute_nodes
    BEGIN
        {_SQLITE_NEXT}
        UPDATE compute_nodes SET described_seq = {_SQLITE_VALUE} WHERE id = NEW.id;
    END""",
    f"""CREATE TRIGGER compute_nodes_described_update
    AFTER UPDATE OF {", ".join(_DESCRIPTION)} ON compute_nodes
    WHEN {_sqlite_changed("OLD", "NEW")}
    BEGIN
        {_SQLITE_NEXT}
        UPDATE compute_nodes SET described_seq = {_SQLITE_VALUE}, change_seq = {_SQLITE_VALUE}
            WHERE id = NEW.id;
    END""",
    _sqlite_inventory_trigger("INSERT", "NEW"),
    _sqlite_inventory_trigger("UPDATE", "NEW"),
    _sqlite_inventory_trigger("DELETE", "OLD"),
]

_PG_XID = "pg_current_xact_id()::text::bigint"


def _pg_inventory_trigger(event: str, tables: str, nodes: str) -> str:
    return f"""CREATE TRIGGER inventories_described_{event.lower()}
    AFTER {event} ON inventories REFERENCING {tables} FOR EACH STATEMENT
    EXECUTE FUNCTION nova_lite_inventories_described_{nodes}()"""


def _pg_inventory_function(name: str, touched: str) -> str:
    # One UPDATE per statement, and none of a node already at this
    # transaction's value: an audit writing several inventory rows of a
    # node leaves one new version of the node's row, not one per row.
    return f"""CREATE FUNCTION nova_lite_inventories_described_{name}() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE compute_nodes SET described_seq = {_PG_XID}, change_seq = {_PG_XID}
            WHERE uuid IN ({touched}) AND described_seq IS DISTINCT FROM {_PG_XID};
        RETURN NULL;
    END $$"""


_POSTGRESQL = [
    f"""CREATE FUNCTION nova_lite_described_seq() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.described_seq := {_PG_XID};
        NEW.change_seq := {_PG_XID};
        RETURN NEW;
    END $$""",
    _pg_inventory_function("new", "SELECT node_uuid FROM new_rows"),
    _pg_inventory_function("old", "SELECT node_uuid FROM old_rows"),
    _pg_inventory_function(
        "both", "SELECT node_uuid FROM new_rows UNION SELECT node_uuid FROM old_rows"),
    """CREATE TRIGGER compute_nodes_described_insert BEFORE INSERT ON compute_nodes
    FOR EACH ROW EXECUTE FUNCTION nova_lite_described_seq()""",
    f"""CREATE TRIGGER compute_nodes_described_update
    BEFORE UPDATE OF {", ".join(_DESCRIPTION)} ON compute_nodes FOR EACH ROW
    WHEN ({" OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in _DESCRIPTION)})
    EXECUTE FUNCTION nova_lite_described_seq()""",
    _pg_inventory_trigger("INSERT", "NEW TABLE AS new_rows", "new"),
    _pg_inventory_trigger("UPDATE", "NEW TABLE AS new_rows OLD TABLE AS old_rows", "both"),
    _pg_inventory_trigger("DELETE", "OLD TABLE AS old_rows", "old"),
]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("compute_nodes", sa.Column("described_seq", sa.BigInteger, nullable=False,
                                             server_default="0"))
    if dialect == "postgresql":
        op.execute(f"UPDATE compute_nodes SET described_seq = {_PG_XID}")
        statements = _POSTGRESQL
    else:
        op.execute(_SQLITE_NEXT)
        op.execute(f"UPDATE compute_nodes SET described_seq = {_SQLITE_VALUE}")
        statements = _SQLITE
    for statement in statements:
        op.execute(statement)
