"""``nova-lite db sync|version``: the database schema and its migrations."""

import logging

from cliff import show

from nova_lite.cli.context import CommandError
from nova_lite.db import migrations
from nova_lite.db.engine import Database

LOG = logging.getLogger(__name__)

FIELDS = ("Database", "Revision", "Head", "Current", "Pending")


def _pending(state):
    return ", ".join(f"{r.revision} ({r.description})" for r in state.pending) or "-"


def read_schema_state(ctx):
    """The :class:`~nova_lite.db.migrations.SchemaState` of the configured
    database, read without taking a write lock or changing anything."""
    ctx.require_database_file()
    db = Database(ctx.settings.database_url, busy_timeout_s=ctx.settings.database_busy_timeout,
                  readonly=True)
    try:
        return db.read("read schema revision", migrations.schema_state)
    except migrations.UnknownSchema as exc:
        raise CommandError(f"Database {ctx.database}: {exc}") from exc
    finally:
        db.dispose()


class DatabaseVersion(show.ShowOne):
    """Show the database's schema revision, this nova-lite's newest, and what
    'db sync' would apply. Changes nothing; exit status 0 either way."""

    def take_action(self, parsed_args):
        ctx = self.app.context()
        state = read_schema_state(ctx)
        return FIELDS, (ctx.database, state.describe(), state.head,
                        "yes" if state.current else "no", _pending(state))


class SyncDatabase(show.ShowOne):
    """Create the schema of a new database, or upgrade an older one to this
    nova-lite's newest revision (a 0.1.0 database of numbered steps is adopted).
    Safe to run again and from several hosts at once; a database upgraded by a
    newer nova-lite is refused."""

    def take_action(self, parsed_args):
        ctx = self.app.context()
        store = ctx.open_store(initialise=True)
        before = store.schema_before_open
        after = store.schema
        LOG.info("Database %s schema: %s -> %s", ctx.database, before.describe(),
                 after.describe())
        applied = ", ".join(r.revision for r in before.pending) or "nothing (already current)"
        return ("Database", "Was", "Now", "Applied"), (
            ctx.database, before.describe(), after.describe(), applied)
