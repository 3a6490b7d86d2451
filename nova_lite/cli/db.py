"""``nova-lite db sync|version|archive|purge``: the database schema, its
migrations, and the history archived out of the way."""

import argparse
import datetime
import logging

from nova_lite.cli.context import CliContext, CommandError
from nova_lite.cli.output import LinesColumn
from nova_lite.cli.node import CONFIRM_FLAG
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.db import archive, migrations
from nova_lite.db.engine import Database
from nova_lite.exception import BadArguments

LOG = logging.getLogger(__name__)

FIELDS = ("Database", "Revision", "Head", "Current", "Pending")
SYNC_FIELDS = ("Database", "Was", "Now", "Applied")
HISTORY_FIELDS = ("Table", "Rows")

#: ``db version``'s fields, in FIELDS' order.
VersionRow = tuple[str, str, str, bool, LinesColumn]
#: ``db sync``'s fields, in SYNC_FIELDS' order.
SyncRow = tuple[str, str, str, LinesColumn]
#: ``db archive``'s and ``db purge``'s rows, in HISTORY_FIELDS' order.
HistoryRow = tuple[str, int]


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
                  readonly=True, pooler=ctx.settings.database_pooler)
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


def parse_before(value: str, option: str = "--before") -> float:
    """An ISO 8601 date or date and time (``2026-01-31``, ``2026-01-31T12:00``,
    ``2026-01-31T12:00:00+02:00``; UTC unless it names an offset) as epoch
    seconds; :class:`~nova_lite.exception.BadArguments` naming ``option`` otherwise."""
    try:
        when = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        raise BadArguments(
            f"{option} {value!r} is not an ISO 8601 date or date and time (for example "
            "2026-01-31 or 2026-01-31T12:00:00Z); nothing was changed") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _history_rows(counts: list[archive.TableCount]) -> list[HistoryRow]:
    return [(c.table, c.rows) for c in counts]


class ArchiveDeletedRows(Lister):
    """Move deleted instances and finished migrations into the shadow tables.

    An instance moves when its vm_state is deleted, it holds no allocation
    (a leaked one keeps it) and has no migration in progress; a migration
    when its status is final, it holds no allocation and its instance is
    deleted or already archived.  Rows move in batches of --max-rows, each
    its own transaction, until none is left.  Rows gives, per table, how
    many moved (with --dry-run: would move; nothing is written).
    """

    columns = HISTORY_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--before", metavar="DATE",
            help="Only rows last updated before DATE (ISO 8601 date or date and time, UTC "
                 "unless it names an offset). Default: every row that may move.")
        parser.add_argument(
            "--max-rows", metavar="N", default="1000",
            help="The most rows one batch (one transaction) moves. Default: 1000.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Count the rows that would move; change nothing.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[HistoryRow]]:
        before = None if parsed_args.before is None else parse_before(parsed_args.before)
        try:
            max_rows = int(parsed_args.max_rows)
        except ValueError:
            max_rows = 0
        if max_rows < 1:
            raise BadArguments(f"--max-rows {parsed_args.max_rows!r} must be an integer "
                               ">= 1; nothing was changed")
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=parsed_args.dry_run)
        return HISTORY_FIELDS, _history_rows(store.archive_deleted_rows(
            before=before, max_rows=max_rows, dry_run=parsed_args.dry_run))


class PurgeArchivedRows(Lister):
    """Delete for good the rows 'db archive' moved into the shadow tables.

    --before DATE deletes the rows archived before DATE, --all every
    archived row; one of them is required, and so is --yes-i-really-mean-it
    (unless --dry-run): what it deletes cannot be brought back.  Rows
    gives, per shadow table, how many were deleted (with --dry-run: would
    be; nothing is written).
    """

    columns = HISTORY_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument(
            "--before", metavar="DATE",
            help="Only rows archived before DATE (ISO 8601 date or date and time, UTC "
                 "unless it names an offset).")
        parser.add_argument("--all", action="store_true", help="Every archived row.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Count the rows that would be deleted; change nothing.")
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required unless --dry-run).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[HistoryRow]]:
        if parsed_args.all == (parsed_args.before is not None):
            raise BadArguments("db purge needs either --before DATE or --all (not both); "
                               "nothing was changed")
        before = None if parsed_args.all else parse_before(parsed_args.before)
        if not (parsed_args.confirmed or parsed_args.dry_run):
            raise BadArguments(f"Refusing to purge archived rows for good without "
                               f"{CONFIRM_FLAG} (or --dry-run to count them); nothing was "
                               "changed")
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=parsed_args.dry_run)
        return HISTORY_FIELDS, _history_rows(store.purge_archived_rows(
            before=before, dry_run=parsed_args.dry_run))
