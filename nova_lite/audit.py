"""Audit: the hypervisor view, the tracked view and the records, side by side.

For every node of one compute host, three views of the same usage:

- **hypervisor**: what the driver reports (the ``*_used`` figures of its
  :class:`~nova_lite.objects.NodeResources`) and the guests its
  ``list_instances()`` has;
- **tracked**: what the :class:`~nova_lite.compute.resource_tracker.ResourceTracker`
  holds on the node, i.e. the allocations claims made;
- **records**: the live instances recorded on the node plus the in-progress
  migrations into it, each asking for its flavor plus the driver's overhead
  (exactly what the periodic pass rebuilds usage from).

Where they differ, a :class:`Difference` names the instance, guest,
migration or node that makes them differ.  :func:`audit_host` only reads:
it never changes a record (the compute service's periodic pass is what
repairs allocations).
"""

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import findings, metrics, pci_providers
from nova_lite.compute import accounting
from nova_lite.compute.driver_calls import DriverCaller, Outcome
from nova_lite.exception import InstanceNotFound, NodeNotFound
from nova_lite.objects import (
    Allocation, ComputeNode, Instance, InstanceNUMATopology, Migration, NodeResources)

if TYPE_CHECKING:
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db.store import Store
    from nova_lite.virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

# The kinds of difference, from the one vocabulary of nova_lite.findings.
GUEST_WITHOUT_RECORD = findings.UNKNOWN_GUEST
RECORD_WITHOUT_GUEST = findings.MISSING_GUEST
ALLOCATION_WITHOUT_RECORD = findings.STALE_ALLOCATION
RECORD_WITHOUT_ALLOCATION = findings.MISSING_ALLOCATION
ALLOCATION_MISMATCH = findings.ALLOCATION_MISMATCH
NODE_NOT_RECORDED = findings.NODE_NOT_RECORDED
NODE_NOT_REPORTED = findings.NODE_NOT_REPORTED
NODE_REPORT_FAILED = findings.NODE_REPORT_FAILED

#: Every kind of difference, in the order they are reported.
KINDS = findings.VIEW_KINDS

# {consumer uuid: (label, {rc: amount})} the records ask for on a node.
_Expected = dict[str, tuple[str, dict[str, int]]]

_HYPERVISOR_USED = {"VCPU": "vcpus_used", "MEMORY_MB": "memory_mb_used",
                    "DISK_GB": "local_gb_used"}


@attrs.frozen
class Difference:
    """One thing that makes the views differ.

    ``kind`` is one of :data:`KINDS`; ``uuid`` names the instance, guest,
    migration or node (for node kinds, the node name); ``nodename`` is None
    for a guest that cannot be placed on a node; ``detail`` says what
    differs, in words.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    uuid: str
    nodename: str | None = None
    detail: str = ""


@attrs.frozen
class ResourceView:
    """One resource class of one node in the three views.

    A view that has no figure (the hypervisor reports no ``*_used`` for the
    class, or the node has no record) is None.
    """

    resource_class: str
    hypervisor: int | None = None
    tracked: int | None = None
    records: int | None = None
    #: The node's capacity, free and over amounts as tracked (None without a
    #: record): free is never negative, over is what is held beyond capacity.
    capacity: int | None = None
    free: int | None = None
    over: int | None = None

    @property
    def tracked_matches_records(self) -> bool:
        """True when the tracker holds exactly what the records ask for."""
        return self.tracked == self.records

    @property
    def status(self) -> str:
        """``"ok"``, ``"differs"`` (tracked vs records) or ``"hypervisor differs"``.

        The hypervisor's own figures may legitimately include host usage;
        nova-lite never accounts from them, so that case is informational.
        """
        if not self.tracked_matches_records:
            return "differs"
        if self.hypervisor is not None and self.records is not None \
                and self.hypervisor != self.records:
            return "hypervisor differs"
        return "ok"


@attrs.frozen
class NodeAudit:
    """The three views of one node and every difference found on it."""

    host: str
    nodename: str
    node_uuid: str | None = None
    resources: tuple[ResourceView, ...] = ()
    differences: tuple[Difference, ...] = ()
    #: Instance uuids of this node's records the hypervisor has a guest
    #: for; None: unknown.
    guests: tuple[str, ...] | None = None

    @property
    def consistent(self) -> bool:
        """True when nothing differs and the tracker matches the records."""
        return not self.differences and all(r.tracked_matches_records for r in self.resources)


@attrs.frozen
class HostAudit:
    """The audit of one compute host.

    ``differences`` holds what belongs to no single node (guests nothing
    records on this host); ``guests_listed`` is False when the driver does
    not list its guests, and ``note`` then says why.
    """

    host: str
    driver: str
    nodes: tuple[NodeAudit, ...] = ()
    differences: tuple[Difference, ...] = ()
    guests_listed: bool = True
    note: str | None = None

    @property
    def consistent(self) -> bool:
        """True when every node is consistent and no host-level difference exists."""
        return not self.differences and all(n.consistent for n in self.nodes)

    def all_differences(self) -> tuple[Difference, ...]:
        """Host-level and per-node differences, in one tuple."""
        found = list(self.differences)
        for node in self.nodes:
            found.extend(node.differences)
        return tuple(found)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (with ``consistent`` and per-row ``status``)."""
        data = attrs.asdict(self)
        data["consistent"] = self.consistent
        for node, node_data in zip(self.nodes, data["nodes"]):
            node_data["consistent"] = node.consistent
            for row, row_data in zip(node.resources, node_data["resources"]):
                row_data["status"] = row.status
        return data


def audit_host(tracker: "ResourceTracker", nodename: str | None = None) -> HostAudit:
    """Compare the three views on every node of ``tracker.host`` (or one node).

    ``tracker`` is a ResourceTracker (it gives the host, driver, store and
    the tracked view).  Reads only; returns a :class:`HostAudit`.
    """
    started = time.monotonic()
    host, driver, store = tracker.host, tracker.driver, tracker.store
    caller = DriverCaller(tracker.settings.driver_timeout)
    host_diffs: list[Difference] = []
    # Nodes first: a driver of many nodes (bare metal) knows its guests only
    # once it has listed its nodes, as the compute service's audit does.
    try:
        reported = list(caller.call(driver.get_available_nodes, what="get_available_nodes"))
    except Exception as exc:   # noqa: BLE001 - reported, the records are still shown
        reported = []
        host_diffs.append(Difference(NODE_REPORT_FAILED, host, None,
                                     f"get_available_nodes failed: {_err(exc)}"))
    guests, note = _list_guests(driver, caller)
    recorded = {n.nodename for n in store.get_compute_nodes(host)}
    names = sorted(set(reported) | recorded)
    if nodename is not None:
        if nodename not in names:
            raise NodeNotFound(nodename, host)
        names = [nodename]
    reports = {o.item: o for o in caller.map(
        driver.get_available_resource, [n for n in names if n in reported],
        what="get_available_resource")}
    live = store.list_instances(host=host)
    migrations = store.list_migrations(in_progress_only=True)
    nodes = [_audit_node(tracker, name, name in reported, reports.get(name), guests,
                         live, migrations) for name in names]
    if guests is not None and nodename is None:
        only = reported[0] if len(reported) == 1 else None
        host_diffs.extend(_unrecorded_guests(store, host, guests, live, migrations, only))
    audit = HostAudit(host=host, driver=type(driver).__name__, nodes=tuple(nodes),
                      differences=tuple(host_diffs), guests_listed=guests is not None,
                      note=note)
    for diff in audit.all_differences():
        LOG.info("Audit of host %s: %s %s on node %s: %s", host, diff.kind, diff.uuid,
                 diff.nodename, diff.detail)
    for node in nodes:
        if any(row.over for row in node.resources):
            accounting.log_over_capacity(
                tracker.get_node(node.nodename),
                store.list_allocations(node_uuid=node.node_uuid))
    metrics.record_audit_duration(metrics.VIEWS_AUDIT, time.monotonic() - started)
    metrics.record_differences(host, KINDS, (d.kind for d in audit.all_differences()))
    return audit


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def list_guests(driver: "ComputeDriver",
                timeout: float) -> tuple[frozenset[str] | None, str | None]:
    """``(frozenset of guest uuids or None, note)`` the driver lists.

    None (with a note saying why) when the driver does not list guests or
    the call fails or outlasts ``timeout`` seconds.
    """
    return _list_guests(driver, DriverCaller(timeout))


def _list_guests(driver: "ComputeDriver",
                 caller: DriverCaller) -> tuple[frozenset[str] | None, str | None]:
    if not driver.capabilities.supports_lifecycle:
        return None, (f"{type(driver).__name__} does not declare supports_lifecycle: "
                      "guests are not compared")
    try:
        return frozenset(caller.call(driver.list_instances, what="list_instances")), None
    except NotImplementedError:
        return None, f"{type(driver).__name__}.list_instances is not implemented"
    except Exception as exc:   # noqa: BLE001 - the other views are still worth showing
        return None, f"list_instances failed: {_err(exc)}"


def _hypervisor_view(outcome: Outcome | None, nodename: str,
                     diffs: list[Difference]) -> NodeResources | None:
    """``(NodeResources or None)`` from a driver outcome, noting failures."""
    if outcome is None:
        return None
    try:
        if outcome.error is not None:
            raise outcome.error
        report = outcome.value
        if isinstance(report, dict):
            report = NodeResources.from_dict(report, nodename=nodename)
        if not isinstance(report, NodeResources):
            raise TypeError(f"driver returned {type(report).__name__}, not NodeResources")
        return report
    except Exception as exc:   # noqa: BLE001 - one node's failure is a finding
        diffs.append(Difference(NODE_REPORT_FAILED, nodename, nodename,
                                f"get_available_resource failed: {_err(exc)}"))
        return None


def _expected(tracker: "ResourceTracker", nodename: str, live: Iterable[Instance],
              migrations: Iterable[Migration]) -> _Expected:
    """``{consumer uuid: (label, {rc: amount})}`` the records ask for on the node."""
    expected: _Expected = {}
    for inst in live:
        if inst.node == nodename:
            overhead = tracker.driver.estimate_instance_overhead(inst)
            expected[inst.uuid] = (f"the instance ({inst.flavor.name}, "
                                   f"{inst.vm_state})", accounting.requested_resources(
                                       inst.flavor, overhead, inst.numa_topology))
    for mig in migrations:
        if (mig.dest_compute, mig.dest_node) == (tracker.host, nodename):
            overhead = tracker.driver.estimate_instance_overhead(mig.new_flavor)
            numa = _instance_numa(tracker.store, live, mig.instance_uuid)
            expected[mig.uuid] = (f"the migration of instance {mig.instance_uuid} "
                                  f"({mig.migration_type} to {mig.new_flavor.name}, "
                                  f"{mig.status})", accounting.requested_resources(
                                      mig.new_flavor, overhead, numa))
    return expected


def _instance_numa(store: "Store", live: Iterable[Instance],
                   instance_uuid: str) -> InstanceNUMATopology | None:
    """The NUMA request of a migrating instance (a claim asks for PCPU with it)."""
    for inst in live:
        if inst.uuid == instance_uuid:
            return inst.numa_topology
    try:
        return store.get_instance(instance_uuid).numa_topology
    except InstanceNotFound:
        return None


def _amounts(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items())) or "nothing"


def _why_not_live(store: "Store", alloc: Allocation) -> str:
    if alloc.consumer_type == "migration":
        done = [m for m in store.list_migrations(alloc.instance_uuid)
                if m.uuid == alloc.consumer_uuid]
        return (f"its migration is {done[0].status}" if done
                else "no migration record exists")
    try:
        inst = store.get_instance(alloc.consumer_uuid)
    except InstanceNotFound:
        return "no instance record exists"
    if not inst.holds_resources:
        return f"the instance is {inst.vm_state}"
    return f"the instance is recorded on {inst.host}/{inst.node}"


def _pci_provider_names(tracker: "ResourceTracker", nodename: str) -> frozenset[str]:
    try:
        node = tracker.get_node(nodename)
    except NodeNotFound:
        return frozenset()
    tree = pci_providers.tree_of(nodename, node.resources)
    return tree.names if tree is not None else frozenset()


def _allocation_differences(tracker: "ResourceTracker", nodename: str, node_uuid: str,
                            expected: _Expected) -> list[Difference]:
    diffs: list[Difference] = []
    held = {a.consumer_uuid: a for a in tracker.store.list_allocations(node_uuid=node_uuid)}
    # The units on PCI device providers follow the devices the claim took,
    # not the flavor's amounts.
    pci_names = _pci_provider_names(tracker, nodename)
    for consumer, alloc in sorted(held.items()):
        if consumer not in expected:
            diffs.append(Difference(
                ALLOCATION_WITHOUT_RECORD, consumer, nodename,
                f"the {alloc.consumer_type} holds {_amounts(alloc.resources)} but "
                f"{_why_not_live(tracker.store, alloc)}"))
        elif pci_providers.without_units_on(alloc, pci_names) != expected[consumer][1]:
            diffs.append(Difference(
                ALLOCATION_MISMATCH, consumer, nodename,
                f"{expected[consumer][0]} asks for {_amounts(expected[consumer][1])} but "
                f"holds {_amounts(alloc.resources)}"))
    for consumer, (label, resources) in sorted(expected.items()):
        if consumer not in held:
            diffs.append(Difference(
                RECORD_WITHOUT_ALLOCATION, consumer, nodename,
                f"{label} asks for {_amounts(resources)} but holds nothing"))
    return diffs


def _audit_node(tracker: "ResourceTracker", nodename: str, is_reported: bool,
                outcome: Outcome | None, guests: frozenset[str] | None, live: Sequence[Instance],
                migrations: Sequence[Migration]) -> NodeAudit:
    diffs: list[Difference] = []
    report = _hypervisor_view(outcome, nodename, diffs)
    if not is_reported:
        diffs.append(Difference(NODE_NOT_REPORTED, nodename, nodename,
                                "a record exists but the driver no longer reports this node "
                                "(an orphan: kept until the driver says it is deleted)"))
    try:
        node = tracker.get_node(nodename)
    except NodeNotFound:
        node = None
        diffs.append(Difference(NODE_NOT_RECORDED, nodename, nodename,
                                "the driver reports this node but it has no record yet"))
    expected = _expected(tracker, nodename, live, migrations) if node is not None else {}
    if node is not None:
        diffs.extend(_allocation_differences(tracker, nodename, node.uuid, expected))
    on_node = sorted(inst.uuid for inst in live if inst.node == nodename)
    node_guests = None
    if guests is not None and is_reported:
        node_guests = tuple(u for u in on_node if u in guests)
        for inst in live:
            if inst.node == nodename and inst.uuid not in guests:
                diffs.append(Difference(
                    RECORD_WITHOUT_GUEST, inst.uuid, nodename,
                    f"recorded as {inst.vm_state} ({inst.flavor.name}) on this node, but "
                    "the hypervisor has no guest for it"))
    records: dict[str, int] = {}
    for _, resources in expected.values():
        for rc, n in resources.items():
            records[rc] = records.get(rc, 0) + n
    rows = _resource_rows(report, node, records)
    return NodeAudit(host=tracker.host, nodename=nodename,
                     node_uuid=node.uuid if node is not None else None,
                     resources=tuple(rows), differences=tuple(diffs), guests=node_guests)


def _resource_rows(report: NodeResources | None, node: ComputeNode | None,
                   records: Mapping[str, int]) -> list[ResourceView]:
    hyper: dict[str, int] = {}
    if report is not None:
        offered = report.totals()
        for rc, attr in _HYPERVISOR_USED.items():
            if rc in offered or getattr(report, attr):
                hyper[rc] = getattr(report, attr)
    classes = set(hyper) | set(records)
    if node is not None:
        classes |= set(node.inventories) | set(node.usage)
    rows = []
    for rc in sorted(classes):
        rows.append(ResourceView(
            resource_class=rc, hypervisor=hyper.get(rc),
            tracked=node.used(rc) if node is not None else None,
            records=records.get(rc, 0) if node is not None else None,
            capacity=node.capacity(rc) if node is not None else None,
            free=node.free(rc) if node is not None else None,
            over=node.over(rc) if node is not None else None))
    return rows


def _unrecorded_guests(store: "Store", host: str, guests: frozenset[str], live: Iterable[Instance],
                       migrations: Iterable[Migration], nodename: str | None) -> list[Difference]:
    """Guests the hypervisor has that nothing on this host records.

    ``nodename`` is the host's only node, if it has one (else the guest's
    node is unknown: ``list_instances`` does not say).
    """
    known = {inst.uuid for inst in live}
    moving = {m.instance_uuid for m in migrations if host in (m.source_compute, m.dest_compute)}
    diffs: list[Difference] = []
    for guest in sorted(guests - known - moving):
        try:
            inst = store.get_instance(guest)
        except InstanceNotFound:
            why = "no instance record exists"
        else:
            why = (f"its record is {inst.vm_state}" if not inst.holds_resources
                   else f"its record is on {inst.host}/{inst.node}")
        diffs.append(Difference(GUEST_WITHOUT_RECORD, guest, nodename,
                                f"the hypervisor has this guest but {why}"))
    return diffs


__all__ = ["audit_host", "list_guests", "HostAudit", "NodeAudit", "ResourceView",
           "Difference", "KINDS",
           "GUEST_WITHOUT_RECORD", "RECORD_WITHOUT_GUEST", "ALLOCATION_WITHOUT_RECORD",
           "RECORD_WITHOUT_ALLOCATION", "ALLOCATION_MISMATCH", "NODE_NOT_RECORDED",
           "NODE_NOT_REPORTED", "NODE_REPORT_FAILED"]
