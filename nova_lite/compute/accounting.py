"""The accounting rules: inventories from a report, and nodes held beyond capacity.

Pure functions over records; the tracker orchestrates them.  What a claim
asks for and whether it fits are the claim model's
(:mod:`nova_lite.model.requested`, :mod:`nova_lite.model.fit`), below both
the tracker and the store; their names are importable from here too.
"""

import functools
import logging
import math
from collections.abc import Sequence
from fractions import Fraction

from nova_lite.conf import Settings
from nova_lite.model.fit import (  # noqa: F401 - public names here too
    LIMIT_KEYS, amount_problems, usage_bounds)
from nova_lite.model.requested import (  # noqa: F401 - public names here too
    CPU_THREAD_POLICIES, flavor_numa_request, requested_resources, wants_dedicated_cpus)
from nova_lite.objects import Allocation, ComputeNode, NodeResources
from nova_lite.resources import (  # noqa: F401 - public names here too
    DISK_GB, MEMORY_MB, PCPU, VCPU, Inventory, validate_resource_class)

LOG = logging.getLogger(__name__)


def build_inventories(report: NodeResources, settings: Settings) -> dict[str, Inventory]:
    """``{rc: Inventory}`` for one node from its report and the settings.

    Reserved host amounts come from settings (``reserved_host_disk_mb`` is
    rounded up to whole GB) plus what the driver reserves itself; ratios
    from ``<kind>_allocation_ratio`` or the ``initial_*`` default.  Classes
    with a total of 0 are left out.  A reserved amount greater than the
    node's total (the host shrank below it) never fails the node: it is
    recorded with its current total, all of it reserved, so its capacity
    is 0 and it admits nothing; one WARNING names the option and figures.
    """
    driver_reserved = report.reserved
    plan: list[tuple[str, int, int, str | None, Fraction | int]] = [
        (VCPU, report.vcpus, settings.reserved_host_cpus, "reserved_host_cpus",
         _ratio(settings, "cpu")),
        (PCPU, report.pcpus, 0, None, 1),
        (MEMORY_MB, report.memory_mb, settings.reserved_host_memory_mb,
         "reserved_host_memory_mb", _ratio(settings, "ram")),
        (DISK_GB, report.local_gb, math.ceil(settings.reserved_host_disk_mb / 1024),
         "reserved_host_disk_mb", _ratio(settings, "disk")),
    ]
    if report.resource_class:
        plan.append((validate_resource_class(report.resource_class), 1, 0, None, 1))
    inventories: dict[str, Inventory] = {}
    for rc, total, reserved, option, ratio in plan:
        if not total:
            continue
        reserved += driver_reserved.get(rc, 0)
        if reserved > total:
            LOG.warning(
                "Node %s: %s = %d is greater than its %s total %d (the host shrank?); "
                "recording it with all %d reserved, so it admits nothing of %s",
                report.hypervisor_hostname or "?",
                option or "the driver's reserved " + rc, reserved, rc, total, total, rc)
            reserved = total
        inventories[rc] = _inventory(total, reserved, ratio)
    return inventories


# Settings and inventories are frozen, and a fleet's nodes mostly alike: an
# audit of thousands of nodes reuses the same few records.
@functools.lru_cache(maxsize=64)
def _ratio(settings: Settings, kind: str) -> Fraction:
    return settings.allocation_ratio(kind)


@functools.lru_cache(maxsize=4096)
def _inventory(total: int, reserved: int, ratio: Fraction | int) -> Inventory:
    return Inventory(total=total, reserved=reserved, allocation_ratio=ratio)


def over_capacity_reports(node: ComputeNode, allocations: Sequence[Allocation] = ()
                          ) -> list[tuple[str, int, int, int, list[str]]]:
    """``[(rc, over, capacity, used, instance uuids)]`` for every class ``node``
    holds beyond its capacity (empty when none is).

    ``node`` is a ComputeNode; ``allocations`` its live Allocation records,
    which name the instances holding each class (migrations by their
    instance).
    """
    out = []
    for rc, over in node.over_classes().items():
        instances = sorted({a.instance_uuid for a in allocations if a.resources.get(rc)})
        out.append((rc, over, node.capacity(rc), node.used(rc), instances))
    return out


def log_over_capacity(node: ComputeNode, allocations: Sequence[Allocation] = (),
                      log: logging.Logger | None = None) -> int:
    """One WARNING per class ``node`` holds beyond capacity, naming the node,
    the class, the figures and the instances on it.  Returns how many."""
    log = log or LOG
    reports = over_capacity_reports(node, allocations)
    for rc, over, capacity, used, instances in reports:
        log.warning("Node %s/%s (uuid %s) is over capacity in %s by %d: %d used of "
                    "capacity %d (free shows 0). Instances on it: %s", node.host,
                    node.nodename, node.uuid, rc, over, used, capacity,
                    ", ".join(instances) or "none")
    return len(reports)
