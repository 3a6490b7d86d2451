"""Leaks: find them in the records, and heal the ones that can be healed.

:func:`find_leaks` reads the records (and, when a driver is available, the
guests it lists) and returns a :class:`LeakReport` of typed
:class:`Finding` records:

- ``stale_allocation``: an allocation held by a deleted or unknown
  instance, a finished or unknown migration, or an instance recorded on
  another node;
- ``unknown_guest``: a guest the hypervisor has that no record knows
  (only when guests are given);
- ``instance_node_gone``: a live instance whose host/node has no record;
- ``move_waiting``: a move in progress, unchanged for longer than
  ``[compute] migration_stuck_age`` seconds, whose source and destination
  compute services are both up: a resize waiting for confirm or revert, or
  a move its services are still carrying out.  Reported, never healed;
- ``stuck_migration``: such a move whose source or destination service is
  down (no heartbeat within ``service_down_time``, or no service record),
  or one the operator named (``audit --heal --migration UUID``): nobody is
  left to finish it;
- ``over_capacity``: a node holding more of a class than its capacity.

Every finding is read from one snapshot of the records
(:meth:`~nova_lite.db.Store.records_snapshot`), so it was true at one
moment: a consumer deleted between two reads is never reported as a leak.
Whether a consumer holds resources is :mod:`nova_lite.holds`, the rule the
periodic pass uses too.

:func:`plan_heal` turns the healable findings into
:class:`~nova_lite.db.heal_writes.HealChange` steps and :func:`heal`
applies them, each in its own transaction, which re-checks the consumer's
own record under its lock (a stale allocation whose consumer holds
resources again, a migration that moved on or whose service came back, is
skipped) and the generations the findings were read at: nothing is
applied blindly.  It returns one :class:`HealAction` per step.  A stale
allocation is removed; a stuck move is finished: one whose guest already
runs on the destination (``finished``, ``confirming``) is confirmed (the
source's claim is freed, the destination's becomes the instance's), one
being reverted is reverted, and any other is failed as Nova fails one
(the destination's claim is dropped, the source keeps the instance's own,
and it is marked ``error``).
"""

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import explain, holds
from nova_lite.db.heal_writes import FINISH_MIGRATION, REMOVE_ALLOCATION, HealChange
from nova_lite.exception import InvalidInput, MigrationNotFound, NodeNotFound
from nova_lite.findings import (  # noqa: F401 - public names of this module too
    FINDING_KINDS, HEALABLE, INSTANCE_NODE_GONE, MOVE_WAITING, OVER_CAPACITY, STALE_ALLOCATION,
    STUCK_MIGRATION, UNKNOWN_GUEST, Finding)
from nova_lite.objects import ComputeNode, Instance, Migration

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.db.snapshot import RecordsSnapshot
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

#: Status a stuck migration gets when healed (as Nova marks a failed move),
#: unless its guest runs on the destination already (confirmed) or it was
#: being reverted (reverted).
STUCK_MIGRATION_STATUS = "error"

#: HealAction outcomes.
APPLIED, SKIPPED, PLANNED = "applied", "skipped", "would apply"

# Every node record by (host, node name).
_NodesByName = Mapping[tuple[str, str], ComputeNode]


@attrs.frozen
class LeakReport:
    """The findings of one host (or every host: ``host`` None) or one node."""

    host: str | None
    nodename: str | None
    findings: tuple[Finding, ...]
    guests_compared: bool
    migration_stuck_age: float
    #: What :func:`plan_heal` needs of each stuck migration, by uuid.
    stuck: "dict[str, _StuckPlan]" = attrs.field(factory=dict, repr=False, eq=False)
    service_down_time: float = 60.0

    @property
    def clean(self) -> bool:
        """True when nothing was found."""
        return not self.findings

    def to_dicts(self) -> list[dict[str, Any]]:
        """The findings as JSON-serialisable dicts."""
        return [f.to_dict() for f in self.findings]


def _amounts_dict(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


@attrs.frozen
class HealAction:
    """One heal step and what became of it.

    ``kind`` is ``remove_allocation`` or ``finish_migration``; ``outcome``
    ``applied``, ``skipped`` (``reason`` says why: nothing was written) or
    ``would apply`` (a dry run); ``resources`` what it frees (class ->
    amount, summed over its nodes).
    """

    kind: str
    subject: str
    instance_uuid: str
    host: str
    nodename: str
    resources: dict[str, int] = attrs.field(converter=_amounts_dict)
    outcome: str = attrs.field(validator=attrs.validators.in_((APPLIED, SKIPPED, PLANNED)))
    detail: str = ""
    reason: str = ""


def _nodes_in_scope(snap: "RecordsSnapshot", host: str | None,
                    nodename: str | None) -> list[ComputeNode]:
    nodes = snap.scoped_nodes()
    if nodename is None:
        return nodes
    if not isinstance(nodename, str) or not nodename.strip():
        raise InvalidInput(f"node must be a node name or uuid, got {nodename!r}")
    found = [n for n in nodes if nodename in (n.nodename, n.uuid)]
    if not found:
        raise NodeNotFound(nodename, host)
    return found


def find_leaks(store: "Store", settings: "Settings", host: str | None = None,
               nodename: str | None = None, guests: Iterable[str] | None = None,
               now: float | None = None, migrations: Iterable[str] = ()) -> LeakReport:
    """Every leak on ``host``'s nodes (every host's if None; one node with ``nodename``).

    ``settings`` gives ``migration_stuck_age`` and ``service_down_time``
    (s); ``guests``: the guest uuids the host's driver lists (None: no
    driver, guests are not compared); ``now`` (epoch s) defaults to the
    clock; ``migrations``: uuids of moves the operator names for heal to
    finish whatever their services (each must be in progress and in
    scope).  Reads only, from one snapshot of the records.  Returns a
    :class:`LeakReport`; raises :class:`NodeNotFound` for an unknown
    ``nodename`` and :class:`MigrationNotFound` for a named migration that
    is not in progress there.
    """
    snap = store.records_snapshot(host)
    report = findings_from(snap, settings, nodename=nodename, guests=guests, now=now,
                           migrations=migrations)
    for finding in report.findings:
        LOG.info("Leak audit: %s %s on %s/%s: %s", finding.kind, finding.subject,
                 finding.host, finding.nodename, finding.detail)
    return report


def findings_from(snap: "RecordsSnapshot", settings: "Settings", nodename: str | None = None,
                  guests: Iterable[str] | None = None, now: float | None = None,
                  migrations: Iterable[str] = ()) -> LeakReport:
    """The :class:`LeakReport` of a :class:`~nova_lite.db.snapshot.RecordsSnapshot`
    (pure: see :func:`find_leaks` for the arguments)."""
    host = snap.host
    now = snap.read_at if now is None else now
    nodes = _nodes_in_scope(snap, host, nodename)
    every_node = {(n.host, n.nodename): n for n in snap.nodes}
    findings: list[Finding] = []
    stuck: dict[str, _StuckPlan] = {}
    instances: dict[str, Instance] = {}
    moves: dict[str, Migration] = {}
    for node in nodes:
        allocations, node_instances, node_migrations = explain.gather_from(snap, node)
        instances.update(node_instances)
        moves.update(node_migrations)
        culprits = explain.node_culprits(node, allocations, node_instances, node_migrations,
                                         settings)
        held = {a.consumer_uuid: a for a in allocations}
        for culprit in culprits:
            if culprit.kind == explain.STALE_ALLOCATION:
                findings.append(Finding(
                    STALE_ALLOCATION, culprit.subject, culprit.detail, node.host,
                    node.nodename, node.uuid, node.generation,
                    held[culprit.subject].instance_uuid, culprit.resources))
            elif culprit.kind in (explain.SHRUNKEN_HOST, explain.OVER_COMMIT):
                findings.append(Finding(
                    OVER_CAPACITY, culprit.subject, culprit.detail, node.host, node.nodename,
                    node.uuid, node.generation, None, culprit.resources))
    named = frozenset(migrations)
    in_scope = _moves_in_scope(snap, nodes, nodename, every_node)
    unknown = sorted(named - {m.uuid for m in in_scope})
    if unknown:
        raise MigrationNotFound(unknown[0], "in progress on " + (
            f"node {nodename}" if nodename else f"host {host}" if host else "any host"))
    for mig in in_scope:
        finding, plan = _move_finding(snap, mig, settings, now, every_node, mig.uuid in named)
        if finding is not None:
            findings.append(finding)
        if plan is not None:
            stuck[mig.uuid] = plan
    if nodename is None:
        findings.extend(_nodeless_instances(snap, host, every_node))
    if guests is not None:
        hosts = {n.host for n in nodes} if host is None else {host}
        for guest_host in sorted(hosts):
            backing = {u: i for u, i in snap.instances.items() if i.host == guest_host}
            backing.update(instances)
            for culprit in explain.unknown_guests(guest_host, guests, backing, moves):
                findings.append(Finding(UNKNOWN_GUEST, culprit.subject, culprit.detail,
                                        guest_host, None))
    findings.sort(key=lambda f: (FINDING_KINDS.index(f.kind), f.host or "",
                                 f.nodename or "", f.subject))
    return LeakReport(host=host, nodename=nodename, findings=tuple(findings),
                      guests_compared=guests is not None,
                      migration_stuck_age=settings.migration_stuck_age, stuck=stuck,
                      service_down_time=settings.service_down_time)


def _moves_in_scope(snap: "RecordsSnapshot", nodes: Iterable[ComputeNode], nodename: str | None,
                    every_node: _NodesByName) -> list[Migration]:
    scoped = {n.uuid for n in nodes}
    found = []
    for mig in sorted(snap.migrations.values(), key=lambda m: m.uuid):
        if not mig.in_progress or mig.uuid not in snap.migration_times:
            continue
        ends = {n for n in (every_node.get((mig.source_compute, mig.source_node)),
                            every_node.get((mig.dest_compute, mig.dest_node))) if n is not None}
        if nodename is not None and not {n.uuid for n in ends} & scoped:
            continue
        if nodename is None and snap.host is not None and \
                snap.host not in (mig.source_compute, mig.dest_compute):
            continue
        found.append(mig)
    return found


def _down_hosts(snap: "RecordsSnapshot", mig: Migration, settings: "Settings",
                now: float) -> dict[str, str]:
    """``{host: why}`` of the move's ends whose compute service is down."""
    down: dict[str, str] = {}
    for end in sorted({mig.source_compute, mig.dest_compute}):
        beat = snap.services.get(end)
        if beat is None:
            down[end] = f"host {end} has no compute service record"
        elif not beat.is_up(settings.service_down_time, now):
            down[end] = (f"the compute service of host {end} is down since "
                         f"{_when(beat.updated_at)} (no heartbeat for "
                         f"{now - beat.updated_at:.0f} s; service_down_time "
                         f"{settings.service_down_time:g} s)")
    return down


def _move_finding(snap: "RecordsSnapshot", mig: Migration, settings: "Settings", now: float,
                  every_node: _NodesByName,
                  named: bool) -> "tuple[Finding | None, _StuckPlan | None]":
    """``(Finding or None, heal plan or None)`` for one move in progress.

    A move unchanged for longer than migration_stuck_age is stuck (heal
    finishes it) only when a service that must act on it is down, or the
    operator named it; with both services up it waits and is left alone.
    """
    updated_at = snap.migration_times[mig.uuid][1]
    age = now - updated_at
    if age <= settings.migration_stuck_age and not named:
        return None, None
    held = [a for a in snap.allocations if a.consumer_uuid == mig.uuid]
    freed: dict[str, int] = {}
    for alloc in held:
        for rc, n in alloc.resources.items():
            freed[rc] = freed.get(rc, 0) + n
    dest = every_node.get((mig.dest_compute, mig.dest_node))
    source = every_node.get((mig.source_compute, mig.source_node))
    what = (f"{mig.migration_type} of instance {mig.instance_uuid} from "
            f"{mig.source_compute}/{mig.source_node} to {mig.dest_compute}/{mig.dest_node}")
    place = (mig.dest_compute, mig.dest_node, dest.uuid if dest else None,
             dest.generation if dest else None, mig.instance_uuid, freed, age)
    down = _down_hosts(snap, mig, settings, now)
    if not down and not named:
        waiting = ("waiting for confirm or revert" if mig.status in
                   holds.MIGRATION_WAITING_FOR_CONFIRM else f"in progress ({mig.status})")
        return Finding(
            MOVE_WAITING, mig.uuid,
            f"move waiting for confirm or revert since {_when(updated_at)}: {what} has been "
            f"{waiting} for {age:.0f} s and holds {_amounts(freed)}; both compute services "
            "are up, so heal leaves it to them (name it with --migration to finish it)",
            *place), None
    action = _finish_action(mig.status)
    why = ("the operator named it" if named else "; ".join(down[h] for h in sorted(down)))
    finding = Finding(
        STUCK_MIGRATION, mig.uuid,
        f"{what} has been {mig.status} for {age:.0f} s (migration_stuck_age "
        f"{settings.migration_stuck_age:g} s) and {why}; it holds {_amounts(freed)}; heal "
        f"marks it {action}", *place)
    guard_nodes = {a.node_uuid for a in held} | ({dest.uuid} if dest else set())
    if action == "confirmed" and source is not None:
        guard_nodes.add(source.uuid)
    by_uuid = {n.uuid: n for n in snap.nodes}
    plan = _StuckPlan(
        updated_at=updated_at,
        guards=tuple((u, by_uuid[u].generation) for u in sorted(guard_nodes) if u in by_uuid),
        allocations=tuple((mig.uuid, a.node_uuid) for a in held),
        status=action, source_node_uuid=source.uuid if source is not None else None,
        down_hosts=() if named else tuple(sorted(down)), named=named)
    return finding, plan


def _finish_action(status: str) -> str:
    """The status heal gives a stuck move in ``status``."""
    if status in holds.MIGRATION_WAITING_FOR_CONFIRM:
        return "confirmed"
    if status == "reverting":
        return "reverted"
    return STUCK_MIGRATION_STATUS


@attrs.frozen
class _StuckPlan:
    updated_at: float
    guards: tuple[tuple[str, int], ...]
    allocations: tuple[tuple[str, str], ...]
    status: str
    source_node_uuid: str | None
    down_hosts: tuple[str, ...]
    named: bool


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _nodeless_instances(snap: "RecordsSnapshot", host: str | None,
                        every_node: _NodesByName) -> list[Finding]:
    found = []
    for inst in snap.instances.values():
        if host is not None and inst.host != host:
            continue
        if inst.host is None or inst.node is None or not inst.holds_resources:
            continue
        if (inst.host, inst.node) not in every_node:
            found.append(Finding(
                INSTANCE_NODE_GONE, inst.uuid,
                f"the instance ({inst.flavor.name}, {inst.vm_state}) is recorded on "
                f"{inst.host}/{inst.node}, which has no compute node record",
                inst.host, inst.node, None, None, inst.uuid))
    return found


def _amounts(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items()) if n) or "nothing"


def plan_heal(report: LeakReport) -> list[tuple[Finding, HealChange]]:
    """``[(Finding, HealChange)]`` for every healable finding of ``report``, in order."""
    plan: list[tuple[Finding, HealChange]] = []
    for finding in report.findings:
        if finding.kind == STALE_ALLOCATION:
            # A stale allocation is always found on a node, at a generation.
            assert finding.node_uuid is not None and finding.generation is not None
            plan.append((finding, HealChange(
                kind=REMOVE_ALLOCATION, subject=finding.subject,
                guards=((finding.node_uuid, finding.generation),),
                allocations=((finding.subject, finding.node_uuid),))))
        elif finding.kind == STUCK_MIGRATION:
            stuck = report.stuck[finding.subject]
            plan.append((finding, HealChange(
                kind=FINISH_MIGRATION, subject=finding.subject, guards=stuck.guards,
                allocations=stuck.allocations, migration_uuid=finding.subject,
                migration_status=stuck.status, migration_updated_at=stuck.updated_at,
                source_node_uuid=stuck.source_node_uuid, down_hosts=stuck.down_hosts,
                service_down_time=report.service_down_time)))
    return plan


def heal(store: "Store", report: LeakReport, dry_run: bool = False) -> tuple[HealAction, ...]:
    """Apply (or with ``dry_run`` only describe) the heal plan of ``report``.

    Each step is its own transaction through :meth:`Store.heal`, guarded by
    the generations ``report`` read (moved on only by the steps before it
    that were applied); a step whose node another writer moved on is
    skipped and reported so.  A dry run reads nothing more and writes nothing.
    Returns a tuple of :class:`HealAction`, one per step, in order.
    """
    actions: list[HealAction] = []
    ours: dict[str, int] = {}   # node uuid -> the generation our own applied steps moved it to
    for finding, change in plan_heal(report):
        change = attrs.evolve(change, guards=tuple((node_uuid, ours.get(node_uuid, seen))
                                                   for node_uuid, seen in change.guards))
        what = ("remove the allocation" if change.kind == REMOVE_ALLOCATION else
                "confirm it: free the source and keep the destination" if
                change.migration_status == "confirmed" else
                f"drop its destination's claim and mark it {change.migration_status}")
        base: dict[str, Any] = dict(kind=change.kind, subject=change.subject,
                    instance_uuid=finding.instance_uuid, host=finding.host,
                    nodename=finding.nodename, resources=finding.resources,
                    detail=f"{what}: {finding.detail}")
        if dry_run:
            actions.append(HealAction(outcome=PLANNED, **base))
            continue
        result = store.heal(change)
        if result.applied:
            ours.update(result.generations)
            LOG.warning("Healed: %s %s on %s/%s (%s)", change.kind, change.subject,
                        finding.host, finding.nodename, _amounts(finding.resources))
            actions.append(HealAction(outcome=APPLIED, **base))
        else:
            LOG.warning("Heal step skipped: %s %s: %s", change.kind, change.subject,
                        result.reason)
            actions.append(HealAction(outcome=SKIPPED, reason=result.reason, **base))
    return tuple(actions)


__all__ = ["find_leaks", "findings_from", "plan_heal", "heal", "Finding", "LeakReport",
           "HealAction", "FINDING_KINDS", "HEALABLE", "STALE_ALLOCATION", "UNKNOWN_GUEST",
           "INSTANCE_NODE_GONE", "STUCK_MIGRATION", "MOVE_WAITING", "OVER_CAPACITY",
           "APPLIED", "SKIPPED", "PLANNED", "STUCK_MIGRATION_STATUS"]
