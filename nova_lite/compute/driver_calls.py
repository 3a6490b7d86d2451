"""Driver calls with a timeout, so one hung node cannot stall an audit.

:meth:`DriverCaller.map` runs the calls one after another in a worker
thread and watches the clock: a call that outlives the timeout is marked
timed out, its thread is abandoned (it calls nothing more once that call
returns), and another worker goes on with the next node.

Workers outlive a map: a few idle ones are kept (:data:`MOST_IDLE`, shared
by every caller of the process), so a periodic pass starts no thread.  Per
call this costs nothing beyond the call itself.
"""

import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from nova_lite.exception import DriverCallTimeout


@attrs.frozen
class Outcome:
    """What one call gave: ``value`` or ``error`` (an exception)."""

    item: Any
    value: Any = None
    error: BaseException | None = None


#: The most idle workers kept for the next map (of any caller).
MOST_IDLE = 4


class _Run:
    """One worker's progress through the items, from ``start`` on."""

    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any], start: int) -> None:
        self.fn, self.items, self.index = fn, items, start
        self.results: dict[int, Outcome] = {}
        self.call_started = time.monotonic()
        self.done = threading.Event()
        #: Set by the watcher when a call timed out: the rest is not this run's.
        self.abandoned = False

    def work(self) -> None:
        for index in range(self.index, len(self.items)):
            if self.abandoned:
                return
            self.call_started = time.monotonic()   # before index: the watcher reads both
            self.index = index
            try:
                self.results[index] = Outcome(self.items[index], value=self.fn(self.items[index]))
            except Exception as exc:   # noqa: BLE001 - reported per node
                self.results[index] = Outcome(self.items[index], error=exc)
        self.index = len(self.items)
        self.done.set()


class _Worker:
    """A daemon thread that does the runs given to it, then waits idle for more."""

    _idle: list["_Worker"] = []
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.runs: queue.SimpleQueue[_Run] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True,
                                       name="nova-lite driver call")
        self.thread.start()

    @classmethod
    def take(cls) -> "_Worker":
        with cls._lock:
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def _serve(self) -> None:
        while True:
            self.runs.get().work()
            with self._lock:
                if len(self._idle) >= MOST_IDLE:
                    return
                self._idle.append(self)

    @classmethod
    def forget_all(cls) -> None:
        """Forget every idle worker: in a forked child their threads do not exist."""
        cls._idle = []
        cls._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Worker.forget_all)


class DriverCaller:
    """Calls into a driver with ``timeout`` seconds per call."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any],
            what: str = "driver call") -> list[Outcome]:
        """``[Outcome]`` of ``fn(item)`` for each item, in order."""
        items = list(items)
        outcomes: dict[int, Outcome] = {}
        start = 0
        poll = min(0.05, self.timeout / 4)
        while start < len(items):
            run = _Run(fn, items, start)
            _Worker.take().runs.put(run)
            while not run.done.wait(poll):
                stuck = run.index
                if time.monotonic() - run.call_started > self.timeout and stuck not in run.results:
                    run.abandoned = True
                    outcomes.update(run.results)
                    outcomes[stuck] = Outcome(items[stuck], error=DriverCallTimeout(
                        f"{what}({items[stuck]!r}) did not return within {self.timeout:g} s"))
                    start = stuck + 1
                    break
            else:
                outcomes.update(run.results)
                start = len(items)
        return [outcomes[i] for i in range(len(items))]

    def call(self, fn: Callable[..., Any], *args: Any, what: str = "driver call") -> Any:
        """``fn(*args)`` with the timeout; raises its error or DriverCallTimeout."""
        outcome = self.map(lambda _: fn(*args), [None], what=what)[0]
        if outcome.error is not None:
            raise outcome.error
        return outcome.value
