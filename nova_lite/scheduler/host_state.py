"""``HostState``: what the scheduler knows of one compute node.

Built from the node's record and its service row; ``consume`` adds what
the scheduler just placed there, so back-to-back requests see it before
the next refresh from the records.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nova_lite.compute import accounting, placement
from nova_lite.compute.node_usage import with_allocation
from nova_lite.objects import Allocation, ComputeNode
from nova_lite.resources import Inventory

if TYPE_CHECKING:
    from nova_lite.db.aggregates import Aggregate
    from nova_lite.db.store import ServiceRecord
    from nova_lite.scheduler.request import RequestSpec

VCPU, PCPU, MEMORY_MB, DISK_GB = (accounting.VCPU, accounting.PCPU, accounting.MEMORY_MB,
                                  accounting.DISK_GB)


def _free(inventories: Mapping[str, Inventory], usage: Mapping[str, int], rc: str) -> int:
    """``ComputeNode.free(rc)`` of the node with these ``inventories`` and
    ``usage``, in fewer steps (computed for every node of a fleet at once).

    The same figure: past its inventory's capacity a node's capacity
    counts reserved units in use as used (``Inventory.capacity_in_use``),
    but never above what is used, so nothing is free either way.
    """
    inv = inventories.get(rc)
    if inv is None:
        return 0
    return max(0, inv.capacity - usage.get(rc, 0))


class HostState:
    """One compute node as the scheduler sees it.

    ``free_ram_mb``, ``free_disk_gb``, ``free_vcpus`` and ``free_pcpus`` are
    never negative: ``max(0, capacity - used)``.  ``service`` is the host's
    service row (None if it never reported); ``aggregates`` the host
    aggregates of its host (:class:`~nova_lite.db.aggregates.Aggregate`),
    read with the service rows.
    """

    __slots__ = ("host", "nodename", "uuid", "generation", "node", "service",
                 "free_ram_mb", "free_disk_gb", "free_vcpus", "free_pcpus", "consumed",
                 "aggregates")

    def __init__(self, node: ComputeNode, service: "ServiceRecord | None" = None) -> None:
        self.host = node.host
        self.nodename = node.nodename
        self.uuid = node.uuid
        self.service = service
        self.aggregates: tuple[Aggregate, ...] = ()
        self.consumed = 0
        self.update_from_node(node)

    def update_from_node(self, node: ComputeNode) -> None:
        """Take the record's view (inventories, usage, generation)."""
        self.node = node
        self.generation = node.generation
        self.consumed = 0
        self._recompute()

    def restore(self, node: ComputeNode, consumed: int) -> None:
        """Go back to an earlier view (``node``) of this scheduler's own picks."""
        self.node, self.consumed = node, consumed
        self._recompute()

    def _recompute(self) -> None:
        inventories, usage = self.node.inventories, self.node.usage
        self.free_ram_mb = _free(inventories, usage, MEMORY_MB)
        self.free_disk_gb = _free(inventories, usage, DISK_GB)
        self.free_vcpus = _free(inventories, usage, VCPU)
        self.free_pcpus = _free(inventories, usage, PCPU)

    def free(self, rc: str) -> int:
        """``max(0, capacity - used)`` of ``rc``, including this scheduler's picks."""
        return self.node.free(rc)

    def decide(self, spec: "RequestSpec") -> placement.Decision:
        """The claim's own pure decision for ``spec`` on this view (no overhead)."""
        return placement.decide(self.node, spec.requested, None, spec.numa_request,
                                spec.pci_requests, spec.flavor.extra_specs)

    def consume(self, spec: "RequestSpec") -> None:
        """Count ``spec`` as placed here (amounts, NUMA cells, PCI devices)."""
        decision = self.decide(spec)
        alloc = Allocation(
            consumer_uuid="scheduled", consumer_type="instance", instance_uuid="scheduled",
            node_uuid=self.uuid, resources=spec.requested, flavor=spec.flavor,
            numa_topology=decision.numa_topology, pci_devices=decision.pci_devices,
            providers=decision.providers)
        self.node = with_allocation(self.node, alloc)
        self.consumed += 1
        self._recompute()

    def limits(self) -> dict[str, float]:
        """Nova's scheduler limits for the claim: ``total x ratio`` per key
        (``memory_mb``, ``disk_gb``, ``vcpu``), for the classes the node offers."""
        out: dict[str, float] = {}
        for key, rc in accounting.LIMIT_KEYS.items():
            inv = self.node.inventories.get(rc)
            if inv is not None:
                # Integers' true division rounds correctly, as float() of
                # the Fraction does, without Fraction arithmetic.
                ratio = inv.allocation_ratio
                out[key] = inv.total * ratio.numerator / ratio.denominator
        return out

    def __repr__(self) -> str:
        return (f"HostState({self.host}/{self.nodename}: ram {self.free_ram_mb} MB, "
                f"disk {self.free_disk_gb} GB, vcpus {self.free_vcpus})")
