"""Deciding claims on one node: owner, amounts, NUMA cells and PCI devices together.

Pure functions of (node record, request): the store calls
:func:`decide_claims` with the node as recorded at the generation it
commits against, so NUMA and PCI are claimed under the same lock as
everything else.
"""

from collections.abc import Mapping

import attrs

from nova_lite.compute import accounting
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.node_usage import with_allocation
from nova_lite.objects import Allocation, Flavor, Instance, InstanceNUMATopology, Migration
from nova_lite.numa import NUMA_FIT_FAILED, fit_instance_to_host, numa_fit_problem, \
    numa_usage_for
from nova_lite.pci import PciClaimError, PciStats


@attrs.frozen
class Decision:
    """Where a request landed, or why it cannot."""

    reasons: tuple[str, ...] = ()
    numa_topology: InstanceNUMATopology | None = None     # as placed
    pci_devices: tuple[str, ...] = ()


#: The largest amount of one class a node records (SQL's 64-bit sums, exact
#: in a double): a request or a usage above it is refused, never stored.
MAX_AMOUNT = 2 ** 53 - 1


@attrs.frozen
class ClaimAsk:
    """One claim's request, worked out before any lock: what it asks for and why.

    ``requested`` is ``{rc: amount}`` (flavor plus the driver's overhead);
    ``numa_request`` the NUMA topology it needs placed (the instance's, else
    the one its flavor implies); ``migration`` is set for a move.
    """

    instance: Instance
    flavor: Flavor
    requested: Mapping[str, int]
    numa_request: InstanceNUMATopology | None = None
    migration: Migration | None = None

    @classmethod
    def build(cls, instance, flavor, overhead, migration=None):
        """The ask of ``instance`` for ``flavor`` with the driver's ``overhead``."""
        # An instance without a NUMA request gets the one its flavor implies
        # (hw:cpu_policy=dedicated, hw:numa_nodes, hw:mem_page_size), as in Nova.
        numa_request = instance.numa_topology or accounting.flavor_numa_request(flavor)
        requested = accounting.requested_resources(flavor, overhead, numa_request)
        return cls(instance=instance, flavor=flavor, requested=requested,
                   numa_request=numa_request, migration=migration)


def owner_problems(node, host):
    """Why ``host`` may not claim on ``node`` (empty if it may)."""
    problems = []
    if node.host != host:
        problems.append(f"Node {node.nodename} is owned by host {node.host}, not {host}")
    if not node.reported:
        problems.append(f"Node {node.nodename} is no longer reported by the virt driver of "
                        f"host {node.host}")
    return problems


def decide_claims(node, host, nodename, asks, limits):
    """The ClaimPlans of ``asks`` on ``node``, each decided with the ones before it counted.

    ``node``: the ComputeNode as recorded; ``host``: the claiming host.
    Raises ComputeResourcesUnavailable with every reason of the first ask
    that does not fit (and so none is admitted).
    """
    from nova_lite.db.store import ClaimPlan   # the plan is the store's record
    problems = owner_problems(node, host)
    if problems:
        raise ComputeResourcesUnavailable(problems)
    plans = []
    for ask in asks:
        oversized = [f"{rc}: requested {n} is more than nova-lite records ({MAX_AMOUNT})"
                     for rc, n in sorted(ask.requested.items())
                     if n > MAX_AMOUNT or node.used(rc) + n > MAX_AMOUNT]
        if oversized:
            raise ComputeResourcesUnavailable(oversized)
        decision = decide(node, ask.requested, limits, ask.numa_request,
                          ask.instance.pci_requests)
        if decision.reasons:
            raise ComputeResourcesUnavailable(decision.reasons)
        migration, instance = ask.migration, ask.instance
        alloc = Allocation(
            consumer_uuid=instance.uuid if migration is None else migration.uuid,
            consumer_type="instance" if migration is None else "migration",
            instance_uuid=instance.uuid, node_uuid=node.uuid, resources=ask.requested,
            flavor=ask.flavor, numa_topology=decision.numa_topology,
            pci_devices=decision.pci_devices)
        placed = None
        if migration is None:
            placed = attrs.evolve(
                instance, host=host, node=nodename,
                numa_topology=decision.numa_topology or instance.numa_topology,
                pci_devices=decision.pci_devices)
        plans.append(ClaimPlan(allocation=alloc, instance=placed, migration=migration,
                               bounds=_usage_bounds(node, ask, limits)))
        if len(plans) < len(asks):
            node = with_allocation(node, alloc)
    return tuple(plans)


def _usage_bounds(node, ask, limits):
    """The plan's :attr:`~nova_lite.db.store.ClaimPlan.bounds`: for a request
    that depends on the node only through its usage of each class (no NUMA
    cell, no PCI device to place), the most each class may hold with it."""
    if ask.numa_request is not None or ask.instance.pci_requests:
        return None
    bounds = accounting.usage_bounds(node.inventories, ask.requested, limits)
    return {rc: min(most, MAX_AMOUNT) for rc, most in bounds.items()}


def rebuilt_allocation(consumer, node_uuid, numa_request, overhead):
    """The Allocation a claim would have recorded for ``consumer`` (an audit's repair).

    ``consumer``: an Instance or a Migration (its new flavor); the NUMA
    request is the instance's, else the one its flavor implies, so a pinned
    instance counts PCPU again.  ``overhead``: the driver's estimate.
    """
    if isinstance(consumer, Migration):
        flavor, instance_uuid, kind = consumer.new_flavor, consumer.instance_uuid, "migration"
        # Where the destination pinned it is lost with the allocation: the
        # rebuilt one counts the amounts, not the cells.
        pci, placed = (), None
    else:
        flavor, instance_uuid, kind = consumer.flavor, consumer.uuid, "instance"
        pci, placed = consumer.pci_devices, consumer.numa_topology
    numa = numa_request or accounting.flavor_numa_request(flavor)
    return Allocation(
        consumer_uuid=consumer.uuid, consumer_type=kind, instance_uuid=instance_uuid,
        node_uuid=node_uuid, resources=accounting.requested_resources(flavor, overhead, numa),
        flavor=flavor, numa_topology=placed, pci_devices=pci)


def decide(node, requested, limits, numa_request=None, pci_requests=()):
    """Check ``requested`` amounts plus NUMA and PCI against ``node``'s usage.

    ``node`` is the ComputeNode (inventories, usage and the driver's
    report); returns a :class:`Decision` with every failing reason.
    """
    reasons = accounting.amount_problems(node.inventories, node.usage, requested, limits)
    resources = node.resources
    placed, numa_cells = None, None
    pci = None
    if pci_requests:
        devices = resources.pci_devices if resources is not None else ()
        pci = PciStats(devices=devices, in_use=node.pci_in_use)
    if numa_request is not None:
        host = resources.numa_topology if resources is not None else None
        if host is None:
            reasons.append(f"{NUMA_FIT_FAILED}: the node reports no NUMA topology")
        else:
            kwargs = dict(
                usage=numa_usage_for(host, node.numa_placements),
                cpu_allocation_ratio=node.inventory("VCPU").allocation_ratio,
                ram_allocation_ratio=node.inventory("MEMORY_MB").allocation_ratio,
                pci=pci, pci_requests=tuple(pci_requests))
            placed = fit_instance_to_host(host, numa_request, **kwargs)
            if placed is None:
                reasons.append(numa_fit_problem(host, numa_request, **kwargs))
            else:
                numa_cells = {c.host_cell for c in placed.cells}
    addresses = ()
    if pci is not None:
        try:
            addresses = pci.claim(tuple(pci_requests), numa_cells=numa_cells)
        except PciClaimError as exc:
            reasons.append(str(exc))
    return Decision(reasons=tuple(reasons), numa_topology=placed, pci_devices=addresses)
