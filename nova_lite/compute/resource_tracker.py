"""``ResourceTracker``: audits what the driver reports and admits claims.

Orchestration only: the arithmetic is in :mod:`.accounting` and
:mod:`.placement`, the transactions in :mod:`nova_lite.db.store`.  All
state is per node, behind one fair lock per node; the slow driver calls of
an audit run outside every lock.
"""

import logging
import time
import uuid as uuidlib
from collections.abc import Iterable, Mapping, Sequence

import attrs

from nova_lite import conf, metrics, pci_providers, provider_config
from nova_lite import validators as v
from nova_lite.compute import accounting, node_checks, placement
from nova_lite.compute.claims import Claim, ComputeResourcesUnavailable, MoveClaim, NopClaim
from nova_lite.compute.driver_calls import DriverCaller
from nova_lite.compute.locks import NodeLocks
from nova_lite.db.audit_writes import MissingAllocation
from nova_lite.db.pass_records import PassRecords
from nova_lite.db.store import AuditedNode, Store
from nova_lite.exception import DriverNotReady, InstanceNotFound, InvalidInput, NodeNotFound
from nova_lite.model.decide import NodeClaims
from nova_lite.model.plans import ClaimAsk, ClaimPlan
from nova_lite.model.usage import synced
from nova_lite.objects import (
    Allocation, ComputeNode, Flavor, Instance, Migration, NodeResources)
from nova_lite.providers import child_uuid
from nova_lite.traits import node_traits
from nova_lite.virt.driver import ComputeDriver
from nova_lite.work import Task, WorkRequest

LOG = logging.getLogger(__name__)


@attrs.frozen
class BuildClaims:
    """What :meth:`ResourceTracker.build_claims` made: ``claims``, one per
    instance, in order; ``tasks``, recorded with them, in order; ``node``,
    the node's record as the claims left it."""

    claims: tuple[Claim, ...]
    tasks: tuple[Task, ...]
    node: ComputeNode


@attrs.frozen
class AuditResult:
    """One audit pass: nodes recorded, and nodes skipped with the reason.

    ``skipped`` is the reason the whole pass was skipped (the driver was
    not ready), else None.
    """

    #: The names of the nodes recorded, sorted.
    audited: tuple[str, ...] = ()
    #: ``{nodename: reason}`` of the nodes skipped.
    failed: dict[str, str] = attrs.field(factory=dict)
    skipped: str | None = None
    #: ``{nodename: generation}`` of the audited nodes as recorded by this pass.
    generations: dict[str, int] = attrs.field(factory=dict)
    #: Whether the pass wrote to the records (False: the records agreed with
    #: the driver's reports, and the pass only read them).
    wrote: bool = False


@attrs.frozen
class Released:
    """What giving resources back changed.

    ``generations``: ``{node_uuid: generation}`` of each node freed on, as
    the change committed; ``migration_uuid``: the migration it finished
    (confirm, revert, abort), else None.
    """

    generations: dict[str, int] = attrs.field(factory=dict)
    migration_uuid: str | None = None


class ResourceTracker:
    """Tracks the nodes of one compute service (``host``).

    ``host``: the service's name (a recordable name, see
    :func:`nova_lite.validators.text_problem`); ``driver``: a
    :class:`~nova_lite.virt.driver.ComputeDriver`, ``init_host``-ed;
    ``store``: a :class:`~nova_lite.db.Store` (default: an in-memory one);
    ``settings``: :class:`~nova_lite.conf.Settings` (default: the
    driver's).  The provider.yaml files of the settings'
    ``provider_config_location`` are read here, once
    (:mod:`nova_lite.provider_config`), unless ``provider_configs`` gives
    them already read; every audit adds their inventories and traits to
    the nodes they name.  A wrong argument raises
    :class:`~nova_lite.exception.InvalidInput` naming it (an
    :class:`~nova_lite.exception.InvalidType` for a wrong type).

    :param host: the compute service's host name.
    :param driver: the virt driver, its ``init_host`` called.
    :param store: the records; None: a new in-memory store.
    :param settings: the service's settings; None: the driver's, else the
        defaults.
    :param provider_configs: the provider.yaml entries, already read
        (:data:`~nova_lite.provider_config.NO_PROVIDER_CONFIGS` for none);
        None: read them from ``settings``.
    :raises nova_lite.exception.ProviderConfigError: for a bad provider.yaml
        file, naming it, the place in it and the problem.
    :raises nova_lite.exception.InvalidInput: for a wrong argument, named.
    """

    def __init__(self, host: str, driver: ComputeDriver, store: Store | None = None,
                 settings: conf.Settings | None = None,
                 provider_configs: provider_config.ProviderConfigs | None = None) -> None:
        check_service_arguments("ResourceTracker", host, driver, store, settings)
        v.check_type(provider_configs, provider_config.ProviderConfigs,
                     "ResourceTracker provider_configs", optional=True)
        self.host = host
        self.driver = driver
        self.settings = settings or getattr(driver, "settings", None) or conf.Settings()
        #: The provider.yaml entries applied at each audit (read once).
        self.provider_configs = provider_configs if provider_configs is not None else \
            provider_config.load_provider_configs(self.settings.provider_config_location)
        # {nodename: uuid} of this host's records, read once at the first audit
        # when an entry names nodes by uuid; entries naming no node, warned of.
        self._recorded_uuids: dict[str, str] | None = None
        self._unmatched_warned: set[str] = set()
        self.store = store if store is not None else Store(
            "sqlite://", claim_retries=self.settings.claim_retries,
            busy_timeout=self.settings.database_busy_timeout)
        self._locks = NodeLocks()
        self._nodes: dict[str, ComputeNode] = {}
        # {nodename: (report, settings, driver capabilities, its AuditedNode)}:
        # a steady node reports the same each pass; its entry is not built again.
        self._audited: dict[str, tuple[NodeResources, conf.Settings, object, AuditedNode]] = {}
        self._raced: set[str] = set()   # nodes whose last claim here lost its compare-and-swap
        self._calls = DriverCaller(self.settings.driver_timeout)
        attach = getattr(driver, "attach_store", None)
        if callable(attach):
            attach(self.store)

    # -- views ----------------------------------------------------------------
    def get_node(self, nodename: str) -> ComputeNode:
        """The :class:`ComputeNode` as recorded now; raises NodeNotFound.

        The node as tracked here while its generation is still the
        recorded one; if another process or host changed it since, the
        records are read again: they are the truth (its owner may then be
        another host, or it may no longer be reported).

        :param nodename: the node's name.
        :returns: the node, its usage summed from the records.
        :raises nova_lite.exception.NodeNotFound: if this host has no record
            of it.
        """
        with self._locks[nodename]:
            node = self._tracked(nodename)
            try:
                if self.store.node_generation(node.uuid) != node.generation:
                    node = self._nodes[nodename] = self.store.load_node(node.uuid)
            except NodeNotFound:
                pass   # deleted as an orphan meanwhile: the last view
            return synced(node)

    def nodenames(self) -> list[str]:
        """Names of the nodes tracked here.

        :returns: the node names, sorted.
        """
        return sorted(self._nodes)

    def _adopted(self, nodename: str, seen: ComputeNode | None) -> ComputeNode:
        """:meth:`_tracked`, or ``seen`` (the node as a caller read it) when it
        is of this host and node and newer than the record tracked here (or
        none is): the caller read it more recently than this tracker did."""
        node = self._nodes.get(nodename)
        if seen is not None and seen.host == self.host and seen.nodename == nodename \
                and (node is None or (seen.uuid == node.uuid
                                      and seen.generation > node.generation)):
            node = self._nodes[nodename] = seen
            return node
        return self._tracked(nodename)

    def _tracked(self, nodename: str) -> ComputeNode:
        node = self._nodes.get(nodename)
        if node is None:
            # Another process may have audited it; records are the truth.
            try:
                node = self.store.get_compute_node(self.host, nodename)
            except NodeNotFound:
                raise NodeNotFound(nodename, self.host) from None
            self._nodes[nodename] = node
        return node

    # -- the audit ---------------------------------------------------------------
    def update_available_resource(self, nodename: str | None = None, *,
                                  records: PassRecords | None = None) -> AuditResult:
        """Audit every node (or just ``nodename``) and record the result.

        Driver calls run outside the locks and every transaction, each with
        ``driver_timeout``: the node reports, then the overhead estimates
        of any consumer whose allocation must be rebuilt.  A node whose
        name or report is malformed, or whose report raises or hangs, is
        skipped and marked with the reason; the others are recorded.
        Records of this host the driver no longer lists are marked not
        reported (they admit no claim).  Usage is rebuilt from the records.
        Returns an :class:`AuditResult`.  If the driver raises
        DriverNotReady, or gives something that is not a list of node
        names, nothing is recorded and the result's ``skipped`` says why.
        Its duration feeds ``nova_lite_audit_duration_seconds``.

        The records are first read and compared, in one read-only transaction
        (:meth:`~nova_lite.db.store.Store.pass_records`, or ``records`` when
        the caller read them already): when they agree with every report
        (same reports and inventories, nothing stale, nothing missing, no
        node to mark) nothing is written and no row is locked.  Otherwise one
        writing transaction (:meth:`~nova_lite.db.store.Store.record_audit`)
        locks the host's node rows, checks again and writes what differs.

        :param nodename: audit this node only; None: every node the driver
            lists.
        :param records: this host's records as the caller's pass read them;
            None: read them here.
        :returns: the nodes recorded, and those skipped with the reason.
        :raises nova_lite.exception.InvalidInput: for a ``nodename`` that is
            not a recordable name.
        """
        started = time.monotonic()
        try:
            return self._update_available_resource(nodename, records)
        finally:
            metrics.record_audit_duration(metrics.RESOURCE_AUDIT, time.monotonic() - started)

    def _update_available_resource(self, nodename: str | None,
                                   records: PassRecords | None) -> AuditResult:
        failed: dict[str, str] = {}
        listed: frozenset[str] | None = None
        if nodename is not None:
            v.check_text(nodename, "Cannot audit: nodename")
            names = [nodename]
        else:
            try:
                listing = node_checks.node_names(
                    self._calls.call(self.driver.get_available_nodes,
                                     what="get_available_nodes"), self.host)
            except DriverNotReady as exc:
                LOG.warning("Virt driver of host %s is not ready (%s); skipping this audit "
                            "and keeping every node record as it is", self.host, exc)
                return AuditResult(skipped=str(exc) or type(exc).__name__)
            except InvalidInput as exc:
                LOG.error("Skipping the audit of host %s and keeping every node record as "
                          "it is: %s", self.host, exc)
                return AuditResult(skipped=str(exc))
            names, failed = list(listing.valid), dict(listing.invalid)
            listed = frozenset(names)
        outcomes = self._calls.map(self.driver.get_available_resource, names,
                                   what="get_available_resource")
        if records is None:
            records = self.store.pass_records(self.host)
        if self.provider_configs.uuids and self._recorded_uuids is None:
            # Once: a node reported without a uuid is matched by its record's.
            self._recorded_uuids = {name: row.uuid for name, row in records.node_rows.items()}
        audits: list[AuditedNode] = []
        for outcome in outcomes:
            name = outcome.item
            try:
                if outcome.error is not None:
                    raise outcome.error
                audits.append(self._audit_entry(name, outcome.value))
            except Exception as exc:   # noqa: BLE001 - one node's failure is reported
                failed[name] = f"{type(exc).__name__}: {exc}"
                LOG.error("Skipping node %s of host %s in this audit: %s",
                          v.printable(name), self.host, v.printable(failed[name]))
        audits = _refuse_shared_uuids(audits, failed, self.host)
        if listed is not None and self.provider_configs:
            nodes = {name: self._node_uuid(name, None) for name in listed}
            nodes.update((a.nodename, self._node_uuid(a.nodename, a.node_uuid))
                         for a in audits)
            children = {child.name: child_uuid(nodes[a.nodename], child.name)
                        if nodes[a.nodename] else None
                        for a in audits for child in a.resources.providers}
            self._warn_unmatched(nodes, children)
        only = None if nodename is None else [nodename]
        rebuilt = self._rebuild_missing(only, records.missing_allocations(only))
        differs = self.store.audit_differs(records, audits, listed, only)
        with self._locks.holding(a.nodename for a in audits):
            if differs is None:
                # Nothing to write: the records as read are the audit's view.
                recorded = records.audited_nodes(audits)
                self._adopt_audited(recorded)
            else:
                LOG.debug("Audit of host %s writes: %s", self.host, differs)
                recorded = self.store.record_audit(self.host, audits, rebuilt, listed=listed,
                                                   only=only)
                self._nodes.update(recorded)
        for node in recorded.values():
            _log_final_view(node)
            if node.over_classes():
                accounting.log_over_capacity(
                    node, records.allocations_on(node.uuid)
                    if differs is None and records.services is not None
                    else self.store.list_allocations(node_uuid=node.uuid))
        marked = False
        for name, reason in failed.items():
            if node_checks.storable(name):
                marked |= self._mark_failed(name, reason, records)
        if listed is not None:
            for gone in set(self._nodes) - listed:
                del self._nodes[gone]
        return AuditResult(audited=tuple(sorted(recorded)), failed=failed,
                           generations={name: n.generation for name, n in recorded.items()},
                           wrote=differs is not None or marked)

    def _adopt_audited(self, recorded: Mapping[str, ComputeNode]) -> None:
        """Track the nodes of an audit that wrote nothing (the node locks held).

        They were read before the driver's reports: a claim committed since
        left a newer record tracked here, which stays.
        """
        for name, node in recorded.items():
            tracked = self._nodes.get(name)
            if tracked is None or tracked.uuid != node.uuid or \
                    node.generation >= tracked.generation:
                self._nodes[name] = node

    def _audit_entry(self, nodename: str, report: object) -> AuditedNode:
        if isinstance(report, dict):
            report = NodeResources.from_dict(report, nodename=nodename)
        if not isinstance(report, NodeResources):
            raise InvalidInput(
                f"driver returned {type(report).__name__}, not NodeResources, for "
                f"node {nodename!r}")
        last = self._audited.get(nodename)
        capabilities = self.driver.capabilities
        if last is not None and last[1] is self.settings and last[2] is capabilities and \
                last[0] == report:
            audited = last[3]
        else:
            audited = self._new_audit_entry(nodename, report)
            if not self.provider_configs:   # its entries may depend on the records read
                self._audited[nodename] = (report, self.settings, capabilities, audited)
        seen = audited.resources
        LOG.info("Node %s/%s hypervisor view: vcpus=%d used=%d memory=%dMB used=%dMB "
                 "disk=%dGB used=%dGB disk_available_least=%s", self.host, nodename,
                 seen.vcpus, seen.vcpus_used, seen.memory_mb, seen.memory_mb_used,
                 seen.local_gb, seen.local_gb_used, seen.disk_available_least)
        return audited

    def _new_audit_entry(self, nodename: str, report: NodeResources) -> AuditedNode:
        node_checks.check_report(nodename, report)
        recorded = node_traits(report.traits, self.driver.capabilities)
        if recorded != report.traits:
            report = attrs.evolve(report, traits=recorded)
        inventories: Mapping[str, accounting.Inventory] = accounting.build_inventories(
            report, self.settings)
        if self.settings.pci_report_in_placement and report.pci_devices:
            report = pci_providers.with_pci_children(nodename, report)
        if self.provider_configs:
            node_uuid = self._node_uuid(nodename, report.uuid)
            report, inventories = self.provider_configs.apply(
                nodename, node_uuid, report, inventories)
            report = self.provider_configs.apply_to_children(nodename, node_uuid, report)
        return AuditedNode(nodename=nodename, resources=report, inventories=inventories,
                         node_uuid=report.uuid)

    def _node_uuid(self, nodename: str, reported: str | None) -> str | None:
        """The node's uuid as its driver reports it, or as recorded; None for a
        node not recorded yet (no I/O: the records were read at most once)."""
        if reported:
            return reported
        node = self._nodes.get(nodename)
        if node is not None:
            return node.uuid
        return (self._recorded_uuids or {}).get(nodename)

    def _warn_unmatched(self, nodes: Mapping[str, str | None],
                        children: Mapping[str, str | None] | None = None) -> None:
        """One WARNING per provider.yaml entry that names none of ``nodes`` (as
        Nova warns of each absent provider); again if it matched meanwhile."""
        unmatched = {e.where: e for e in self.provider_configs.unmatched(nodes, children)}
        for where in unmatched.keys() - self._unmatched_warned:
            LOG.warning("Provider config %s names no node of host %s; it is ignored",
                        where, self.host)
        self._unmatched_warned = set(unmatched)

    def _mark_failed(self, nodename: str, reason: str, records: PassRecords) -> bool:
        """Mark the node's record with ``reason``; returns whether that wrote.

        Marked even when this tracker has not loaded it yet (after a restart,
        or a node that vanished and came back); a record already marked with
        this reason (or no record) is left alone.
        """
        row = records.node_rows.get(nodename)
        wrote = row is not None and row.last_error != reason.replace("\x00", "\\x00")
        if wrote:
            self.store.set_node_error(self.host, nodename, reason)
        node = self._nodes.get(nodename)
        if node is not None:
            self._nodes[nodename] = attrs.evolve(node, last_error=reason)
        return wrote

    def _rebuild_missing(self, nodenames: Sequence[str] | None = None,
                         missing: Sequence[MissingAllocation] | None = None
                         ) -> dict[tuple[str, str], Allocation]:
        """``{(consumer_uuid, nodename): Allocation}`` for the consumers whose
        allocation is missing (``missing``, as the pass read them; None: read
        them now), worked out before the audit's transaction.

        The driver's overhead estimates run here, outside every lock and
        transaction, each with ``driver_timeout``; a consumer whose
        estimate fails is repaired by a later pass.
        """
        if missing is None:
            missing = self.store.missing_allocations(self.host, nodenames)
        if not missing:
            return {}
        outcomes = self._calls.map(
            lambda m: self.driver.estimate_instance_overhead(
                m.consumer.new_flavor if isinstance(m.consumer, Migration) else m.consumer),
            missing, what="estimate_instance_overhead")
        rebuilt: dict[tuple[str, str], Allocation] = {}
        for outcome in outcomes:
            m = outcome.item
            if outcome.error is not None:
                LOG.warning("Cannot rebuild the allocation of %s on node %s/%s in this pass: "
                            "the overhead estimate failed: %s", m.consumer.uuid, self.host,
                            m.nodename, outcome.error)
                continue
            rebuilt[(m.consumer.uuid, m.nodename)] = placement.rebuilt_allocation(
                m.consumer, m.node_uuid, m.numa_request, outcome.value)
        return rebuilt

    # -- claims -------------------------------------------------------------------
    def instance_claim(self, instance: Instance, nodename: str,
                       limits: object = None) -> Claim:
        """Claim ``instance``'s flavor plus overhead on ``nodename``.

        Returns a :class:`Claim`; raises ComputeResourcesUnavailable with
        every reason (also when this host does not own the node, or its
        driver no longer reports it), or NodeNotFound for a node not
        tracked here.

        :param instance: the instance to claim for (its flavor).
        :param nodename: the node to claim on.
        :param limits: the scheduler's limits (``{"memory_mb": ...,
            "disk_gb": ..., "vcpu": ...}``, Nova's keys and units, or an
            object with ``to_dict()``), which can only narrow the node's
            capacity; None: the node's inventory bounds the claim.
        :returns: the claim; a context manager that aborts it if its block
            raises.
        :raises nova_lite.exception.ComputeResourcesUnavailable: naming every
            reason; nothing is claimed.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InvalidInput: for a wrong argument.
        """
        # build_claims of one instance, without its checks of a list.
        _check_instance(instance)
        (plan,), after, _ = self._claim(nodename, limits,
                                        [self._request(instance, instance.flavor, None)])
        assert plan.instance is not None   # a build's plan places its instance
        return Claim(self, plan.instance, nodename, plan.allocation, after.generation)

    def instance_claims(self, instances: Iterable[Instance], nodename: str,
                        limits: object = None) -> list[Claim]:
        """Claim every instance of ``instances`` on ``nodename``: all of them or none.

        One transaction: each is decided on the node with the ones before
        it counted.  Returns a list of :class:`Claim`, in order; raises
        ComputeResourcesUnavailable with every reason of the first that
        does not fit (nothing is claimed then).

        :param instances: the instances to claim for, at least one, each
            once.
        :param nodename: the node to claim on.
        :param limits: the scheduler's limits, as for :meth:`instance_claim`.
        :returns: one claim per instance, in order.
        :raises nova_lite.exception.ComputeResourcesUnavailable: naming every
            reason of the first that does not fit; nothing is claimed.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InvalidInput: for no instance, one given
            twice, or a wrong argument.
        """
        return list(self.build_claims(instances, nodename, limits).claims)

    def build_claims(self, instances: Iterable[Instance], nodename: str,
                     limits: object = None, *, tasks: Sequence[WorkRequest] = (),
                     seen: ComputeNode | None = None) -> "BuildClaims":
        """:meth:`instance_claims`, with ``tasks`` recorded in the claims'
        transaction: the claims and the tasks are committed together or not
        at all (a build's claims and the build tasks of its hosts).

        :param instances: as :meth:`instance_claims`.
        :param nodename: as :meth:`instance_claims`.
        :param limits: as :meth:`instance_claims`.
        :param tasks: the work to record with the claims, in order.
        :param seen: ``nodename``'s record as the caller read it (a
            scheduler's view): the claim is first decided on it, instead of
            reading the node, when this tracker holds no record of the node
            or an older one.  A record that is stale by then costs no
            exactness: the claim's transaction checks the decision as for
            any record (:meth:`~nova_lite.db.store.Store.claim`).
        :returns: a :class:`BuildClaims`: one claim per instance, in order,
            the tasks as recorded, in order, and the node as recorded after
            them.
        :raises: as :meth:`instance_claims`; nothing is written, no task
            either.
        """
        instances = list(instances)
        if not instances:
            raise InvalidInput("instance_claims needs at least one instance")
        for instance in instances:
            _check_instance(instance)
        if len(instances) > 1 and len({i.uuid for i in instances}) != len(instances):
            raise InvalidInput("instance_claims got the same instance twice")
        requests = [self._request(instance, instance.flavor, None) for instance in instances]
        plans, after, made = self._claim(nodename, limits, requests, tasks=tasks, seen=seen)
        generation = after.generation
        claims = []
        for plan in plans:
            assert plan.instance is not None   # a build's plan places its instance
            claims.append(Claim(self, plan.instance, nodename, plan.allocation, generation))
        return BuildClaims(claims=tuple(claims), tasks=tuple(made), node=after)

    def resize_claim(self, instance: Instance, new_flavor: Flavor, nodename: str,
                     limits: object = None, migration_type: str = "resize") -> MoveClaim:
        """Claim ``new_flavor`` on ``nodename`` for a resize (or cold migration) of ``instance``.

        Returns a :class:`MoveClaim` whose ``migration`` is recorded.  On the
        same node both flavors count until confirm or revert.  Refused
        (InvalidInput, checked in the claim's transaction) unless the
        records hold the instance live with no other move in progress.

        :param instance: the instance to resize.
        :param new_flavor: the flavor it is resized to.
        :param nodename: the node to claim on (the destination).
        :param limits: the scheduler's limits, as for :meth:`instance_claim`.
        :param migration_type: ``resize``, or ``migration`` for a cold
            migration (the flavor stays).
        :returns: the claim, its ``migration`` recorded.
        :raises nova_lite.exception.ComputeResourcesUnavailable: naming every
            reason; nothing is claimed.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InvalidInput: for a wrong argument, or
            an instance that is not live or already moving.
        """
        _check_instance(instance)
        if not isinstance(new_flavor, Flavor):
            raise InvalidInput(f"new_flavor must be a Flavor, got {new_flavor!r}")
        if migration_type not in ("resize", "migration"):
            raise InvalidInput(f"migration_type must be 'resize' or 'migration', got "
                               f"{migration_type!r}")
        return self._move_claim(instance, new_flavor, nodename, limits, migration_type)

    def rebuild_claim(self, instance: Instance, nodename: str,
                      limits: object = None) -> NopClaim | MoveClaim:
        """Claim for a rebuild: nothing on the instance's own node, else an evacuation.

        :param instance: the instance to rebuild.
        :param nodename: the node to rebuild it on.
        :param limits: the scheduler's limits, as for :meth:`instance_claim`.
        :returns: a :class:`~nova_lite.compute.claims.NopClaim` on the
            instance's own node, else a
            :class:`~nova_lite.compute.claims.MoveClaim` of an evacuation.
        :raises nova_lite.exception.ComputeResourcesUnavailable: naming every
            reason; nothing is claimed.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InvalidInput: for a wrong argument, or
            (evacuation) an instance that is not live or already moving.
        """
        _check_instance(instance)
        if self._placement_of(instance) == (self.host, nodename):
            with self._locks[nodename]:
                self._tracked(nodename)
            return NopClaim(instance, nodename)
        return self._move_claim(instance, instance.flavor, nodename, limits, "evacuation")

    def _move_claim(self, instance: Instance, flavor: Flavor, nodename: str, limits: object,
                    kind: str) -> MoveClaim:
        migration = self._new_migration(instance, flavor, nodename, kind)
        (plan,), after, _ = self._claim(nodename, limits,
                                        [self._request(instance, flavor, migration)])
        return MoveClaim(self, instance, nodename, plan.allocation, migration, after.generation)

    def _placement_of(self, instance: Instance) -> tuple[str | None, str | None]:
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

    def _new_migration(self, instance: Instance, new_flavor: Flavor, nodename: str,
                       kind: str) -> Migration:
        # The move starts from the instance as recorded (the caller's copy may
        # predate a confirmed resize); the claim's transaction checks it again.
        try:
            stored = self.store.get_instance(instance.uuid)
        except InstanceNotFound:
            stored = instance
        host, node = ((instance.host, instance.node) if instance.host is not None
                      and instance.node is not None else (stored.host, stored.node))
        return Migration(
            uuid=str(uuidlib.uuid4()), instance_uuid=instance.uuid,
            source_compute=host or self.host, source_node=node or nodename,
            dest_compute=self.host, dest_node=nodename, old_flavor=stored.flavor,
            new_flavor=new_flavor, status="pre-migrating", migration_type=kind,
            new_pci_requests=instance.pci_requests if kind == "resize" else None)

    def _request(self, instance: Instance, flavor: Flavor,
                 migration: Migration | None) -> ClaimAsk:
        """What one claim asks for; worked out before the node's lock, so a slow
        driver estimate holds up no other claim."""
        overhead = self.driver.estimate_instance_overhead(
            instance if migration is None else flavor)
        return ClaimAsk.build(instance, flavor, overhead, migration)

    def _claim(self, nodename: str, limits: object, asks: list[ClaimAsk], *,
               tasks: Sequence[WorkRequest] = (), seen: ComputeNode | None = None
               ) -> tuple[tuple[ClaimPlan, ...], ComputeNode, list[Task]]:
        """Claim ``asks`` on ``nodename`` in one transaction, ``tasks`` recorded in it.

        The store decides with :meth:`~nova_lite.model.decide.NodeClaims.decide`
        (a pure function of the node record), first on the node as tracked
        here (or ``seen``, if newer: see :meth:`build_claims`), and again on
        the records under the node's lock if they moved on.  Returns
        ``(plans, node, tasks)``: their ClaimPlans, the node as recorded
        after them (at the generation they committed at), and the tasks as
        recorded.
        """
        # A node tracked here has a recorded, so valid, name; any other is checked.
        problem = None if isinstance(nodename, str) and nodename in self._nodes \
            else node_checks.name_problem(nodename, "nodename")
        if problem is not None:
            raise InvalidInput(f"Cannot claim: {problem}")
        claims = NodeClaims(host=self.host, nodename=nodename, asks=asks, limits=limits)
        with self._locks[nodename]:
            node = self._adopted(nodename, seen)
            # Another process or host claimed on this node since our last
            # claim, and likely again: decide only on the records under the
            # node's lock, not first on a record that is probably stale,
            # unless the database checks such a decision itself.
            optimistic = nodename not in self._raced or self.store.checks_stale_claims
            try:
                after, plans, made = self.store.claim_with_tasks(
                    node, claims.requests, claims.decide, optimistic=optimistic, tasks=tasks)
            except ComputeResourcesUnavailable as exc:
                LOG.info("Claim of instance %s on node %s of host %s rejected: %s",
                         ", ".join(f"{a.instance.uuid} ({a.flavor.name})" for a in asks),
                         nodename, self.host, "; ".join(exc.reasons))
                metrics.record_claims(reasons=exc.reasons, rejected=len(asks))
                raise
            if after.generation == node.generation + 1:
                self._raced.discard(nodename)
            else:
                self._raced.add(nodename)
            node = self._nodes[nodename] = after
        metrics.record_claims(admitted=len(asks))
        if LOG.isEnabledFor(logging.INFO):
            for ask in asks:
                LOG.info("Claim of instance %s (%s) on node %s successful: %s",
                         ask.instance.uuid, ask.flavor.name, nodename, dict(ask.requested))
        return plans, node, made

    # -- giving back ------------------------------------------------------------
    def _release(self, nodename: str, consumers: list[str], *,
                 instance: Instance | None = None,
                 migration_status: tuple[str, str] | None = None,
                 transfer: tuple[str, str] | None = None) -> Released:
        """Drop ``consumers``' allocations on ``nodename`` (one transaction).

        Returns a :class:`Released`.
        """
        with self._locks[nodename]:
            node = self._tracked(nodename)
            fresh = self.store.release([node.uuid], consumers, instance=instance,
                                       migration_status=migration_status, transfer=transfer)
            self._nodes[nodename] = fresh[node.uuid]
        return Released(generations={node.uuid: fresh[node.uuid].generation},
                        migration_uuid=migration_status[0] if migration_status else None)

    def abort_instance_claim(self, instance: Instance, nodename: str) -> Released:
        """Give back everything ``instance`` holds on ``nodename``.

        Returns a :class:`Released`.

        :param instance: the instance whose claim to abort; it leaves its
            host and node.
        :param nodename: the node it holds resources on.
        :returns: the node freed on, at its new generation.
        :raises nova_lite.exception.InstanceNotFound: if the instance has no
            record.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InstanceStateConflict: if the records
            say it is deleted.
        """
        _check_instance(instance)
        self.store.get_instance(instance.uuid)   # InstanceNotFound: nothing to give back
        done = self._release(nodename, [instance.uuid], instance=attrs.evolve(
            instance, host=None, node=None, pci_devices=()))
        LOG.info("Aborted claim of instance %s on node %s", instance.uuid, nodename)
        return done

    def abort_move_claim(self, migration: Migration) -> Released:
        """Free a move claim's destination and mark its migration "error".

        Returns a :class:`Released`.

        :param migration: the move's migration record.
        :returns: the destination freed on, and the migration finished.
        :raises nova_lite.exception.NodeNotFound: for a destination node
            this host has no record of.
        :raises nova_lite.exception.InvalidInput: if the migration is no
            longer in progress; nothing is changed.
        """
        return self._release(migration.dest_node, [migration.uuid],
                             migration_status=(migration.uuid, "error"))

    def drop_move_claim(self, instance: Instance, nodename: str, flavor: Flavor) -> Released:
        """Free ``flavor`` held for ``instance`` on ``nodename``.

        Confirm: the old flavor at the source (the new one becomes the
        instance's own).  Revert: the new flavor at the destination.
        Refused (InvalidInput, nothing changed) if the migration is no
        longer in progress when the change commits.  Returns a
        :class:`Released` naming the migration.

        :param instance: the instance being resized.
        :param nodename: the node to free ``flavor`` on (the source to
            confirm, the destination to revert).
        :param flavor: the flavor to free there.
        :returns: the node freed on, and the migration finished.
        :raises nova_lite.exception.InstanceNotFound: if the instance has no
            migration in progress, or holds no ``flavor`` on ``nodename``.
        :raises nova_lite.exception.NodeNotFound: for a node this host has
            no record of.
        :raises nova_lite.exception.InvalidInput: if the migration is no
            longer in progress when the change commits; nothing is changed.
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
            done = self._release(nodename, [migration.uuid],
                                 migration_status=(migration.uuid, "reverted"))
            LOG.info("Reverted resize of instance %s: freed %s on %s", instance.uuid,
                     flavor.name, nodename)
            return done
        moved = self.store.list_allocations(instance_uuid=instance.uuid)
        target = [a for a in moved if a.consumer_uuid == migration.uuid]
        numa = target[0].numa_topology if target else instance.numa_topology
        pci = target[0].pci_devices if target else ()
        confirmed = attrs.evolve(instance, flavor=migration.new_flavor,
                                 host=migration.dest_compute, node=migration.dest_node,
                                 numa_topology=numa, pci_devices=pci)
        if migration.new_pci_requests is not None:
            confirmed = attrs.evolve(confirmed, pci_requests=migration.new_pci_requests)
        done = self._release(nodename, [instance.uuid], instance=confirmed,
                             migration_status=(migration.uuid, "confirmed"),
                             transfer=(migration.uuid, instance.uuid))
        LOG.info("Confirmed resize of instance %s: freed %s on %s", instance.uuid,
                 flavor.name, nodename)
        return done

    def update_migration_status(self, migration: Migration | str, status: str) -> Migration:
        """Record that ``migration`` (a Migration or its uuid) reached ``status``.

        ``status`` is one of Nova's steps of a move in progress
        (:data:`nova_lite.holds.MIGRATION_STEPS`: ``migrating``,
        ``post-migrating``, ``finished``, ...); its time is recorded with
        it, so a move that goes on is never taken for stuck.  Returns the
        Migration as recorded; InvalidInput (nothing changed) for a final
        status or a move that is over.

        :param migration: the migration, or its uuid.
        :param status: the step it reached.
        :returns: the migration as recorded.
        :raises nova_lite.exception.MigrationNotFound: for an unknown
            migration.
        :raises nova_lite.exception.InvalidInput: for a status that is not a
            step of a move in progress, or a move that is over; nothing is
            changed.
        """
        uuid = migration.uuid if isinstance(migration, Migration) else migration
        recorded = self.store.set_migration_status(uuid, status)
        LOG.info("Migration %s of instance %s is %s", uuid, recorded.instance_uuid, status)
        return recorded

    def _migration_in_progress(self, instance: Instance) -> Migration:
        migrations = self.store.list_migrations(instance.uuid, in_progress_only=True)
        if not migrations:
            raise InstanceNotFound(instance.uuid, "with a migration in progress")
        return migrations[-1]

    def _tracked_node_uuid(self, nodename: str) -> str:
        with self._locks[nodename]:
            return self._tracked(nodename).uuid

    def update_usage(self, instance: Instance) -> Released:
        """Record ``instance``'s new state; deleted or shelve-offloaded frees it at once.

        One transaction: the instance row and its allocations change
        together, so no audit ever sees a live instance without its
        allocation, nor a deleted one still holding resources.  A change
        decided on a state the records no longer hold (the instance was
        deleted meanwhile) raises InstanceStateConflict and changes
        nothing.  Returns a :class:`Released` with the nodes it freed
        resources on.

        :param instance: the instance in its new state.
        :returns: the nodes whose usage changed, at their new generations.
        :raises nova_lite.exception.InstanceNotFound: if the instance has no
            record.
        :raises nova_lite.exception.InstanceStateConflict: for a change
            decided on a state the records no longer hold; nothing is
            changed.
        :raises nova_lite.exception.InvalidType: if ``instance`` is not an
            :class:`~nova_lite.objects.Instance`.
        """
        _check_instance(instance)
        fresh = self.store.record_instance_state(instance)
        self._adopt_usages(fresh)
        if not Instance.state_holds_resources(instance.vm_state, instance.task_state):
            LOG.info("Instance %s is %s: freed its resources", instance.uuid,
                     instance.vm_state)
        return Released(generations={u: node.generation for u, node in fresh.items()})

    def _adopt_usages(self, fresh: Mapping[str, ComputeNode]) -> None:
        """Take ``{node_uuid: ComputeNode}`` read in a transaction for the nodes tracked here.

        A record older than the one tracked (a claim committed since) is
        ignored: generations only move forward.
        """
        if not fresh:
            return
        names = {n.uuid: name for name, n in self._nodes.items() if n.uuid in fresh}
        for node_uuid, name in names.items():
            with self._locks[name]:
                node = self._nodes.get(name)
                if node is not None and fresh[node_uuid].generation > node.generation:
                    self._nodes[name] = fresh[node_uuid]


def _refuse_shared_uuids(audits: list[AuditedNode], failed: dict[str, str],
                         host: str) -> list[AuditedNode]:
    """Drop (into ``failed``) the nodes whose report gives a uuid another node's gives too.

    A uuid names one node record; which of the nodes owns it cannot be
    told, so neither is recorded.
    """
    by_uuid: dict[str, list[str]] = {}
    for audit in audits:
        if audit.node_uuid is not None:
            by_uuid.setdefault(audit.node_uuid, []).append(audit.nodename)
    shared = {u: names for u, names in by_uuid.items() if len(names) > 1}
    if not shared:
        return audits
    kept = []
    for audit in audits:
        names = shared.get(audit.node_uuid) if audit.node_uuid is not None else None
        if names is None:
            kept.append(audit)
            continue
        failed[audit.nodename] = (
            f"InvalidNodeResources: the driver reported uuid {audit.node_uuid} for nodes "
            f"{', '.join(repr(n) for n in sorted(names))}; a uuid names one node")
        LOG.error("Skipping node %s of host %s in this audit: %s", audit.nodename, host,
                  failed[audit.nodename])
    return kept


def check_service_arguments(what: str, host: object, driver: object, store: object,
                            settings: object) -> None:
    """Raise InvalidInput naming the first wrong argument of ``what``'s constructor.

    Shared by :class:`ResourceTracker` and the compute service: ``host``
    must be a recordable name, ``driver`` a ComputeDriver, ``store`` None or
    a Store, ``settings`` None or Settings.
    """
    v.check_text(host, f"{what} host")
    v.check_type(driver, ComputeDriver, f"{what} driver")
    v.check_type(store, Store, f"{what} store", optional=True)
    v.check_type(settings, conf.Settings, f"{what} settings", optional=True)


def _check_instance(instance: object) -> None:
    v.check_type(instance, Instance, "instance")


def _log_final_view(node: ComputeNode) -> None:
    if not LOG.isEnabledFor(logging.INFO):
        return
    parts = [f"{rc}: capacity={node.capacity(rc)} used={node.used(rc)} free={node.free(rc)} "
             f"over={node.over(rc)}" for rc in sorted(node.inventories)]
    LOG.info("Node %s/%s final view: %s", node.host, node.nodename,
             "; ".join(parts) or "no inventory")


__all__ = ["ResourceTracker", "AuditResult", "BuildClaims", "Released", "ComputeNode"]
