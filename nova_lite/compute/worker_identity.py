"""Who took a task: a worker identity that tells a dead taker from a live one.

A compute service's worker names itself ``host@machine:pid:start:token``:
the host it serves, the machine and process it runs in (with the
process's start time, so a reused pid is not mistaken for it) and a random
token.  A service that starts again on the same machine can then tell at
once that a task's taker is gone (its process no longer exists) and take
the task back; a taker on another machine is judged by its lease alone.
"""

import os
import socket
import uuid

import attrs


def _process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot ("" if unknown)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name (field 2) may hold spaces: count from its ')'.
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


@attrs.frozen
class WorkerIdentity:
    """A worker: ``host`` served, ``machine`` and ``pid`` it runs in, the
    process's ``start`` (clock ticks since boot), a random ``token``."""

    host: str
    machine: str
    pid: int
    start: str
    token: str

    @classmethod
    def of_this_process(cls, host: str) -> "WorkerIdentity":
        """A new identity for a worker of ``host`` in this process."""
        pid = os.getpid()
        return cls(host=host, machine=socket.gethostname(), pid=pid,
                   start=_process_start(pid), token=uuid.uuid4().hex[:8])

    def __str__(self) -> str:
        return f"{self.host}@{self.machine}:{self.pid}:{self.start}:{self.token}"

    @classmethod
    def parse(cls, text: str) -> "WorkerIdentity | None":
        """The identity ``str()`` wrote, or None for any other text."""
        host, sep, rest = text.rpartition("@")
        parts = rest.split(":")
        if not sep or len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(host=host, machine=parts[0], pid=int(parts[1]), start=parts[2],
                   token=parts[3])


def is_gone(taken_by: str) -> bool:
    """True when ``taken_by`` names a worker of a process on this machine that
    no longer runs (or whose pid now belongs to another process).  A worker
    on another machine, or one still running, is not known to be gone."""
    taker = WorkerIdentity.parse(taken_by)
    if taker is None or taker.machine != socket.gethostname():
        return False
    if taker.pid == os.getpid():
        return False   # this process: not gone (another worker of it decides for itself)
    try:
        os.kill(taker.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass   # exists, another user's
    start = _process_start(taker.pid)
    return bool(start) and bool(taker.start) and start != taker.start
