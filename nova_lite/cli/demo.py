"""The ``compute --once --demo`` claims: one admitted, one rejected with its reasons.

The admitted claim is released again at the end (its instance is marked
deleted), so running the demo twice leaves the usage where it was.  Only
the fake hypervisor gets a guest spawned; other drivers are only claimed
against, never asked to create anything.
"""

import logging
import uuid
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.objects import ACTIVE, DELETED, ComputeNode, Flavor, Instance
from nova_lite.virt.fake import FakeDriver

if TYPE_CHECKING:
    from nova_lite.compute.resource_tracker import ResourceTracker

LOG = logging.getLogger(__name__)

#: The flavor of the claim that is admitted.
DEMO_FLAVOR = Flavor(name="demo.small", vcpus=1, memory_mb=512, root_gb=1)
DEMO_PROJECT = "nova-lite-demo"


def too_big_flavor(node: ComputeNode) -> Flavor:
    """A flavor one unit beyond the node's free VCPU, memory and disk."""
    def over(rc: str, minimum: int) -> int:
        return max(node.free(rc), 0) + 1 if rc in node.inventories else minimum
    return Flavor(name="demo.too-big", vcpus=over("VCPU", 1), memory_mb=over("MEMORY_MB", 1),
                  root_gb=over("DISK_GB", 0))


def flavor_dict(flavor: Flavor) -> dict[str, Any]:
    """The sizes of a flavor as plain data."""
    return {"name": flavor.name, "vcpus": flavor.vcpus, "memory_mb": flavor.memory_mb,
            "root_gb": flavor.root_gb, "ephemeral_gb": flavor.ephemeral_gb,
            "swap": flavor.swap}


def _free(node: ComputeNode) -> dict[str, int]:
    return {rc: node.free(rc) for rc in sorted(node.inventories)}


def _instance(flavor: Flavor) -> Instance:
    return Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id=DEMO_PROJECT,
                    display_name=f"nova-lite-demo-{flavor.name}")


def _admit(tracker: "ResourceTracker", nodename: str
           ) -> tuple[Instance | None, dict[str, Any]]:
    inst = _instance(DEMO_FLAVOR)
    spawn = isinstance(tracker.driver, FakeDriver)
    try:
        with tracker.instance_claim(inst, nodename) as claim:
            if spawn:
                tracker.driver.spawn(claim.instance)
    except ComputeResourcesUnavailable as exc:
        return None, {"instance": inst.uuid, "flavor": flavor_dict(inst.flavor),
                      "admitted": False, "reasons": exc.reasons, "message": str(exc)}
    placed = attrs.evolve(claim.instance, vm_state=ACTIVE)
    tracker.update_usage(placed)
    return placed, {"instance": inst.uuid, "flavor": flavor_dict(inst.flavor),
                    "admitted": True, "claimed": dict(sorted(claim.claimed.items())),
                    "guest_spawned": spawn,
                    "free_after": _free(tracker.get_node(nodename))}


def _reject(tracker: "ResourceTracker", nodename: str) -> dict[str, Any]:
    flavor = too_big_flavor(tracker.get_node(nodename))
    inst = _instance(flavor)
    try:
        claim = tracker.instance_claim(inst, nodename)
    except ComputeResourcesUnavailable as exc:
        return {"instance": inst.uuid, "flavor": flavor_dict(flavor), "admitted": False,
                "reasons": exc.reasons, "message": str(exc)}
    claim.abort()   # cannot happen on a node with finite capacity; leave nothing behind
    return {"instance": inst.uuid, "flavor": flavor_dict(flavor), "admitted": True,
            "reasons": [], "message": "admitted (unexpected); aborted"}


def run_demo(tracker: "ResourceTracker", nodename: str) -> dict[str, Any]:
    """Make the two demo claims on ``nodename``; returns plain data about them."""
    placed, admitted = _admit(tracker, nodename)
    rejected = _reject(tracker, nodename)
    released: dict[str, Any] | None = None
    if placed is not None:
        if isinstance(tracker.driver, FakeDriver):
            tracker.driver.destroy(placed)
        tracker.update_usage(attrs.evolve(placed, vm_state=DELETED))
        released = {"instance": placed.uuid,
                    "free_after": _free(tracker.get_node(nodename))}
    LOG.info("Demo on node %s: admitted %s, rejected %s", nodename,
             admitted.get("admitted"), not rejected["admitted"])
    return {"node": nodename, "admitted": admitted, "rejected": rejected,
            "released": released,
            "ok": bool(admitted.get("admitted")) and not rejected["admitted"]}
