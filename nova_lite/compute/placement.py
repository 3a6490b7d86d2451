"""Deciding a claim on one node: amounts, NUMA cells and PCI devices together.

Called inside the claim's transaction with the node's current usage, so
NUMA and PCI are claimed under the same lock as everything else.
"""

import attrs

from nova_lite.compute import accounting
from nova_lite.numa import NUMA_FIT_FAILED, fit_instance_to_host, numa_fit_problem, \
    numa_usage_for
from nova_lite.pci import PciClaimError, PciStats


@attrs.frozen
class Decision:
    """Where a request landed, or why it cannot."""

    reasons: tuple = ()
    numa_topology: object = None     # placed InstanceNUMATopology
    pci_devices: tuple = ()


def decide(node, usage, requested, limits, numa_request=None, pci_requests=()):
    """Check ``requested`` amounts plus NUMA and PCI against ``usage``.

    ``node`` is the ComputeNode (inventories and the driver's report);
    returns a :class:`Decision` with every failing reason.
    """
    reasons = accounting.amount_problems(node.inventories, usage.amounts, requested, limits)
    resources = node.resources
    placed, numa_cells = None, None
    pci = None
    if pci_requests:
        devices = resources.pci_devices if resources is not None else ()
        pci = PciStats(devices=devices, in_use=usage.pci_in_use)
    if numa_request is not None:
        host = resources.numa_topology if resources is not None else None
        if host is None:
            reasons.append(f"{NUMA_FIT_FAILED}: the node reports no NUMA topology")
        else:
            kwargs = dict(
                usage=numa_usage_for(host, usage.numa_placements),
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
