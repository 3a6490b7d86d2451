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
- ``stuck_migration``: a migration in progress that has not changed for
  longer than ``[compute] migration_stuck_age`` seconds (a resize waiting
  for its confirmation, status ``finished``, is waiting for a person, not
  stuck);
- ``over_capacity``: a node holding more of a class than its capacity.

:func:`plan_heal` turns the healable findings into
:class:`~nova_lite.db.heal_writes.HealChange` steps and :func:`heal`
applies them, each in its own transaction guarded by the generations the
findings were read at (a step whose node moved on is skipped, never
applied blindly), returning one :class:`HealAction` per step.  A stale
allocation is removed; a stuck migration is finished the way Nova fails
one: its allocations are dropped (the destination's claim is reverted; the
source keeps the instance's own) and it is marked ``error``.
"""

import logging
import time

import attrs

from nova_lite import explain, metrics
from nova_lite.db.heal_writes import FINISH_MIGRATION, REMOVE_ALLOCATION, HealChange
from nova_lite.exception import InvalidInput, NodeNotFound

LOG = logging.getLogger(__name__)

STALE_ALLOCATION = "stale_allocation"
UNKNOWN_GUEST = "unknown_guest"
INSTANCE_NODE_GONE = "instance_node_gone"
STUCK_MIGRATION = "stuck_migration"
OVER_CAPACITY = "over_capacity"
#: Every kind of finding, in the order they are reported.
FINDING_KINDS = (STALE_ALLOCATION, STUCK_MIGRATION, UNKNOWN_GUEST, INSTANCE_NODE_GONE,
                 OVER_CAPACITY)
#: The kinds ``heal`` repairs; the others are for an operator to decide.
HEALABLE = (STALE_ALLOCATION, STUCK_MIGRATION)
#: Status a stuck migration gets when healed (as Nova marks a failed move).
STUCK_MIGRATION_STATUS = "error"
#: Statuses that wait for a person (a resize awaiting confirmation): never stuck.
WAITING_STATUSES = frozenset({"finished"})

#: HealAction outcomes.
APPLIED, SKIPPED, PLANNED = "applied", "skipped", "would apply"


@attrs.frozen
class Finding:
    """One leak or anomaly.

    ``subject`` names the consumer, migration, guest, instance or resource
    class (``over_capacity``); ``host``/``nodename``/``node_uuid`` the node
    it is on (None if none); ``generation`` the node's generation when
    read; ``resources`` class -> amount involved; ``age`` seconds since a
    stuck migration last changed.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(FINDING_KINDS))
    subject: str
    detail: str
    host: str | None = None
    nodename: str | None = None
    node_uuid: str | None = None
    generation: int | None = None
    instance_uuid: str | None = None
    resources: dict[str, int] = attrs.field(factory=dict, converter=dict)
    age: float | None = None


@attrs.frozen
class LeakReport:
    """The findings of one host (or every host: ``host`` None) or one node."""

    host: str | None
    nodename: str | None
    findings: tuple[Finding, ...]
    guests_compared: bool
    migration_stuck_age: float
    #: What :func:`plan_heal` needs of each stuck migration: ``{uuid:
    #: (updated_at, guards, allocations)}``.
    stuck: dict[str, tuple[float, tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]] = (
        attrs.field(factory=dict, repr=False, eq=False))

    @property
    def clean(self):
        """True when nothing was found."""
        return not self.findings

    def to_dicts(self):
        """The findings as JSON-serialisable dicts."""
        return [attrs.asdict(f) for f in self.findings]


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
    resources: dict[str, int] = attrs.field(converter=dict)
    outcome: str = attrs.field(validator=attrs.validators.in_((APPLIED, SKIPPED, PLANNED)))
    detail: str = ""
    reason: str = ""


def _nodes_in_scope(store, host, nodename):
    nodes = store.get_compute_nodes(host)
    if nodename is None:
        return nodes
    if not isinstance(nodename, str) or not nodename.strip():
        raise InvalidInput(f"node must be a node name or uuid, got {nodename!r}")
    found = [n for n in nodes if nodename in (n.nodename, n.uuid)]
    if not found:
        raise NodeNotFound(nodename, host)
    return found


def find_leaks(store, settings, host=None, nodename=None, guests=None, now=None):
    """Every leak on ``host``'s nodes (every host's if None; one node with ``nodename``).

    ``settings`` gives ``migration_stuck_age`` (s); ``guests``: the guest
    uuids the host's driver lists (None: no driver, guests are not
    compared); ``now`` (epoch s) defaults to the clock.  Reads only.
    Returns a :class:`LeakReport`; raises :class:`NodeNotFound` for an
    unknown ``nodename``.
    """
    now = time.time() if now is None else now
    nodes = _nodes_in_scope(store, host, nodename)
    every_node = {(n.host, n.nodename): n for n in store.get_compute_nodes()}
    by_uuid = {n.uuid: n for n in every_node.values()}
    findings, stuck = [], {}
    instances, migrations = {}, {}
    for node in nodes:
        allocations, node_instances, node_migrations = explain.gather(store, node)
        instances.update(node_instances)
        migrations.update(node_migrations)
        result = explain.explain(node, allocations, node_instances, node_migrations, settings)
        held = {a.consumer_uuid: a for a in allocations}
        for culprit in result.culprits:
            if culprit.kind == explain.STALE_ALLOCATION:
                findings.append(Finding(
                    STALE_ALLOCATION, culprit.subject, culprit.detail, node.host,
                    node.nodename, node.uuid, node.generation,
                    held[culprit.subject].instance_uuid, culprit.resources))
            elif culprit.kind in (explain.SHRUNKEN_HOST, explain.OVER_COMMIT):
                findings.append(Finding(
                    OVER_CAPACITY, culprit.subject, culprit.detail, node.host, node.nodename,
                    node.uuid, node.generation, None, culprit.resources))
    scoped = {n.uuid for n in nodes}
    times = store.migration_times()
    for mig in store.list_migrations(in_progress_only=True):
        ends = {every_node.get((mig.source_compute, mig.source_node)),
                every_node.get((mig.dest_compute, mig.dest_node))} - {None}
        if nodename is not None and not {n.uuid for n in ends} & scoped:
            continue
        if nodename is None and host is not None and \
                host not in (mig.source_compute, mig.dest_compute):
            continue
        if mig.status in WAITING_STATUSES or mig.uuid not in times:
            continue
        age = now - times[mig.uuid][1]
        if age <= settings.migration_stuck_age:
            continue
        held = [a for a in store.list_allocations(instance_uuid=mig.instance_uuid)
                if a.consumer_uuid == mig.uuid]
        freed = {}
        for alloc in held:
            for rc, n in alloc.resources.items():
                freed[rc] = freed.get(rc, 0) + n
        dest = every_node.get((mig.dest_compute, mig.dest_node))
        guard_nodes = {a.node_uuid for a in held} | ({dest.uuid} if dest else set())
        stuck[mig.uuid] = (times[mig.uuid][1], tuple(
            (u, by_uuid[u].generation) for u in sorted(guard_nodes) if u in by_uuid),
            tuple((mig.uuid, a.node_uuid) for a in held))
        findings.append(Finding(
            STUCK_MIGRATION, mig.uuid,
            f"{mig.migration_type} of instance {mig.instance_uuid} from "
            f"{mig.source_compute}/{mig.source_node} to {mig.dest_compute}/{mig.dest_node} "
            f"has been {mig.status} for {age:.0f} s (migration_stuck_age "
            f"{settings.migration_stuck_age:g} s); it holds {_amounts(freed)}",
            mig.dest_compute, mig.dest_node, dest.uuid if dest else None,
            dest.generation if dest else None, mig.instance_uuid, freed, age))
    if nodename is None:
        findings.extend(_nodeless_instances(store, host, every_node))
    if guests is not None:
        hosts = {n.host for n in nodes} if host is None else {host}
        for guest_host in sorted(hosts):
            backing = {i.uuid: i for i in store.list_instances(host=guest_host)}
            backing.update(instances)
            for culprit in explain.unknown_guests(guest_host, guests, backing, migrations):
                findings.append(Finding(UNKNOWN_GUEST, culprit.subject, culprit.detail,
                                        guest_host, None))
    findings.sort(key=lambda f: (FINDING_KINDS.index(f.kind), f.host or "",
                                 f.nodename or "", f.subject))
    report = LeakReport(host=host, nodename=nodename, findings=tuple(findings),
                        guests_compared=guests is not None,
                        migration_stuck_age=settings.migration_stuck_age, stuck=stuck)
    metrics.record_findings(FINDING_KINDS, (f.kind for f in report.findings))
    for finding in report.findings:
        LOG.info("Leak audit: %s %s on %s/%s: %s", finding.kind, finding.subject,
                 finding.host, finding.nodename, finding.detail)
    return report


def _nodeless_instances(store, host, every_node):
    found = []
    for inst in store.list_instances(host=host):
        if inst.host is None or inst.node is None or not inst.holds_resources:
            continue
        if (inst.host, inst.node) not in every_node:
            found.append(Finding(
                INSTANCE_NODE_GONE, inst.uuid,
                f"the instance ({inst.flavor.name}, {inst.vm_state}) is recorded on "
                f"{inst.host}/{inst.node}, which has no compute node record",
                inst.host, inst.node, None, None, inst.uuid))
    return found


def _amounts(resources):
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items()) if n) or "nothing"


def plan_heal(report):
    """``[(Finding, HealChange)]`` for every healable finding of ``report``, in order."""
    plan = []
    for finding in report.findings:
        if finding.kind == STALE_ALLOCATION:
            plan.append((finding, HealChange(
                kind=REMOVE_ALLOCATION, subject=finding.subject,
                guards=((finding.node_uuid, finding.generation),),
                allocations=((finding.subject, finding.node_uuid),))))
        elif finding.kind == STUCK_MIGRATION:
            updated_at, guards, allocations = report.stuck[finding.subject]
            plan.append((finding, HealChange(
                kind=FINISH_MIGRATION, subject=finding.subject, guards=guards,
                allocations=allocations, migration_uuid=finding.subject,
                migration_status=STUCK_MIGRATION_STATUS, migration_updated_at=updated_at)))
    return plan


def heal(store, report, dry_run=False):
    """Apply (or with ``dry_run`` only describe) the heal plan of ``report``.

    Each step is its own transaction through :meth:`Store.heal`, guarded by
    the generations ``report`` read (moved on only by the steps before it
    that were applied); a step whose node another writer moved on is
    skipped and reported so.  A dry run reads nothing more and writes nothing.
    Returns a tuple of :class:`HealAction`, one per step, in order.
    """
    actions = []
    ours = {}   # node uuid -> the generation our own applied steps moved it to
    for finding, change in plan_heal(report):
        change = attrs.evolve(change, guards=tuple((node_uuid, ours.get(node_uuid, seen))
                                                   for node_uuid, seen in change.guards))
        what = ("remove the allocation" if change.kind == REMOVE_ALLOCATION else
                f"drop its allocations and mark it {change.migration_status}")
        base = dict(kind=change.kind, subject=change.subject,
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


__all__ = ["find_leaks", "plan_heal", "heal", "Finding", "LeakReport", "HealAction",
           "FINDING_KINDS", "HEALABLE", "STALE_ALLOCATION", "UNKNOWN_GUEST",
           "INSTANCE_NODE_GONE", "STUCK_MIGRATION", "OVER_CAPACITY", "APPLIED", "SKIPPED",
           "PLANNED", "STUCK_MIGRATION_STATUS"]
