"""Alembic environment of nova-lite's schema.

nova-lite always runs migrations on a connection it opened itself (see
:func:`nova_lite.db.migrations.upgrade`), inside a transaction that it holds,
so this environment needs no URL of its own and no logging set-up.
"""

from alembic import context

connection = context.config.attributes["connection"]
# SQLite cannot ALTER most columns in place: batch mode copies the table.
context.configure(connection=connection, render_as_batch=True,
                  transaction_per_migration=False)
with context.begin_transaction():
    context.run_migrations()
