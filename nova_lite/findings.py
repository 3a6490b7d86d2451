"""Findings: one vocabulary for everything that can be wrong with the records.

Every kind is named once, here, and used by all who report one: the leak
search and heal (:mod:`nova_lite.leaks`, :data:`FINDING_KINDS`), ``node
explain``'s culprits (:data:`CULPRIT_KINDS`), the ``audit`` command's
comparison of the hypervisor, the tracker and the records
(:data:`VIEW_KINDS`), the API and the metrics.  The same discrepancy has
the same name wherever it is reported: an allocation no live record backs
is ``stale_allocation`` in all of them.  :data:`DESCRIPTIONS` says what
each means.

A :class:`Finding` is one leak or anomaly of the records.
:mod:`nova_lite.leaks` makes them (and heals the healable ones); each
compute service records its host's last findings
(:class:`RecordedFindings`, through :meth:`Store.record_findings
<nova_lite.db.Store.record_findings>`), which the audit command, the API
and the metrics read, so every process shows the same figures.
"""

import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs


def _amounts(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


#: An allocation held by a deleted or unknown instance, a finished or
#: unknown migration, or an instance recorded on another node: a leak.
STALE_ALLOCATION = "stale_allocation"
#: A move in progress that nobody is left to finish (a service at one end
#: is down), or that the operator named: heal finishes it.
STUCK_MIGRATION = "stuck_migration"
#: A move in progress for longer than migration_stuck_age whose services
#: are both up: reported, left to them.
MOVE_WAITING = "move_waiting"
#: A guest the hypervisor has that no live record backs.
UNKNOWN_GUEST = "unknown_guest"
#: A live instance recorded on a node that has no record.
INSTANCE_NODE_GONE = "instance_node_gone"
#: A node holding more of a class than its capacity.
OVER_CAPACITY = "over_capacity"
#: Work recorded for a host whose compute service is down: it waits for the
#: service to come back (a live peer records it with the host's findings).
TASKS_WAITING = "tasks_waiting"
#: A live instance recorded on a node holds no allocation there (the next
#: periodic pass restores it).
MISSING_ALLOCATION = "missing_allocation"
#: A live instance is recorded on the node but the hypervisor has no guest for it.
MISSING_GUEST = "missing_guest"
#: An allocation and its record both exist but the amounts differ.
ALLOCATION_MISMATCH = "allocation_mismatch"
#: Over capacity because the host offers less than its consumers hold (its
#: reported total dropped, reserved grew, or the ratio was lowered).
SHRUNKEN_HOST = "shrunken_host"
#: Over capacity although the host has room: a ratio below 1 leaves less
#: than the consumers hold.
OVER_COMMIT = "over_commit"
#: The driver failed to report the node (exception, timeout, malformed report).
NODE_REPORT_FAILED = "node_report_failed"
#: The driver reports a node that has no record yet.
NODE_NOT_RECORDED = "node_not_recorded"
#: A node record exists but the driver no longer reports the node (an orphan).
NODE_NOT_REPORTED = "node_not_reported"

#: The kinds of the leak search (and ``tasks_waiting``, which a live peer adds
#: to the findings of a host that is down), in the order they are reported.
FINDING_KINDS = (STALE_ALLOCATION, STUCK_MIGRATION, MOVE_WAITING, UNKNOWN_GUEST,
                 INSTANCE_NODE_GONE, OVER_CAPACITY, TASKS_WAITING)
#: The kinds of ``node explain``'s culprits, in the order they are reported
#: (``over_capacity`` is told apart as ``shrunken_host`` or ``over_commit``).
CULPRIT_KINDS = (STALE_ALLOCATION, UNKNOWN_GUEST, SHRUNKEN_HOST, OVER_COMMIT,
                 MISSING_ALLOCATION)
#: The kinds of the ``audit`` command's comparison of the hypervisor, the
#: tracker and the records, in the order they are reported.
VIEW_KINDS = (NODE_REPORT_FAILED, NODE_NOT_RECORDED, NODE_NOT_REPORTED, UNKNOWN_GUEST,
              MISSING_GUEST, STALE_ALLOCATION, MISSING_ALLOCATION, ALLOCATION_MISMATCH)

#: What every kind means, in words (the operator guide's table).
DESCRIPTIONS = {
    STALE_ALLOCATION: "an allocation that no live record backs: its instance is deleted, "
                      "gone or recorded elsewhere, or its migration is over (a leak)",
    MISSING_ALLOCATION: "a live instance recorded on the node holds no allocation there",
    ALLOCATION_MISMATCH: "an allocation holds other amounts than its record asks for",
    STUCK_MIGRATION: "a move in progress that nobody is left to finish (a compute service "
                     "at one end is down), or one the operator named",
    MOVE_WAITING: "a move in progress for longer than migration_stuck_age whose two "
                  "compute services are up: left to them",
    UNKNOWN_GUEST: "a guest the hypervisor has that no live record backs",
    MISSING_GUEST: "a live instance recorded on the node for which the hypervisor has no "
                   "guest",
    INSTANCE_NODE_GONE: "a live instance recorded on a node that has no record",
    OVER_CAPACITY: "a node holding more of a class than its capacity",
    TASKS_WAITING: "work recorded for a host whose compute service is down: it waits, "
                   "and what it holds stays held, until the service comes back",
    SHRUNKEN_HOST: "over capacity because the host offers less than its consumers hold",
    OVER_COMMIT: "over capacity because a ratio below 1 leaves less than they hold",
    NODE_REPORT_FAILED: "the driver failed to report the node",
    NODE_NOT_RECORDED: "the driver reports a node that has no record yet",
    NODE_NOT_REPORTED: "a node record the driver no longer reports (an orphan)",
}
#: The kinds ``heal`` repairs; the others are for an operator (or the
#: services) to decide.
HEALABLE = (STALE_ALLOCATION, STUCK_MIGRATION)


@attrs.frozen
class Finding:
    """One leak or anomaly.

    ``subject`` names the consumer, migration, guest, instance or resource
    class (``over_capacity``); ``host``/``nodename``/``node_uuid`` the node
    it is on (None if none); ``generation`` the node's generation when
    read; ``resources`` class -> amount involved; ``age`` seconds since a
    move last changed.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(FINDING_KINDS))
    subject: str
    detail: str
    host: str | None = None
    nodename: str | None = None
    node_uuid: str | None = None
    generation: int | None = None
    instance_uuid: str | None = None
    resources: dict[str, int] = attrs.field(factory=dict, converter=_amounts)
    age: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of the finding."""
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        """The finding :meth:`to_dict` gave."""
        return cls(**data)


def tasks_waiting(host: str, count: int, down_since: float | None) -> Finding:
    """The :data:`TASKS_WAITING` finding of ``host``: ``count`` tasks recorded
    for it wait while its compute service is down.

    :param host: the host whose service is down.
    :param count: how many of its tasks are open (waiting, or left running).
    :param down_since: the service's last heartbeat (epoch s); None: it has
        no service record.
    """
    since = "which has no compute service record" if down_since is None else \
        "down since " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(down_since))
    return Finding(TASKS_WAITING, host, f"{count} task{'' if count == 1 else 's'} waiting on "
                                        f"host {host}, {since}", host=host)


def _findings(value: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(value)


@attrs.frozen
class RecordedFindings:
    """The findings of one host's last leak search, as its compute service recorded them.

    ``recorded_at``: since when these are the findings (epoch s: when they
    last changed); ``findings``: a tuple of :class:`Finding`;
    ``recorded_by``: the host whose service searched (``host`` itself, or a
    live peer while ``host``'s service is down; None: not known).
    """

    host: str
    recorded_at: float
    findings: tuple[Finding, ...] = attrs.field(converter=_findings)
    recorded_by: str | None = None

    def counts(self) -> dict[str, int]:
        """``{kind: number}`` for every kind of :data:`FINDING_KINDS`."""
        return {kind: sum(1 for f in self.findings if f.kind == kind) for kind in FINDING_KINDS}


__all__ = ["Finding", "RecordedFindings", "tasks_waiting", "FINDING_KINDS", "CULPRIT_KINDS",
           "VIEW_KINDS", "DESCRIPTIONS", "HEALABLE", "STALE_ALLOCATION", "MISSING_ALLOCATION",
           "ALLOCATION_MISMATCH", "STUCK_MIGRATION", "MOVE_WAITING", "UNKNOWN_GUEST",
           "MISSING_GUEST", "INSTANCE_NODE_GONE", "OVER_CAPACITY", "TASKS_WAITING",
           "SHRUNKEN_HOST", "OVER_COMMIT", "NODE_REPORT_FAILED", "NODE_NOT_RECORDED",
           "NODE_NOT_REPORTED"]
