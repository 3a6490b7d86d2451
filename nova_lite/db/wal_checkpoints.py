"""Checkpoints of a SQLite file's write-ahead log, run off the writers' thread.

In WAL mode a commit appends the pages it changed to the log (``-wal``); a
checkpoint copies them back into the database file.  With
``synchronous=NORMAL`` (the store's setting) a checkpoint is the only time
SQLite waits for the disk: one flush of the log, one of the database file,
each 1 to 5 ms on a common disk.  Left to itself SQLite runs the checkpoint
inside the commit that takes the log past 1,000 pages
(``wal_autocheckpoint``), so about one claim in ninety waits for the disk on
behalf of all the others.

A writable SQLite file's ``Database`` (``nova_lite.db.engine``) hands that
work to a :class:`WalCheckpointer`: a thread of its own, woken by the
commits, runs ``PASSIVE`` checkpoints (they never wait for, or block, a
reader or a writer) at most once every :data:`GAP_S` seconds.  The
checkpoint's copying and its flushes run outside Python's GIL, beside the
writers.  What it trades:

- a writer waits for a checkpoint only once per :data:`BACKSTOP_PAGES`
  pages of log (about 360 claims) instead of once per 1,000 (about 90):
  the writers' own automatic checkpoint stays on at that bound.  A writer
  starts the log again from its beginning only if the whole log has been
  copied when it starts; while commits keep coming, a checkpoint running
  beside them never leaves it so, and the writers' checkpoint at the bound
  is what starts it again.  That checkpoint finds almost every page
  already copied, so it is short (two small flushes);
- so the log file grows to about :data:`BACKSTOP_PAGES` pages (16 MiB at
  4 KiB pages) under a steady stream of writes, where it stayed near 1,000
  (4 MiB); it is reused from its start, not grown, after that;
- the log reaches the disk within about :data:`GAP_S` of a commit rather
  than at the next 1,000th page, so a power loss loses less (with
  ``synchronous=NORMAL`` a commit not yet flushed may be lost, never half
  applied);
- if the thread cannot checkpoint, or falls behind, the writers'
  checkpoint at the bound keeps the log from growing further.

Each process that writes the file checkpoints it this way; when two
checkpoint at once, one of them finds the other running and leaves it the
work.  A checkpoint that fails (the file gone, the disk full) is logged at
WARNING once until one succeeds again; the writers are not affected.
"""

import logging
import os
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import Callable

import attrs

LOG = logging.getLogger(__name__)

#: Shortest time (s) between two checkpoints of one file: commits that come
#: faster share a checkpoint (and its two disk flushes).
GAP_S = 0.01

#: The writers' own ``wal_autocheckpoint`` (pages) while a checkpointer runs:
#: the log's bound if the thread falls behind (16 MiB at 4 KiB pages).
BACKSTOP_PAGES = 4_000


@attrs.frozen
class CheckpointTotals:
    """What a :class:`WalCheckpointer` has done since it was made.

    :ivar checkpoints: checkpoints run to the end (each one ``PASSIVE``).
    :ivar busy: checkpoints that did nothing: another connection (another
        process's checkpointer, or a writer's own) was running one, or the
        file had no write-ahead log (it is not in WAL mode).
    :ivar failures: checkpoints that raised a database error.
    :ivar log_pages: pages in the log at the last checkpoint's end.
    :ivar checkpointed_pages: of those, pages copied into the database
        file (fewer than ``log_pages`` while a reader still needs the
        older ones).
    """

    checkpoints: int = 0
    busy: int = 0
    failures: int = 0
    log_pages: int = 0
    checkpointed_pages: int = 0


class _Run:
    """One run of a checkpointer's thread, with the events only it waits on
    (a thread being stopped never takes the wake-up meant for the next)."""

    __slots__ = ("thread", "wake", "stopping")

    def __init__(self, run: Callable[["_Run"], None], name: str) -> None:
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=run, args=(self,), name=name, daemon=True)


class WalCheckpointer:
    """Checkpoints the SQLite file at ``path`` on a thread of its own.

    Writers call :meth:`committed` after each commit; the thread starts at
    the first one.  :meth:`stop` ends the thread and closes its connection
    (a later :meth:`committed` starts them again).

    :param path: the database file.
    :param gap_s: shortest time (s) between two checkpoints.
    """

    def __init__(self, path: str, gap_s: float = GAP_S) -> None:
        self.path = path
        self.gap_s = gap_s
        self._running: _Run | None = None
        self._lock = threading.Lock()
        self._totals = CheckpointTotals()
        self._failing = False
        _LIVE.add(self)

    def committed(self) -> None:
        """Say that a writer committed: the thread checkpoints soon after.

        Cheap enough for every commit: an event set, the thread started on
        the first call.
        """
        running = self._running
        if running is None:
            running = self._start()
        if not running.wake.is_set():
            running.wake.set()

    def totals(self) -> CheckpointTotals:
        """What the thread has done so far."""
        return self._totals

    def stop(self) -> None:
        """End the thread (after the checkpoint it is running, if any) and
        close its connection."""
        with self._lock:
            running, self._running = self._running, None
        if running is None:
            return
        running.stopping.set()
        running.wake.set()
        if running.thread is not threading.current_thread():
            running.thread.join()

    def _start(self) -> _Run:
        with self._lock:
            if self._running is not None:
                return self._running
            running = _Run(self._run, f"wal-checkpoints:{os.path.basename(self.path)}")
            self._running = running
            running.thread.start()
            return running

    def _run(self, running: _Run) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                running.wake.wait()
                if running.stopping.is_set():
                    return
                running.wake.clear()
                conn = self._checkpoint(conn)
                if running.stopping.wait(self.gap_s):
                    return
        finally:
            if conn is not None:
                conn.close()

    def _checkpoint(self, conn: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """One PASSIVE checkpoint; the connection to use next time (None after
        a failure, so the next one opens the file again)."""
        try:
            if conn is None:
                # mode=rw: never create a file that was removed under us.
                conn = sqlite3.connect(f"file:{_quoted(self.path)}?mode=rw", uri=True,
                                       isolation_level=None, check_same_thread=False)
            busy, log_pages, checkpointed = conn.execute(
                "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            totals = self._totals
            self._totals = attrs.evolve(totals, failures=totals.failures + 1)
            if not self._failing:
                self._failing = True
                LOG.warning("Checkpoint of the write-ahead log of %s failed: %s: %s; the "
                            "writers checkpoint it themselves past %d pages", self.path,
                            type(exc).__name__, exc, BACKSTOP_PAGES)
            if conn is not None:
                conn.close()
            return None
        if self._failing:
            self._failing = False
            LOG.info("Checkpoints of the write-ahead log of %s succeed again", self.path)
        totals = self._totals
        if busy or log_pages < 0:
            # Another connection holds the checkpoint lock (-1: no log at all,
            # the file is not in WAL mode): nothing was done here.
            self._totals = attrs.evolve(totals, busy=totals.busy + 1)
        else:
            self._totals = attrs.evolve(totals, checkpoints=totals.checkpoints + 1,
                                        log_pages=log_pages, checkpointed_pages=checkpointed)
        return conn


def _quoted(path: str) -> str:
    return urllib.parse.quote(os.path.abspath(path))


#: Every checkpointer of this process, so a forked child can forget their
#: threads (a thread does not survive a fork).
_LIVE: "weakref.WeakSet[WalCheckpointer]" = weakref.WeakSet()


def _forget_threads() -> None:
    for checkpointer in list(_LIVE):
        # The parent's thread, and its lock if held at the fork, are not here.
        checkpointer._running = None
        checkpointer._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)
