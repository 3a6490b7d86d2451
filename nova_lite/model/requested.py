"""What a claim asks for: a flavor's amounts and NUMA topology, with the driver's overhead.

Pure functions of a :class:`~nova_lite.objects.Flavor` (and the driver's
:class:`~nova_lite.objects.Overhead`); a malformed extra spec raises
:class:`~nova_lite.exception.InvalidInput` naming it.
"""

import math
from collections.abc import Mapping

from nova_lite.exception import InvalidInput
from nova_lite.objects import Flavor, InstanceNUMACell, InstanceNUMATopology, Overhead
from nova_lite.resources import DISK_GB, MEMORY_MB, PCPU, VCPU, validate_resource_class

_PAGE_SUFFIXES = {"KB": 1, "K": 1, "MB": 1024, "M": 1024, "GB": 1024 * 1024, "G": 1024 * 1024}


def _page_size_kb(flavor: Flavor, text: str) -> int:
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


def _check_cpu_specs(flavor: Flavor, specs: Mapping[str, str]) -> str:
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


def flavor_numa_request(flavor: Flavor) -> InstanceNUMATopology | None:
    """The instance NUMA topology a flavor's extra specs ask for, or None.

    As Nova derives it: ``hw:cpu_policy=dedicated``, ``hw:numa_nodes=N`` or
    ``hw:mem_page_size`` ask for NUMA placement; vCPUs and memory are split
    evenly over ``hw:numa_nodes`` cells (default 1).  Raises
    :class:`~nova_lite.exception.InvalidInput` naming the extra spec when one
    is malformed (``hw:cpu_policy``, ``hw:cpu_thread_policy``,
    ``hw:numa_nodes``, ``hw:mem_page_size``), even when it would not ask for
    NUMA placement.
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


def wants_dedicated_cpus(flavor: Flavor,
                         numa_topology: InstanceNUMATopology | None = None) -> bool:
    """True if the instance asks for pinned CPUs (PCPU, not VCPU)."""
    if flavor.extra_specs.get("hw:cpu_policy") == "dedicated":
        return True
    return bool(numa_topology and any(c.cpu_policy == "dedicated"
                                      for c in numa_topology.cells))


def requested_resources(flavor: Flavor, overhead: Overhead,
                        numa_topology: InstanceNUMATopology | None = None) -> dict[str, int]:
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
