"""``ResourceTracker``: audits what the driver reports and admits claims.

Orchestration only: the arithmetic is in :mod:`.accounting` and
:mod:`.placement`, the transactions in :mod:`nova_lite.db.store`.  All
state is per node, behind one fair lock per node; the slow driver calls of
an audit run outside every lock.
"""

import logging
import uuid as uuidlib

import attrs

from nova_lite import conf
from nova_lite.compute import accounting, placement
from nova_lite.compute.claims import Claim, ComputeResourcesUnavailable, MoveClaim, NopClaim
from nova_lite.compute.driver_calls import DriverCaller
from nova_lite.compute.locks import NodeLocks
from nova_lite.db.store import ClaimPlan, NodeAudit, Store
from nova_lite.exception import DriverNotReady, InstanceNotFound, InvalidInput, NodeNotFound
from nova_lite.objects import (
    Allocation, ComputeNode, Flavor, Instance, Migration, NodeResources, NodeUsage)

LOG = logging.getLogger(__name__)


@attrs.frozen
class AuditResult:
    """One audit pass: nodes recorded, and nodes skipped with the reason.

    ``skipped`` is the reason the whole pass was skipped (the driver was
    not ready), else None.
    """

    audited: tuple = ()
    failed: object = attrs.field(factory=dict)
    skipped: object = None


class _Tracked:
    """One node as tracked here: its record and its current usage."""

    __slots__ = ("node", "usage")

    def __init__(self, node, usage):
        self.node = node
        self.usage = usage


def _usage_of(node):
    return NodeUsage(generation=node.generation, amounts=node.usage,
                     numa_placements=node.numa_placements, pci_in_use=node.pci_in_use)


class ResourceTracker:
    """Tracks the nodes of one compute service (``host``).

    ``driver``: a ComputeDriver, ``init_host``-ed; ``store``: a
    :class:`~nova_lite.db.Store` (default: an in-memory one); ``settings``:
    :class:`~nova_lite.conf.Settings` (default: the driver's).
    """

    def __init__(self, host, driver, store=None, settings=None):
        self.host = host
        self.driver = driver
        self.settings = settings or getattr(driver, "settings", None) or conf.Settings()
        self.store = store if store is not None else Store(
            "sqlite://", claim_retries=self.settings.claim_retries)
        self._locks = NodeLocks()
        self._nodes = {}
        self._calls = DriverCaller(self.settings.driver_timeout)
        attach = getattr(driver, "attach_store", None)
        if callable(attach):
            attach(self.store)

    # -- views ----------------------------------------------------------------
    def get_node(self, nodename):
        """The :class:`ComputeNode` as tracked now; raises NodeNotFound.

        If another process or host changed the node since (its generation
        moved on), the records are read again: they are the truth.
        """
        with self._locks[nodename]:
            tracked = self._tracked(nodename)
            try:
                current = self.store.node_usage(tracked.node.uuid)
            except NodeNotFound:
                current = None   # deleted as an orphan meanwhile: the last view
            if current is not None and current.generation != tracked.usage.generation:
                node = self.store.get_compute_node(self.host, nodename)
                tracked.node, tracked.usage = node, _usage_of(node)
            return _view(tracked)

    def nodenames(self):
        """Names of the nodes tracked here."""
        return sorted(self._nodes)

    def _tracked(self, nodename):
        tracked = self._nodes.get(nodename)
        if tracked is None:
            # Another process may have audited it; records are the truth.
            try:
                node = self.store.get_compute_node(self.host, nodename)
            except NodeNotFound:
                raise NodeNotFound(nodename, self.host) from None
            tracked = self._nodes[nodename] = _Tracked(node, _usage_of(node))
        return tracked

    # -- the audit ---------------------------------------------------------------
    def update_available_resource(self, nodename=None):
        """Audit every node (or just ``nodename``) and record the result.

        Driver calls run outside the locks, each with ``driver_timeout``.
        A node whose report is malformed, raises or hangs is skipped and
        marked with the reason; the others are recorded.  Usage is rebuilt
        from the records.  Returns an :class:`AuditResult`.  If the driver
        raises DriverNotReady while listing its nodes, nothing is recorded and
        the result's ``skipped`` says why (one WARNING).
        """
        if nodename is not None:
            names = [nodename]
        else:
            try:
                names = self._calls.call(self.driver.get_available_nodes,
                                         what="get_available_nodes")
            except DriverNotReady as exc:
                LOG.warning("Virt driver of host %s is not ready (%s); skipping this audit "
                            "and keeping every node record as it is", self.host, exc)
                return AuditResult(skipped=str(exc) or type(exc).__name__)
        outcomes = self._calls.map(self.driver.get_available_resource, names,
                                   what="get_available_resource")
        audits, failed = [], {}
        for outcome in outcomes:
            name = outcome.item
            try:
                if outcome.error is not None:
                    raise outcome.error
                audits.append(self._audit_entry(name, outcome.value))
            except Exception as exc:   # noqa: BLE001 - one node's failure is reported
                failed[name] = f"{type(exc).__name__}: {exc}"
                LOG.error("Skipping node %s of host %s in this audit: %s",
                          name, self.host, failed[name])
        audits = _refuse_shared_uuids(audits, failed, self.host)
        with self._locks.holding(a.nodename for a in audits):
            recorded = self.store.record_audit(self.host, audits, self._rebuild_allocation)
            for name, node in recorded.items():
                self._nodes[name] = _Tracked(node, _usage_of(node))
                _log_final_view(node)
        for name, reason in failed.items():
            self._mark_failed(name, reason)
        if nodename is None:
            for gone in set(self._nodes) - set(names):
                del self._nodes[gone]
        return AuditResult(audited=tuple(sorted(recorded)), failed=failed)

    def _audit_entry(self, nodename, report):
        if isinstance(report, dict):
            report = NodeResources.from_dict(report, nodename=nodename)
        if not isinstance(report, NodeResources):
            raise InvalidInput(
                f"driver returned {type(report).__name__}, not NodeResources, for "
                f"node {nodename!r}")
        inventories = accounting.build_inventories(report, self.settings)
        LOG.info("Node %s/%s hypervisor view: vcpus=%d used=%d memory=%dMB used=%dMB "
                 "disk=%dGB used=%dGB disk_available_least=%s", self.host, nodename,
                 report.vcpus, report.vcpus_used, report.memory_mb, report.memory_mb_used,
                 report.local_gb, report.local_gb_used, report.disk_available_least)
        return NodeAudit(nodename=nodename, resources=report, inventories=inventories,
                         node_uuid=report.uuid)

    def _mark_failed(self, nodename, reason):
        # Mark the record even when this tracker has not loaded it yet
        # (after a restart, or a node that vanished and came back).
        self.store.set_node_error(self.host, nodename, reason)
        tracked = self._nodes.get(nodename)
        if tracked is not None:
            tracked.node = attrs.evolve(tracked.node, last_error=reason)

    def _rebuild_allocation(self, consumer, node_uuid, numa_request):
        """The Allocation a claim would have recorded for ``consumer`` (an audit's repair).

        Mirrors :meth:`_claim`: the NUMA request is the instance's, else the
        one its flavor implies, so a pinned instance counts PCPU again.
        """
        if isinstance(consumer, Migration):
            flavor, instance_uuid, kind = consumer.new_flavor, consumer.instance_uuid, "migration"
            # Where the destination pinned it is lost with the allocation: the
            # rebuilt one counts the amounts, not the cells.
            subject, pci, placed = flavor, (), None
        else:
            flavor, instance_uuid, kind = consumer.flavor, consumer.uuid, "instance"
            subject, pci, placed = consumer, consumer.pci_devices, consumer.numa_topology
        numa = numa_request or accounting.flavor_numa_request(flavor)
        overhead = self.driver.estimate_instance_overhead(subject)
        return Allocation(
            consumer_uuid=consumer.uuid, consumer_type=kind, instance_uuid=instance_uuid,
            node_uuid=node_uuid, resources=accounting.requested_resources(flavor, overhead, numa),
            flavor=flavor, numa_topology=placed, pci_devices=pci)

    # -- claims -------------------------------------------------------------------
    def instance_claim(self, instance, nodename, limits=None):
        """Claim ``instance``'s flavor plus overhead on ``nodename``.

        Returns a :class:`Claim`; raises ComputeResourcesUnavailable with
        every reason, or NodeNotFound for a node not tracked here.
        """
        _check_instance(instance)
        return self._claim(instance, instance.flavor, nodename, limits, migration=None)

    def resize_claim(self, instance, new_flavor, nodename, limits=None):
        """Claim ``new_flavor`` on ``nodename`` for a resize of ``instance``.

        Returns a :class:`MoveClaim` whose ``migration`` is recorded.  On the
        same node both flavors count until confirm or revert.
        """
        _check_instance(instance)
        if not isinstance(new_flavor, Flavor):
            raise InvalidInput(f"new_flavor must be a Flavor, got {new_flavor!r}")
        self._check_movable(instance)
        return self._claim(instance, new_flavor, nodename, limits,
                           migration=self._new_migration(instance, new_flavor, nodename,
                                                         "resize"))

    def rebuild_claim(self, instance, nodename, limits=None):
        """Claim for a rebuild: nothing on the instance's own node, else an evacuation."""
        _check_instance(instance)
        if self._placement_of(instance) == (self.host, nodename):
            with self._locks[nodename]:
                self._tracked(nodename)
            return NopClaim(instance, nodename)
        self._check_movable(instance)
        return self._claim(instance, instance.flavor, nodename, limits,
                           migration=self._new_migration(instance, instance.flavor, nodename,
                                                         "evacuation"))

    def _check_movable(self, instance):
        """A move needs a live instance on record and no other move in progress
        (else its allocations would be counted twice)."""
        stored = self.store.get_instance(instance.uuid)   # InstanceNotFound
        if not stored.holds_resources:
            raise InvalidInput(f"Instance {instance.uuid} is {stored.vm_state}: there is "
                               "nothing to move")
        moving = self.store.list_migrations(instance.uuid, in_progress_only=True)
        if moving:
            raise InvalidInput(
                f"Instance {instance.uuid} already has migration {moving[-1].uuid} "
                f"({moving[-1].status}) in progress; confirm, revert or abort it first")

    def _placement_of(self, instance):
        """(host, node) of ``instance``: its own, else its record's.

        Callers may hold the Instance they built before the claim placed
        it; the record knows where it landed.
        """
        if instance.host is not None and instance.node is not None:
            return instance.host, instance.node
        try:
            stored = self.store.get_instance(instance.uuid)
        except InstanceNotFound:
            return instance.host, instance.node
        return stored.host, stored.node

    def _new_migration(self, instance, new_flavor, nodename, kind):
        host, node = self._placement_of(instance)
        return Migration(
            uuid=str(uuidlib.uuid4()), instance_uuid=instance.uuid,
            source_compute=host or self.host, source_node=node or nodename,
            dest_compute=self.host, dest_node=nodename, old_flavor=instance.flavor,
            new_flavor=new_flavor, status="pre-migrating", migration_type=kind)

    def _claim(self, instance, flavor, nodename, limits, migration):
        # What is asked for depends on the request alone: worked out before the
        # node's lock, so a slow driver estimate holds up no other claim.
        overhead = self.driver.estimate_instance_overhead(
            instance if migration is None else flavor)
        # An instance without a NUMA request gets the one its flavor implies
        # (hw:cpu_policy=dedicated, hw:numa_nodes, hw:mem_page_size), as in Nova.
        numa_request = instance.numa_topology or accounting.flavor_numa_request(flavor)
        requested = accounting.requested_resources(flavor, overhead, numa_request)
        consumer = migration.uuid if migration is not None else instance.uuid
        with self._locks[nodename]:
            tracked = self._tracked(nodename)
            node = tracked.node

            def decide(usage):
                decision = placement.decide(node, usage, requested, limits,
                                            numa_request, instance.pci_requests)
                if decision.reasons:
                    raise ComputeResourcesUnavailable(decision.reasons)
                alloc = Allocation(
                    consumer_uuid=consumer,
                    consumer_type="instance" if migration is None else "migration",
                    instance_uuid=instance.uuid, node_uuid=node.uuid, resources=requested,
                    flavor=flavor, numa_topology=decision.numa_topology,
                    pci_devices=decision.pci_devices)
                placed = None
                if migration is None:
                    placed = attrs.evolve(
                        instance, host=self.host, node=nodename,
                        numa_topology=decision.numa_topology or instance.numa_topology,
                        pci_devices=decision.pci_devices)
                return ClaimPlan(allocation=alloc, instance=placed, migration=migration)

            try:
                seen, plan, generation = self.store.claim(node.uuid, tracked.usage, decide)
            except ComputeResourcesUnavailable as exc:
                LOG.info("Claim of instance %s (%s) on node %s of host %s rejected: %s",
                         instance.uuid, flavor.name, nodename, self.host, "; ".join(exc.reasons))
                raise
            tracked.usage = accounting.add_usage(seen, plan.allocation, generation=generation)
        if LOG.isEnabledFor(logging.INFO):
            LOG.info("Claim of instance %s (%s) on node %s successful: %s", instance.uuid,
                     flavor.name, nodename, dict(requested))
        if migration is None:
            return Claim(self, plan.instance, nodename, plan.allocation)
        return MoveClaim(self, instance, nodename, plan.allocation, migration)

    # -- giving back ------------------------------------------------------------
    def _release(self, nodename, consumers, **changes):
        """Drop ``consumers``' allocations on ``nodename`` (one transaction)."""
        with self._locks[nodename]:
            tracked = self._tracked(nodename)
            fresh = self.store.release([tracked.node.uuid], consumers, **changes)
            tracked.usage = fresh[tracked.node.uuid]

    def abort_instance_claim(self, instance, nodename):
        """Give back everything ``instance`` holds on ``nodename``."""
        _check_instance(instance)
        self.store.get_instance(instance.uuid)   # InstanceNotFound: nothing to give back
        self._release(nodename, [instance.uuid], instance=attrs.evolve(
            instance, host=None, node=None, pci_devices=()))
        LOG.info("Aborted claim of instance %s on node %s", instance.uuid, nodename)

    def abort_move_claim(self, migration):
        """Free a move claim's destination and mark its migration "error"."""
        self._release(migration.dest_node, [migration.uuid],
                      migration_status=(migration.uuid, "error"))

    def drop_move_claim(self, instance, nodename, flavor):
        """Free ``flavor`` held for ``instance`` on ``nodename``.

        Confirm: the old flavor at the source (the new one becomes the
        instance's own).  Revert: the new flavor at the destination.
        """
        _check_instance(instance)
        migration = self._migration_in_progress(instance)
        tracked_uuid = self._tracked_node_uuid(nodename)
        held = self.store.list_allocations(node_uuid=tracked_uuid, instance_uuid=instance.uuid)
        match = [a for a in held if a.flavor == flavor]
        if not match:
            raise InstanceNotFound(
                instance.uuid, f"holding flavor {flavor.name!r} on node {nodename!r}")
        # On a same-node resize to an equal flavor both match: confirm wins.
        alloc = sorted(match, key=lambda a: a.consumer_type != "instance")[0]
        if alloc.consumer_type == "migration":
            self._release(nodename, [migration.uuid],
                          migration_status=(migration.uuid, "reverted"))
            LOG.info("Reverted resize of instance %s: freed %s on %s", instance.uuid,
                     flavor.name, nodename)
            return
        moved = self.store.list_allocations(instance_uuid=instance.uuid)
        target = [a for a in moved if a.consumer_uuid == migration.uuid]
        numa = target[0].numa_topology if target else instance.numa_topology
        pci = target[0].pci_devices if target else ()
        confirmed = attrs.evolve(instance, flavor=migration.new_flavor,
                                 host=migration.dest_compute, node=migration.dest_node,
                                 numa_topology=numa, pci_devices=pci)
        self._release(nodename, [instance.uuid], instance=confirmed,
                      migration_status=(migration.uuid, "confirmed"),
                      transfer=(migration.uuid, instance.uuid))
        LOG.info("Confirmed resize of instance %s: freed %s on %s", instance.uuid,
                 flavor.name, nodename)

    def _migration_in_progress(self, instance):
        migrations = self.store.list_migrations(instance.uuid, in_progress_only=True)
        if not migrations:
            raise InstanceNotFound(instance.uuid, "with a migration in progress")
        return migrations[-1]

    def _tracked_node_uuid(self, nodename):
        with self._locks[nodename]:
            return self._tracked(nodename).node.uuid

    def update_usage(self, instance):
        """Record ``instance``'s new state; deleted or shelve-offloaded frees it at once.

        One transaction: the instance row and its allocations change
        together, so no audit ever sees a live instance without its
        allocation, nor a deleted one still holding resources.
        """
        _check_instance(instance)
        fresh = self.store.record_instance_state(instance)
        self._adopt_usages(fresh)
        if not instance.holds_resources:
            LOG.info("Instance %s is %s: freed its resources", instance.uuid,
                     instance.vm_state)

    def _adopt_usages(self, fresh):
        """Take ``{node_uuid: NodeUsage}`` read in a transaction for the nodes tracked here.

        A usage older than the one tracked (a claim committed since) is
        ignored: generations only move forward.
        """
        if not fresh:
            return
        names = {t.node.uuid: name for name, t in self._nodes.items() if t.node.uuid in fresh}
        for node_uuid, name in names.items():
            with self._locks[name]:
                tracked = self._nodes.get(name)
                if tracked is not None and \
                        fresh[node_uuid].generation > tracked.usage.generation:
                    tracked.usage = fresh[node_uuid]


def _refuse_shared_uuids(audits, failed, host):
    """Drop (into ``failed``) the nodes whose report gives a uuid another node's gives too.

    A uuid names one node record; which of the nodes owns it cannot be
    told, so neither is recorded.
    """
    by_uuid = {}
    for audit in audits:
        if audit.node_uuid is not None:
            by_uuid.setdefault(audit.node_uuid, []).append(audit.nodename)
    shared = {u: names for u, names in by_uuid.items() if len(names) > 1}
    if not shared:
        return audits
    kept = []
    for audit in audits:
        names = shared.get(audit.node_uuid)
        if names is None:
            kept.append(audit)
            continue
        failed[audit.nodename] = (
            f"InvalidNodeResources: the driver reported uuid {audit.node_uuid} for nodes "
            f"{', '.join(repr(n) for n in sorted(names))}; a uuid names one node")
        LOG.error("Skipping node %s of host %s in this audit: %s", audit.nodename, host,
                  failed[audit.nodename])
    return kept


def _check_instance(instance):
    if not isinstance(instance, Instance):
        raise InvalidInput(f"expected an Instance record, got {type(instance).__name__}")


def _view(tracked):
    node, usage = tracked.node, tracked.usage
    inventories = {rc: attrs.evolve(inv, used=usage.amounts.get(rc, 0))
                   for rc, inv in node.inventories.items()}
    return attrs.evolve(node, generation=usage.generation, usage=dict(usage.amounts),
                        inventories=inventories, numa_placements=usage.numa_placements,
                        pci_in_use=usage.pci_in_use)


def _log_final_view(node):
    if not LOG.isEnabledFor(logging.INFO):
        return
    parts = [f"{rc}: capacity={inv.capacity} used={node.used(rc)} free={node.free(rc)}"
             for rc, inv in sorted(node.inventories.items())]
    LOG.info("Node %s/%s final view: %s", node.host, node.nodename,
             "; ".join(parts) or "no inventory")


__all__ = ["ResourceTracker", "AuditResult", "ComputeNode"]
