"""The database server's own settings that work against a fleet, as advice.

nova-lite cannot change a server's settings, but some of them decide how
it runs: PostgreSQL without autovacuum (or without ``track_counts``, which
autovacuum needs) never refreshes the planner's statistics of tables that
grew from empty, and a connection's prepared statements then keep plans
made for empty tables (a full read of a table in every service's pass),
while the dead row versions of the heartbeats pile up.  Every long-running
process logs each :class:`ServerAdvice` at WARNING when it starts
(:func:`log_server_advice`): a compute service, ``nova-lite api serve`` and
``nova-lite metrics serve``.
"""

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import sqlalchemy as sa

from nova_lite.exception import NovaLiteError

if TYPE_CHECKING:
    from nova_lite.db.store import Store

#: The PostgreSQL settings read (``pg_settings``).
SETTINGS = ("autovacuum", "track_counts")


@attrs.frozen
class ServerAdvice:
    """One server setting that works against nova-lite: its name, its value
    as the server shows it, and what to do about it."""

    setting: str
    value: str
    advice: str

    def __str__(self) -> str:
        return f"{self.setting} = {self.value}: {self.advice}"


def advice_for(settings: Mapping[str, str]) -> list[ServerAdvice]:
    """The advice for PostgreSQL ``settings`` (name to value, as
    ``pg_settings`` shows them; a setting missing is not judged)."""
    out = []
    for name in SETTINGS:
        if settings.get(name) == "off":
            out.append(ServerAdvice(name, "off", (
                "turn it on (PostgreSQL's default); without it the planner's statistics "
                "of the record tables never change as the fleet grows, prepared "
                "statements keep plans made for empty tables, and the heartbeats' dead "
                "rows are never vacuumed.  If it must stay off, run VACUUM (ANALYZE) on "
                "the database after the fleet grows and every few minutes after")
                if name == "autovacuum" else (
                "turn it on (PostgreSQL's default): autovacuum needs it, so without it "
                "nothing refreshes the planner's statistics or vacuums the heartbeats' "
                "dead rows")))
    return out


def server_advice(conn: sa.Connection) -> list[ServerAdvice]:
    """The advice for the server ``conn`` is on: none for SQLite (an embedded
    file has no server settings of this kind)."""
    if conn.dialect.name != "postgresql":
        return []
    found = conn.execute(sa.text("SELECT name, setting FROM pg_settings "
                                 "WHERE name IN :names").bindparams(
        sa.bindparam("names", expanding=True)), {"names": list(SETTINGS)}).all()
    return advice_for(dict(found))


def log_server_advice(store: "Store", who: str, log: logging.Logger) -> list[ServerAdvice]:
    """Log each advice for ``store``'s server on ``log`` at WARNING, as
    ``Database server of <who>: <advice>``; returns them.

    A database that cannot be read now is not reported here (DEBUG): the
    process's first statement on it reports that as it would anyway.
    """
    try:
        found = store.server_advice()
    except NovaLiteError as exc:
        log.debug("Could not read the database server's settings: %s", exc)
        return []
    for advice in found:
        log.warning("Database server of %s: %s", who, advice)
    return found


__all__ = ["SETTINGS", "ServerAdvice", "advice_for", "log_server_advice", "server_advice"]
