"""PostgreSQL: a statement that sets a node's change sequence itself skips its trigger.

Every change of a node's generation or host moves ``compute_nodes.change_seq``
to the writing transaction's id (revision 0010), by a ``BEFORE UPDATE``
trigger that calls a PL/pgSQL function for the row.  A claim changes the
generation, so every claim paid for that call: a few percent of the
server's CPU time of a claim.

From this revision the trigger fires only when the statement left
``change_seq`` as it was.  The claims' one-statement writes
(``nova_lite.db.claim_writes``) set it to the transaction's id themselves,
the value the trigger would have given, so the function is not called for
them; every other writer still moves it through the trigger, so no writing
path can forget it.  SQLite's triggers are unchanged.

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_MOVED = "(OLD.generation IS DISTINCT FROM NEW.generation OR OLD.host IS DISTINCT FROM NEW.host)"
_DROP = "DROP TRIGGER compute_nodes_change_seq_update ON compute_nodes"


def _create(when: str) -> str:
    return f"""CREATE TRIGGER compute_nodes_change_seq_update
    BEFORE UPDATE OF generation, host ON compute_nodes FOR EACH ROW
    WHEN ({when})
    EXECUTE FUNCTION nova_lite_change_seq()"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_DROP)
    op.execute(_create(f"{_MOVED} AND OLD.change_seq IS NOT DISTINCT FROM NEW.change_seq"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_DROP)
    op.execute(_create(_MOVED))
