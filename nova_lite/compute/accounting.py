"""The accounting rules: inventories from a report, amounts a claim asks
for, and whether they fit.

Pure functions over records; the tracker orchestrates them.
"""

import functools
import logging
import math
from collections.abc import Mapping

from nova_lite.exception import InvalidInput
from nova_lite.objects import InstanceNUMACell, InstanceNUMATopology
from nova_lite.resources import (
    DISK_GB, MEMORY_MB, PCPU, VCPU, Inventory, validate_resource_class)

LOG = logging.getLogger(__name__)

#: Nova's scheduler limit keys -> resource class.
LIMIT_KEYS = {"memory_mb": MEMORY_MB, "disk_gb": DISK_GB, "vcpu": VCPU}
#: (label, unit) of each class in rejection reasons, in Nova's words.
_WORDS = {MEMORY_MB: ("memory", "MB"), DISK_GB: ("disk", "GB"), VCPU: ("vcpu", "VCPU"),
          PCPU: ("pcpu", "PCPU")}
#: The order reasons are reported in (Nova tests memory, then disk, then vCPUs).
_ORDER = {MEMORY_MB: 0, DISK_GB: 1, VCPU: 2, PCPU: 3}


def build_inventories(report, settings):
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
    plan = [
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
    inventories = {}
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
def _ratio(settings, kind):
    return settings.allocation_ratio(kind)


@functools.lru_cache(maxsize=4096)
def _inventory(total, reserved, ratio):
    return Inventory(total=total, reserved=reserved, allocation_ratio=ratio)


_PAGE_SUFFIXES = {"KB": 1, "K": 1, "MB": 1024, "M": 1024, "GB": 1024 * 1024, "G": 1024 * 1024}


def _page_size_kb(flavor, text):
    """KiB of ``hw:mem_page_size``: ``small`` or an explicit positive size."""
    if text == "small":
        return 4
    upper = text.strip().upper()
    size = None
    for suffix, factor in sorted(_PAGE_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if upper.endswith(suffix) and upper[:-len(suffix)].strip().isdigit():
            size = int(upper[:-len(suffix)]) * factor
            break
    else:
        if upper.isdigit():
            size = int(upper)
    if not size:
        raise InvalidInput(f"flavor {flavor.name!r} extra spec hw:mem_page_size={text!r} is not "
                           "a page size nova-lite understands (small, or a positive size: "
                           "2048, 2MB, 1GB)")
    return size


#: Nova's hw:cpu_thread_policy values (accepted; placement ignores threads).
CPU_THREAD_POLICIES = frozenset({"prefer", "isolate", "require"})


def _check_cpu_specs(flavor, specs):
    policy = specs.get("hw:cpu_policy", "shared")
    if policy not in ("shared", "dedicated"):
        hint = " (nova-lite does not place mixed policies)" if policy == "mixed" else ""
        raise InvalidInput(f"flavor {flavor.name!r} extra spec hw:cpu_policy={policy!r} "
                           f"must be shared or dedicated{hint}")
    thread = specs.get("hw:cpu_thread_policy")
    if thread is not None and thread not in CPU_THREAD_POLICIES:
        raise InvalidInput(f"flavor {flavor.name!r} extra spec hw:cpu_thread_policy="
                           f"{thread!r} must be one of prefer, isolate, require")
    return policy


def flavor_numa_request(flavor):
    """The instance NUMA topology a flavor's extra specs ask for, or None.

    As Nova derives it: ``hw:cpu_policy=dedicated``, ``hw:numa_nodes=N`` or
    ``hw:mem_page_size`` ask for NUMA placement; vCPUs and memory are split
    evenly over ``hw:numa_nodes`` cells (default 1).  Raises
    :class:`InvalidInput` naming the extra spec when one is malformed
    (``hw:cpu_policy``, ``hw:cpu_thread_policy``, ``hw:numa_nodes``,
    ``hw:mem_page_size``), even when it would not ask for NUMA placement.
    """
    specs = flavor.extra_specs
    policy = _check_cpu_specs(flavor, specs)
    nodes_text, page_text = specs.get("hw:numa_nodes"), specs.get("hw:mem_page_size")
    page = _page_size_kb(flavor, page_text) if page_text is not None else None
    if policy != "dedicated" and nodes_text is None and page_text is None:
        return None
    try:
        nodes = int(nodes_text) if nodes_text is not None else 1
    except ValueError:
        nodes = 0
    if nodes < 1 or flavor.vcpus % nodes or flavor.memory_mb % nodes:
        raise InvalidInput(
            f"flavor {flavor.name!r} extra spec hw:numa_nodes={nodes_text!r} must be a "
            f"positive divisor of its {flavor.vcpus} vCPUs and {flavor.memory_mb} MB")
    per_cpus, per_mem = flavor.vcpus // nodes, flavor.memory_mb // nodes
    return InstanceNUMATopology(cells=[
        InstanceNUMACell(id=i, cpuset=range(i * per_cpus, (i + 1) * per_cpus),
                         memory_mb=per_mem, cpu_policy=policy, pagesize_kb=page)
        for i in range(nodes)])


def wants_dedicated_cpus(flavor, numa_topology=None):
    """True if the instance asks for pinned CPUs (PCPU, not VCPU)."""
    if flavor.extra_specs.get("hw:cpu_policy") == "dedicated":
        return True
    return bool(numa_topology and any(c.cpu_policy == "dedicated"
                                      for c in numa_topology.cells))


def requested_resources(flavor, overhead, numa_topology=None):
    """``{rc: amount}`` a claim asks for: flavor plus driver overhead.

    Swap (MiB) counts as disk, rounded up to whole GB.  Flavor extra specs
    ``resources:<CLASS>=<n>`` replace the amount of that class (and take
    no overhead), as Nova's flavors for bare metal do.  Zero amounts are
    left out.
    """
    cpu_class = PCPU if wants_dedicated_cpus(flavor, numa_topology) else VCPU
    derived = {
        cpu_class: flavor.vcpus + overhead.vcpus,
        MEMORY_MB: flavor.memory_mb + overhead.memory_mb,
        DISK_GB: flavor.root_gb + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)
        + overhead.disk_gb,
    }
    for key, value in flavor.extra_specs.items():
        if not key.startswith("resources:"):
            continue
        rc = validate_resource_class(key.split(":", 1)[1])
        try:
            amount = int(value)
        except ValueError:
            raise InvalidInput(
                f"flavor {flavor.name!r} extra spec {key}={value!r} is not an integer") from None
        if amount < 0:
            raise InvalidInput(f"flavor {flavor.name!r} extra spec {key}={value!r} is negative")
        derived[rc] = amount
    return {rc: n for rc, n in derived.items() if n}


def _free_text(rc, free, requested):
    label, unit = _WORDS.get(rc, (rc, rc))
    return f"Free {label} {max(0, free):.2f} {unit} < requested {requested} {unit}"


def amount_problems(inventories, used, requested, limits=None):
    """Every reason ``requested`` does not fit, in Nova's words (may be empty).

    Only classes with a positive request are checked, so a node over
    capacity still accepts changes that make it no worse.  ``limits``
    (Nova's scheduler keys, a mapping or an object with ``to_dict()`` such
    as Nova's SchedulerLimits) narrow free to ``limit - reserved - used``.
    Free is never negative, in the decision or in the words.
    """
    limit_by_rc = _limits_by_class(limits)
    problems = {}   # rc -> reason; reported in Nova's order of classes
    for rc, amount in requested.items():
        if amount <= 0:
            continue
        inv = inventories.get(rc)
        in_use = used.get(rc, 0)
        if inv is None:
            problems[rc] = _free_text(rc, 0, amount)
            continue
        free = max(0, _usage_bound(inv, limit_by_rc.get(rc)) - in_use)
        if amount > free:
            problems[rc] = _free_text(rc, free, amount)
            continue   # one reason per dimension: the amount is the first problem
        unit_problem = inv.unit_problem(amount)
        if unit_problem:
            problems[rc] = f"{rc}: {unit_problem}"
    return [problems[rc] for rc in sorted(problems, key=lambda r: (_ORDER.get(r, 9), r))]


def _usage_bound(inv, limit):
    """The most of ``inv``'s class a node may hold: its capacity, narrowed to
    ``limit - reserved`` by a scheduler limit (None: no limit; may be a float)."""
    if limit is None:
        return inv.capacity
    return min(inv.capacity, limit - inv.reserved)


def usage_bounds(inventories, requested, limits=None):
    """``{rc: most}``: for each class ``requested`` asks a positive amount of,
    the most the node's usage of it may reach with the request added (whole
    units).

    The usage half of :func:`amount_problems`: with ``inventories`` unchanged,
    ``requested`` passes its amount checks exactly when ``used[rc] +
    requested[rc] <= most`` for every class here (and its unit checks, which
    do not depend on usage).  A database can then check a claim decided on
    a stale record against the usage it holds now.
    """
    limit_by_rc = _limits_by_class(limits)
    bounds = {}
    for rc, amount in requested.items():
        if amount > 0:
            inv = inventories[rc]
            bounds[rc] = math.floor(_usage_bound(inv, limit_by_rc.get(rc)))
    return bounds


def _limits_by_class(limits):
    """``{rc: limit}`` from scheduler ``limits``: None, a mapping, or an object
    with ``to_dict()`` (Nova's SchedulerLimits); InvalidInput otherwise."""
    if limits is None:
        return {}
    to_dict = getattr(limits, "to_dict", None)
    if callable(to_dict) and not isinstance(limits, Mapping):
        limits = to_dict()
    if not isinstance(limits, Mapping):
        raise InvalidInput(f"limits must be a mapping of Nova's scheduler keys "
                           f"({', '.join(sorted(LIMIT_KEYS))}) to numbers, or an object "
                           f"with to_dict(), got {type(limits).__name__} {limits!r:.80}")
    out = {}
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            continue   # e.g. numa_topology limits: handled by NUMA fitting
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise InvalidInput(f"limit {key!r} must be a finite number, got {value!r}")
        out[LIMIT_KEYS[key]] = value
    return out


def over_capacity_reports(node, allocations=()):
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


def log_over_capacity(node, allocations=(), log=None):
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
