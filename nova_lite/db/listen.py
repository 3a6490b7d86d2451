"""Waking a compute service when work is recorded for its host.

On PostgreSQL a :class:`WorkListener` holds one connection of its own in
session mode and ``LISTEN`` s on its host's own channel
(:func:`~nova_lite.db.tasks.notify_channel`, named after the schema and the
host, so work for other hosts never wakes it): the recording transaction's
``NOTIFY`` (payload: its schema and the host) arrives at its commit, so the
service takes the work at once.  A wait that is woken also consumes every
notification already delivered with it, so work recorded in a burst wakes
the service once, not once per recording.  Everywhere else (SQLite,
or a PostgreSQL reached through a pooler in transaction mode, ``[database]
pooler = transaction``, where a ``LISTEN`` would be made on a server
session the pooler then hands to other clients, and no notification would
ever come back) :meth:`WorkListener.wait` just waits for the poll interval,
and the service polls.  A lost listening connection is logged and opened
again at the next wait; meanwhile the service polls.
"""

import logging
import threading
from typing import Any

from nova_lite.db.engine import redact_url
from nova_lite.db.tasks import notify_channel, notify_payload

LOG = logging.getLogger(__name__)


class WorkListener:
    """Waits for work recorded for ``host`` in the database at ``url``.

    ``listen``: use ``LISTEN``/``NOTIFY`` (PostgreSQL only; False: poll
    only).  ``pooler``: what is between nova-lite and the server (one of
    :data:`nova_lite.conf.DATABASE_POOLERS`); behind a pooler in
    transaction mode nothing listens.  :meth:`wait` returns True when woken
    by a notification for the host (or by :meth:`wake`), False when
    ``timeout`` passed.
    """

    def __init__(self, url: str, host: str, listen: bool = True,
                 pooler: str = "none") -> None:
        self.host = host
        self._url = url
        postgresql = url.split(":", 1)[0].startswith("postgresql")
        self._listen = listen and postgresql and pooler != "transaction"
        if listen and postgresql and not self._listen:
            LOG.info("Not listening for work of host %s on %s: behind a connection pooler "
                     "in transaction mode ([database] pooler = transaction) a LISTEN is not "
                     "kept; the service polls for it instead", host, redact_url(url))
        self._conn: Any = None
        self._payload = ""   # what a notification for this host carries, once listening
        self._woken = threading.Event()
        self._closed = False

    @property
    def listening(self) -> bool:
        """True while a LISTEN connection is open."""
        return self._conn is not None

    def wake(self) -> None:
        """End the current (or next) :meth:`wait` at once (stop, or new local work)."""
        self._woken.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for work of the host; True if woken."""
        if self._woken.is_set():
            self._woken.clear()
            return True
        conn = self._connection()
        if self._woken.is_set():
            self._woken.clear()
            return True
        if conn is None:
            woken = self._woken.wait(timeout)
            self._woken.clear()
            return woken
        try:
            woken = self._notified(conn.notifies(timeout=timeout, stop_after=1))
            if woken:
                # The rest of the burst, drained: the caller takes all of its
                # work in one go.  A round trip first, since the server sends
                # every notification committed before it ahead of its answer:
                # none of them is still on its way when the drain looks.
                conn.execute("SELECT 1")
                self._notified(conn.notifies(timeout=0.0))
            return woken or self._woken.is_set()
        except Exception as exc:   # noqa: BLE001 - fall back to polling, reconnect later
            LOG.warning("Listening for work of host %s on %s failed (polling until it is "
                        "back): %s", self.host, redact_url(self._url), exc)
            self._drop()
            return False

    def _notified(self, notes: Any) -> bool:
        """Whether ``notes`` (psycopg's notifications) hold one for this host."""
        return any([note.payload == self._payload for note in notes])

    def _connection(self) -> Any:
        if not self._listen or self._closed:
            return None
        if self._conn is not None:
            return self._conn
        try:
            import psycopg
            url = self._url.replace("postgresql+psycopg://", "postgresql://", 1)
            conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
            (schema,) = conn.execute("SELECT current_schema()").fetchone() or ("public",)
            channel = notify_channel(schema, self.host)
            conn.execute(f"LISTEN {channel}")
        except Exception as exc:   # noqa: BLE001 - poll instead
            LOG.warning("Cannot listen for work of host %s on %s (polling instead): %s",
                        self.host, redact_url(self._url), exc)
            return None
        LOG.debug("Listening for work of host %s on channel %s", self.host, channel)
        self._conn = conn
        self._payload = notify_payload(schema, self.host)
        # Work recorded before the LISTEN took effect sent its NOTIFY to
        # nobody: the first wait after (re)connecting wakes the caller to look.
        self._woken.set()
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:   # noqa: BLE001,S110 - already broken
                pass

    def close(self) -> None:
        """Close the listening connection; later waits only wait."""
        self._closed = True
        self._drop()
        self.wake()
