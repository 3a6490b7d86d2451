"""One host's audit report: its three views side by side, its leaks, and their repair.

:func:`build_report` makes the report ``nova-lite audit --host HOST``
shows: per node, the hypervisor view, the tracked view and the records
(:func:`nova_lite.audit.audit_host`); the leaks of the host's records with
the guests its driver lists (:func:`nova_lite.leaks.find_leaks`); the
findings recorded for the host; and, when asked, the repair
(:func:`nova_lite.leaks.heal`) and the audit after it.

It runs where the host's driver is: in the host's own compute service,
which does an ``audit`` task (:mod:`nova_lite.compute.audit_work`) and
records the report as the task's result, or in the process of ``nova-lite
audit --local`` on the host itself while its service is stopped.  The
report is a JSON object (the task's result as recorded), so either way
the command shows the same thing.  :class:`AuditRequest` is what is asked:
the task's parameters.
"""

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import audit, leaks
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.exception import InvalidInput

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

#: Exit status when the views differ or leaks are found (as ``nova-manage
#: placement audit``); 0 when consistent.
EXIT_DIFFERENCES = 3

#: The fields of every report, in order.
REPORT_FIELDS = ("host", "driver", "nodes", "differences", "guests_listed", "note",
                 "consistent", "database", "migration_stuck_age", "leaks",
                 "recorded_findings")
#: The fields a report adds with heal or dry_run.
HEAL_FIELDS = ("heal", "dry_run")
#: The fields a report adds when heal wrote (not a dry run).
AFTER_HEAL_FIELDS = ("consistent_after_heal", "leaks_after_heal")

#: Difference kinds about a whole node: their ``uuid`` is the node's, not its name.
_NODE_KINDS = (audit.NODE_REPORT_FAILED, audit.NODE_NOT_RECORDED, audit.NODE_NOT_REPORTED)


def _optional_name(inst: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidInput(f"AuditRequest.{attribute.name} must be a non-empty name or "
                           f"None, got {value!r}")


def _flag(inst: Any, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidInput(f"AuditRequest.{attribute.name} must be true or false, "
                           f"got {value!r}")


def _uuids(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
            isinstance(u, str) and u.strip() for u in value):
        raise InvalidInput(f"AuditRequest.migrations must be a list of migration uuids, "
                           f"got {value!r}")
    return tuple(value)


@attrs.frozen
class AuditRequest:
    """What an audit of one host is asked to do.

    ``node``: only this node (name or uuid; None: every node of the host);
    ``heal``: repair what can be repaired, then audit again; ``dry_run``:
    show what heal would change and write nothing; ``migrations``: uuids
    of moves in progress that heal finishes even though their compute
    services are up.  A wrong value raises InvalidInput naming the field.
    """

    node: str | None = attrs.field(default=None, validator=_optional_name)
    heal: bool = attrs.field(default=False, validator=_flag)
    dry_run: bool = attrs.field(default=False, validator=_flag)
    migrations: tuple[str, ...] = attrs.field(default=(), converter=_uuids)

    @property
    def writes(self) -> bool:
        """Whether the audit writes: heal, not a dry run."""
        return self.heal and not self.dry_run

    def fields(self) -> tuple[str, ...]:
        """The fields of the report this request makes, in order."""
        known: tuple[str, ...] = REPORT_FIELDS
        if self.heal or self.dry_run:
            known += HEAL_FIELDS
        if self.writes:
            known += AFTER_HEAL_FIELDS
        return known

    def to_params(self) -> dict[str, Any]:
        """The request as an ``audit`` task's parameters (a JSON object)."""
        return {"node": self.node, "heal": self.heal, "dry_run": self.dry_run,
                "migrations": list(self.migrations)}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "AuditRequest":
        """The request an ``audit`` task's parameters give; InvalidInput names
        an unknown parameter or a wrong value."""
        unknown = sorted(set(params) - {"node", "heal", "dry_run", "migrations"})
        if unknown:
            raise InvalidInput(f"unknown audit task parameter(s): {', '.join(unknown)}")
        return cls(node=params.get("node"), heal=params.get("heal", False),
                   dry_run=params.get("dry_run", False),
                   migrations=params.get("migrations", ()))


def _node_uuids(data: Mapping[str, Any]) -> None:
    """Put each node difference's node uuid (None if unrecorded) in its uuid field."""
    for node in data["nodes"]:
        for diff in node["differences"]:
            if diff["kind"] in _NODE_KINDS:
                diff["uuid"] = node["node_uuid"]


def exit_status(report: Mapping[str, Any]) -> int:
    """0 when ``report`` is consistent (after heal, when it healed), else
    :data:`EXIT_DIFFERENCES`."""
    consistent = report.get("consistent_after_heal", report["consistent"])
    return 0 if consistent else EXIT_DIFFERENCES


def in_order(report: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` with its fields in the order :data:`REPORT_FIELDS` (and the
    heal fields) give: a report read back from the records has them sorted."""
    order = REPORT_FIELDS + HEAL_FIELDS + AFTER_HEAL_FIELDS
    ordered = {k: report[k] for k in order if k in report}
    ordered.update((k, v) for k, v in report.items() if k not in ordered)
    return ordered


def build_report(tracker: ResourceTracker, store: "Store", settings: "Settings",
                 request: AuditRequest, *, driver_name: str, recorded_by: str,
                 record_guests: bool) -> tuple[dict[str, Any], int]:
    """Audit ``tracker.host`` with ``tracker.driver``; returns ``(report, exit status)``.

    :param tracker: the host's resource tracker (its host and driver are
        audited; its tracked view is the "Tracked" column).
    :param store: the records.
    :param settings: ``migration_stuck_age``, ``service_down_time`` and
        ``driver_timeout`` (s) of the audit.
    :param request: what to do (node, heal, dry run, migrations).
    :param driver_name: the driver's entry point name, shown in the report.
    :param recorded_by: the host recorded as having searched, when heal
        records what is left.
    :param record_guests: whether the driver's guests are the host's own, so
        the ``unknown_guest`` findings left after heal are recorded too.
    :returns: the report (a JSON object, fields :meth:`AuditRequest.fields`)
        and 0 or :data:`EXIT_DIFFERENCES`.
    :raises nova_lite.exception.NodeNotFound: an unknown ``request.node``.
    :raises nova_lite.exception.MigrationNotFound: a named migration that is
        not in progress there.
    """
    host, driver = tracker.host, tracker.driver
    result = audit.audit_host(tracker, nodename=request.node)
    guests, _ = audit.list_guests(driver, settings.driver_timeout)
    found = leaks.find_leaks(store, settings, host=host, nodename=request.node,
                             guests=guests, migrations=request.migrations)
    data = result.to_dict()
    data["driver"] = driver_name   # the entry point, as ``compute`` names it
    _node_uuids(data)
    data["database"] = settings.redacted_database_url()
    data["consistent"] = result.consistent and found.clean
    data["migration_stuck_age"] = settings.migration_stuck_age
    data["leaks"] = found.to_dicts()
    recorded = store.recorded_findings(host)
    data["recorded_findings"] = None if not recorded else {
        "recorded_at": recorded[0].recorded_at,
        "findings": [f.to_dict() for f in recorded[0].findings]}
    if request.heal or request.dry_run:
        actions = leaks.heal(store, found, dry_run=not request.writes)
        data["heal"] = [attrs.asdict(a) for a in actions]
        data["dry_run"] = not request.writes
    if request.writes:
        after_tracker = ResourceTracker(host, driver, store=store, settings=settings)
        after = audit.audit_host(after_tracker, nodename=request.node)
        left = leaks.find_leaks(store, settings, host=host, nodename=request.node,
                                guests=guests)
        data["consistent_after_heal"] = after.consistent and left.clean
        data["leaks_after_heal"] = left.to_dicts()
        # What every process's metrics show for the host, now.  Guests of a
        # driver that is not the host's own are left out.
        store.record_findings(host, [f for f in left.findings
                                     if record_guests or f.kind != leaks.UNKNOWN_GUEST],
                              recorded_by=recorded_by)
    return data, exit_status(data)


__all__ = ["AuditRequest", "build_report", "exit_status", "in_order", "EXIT_DIFFERENCES",
           "REPORT_FIELDS", "HEAL_FIELDS", "AFTER_HEAL_FIELDS"]
