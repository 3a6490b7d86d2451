"""The API's errors: one JSON shape, and database failures named without their URL.

Every failure is answered ``{"error": {"code": N, "title": ..., "message":
...}}``.  A database failure is a 503 whose message names the kind of
failure only (``"database unavailable: connection refused"``): the
database URL, or any part of it (user, host, port, database name, file
path, query parameters), never reaches a client; the full cause is logged
on the server at WARNING.
"""

import json
from collections.abc import Iterator
import sqlite3

from werkzeug import exceptions as http
from werkzeug.wrappers import Response

from nova_lite.exception import DatabaseBusy, SchemaOutdated

#: Longest quoted value an error message echoes back (characters).
MAX_ECHO = 80

#: (PostgreSQL SQLSTATE or its class prefix, what it means), first match wins.
_PG_STATES = (
    ("3D000", "the database does not exist"),
    ("28", "authentication failed"),
    ("42P01", "schema missing (run nova-lite db sync)"),
    ("42703", "schema does not match this nova-lite (run nova-lite db sync)"),
    ("55000", "the database is not accepting connections"),
    ("53", "the database server is out of resources"),
    ("57P", "the database server is shutting down or ended the connection"),
    ("08", "connection lost"),
)
#: (lower-case text in a driver's message, what it means), first match wins.
_TEXTS = (
    ("connection refused", "connection refused"),
    ("timeout expired", "connection timed out"),
    ("timed out", "connection timed out"),
    ("could not translate host name", "database host name not resolved"),
    ("name or service not known", "database host name not resolved"),
    ("no route to host", "no route to the database host"),
    ("server closed the connection", "connection lost"),
    ("connection is closed", "connection lost"),
    ("consuming input failed", "connection lost"),
    ("no such table", "schema missing (run nova-lite db sync)"),
    ("no such column", "schema does not match this nova-lite (run nova-lite db sync)"),
    ("unable to open database file", "cannot open the database file"),
    ("does not exist", "the database does not exist"),
    ("disk i/o error", "disk I/O error"),
    ("file is not a database", "the database file is corrupt"),
    ("malformed", "the database file is corrupt"),
    ("readonly database", "the database file is read-only"),
)


class BadQuery(http.BadRequest):
    """A query parameter that is unknown, repeated, empty or malformed (400)."""


class UnknownName(http.NotFound):
    """A host or node named in the request that no record knows (404)."""


def echo(value: object) -> str:
    """``repr(value)``, cut to :data:`MAX_ECHO` characters, for an error message."""
    text = repr(value)
    return text if len(text) <= MAX_ECHO else text[:MAX_ECHO - 4] + "...'"


def json_response(data: object, status: int = 200) -> Response:
    """``data`` as a JSON response (sorted keys, never cached)."""
    return Response(json.dumps(data, sort_keys=True) + "\n", status=status,
                    mimetype="application/json", headers={"Cache-Control": "no-store"})


def error_response(code: int, title: str, message: str) -> Response:
    """The JSON error body every failure gets."""
    return json_response({"error": {"code": code, "title": title, "message": message}}, code)


def _causes(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__


def database_failure(exc: BaseException) -> str:
    """What kind of database failure ``exc`` is, in words that name no part of the URL.

    ``exc`` is a :class:`~nova_lite.exception.StoreError` or a SQLAlchemy
    error; its chain of causes is read for the driver's error (its
    SQLSTATE on PostgreSQL, its text on SQLite).  A failure of no known
    kind is named by the driver's exception class only.
    """
    chain = list(_causes(exc))
    if any(isinstance(e, DatabaseBusy) for e in chain):
        return "database busy"
    if any(isinstance(e, SchemaOutdated) for e in chain):
        return "schema does not match this nova-lite (run nova-lite db sync)"
    driver = next((e for e in chain if isinstance(e, sqlite3.Error) or
                   type(e).__module__.split(".")[0] in ("psycopg", "psycopg2")), None)
    if driver is None:
        return f"database error ({type(chain[-1]).__name__})"
    state = getattr(driver, "sqlstate", None) or getattr(driver, "pgcode", None) or ""
    for prefix, meaning in _PG_STATES:
        if state.startswith(prefix):
            return meaning
    text = str(driver).lower()
    for needle, meaning in _TEXTS:
        if needle in text:
            return meaning
    return f"database error ({type(driver).__name__})"


__all__ = ["BadQuery", "UnknownName", "echo", "error_response", "json_response",
           "database_failure", "MAX_ECHO"]
