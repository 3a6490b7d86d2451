"""Placement for the tracker: the allocation an audit rebuilds for a consumer.

The decision itself (owner, amounts, NUMA cells and PCI devices on one node
record) is the claim model's (:mod:`nova_lite.model.decide`), below both
the tracker and the store; its names are importable from here too.
"""

from nova_lite.model.decide import (  # noqa: F401 - public names here too
    Decision, decide, decide_claims, owner_problems)
from nova_lite.model.plans import MAX_AMOUNT, ClaimAsk  # noqa: F401 - public names here too
from nova_lite.model.requested import flavor_numa_request, requested_resources
from nova_lite.objects import (
    Allocation, Instance, InstanceNUMATopology, Migration, Overhead)


def rebuilt_allocation(consumer: Instance | Migration, node_uuid: str,
                       numa_request: InstanceNUMATopology | None,
                       overhead: Overhead) -> Allocation:
    """The Allocation a claim would have recorded for ``consumer`` (an audit's repair).

    ``consumer``: an Instance or a Migration (its new flavor); the NUMA
    request is the instance's, else the one its flavor implies, so a pinned
    instance counts PCPU again.  ``overhead``: the driver's estimate.
    """
    pci: tuple[str, ...]
    if isinstance(consumer, Migration):
        flavor, instance_uuid, kind = consumer.new_flavor, consumer.instance_uuid, "migration"
        # Where the destination pinned it is lost with the allocation: the
        # rebuilt one counts the amounts, not the cells.
        pci, placed = (), None
    else:
        flavor, instance_uuid, kind = consumer.flavor, consumer.uuid, "instance"
        pci, placed = consumer.pci_devices, consumer.numa_topology
    numa = numa_request or flavor_numa_request(flavor)
    return Allocation(
        consumer_uuid=consumer.uuid, consumer_type=kind, instance_uuid=instance_uuid,
        node_uuid=node_uuid, resources=requested_resources(flavor, overhead, numa),
        flavor=flavor, numa_topology=placed, pci_devices=pci)
