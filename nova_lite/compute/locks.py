"""Per-node fair locks: claims, drops and the audit's accounting of one node
take that node's lock; other nodes are never held up."""

import threading
from collections.abc import Iterable
from typing import Literal


class FairLock:
    """A re-entrant lock granted in arrival order (first come, first served)."""

    def __init__(self) -> None:
        # The condition's own lock, taken directly where no wait is needed:
        # a Lock's ``with`` runs in C, a Condition's in Python.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._next_ticket = 0
        self._serving = 0
        self._owner: int | None = None
        self._depth = 0
        self._waiting = 0   # threads in wait(): release wakes them only if any

    def acquire(self) -> None:
        """Wait for this thread's turn, then hold the lock."""
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                self._depth += 1
                return
            ticket = self._next_ticket
            self._next_ticket += 1
            if ticket != self._serving:
                self._waiting += 1
                try:
                    while ticket != self._serving:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
            self._owner = me
            self._depth = 1

    def release(self) -> None:
        """Give the lock to the next waiter once fully released."""
        with self._lock:
            if self._owner != threading.get_ident():
                raise RuntimeError("FairLock released by a thread that does not hold it")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._serving += 1
                if self._waiting:
                    self._cond.notify_all()

    def __enter__(self) -> "FairLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.release()
        return False


class NodeLocks:
    """One :class:`FairLock` per node name, created on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, FairLock] = {}

    def __getitem__(self, nodename: str) -> FairLock:
        lock = self._locks.get(nodename)
        if lock is None:
            with self._guard:
                lock = self._locks.setdefault(nodename, FairLock())
        return lock

    def holding(self, nodenames: Iterable[str]) -> "_Many":
        """A context manager holding the locks of ``nodenames`` (sorted, no deadlock)."""
        return _Many([self[name] for name in sorted(set(nodenames))])


class _Many:
    def __init__(self, locks: list[FairLock]) -> None:
        self._locks = locks

    def __enter__(self) -> "_Many":
        taken: list[FairLock] = []
        try:
            for lock in self._locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for lock in reversed(self._locks):
            lock.release()
        return False
