"""Work addressed to a host, in the records: the vocabulary and the :class:`Task` record.

The records are the only channel between whoever asks for work (an
operator's command, :func:`nova_lite.compute.api.build`, the API) and the
compute service that does it.  The asker records a task addressed to a
host; that host's service takes it (:meth:`TaskQueue.take
<nova_lite.db.tasks.TaskQueue.take>`: one taker, as a SKIP LOCKED queue
does), carries it out on its own driver and records the outcome.

A task moves ``waiting`` -> ``running`` -> ``done`` | ``failed``, or
``waiting`` -> ``cancelled`` (its instance was deleted by a local delete
first).  A ``running`` task whose taker died (its process is gone, or its
lease ran out) is taken again; every kind is written so that doing it
again after a crash finishes what was begun rather than doing it twice.
Tasks of one instance are taken in the order they were recorded, one at a
time.
"""

import json
from typing import Any

import attrs

#: Spawn a claimed instance on its host's driver; record it active, or
#: error with the reason and its claim given back.
BUILD = "build"
#: Destroy an instance's guest and free what it holds.
DELETE = "delete"
#: On the destination: claim the new flavor for a resize or cold migration.
PREP_RESIZE = "prep_resize"
#: On the source: hand the guest over (the source keeps its claim).
RESIZE_INSTANCE = "resize_instance"
#: On the destination: start the guest; the move waits for confirm or revert.
FINISH_RESIZE = "finish_resize"
#: On the source: destroy the old guest and drop the source's claim.
CONFIRM_RESIZE = "confirm_resize"
#: On the destination: destroy the new guest and drop its claim, then the
#: source starts the guest again (:data:`FINISH_REVERT_RESIZE`).
REVERT_RESIZE = "revert_resize"
#: On the source: start the guest again after a revert.
FINISH_REVERT_RESIZE = "finish_revert_resize"
#: Run the host's audit now and record its report as the task's result.
AUDIT = "audit"

#: Every kind of task.
TASK_KINDS = (BUILD, DELETE, PREP_RESIZE, RESIZE_INSTANCE, FINISH_RESIZE, CONFIRM_RESIZE,
              REVERT_RESIZE, FINISH_REVERT_RESIZE, AUDIT)

WAITING = "waiting"
RUNNING = "running"
DONE = "done"
FAILED = "failed"
CANCELLED = "cancelled"
#: Every state of a task.
TASK_STATES = (WAITING, RUNNING, DONE, FAILED, CANCELLED)
#: The states of a task not yet over.
OPEN_STATES = (WAITING, RUNNING)
#: The states of a task that is over.
FINAL_STATES = (DONE, FAILED, CANCELLED)


def _json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"task params must be a JSON object, got {type(value).__name__}")
    json.dumps(value)   # must be recordable
    return dict(value)


@attrs.frozen
class Task:
    """One task as recorded.

    ``id``: its number, in the order tasks were recorded; ``host``: the
    host whose compute service does it; ``kind``: one of
    :data:`TASK_KINDS`; ``instance_uuid`` / ``migration_uuid``: what it is
    about (None for a host's audit); ``params``: what the asker gave (a
    JSON object); ``state``: one of :data:`TASK_STATES`; ``attempts``: how
    many times a service took it; ``taken_by``: the worker that took it
    last (``host@machine:pid:start:token``); ``lease_until``: epoch s until
    which that worker's claim on it holds without renewal; ``detail``: the
    outcome in words (the reason, when failed); ``result``: a JSON object
    the task produced (an audit's report); ``created_at``, ``started_at``,
    ``finished_at``: epoch seconds.
    """

    id: int
    host: str
    kind: str = attrs.field(validator=attrs.validators.in_(TASK_KINDS))
    instance_uuid: str | None = None
    migration_uuid: str | None = None
    params: dict[str, Any] = attrs.field(factory=dict, converter=_json_object)
    state: str = attrs.field(default=WAITING, validator=attrs.validators.in_(TASK_STATES))
    attempts: int = 0
    taken_by: str | None = None
    lease_until: float | None = None
    detail: str | None = None
    result: dict[str, Any] | None = None
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def is_open(self) -> bool:
        """True while the task waits or runs."""
        return self.state in OPEN_STATES

    def age(self, now: float) -> float:
        """Seconds since the task was recorded, at ``now`` (epoch s)."""
        return max(0.0, now - self.created_at)

    def describe(self) -> str:
        """``kind state``, e.g. ``build waiting`` (``server list``'s Task column)."""
        return f"{self.kind} {self.state}"


@attrs.frozen
class WorkRequest:
    """A task to record: addressed to ``host``, of ``kind``, about an instance
    (``instance_uuid``) or a move (``migration_uuid``), with ``params``."""

    host: str
    kind: str = attrs.field(validator=attrs.validators.in_(TASK_KINDS))
    instance_uuid: str | None = None
    migration_uuid: str | None = None
    params: dict[str, Any] = attrs.field(factory=dict, converter=_json_object)
