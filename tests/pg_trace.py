"""What the client sends PostgreSQL, from libpq's own trace: messages and round trips.

:func:`client_messages` runs a function with libpq's trace on the store's
connections (the one its next direct transaction takes, and any its
engine's pool hands out meanwhile) and returns the protocol messages the
client sent.  :func:`round_trips` counts the waits for the server among
them: one ends with each ``Sync`` (extended protocol, a pipeline's or a
statement's) and each ``Query`` (simple protocol).
"""

import tempfile

from sqlalchemy import event


def client_messages(store, fn):
    """The messages the client sent PostgreSQL while ``fn()`` ran on ``store``'s
    connections: ``[(type, detail), ...]`` (``Parse``, ``Execute``, ``Sync``,
    ``Query``, ...), in the order libpq wrote them."""
    proxy, dbapi = store.db._held.take()
    store.db._held.give_back(proxy, dbapi)   # on top: the next one taken
    engine = store.db.engine
    with tempfile.TemporaryFile("w+") as trace:
        traced = [dbapi]

        def checked_out(dbapi_connection, record, proxy):
            dbapi_connection.pgconn.trace(trace.fileno())
            traced.append(dbapi_connection)

        dbapi.pgconn.trace(trace.fileno())
        event.listen(engine, "checkout", checked_out)
        try:
            fn()
        finally:
            event.remove(engine, "checkout", checked_out)
            for connection in traced:
                if not connection.closed:
                    connection.pgconn.untrace()
        trace.seek(0)
        lines = [line.rstrip("\n").split("\t") for line in trace]
    return [(f[3], "\t".join(f[4:])) for f in lines if len(f) > 3 and f[1] == "F"]


def round_trips(messages):
    """How many times the client waited for the server's answer in ``messages``."""
    return sum(1 for kind, _ in messages if kind in ("Sync", "Query"))
