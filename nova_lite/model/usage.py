"""A node record with one more (or one less) allocation: a claim's effect, computed.

After a claim commits at generation ``g + 1`` on a node recorded at ``g``,
the node is exactly the one it decided on plus the claim's allocations: no
read is needed to know it.
"""

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from nova_lite.objects import Allocation, ComputeNode
from nova_lite.providers import add_usage
from nova_lite.validators import replaced, unchecked_maker


def with_allocation(node: ComputeNode, allocation: Allocation, sign: int = 1) -> ComputeNode:
    """``node`` with ``allocation`` added (``sign=-1``: removed).

    Usage amounts (the node's own; amounts on child providers count in
    their ``provider_usage``), NUMA placements and PCI devices in use
    change together; the generation does not (the caller sets the one the change committed
    at).  The inventories' own ``used`` figures are left as they were: see
    :func:`synced`.
    """
    return replaced(node, **_changed(node, [allocation], sign))


def _changed(node: ComputeNode, allocations: Iterable[Allocation],
             sign: int = 1) -> dict[str, Any]:
    """The fields of ``node`` that ``allocations`` move (``sign=-1``: removed)."""
    amounts = dict(node.usage)
    nested = node.provider_usage
    numa, pci = node.numa_placements, node.pci_in_use
    for allocation in allocations:
        own = allocation.resources
        if allocation.providers:   # amounts on children count there, not on the node
            nested = add_usage(nested, allocation.providers, sign)
            held: dict[str, int] = {}
            for per in allocation.providers.values():
                for rc, n in per.items():
                    held[rc] = held.get(rc, 0) + n
            own = {rc: n - held.get(rc, 0) for rc, n in own.items() if n - held.get(rc, 0)}
        _add_amounts(amounts, own, sign)
        if allocation.numa_topology is not None:
            placed = list(numa)
            if sign > 0:
                placed.append(allocation.numa_topology)
            elif allocation.numa_topology in placed:
                placed.remove(allocation.numa_topology)
            numa = tuple(placed)
        if allocation.pci_devices:
            devices = frozenset(allocation.pci_devices)
            pci = pci | devices if sign > 0 else pci - devices
    changed: dict[str, Any] = {"usage": amounts}
    # The others only where they moved: a copy converts and checks what it is given.
    if nested is not node.provider_usage:
        changed["provider_usage"] = nested
    if numa is not node.numa_placements:
        changed["numa_placements"] = numa
    if pci is not node.pci_in_use:
        changed["pci_in_use"] = pci
    return changed


def _add_amounts(amounts: dict[str, int], own: Mapping[str, int], sign: int) -> None:
    """Add ``own`` (amounts by class) to ``amounts`` in place, times ``sign``;
    a class whose total comes to 0 is dropped."""
    for rc, n in own.items():
        total = amounts.get(rc, 0) + sign * n
        if total:
            amounts[rc] = total
        else:
            amounts.pop(rc, None)


def with_allocations(node: ComputeNode, allocations: Iterable[Allocation],
                     generation: int) -> ComputeNode:
    """``node`` at ``generation`` with every one of ``allocations`` added: the
    node as recorded once the claims that hold them commit at ``generation``."""
    allocations = tuple(allocations)
    if all(not a.providers and a.numa_topology is None and not a.pci_devices
           for a in allocations):
        # Amounts on the node itself alone (a plain claim's): only the usage
        # moves, and the sums of a checked record's amounts need no check.
        amounts = dict(node.usage)
        for allocation in allocations:
            _add_amounts(amounts, allocation.resources, 1)
        return _with_usage(node, MappingProxyType(amounts), generation)
    return replaced(node, generation=generation, **_changed(node, allocations))


#: ``_with_usage(source, usage, generation)``: ``source`` (a ComputeNode) with
#: that usage (a read-only mapping, as the field's converter makes it) and
#: generation, nothing converted or checked again.
_with_usage = unchecked_maker(
    ComputeNode, "_with_usage", ("source", "usage", "generation"),
    {f.name: (f.name if f.name in ("usage", "generation") else f"source.{f.name}")
     for f in attrs.fields(ComputeNode)})


def synced(node: ComputeNode) -> ComputeNode:
    """``node`` with each inventory's ``used`` equal to the node's usage of its class.

    A claim's hot path leaves them behind (an Inventory is a validated
    record: rebuilding them costs more than the rest of the decision); a
    view shown to a caller syncs them.
    """
    if all(inv.used == node.usage.get(rc, 0) for rc, inv in node.inventories.items()):
        return node
    return attrs.evolve(node, inventories={
        rc: attrs.evolve(inv, used=node.usage.get(rc, 0)) for rc, inv in node.inventories.items()})
