"""``nova-lite db sync|version``: the database schema and its migrations."""

import argparse
import logging

from nova_lite.cli.context import CliContext, CommandError
from nova_lite.cli.output import LinesColumn
from nova_lite.cli.typed import ShowOne
from nova_lite.db import migrations
from nova_lite.db.engine import Database

LOG = logging.getLogger(__name__)

FIELDS = ("Database", "Revision", "Head", "Current", "Pending")
SYNC_FIELDS = ("Database", "Was", "Now", "Applied")

#: ``db version``'s fields, in FIELDS' order.
VersionRow = tuple[str, str, str, bool, LinesColumn]
#: ``db sync``'s fields, in SYNC_FIELDS' order.
SyncRow = tuple[str, str, str, LinesColumn]


def _pending(state: migrations.SchemaState) -> LinesColumn:
    """The revisions an upgrade would apply: text lines, and data for machines."""
    return LinesColumn(([f"{r.revision} ({r.description})" for r in state.pending],
                        [{"revision": r.revision, "description": r.description}
                         for r in state.pending]))


def read_schema_state(ctx: CliContext) -> migrations.SchemaState:
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


class DatabaseVersion(ShowOne):
    """Show the schema revision, this nova-lite's newest and what 'db sync' would apply.

    Current is true when the schema is this nova-lite's newest; Pending
    lists the revisions 'db sync' would apply (revision and description).
    Changes nothing; exit status 0 either way.
    """

    columns = FIELDS

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], VersionRow]:
        ctx = self.app.context()
        state = read_schema_state(ctx)
        return FIELDS, (ctx.database, state.describe(), state.head, state.current,
                        _pending(state))


class SyncDatabase(ShowOne):
    """Create or upgrade the database schema to this nova-lite's newest revision.

    Creates the schema of a new database, or upgrades an older one (a
    0.1.0 database of numbered steps is adopted).  Safe to run again and
    from several hosts at once; a database upgraded by a newer nova-lite is
    refused.  Applied lists the revisions applied (empty: already current).
    """

    columns = SYNC_FIELDS

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], SyncRow]:
        ctx = self.app.context()
        store = ctx.open_store(initialise=True)
        before = store.schema_before_open
        after = store.schema
        LOG.info("Database %s schema: %s -> %s", ctx.database, before.describe(),
                 after.describe())
        applied = [r.revision for r in before.pending]
        return SYNC_FIELDS, (ctx.database, before.describe(), after.describe(), LinesColumn(
            ([", ".join(applied) or "nothing (already current)"], applied)))
