"""Findings: what the leak search reports, as records every reader shares.

A :class:`Finding` is one leak or anomaly of the records; the kinds are
:data:`FINDING_KINDS`.  :mod:`nova_lite.leaks` makes them (and heals the
healable ones); each compute service records its host's last findings
(:class:`RecordedFindings`, through :meth:`Store.record_findings
<nova_lite.db.Store.record_findings>`), which the audit command, the API
and the metrics read, so every process shows the same figures.
"""

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
#: Every kind of finding, in the order they are reported.
FINDING_KINDS = (STALE_ALLOCATION, STUCK_MIGRATION, MOVE_WAITING, UNKNOWN_GUEST,
                 INSTANCE_NODE_GONE, OVER_CAPACITY)
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


def _findings(value: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(value)


@attrs.frozen
class RecordedFindings:
    """The findings of one host's last leak search, as its compute service recorded them.

    ``recorded_at``: when (epoch s); ``findings``: a tuple of :class:`Finding`.
    """

    host: str
    recorded_at: float
    findings: tuple[Finding, ...] = attrs.field(converter=_findings)

    def counts(self) -> dict[str, int]:
        """``{kind: number}`` for every kind of :data:`FINDING_KINDS`."""
        return {kind: sum(1 for f in self.findings if f.kind == kind) for kind in FINDING_KINDS}


__all__ = ["Finding", "RecordedFindings", "FINDING_KINDS", "HEALABLE", "STALE_ALLOCATION",
           "STUCK_MIGRATION", "MOVE_WAITING", "UNKNOWN_GUEST", "INSTANCE_NODE_GONE",
           "OVER_CAPACITY"]
