"""Operator reports from the records: hypervisors, their totals, and host usage.

Pure functions: they take records (ComputeNode, service rows, Instance)
and return attrs records, so the command line and any other front end
show the same figures.  Free is never negative: ``node.free(rc)``, with
what is held beyond capacity in ``over``.

- :func:`hypervisor_rows`: one :class:`HypervisorRow` per node.
- :func:`resource_lines`: per resource class of one node, detected,
  configured and effective values (:class:`ResourceLine`).
- :func:`hypervisor_stats`: totals across nodes (:class:`HypervisorStats`).
- :func:`host_describe`: Nova's host-describe rows (:class:`HostUsageRow`):
  ``(total)``, ``(used_now)``, ``(used_max)``, then one per project.
"""

import collections
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.db.services import ServiceRecord
    from nova_lite.objects import ComputeNode, Flavor, Instance


VCPU, MEMORY_MB, DISK_GB = "VCPU", "MEMORY_MB", "DISK_GB"
#: resource class -> (reserved option, ratio kind) in Settings.
_OPTIONS = {VCPU: ("reserved_host_cpus", "cpu"), MEMORY_MB: ("reserved_host_memory_mb", "ram"),
            DISK_GB: ("reserved_host_disk_mb", "disk")}


def service_state(service: "ServiceRecord | None", service_down_time: float,
                  now: float | None = None) -> tuple[str, str]:
    """``("up"|"down", "enabled"|"disabled")`` of a service record (None: never
    reported) at ``now`` (epoch s, default the current time): up by
    :meth:`~nova_lite.db.services.ServiceRecord.is_up` within
    ``service_down_time`` seconds, and enabled or not, each on its own."""
    if service is None:
        return "down", "disabled"
    state = "up" if service.is_up(service_down_time, now) else "down"
    return state, "disabled" if service.disabled else "enabled"


@attrs.frozen
class HypervisorRow:
    """One compute node: identity, state, and per class capacity/used/free (counts,
    MB, GB); ``running_vms``: live instances recorded on it."""

    host: str
    nodename: str
    uuid: str
    hypervisor_type: str | None
    state: str
    status: str
    vcpus: int
    vcpus_used: int
    memory_mb: int
    memory_mb_used: int
    local_gb: int
    local_gb_used: int
    free_ram_mb: int
    free_disk_gb: int
    running_vms: int


def _live(instances: Iterable["Instance"]) -> list["Instance"]:
    return [i for i in instances if i.holds_resources]


def hypervisor_rows(nodes: Iterable["ComputeNode"], services: Iterable["ServiceRecord"],
                    instances: Iterable["Instance"], service_down_time: float,
                    now: float | None = None,
                    running: "Mapping[tuple[str | None, str | None], int] | None" = None
                    ) -> list[HypervisorRow]:
    """A HypervisorRow per node; ``services``: the compute services' records (state
    and status as :func:`service_state` gives them at ``now``, epoch s).

    ``running_vms`` counts the ``instances`` that hold resources, or, when
    ``running`` is given (``{(host, nodename): count}``, as
    :meth:`Store.count_live_instances <nova_lite.db.store.Store.count_live_instances>`
    gives it for a page of nodes), comes from it and ``instances`` is not read.
    """
    by_host = {s.host: s for s in services}
    if running is None:
        running = collections.Counter((i.host, i.node) for i in _live(instances))
    rows = []
    for node in nodes:
        state, status = service_state(by_host.get(node.host), service_down_time, now)
        report = node.resources
        rows.append(HypervisorRow(
            host=node.host, nodename=node.nodename, uuid=node.uuid,
            hypervisor_type=report.hypervisor_type if report is not None else None,
            state=state, status=status,
            vcpus=node.capacity(VCPU), vcpus_used=node.used(VCPU),
            memory_mb=node.capacity(MEMORY_MB), memory_mb_used=node.used(MEMORY_MB),
            local_gb=node.capacity(DISK_GB), local_gb_used=node.used(DISK_GB),
            free_ram_mb=node.free(MEMORY_MB), free_disk_gb=node.free(DISK_GB),
            running_vms=running.get((node.host, node.nodename), 0)))
    return rows


@attrs.frozen
class PciDeviceLine:
    """One PCI device of one node for passthrough: its address, ids (4 hex
    digits), type (``type-PCI``, ``type-PF``, ``type-VF``, ``vdpa``), NUMA
    node, the PF of a VF (``parent_addr``), whether a claim holds it
    (``in_use``), whether a claim could take it now (``free``: false
    also for a PF with a VF in use, or a VF of a PF in use) and the child
    provider that counts it (``provider``; None unless ``[pci]
    report_in_placement`` records devices as providers)."""

    address: str
    vendor_id: str
    product_id: str
    dev_type: str
    numa_node: int | None
    parent_addr: str | None
    in_use: bool
    free: bool
    provider: str | None = None

    def text(self) -> str:
        """One line for a table: ``0000:81:00.0 10de:1db4 type-PCI numa 0 free``."""
        state = "in use" if self.in_use else "free" if self.free else "unavailable"
        numa = "" if self.numa_node is None else f" numa {self.numa_node}"
        parent = f" of {self.parent_addr}" if self.parent_addr else ""
        on = f" on {self.provider}" if self.provider else ""
        return (f"{self.address} {self.vendor_id}:{self.product_id} {self.dev_type}"
                f"{parent}{numa} {state}{on}")


def pci_device_lines(node: "ComputeNode") -> list[PciDeviceLine]:
    """The node's passthrough devices as last reported, lowest address first."""
    from nova_lite.pci import PciStats
    from nova_lite.pci_providers import tree_of
    report = node.resources
    if report is None or not report.pci_devices:
        return []
    stats = PciStats(report.pci_devices, node.pci_in_use)
    free = {d.address for d in stats.free_devices()}
    tree = tree_of(node.nodename, report)
    holder = tree.holder if tree is not None else {}
    return [PciDeviceLine(address=d.address, vendor_id=d.vendor_id, product_id=d.product_id,
                          dev_type=d.dev_type, numa_node=d.numa_node,
                          parent_addr=d.parent_addr, in_use=d.address in stats.in_use,
                          free=d.address in free,
                          provider=holder[d.address][0] if d.address in holder else None)
            for d in stats.devices]


@attrs.frozen
class ProviderInventoryLine:
    """One resource class of one child provider, in the class's unit:
    ``capacity`` is ``floor((total - reserved) x ratio)``, ``free`` never
    negative, ``over`` what is held beyond capacity."""

    resource_class: str
    total: int
    reserved: int
    ratio: float
    capacity: int
    used: int
    free: int
    over: int


@attrs.frozen
class ProviderLine:
    """One child provider of a node (:mod:`nova_lite.providers`): its name,
    uuid, parent (None: the node itself), generation (None where the
    records hold none yet), traits and inventories."""

    name: str
    uuid: str
    parent: str | None
    generation: int | None
    traits: list[str]
    inventories: list[ProviderInventoryLine]

    def text(self) -> str:
        """One line for a table: ``cmp1_pci_0000_81_00_0: VGPU 3 of 8 used, 5 free
        [CUSTOM_NVIDIA_35]``."""
        amounts = "; ".join(
            f"{i.resource_class} {i.used} of {i.capacity} used, {i.free} free"
            + (f", {i.over} over" if i.over else "") for i in self.inventories) or "no inventory"
        under = f" (under {self.parent})" if self.parent else ""
        traits = f" [{', '.join(self.traits)}]" if self.traits else ""
        return f"{self.name}{under}: {amounts}{traits}"


def provider_lines(node: "ComputeNode", generations: "Mapping[str, int] | None" = None
                   ) -> list[ProviderLine]:
    """The node's child providers as last reported, with their usage, by name.

    ``generations``: each child's recorded generation by name (see
    :meth:`nova_lite.db.Store.child_providers`), or None.
    """
    from nova_lite.providers import child_uuid
    report = node.resources
    if report is None or not report.providers:
        return []
    lines = []
    for child in sorted(report.providers, key=lambda c: c.name):
        used_by_class = node.provider_usage.get(child.name, {})
        inventories = []
        for rc, inv in sorted(child.inventories.items()):
            used = used_by_class.get(rc, 0)
            inventories.append(ProviderInventoryLine(
                resource_class=rc, total=inv.total, reserved=inv.reserved,
                ratio=float(inv.allocation_ratio), capacity=inv.capacity, used=used,
                free=max(0, inv.capacity - used), over=max(0, used - inv.capacity)))
        lines.append(ProviderLine(
            name=child.name, uuid=child_uuid(node.uuid, child.name), parent=child.parent,
            generation=None if generations is None else generations.get(child.name),
            traits=sorted(child.traits), inventories=inventories))
    return lines


@attrs.frozen
class ResourceLine:
    """One resource class of one node.

    ``detected``: the driver's reported total; ``configured_reserved`` and
    ``configured_ratio``: from settings (None without them);
    ``total``/``reserved``/``ratio``/``capacity``: the effective inventory;
    ``used``, ``free`` (never negative) and ``over`` (held beyond capacity).
    """

    resource_class: str
    detected: int | None
    configured_reserved: int | None
    configured_ratio: float | None
    total: int
    reserved: int
    ratio: float | None
    capacity: int
    used: int
    free: int
    over: int


def _configured(rc: str, settings: "Settings | None") -> tuple[int | None, float | None]:
    if settings is None or rc not in _OPTIONS:
        return None, None
    option, kind = _OPTIONS[rc]
    reserved = getattr(settings, option)
    if rc == DISK_GB:
        reserved = math.ceil(reserved / 1024)
    return reserved, float(settings.allocation_ratio(kind))


def resource_lines(node: "ComputeNode",
                   settings: "Settings | None" = None) -> list[ResourceLine]:
    """A ResourceLine per class the node offers, reports or uses, sorted."""
    report = node.resources
    detected = report.totals() if report is not None else {}
    lines = []
    for rc in sorted(set(node.inventories) | set(detected) | set(node.usage)):
        inv = node.inventories.get(rc)
        reserved, ratio = _configured(rc, settings)
        lines.append(ResourceLine(
            resource_class=rc, detected=detected.get(rc), configured_reserved=reserved,
            configured_ratio=ratio, total=inv.total if inv else 0,
            reserved=inv.reserved if inv else 0,
            ratio=float(inv.allocation_ratio) if inv else None,
            capacity=node.capacity(rc), used=node.used(rc), free=node.free(rc),
            over=node.over(rc)))
    return lines


@attrs.frozen
class HypervisorStats:
    """Totals across nodes (Nova's ``hypervisor stats`` fields, plus ``*_over``)."""

    count: int
    vcpus: int
    vcpus_used: int
    memory_mb: int
    memory_mb_used: int
    free_ram_mb: int
    local_gb: int
    local_gb_used: int
    free_disk_gb: int
    running_vms: int
    vcpus_over: int
    memory_mb_over: int
    local_gb_over: int


def hypervisor_stats(nodes: Sequence["ComputeNode"],
                     instances: Iterable["Instance"]) -> HypervisorStats:
    """HypervisorStats summed over ``nodes``; running_vms counts live instances on them."""
    placed = {(n.host, n.nodename) for n in nodes}
    return HypervisorStats(
        count=len(nodes),
        vcpus=sum(n.capacity(VCPU) for n in nodes),
        vcpus_used=sum(n.used(VCPU) for n in nodes),
        memory_mb=sum(n.capacity(MEMORY_MB) for n in nodes),
        memory_mb_used=sum(n.used(MEMORY_MB) for n in nodes),
        free_ram_mb=sum(n.free(MEMORY_MB) for n in nodes),
        local_gb=sum(n.capacity(DISK_GB) for n in nodes),
        local_gb_used=sum(n.used(DISK_GB) for n in nodes),
        free_disk_gb=sum(n.free(DISK_GB) for n in nodes),
        running_vms=sum(1 for i in _live(instances) if (i.host, i.node) in placed),
        vcpus_over=sum(n.over(VCPU) for n in nodes),
        memory_mb_over=sum(n.over(MEMORY_MB) for n in nodes),
        local_gb_over=sum(n.over(DISK_GB) for n in nodes))


@attrs.frozen
class HostUsageRow:
    """One row of ``host describe``: ``project`` is ``(total)``, ``(used_now)``,
    ``(used_max)`` or a project id; ``cpu`` (vCPUs), ``memory_mb`` (MB),
    ``disk_gb`` (GB)."""

    host: str
    project: str
    cpu: int
    memory_mb: int
    disk_gb: int


def _flavor_amounts(flavor: "Flavor") -> tuple[int, int, int]:
    disk = flavor.root_gb + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)
    return flavor.vcpus, flavor.memory_mb, disk


def host_describe(host: str, nodes: Iterable["ComputeNode"],
                  instances: Iterable["Instance"]) -> list[HostUsageRow]:
    """Nova's host-describe rows for ``host`` (its ``nodes`` and ``instances``).

    ``(total)``: the inventories' totals; ``(used_now)``: reserved plus what
    the allocations hold (flavors, overhead, in-progress migrations);
    ``(used_max)``: the flavors of the live instances; then per project the
    flavors of its live instances, sorted by project id.
    """
    nodes = [n for n in nodes if n.host == host]

    def total(fn: Callable[["ComputeNode", str], int]) -> tuple[int, ...]:
        return tuple(sum(fn(n, rc) for n in nodes) for rc in (VCPU, MEMORY_MB, DISK_GB))

    rows = [HostUsageRow(host, "(total)", *total(lambda n, rc: n.inventory(rc).total)),
            HostUsageRow(host, "(used_now)", *total(
                lambda n, rc: n.inventory(rc).reserved + n.used(rc)))]
    live = [i for i in _live(instances) if i.host == host]
    per_project: dict[str, list[int]] = {}
    for inst in live:
        sums = per_project.setdefault(inst.project_id, [0, 0, 0])
        for idx, amount in enumerate(_flavor_amounts(inst.flavor)):
            sums[idx] += amount
    used_max = [sum(p[i] for p in per_project.values()) for i in range(3)]
    rows.append(HostUsageRow(host, "(used_max)", *used_max))
    rows.extend(HostUsageRow(host, project, *sums)
                for project, sums in sorted(per_project.items()))
    return rows
