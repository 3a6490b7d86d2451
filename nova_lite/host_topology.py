"""Records that describe a host as its driver sees it: CPU model and
topology, NUMA cells with their memory pages, PCI devices, and the
(architecture, hypervisor, VM mode) triples it can run.

They are the parts of a :class:`~nova_lite.node_resources.NodeResources`
report; :mod:`nova_lite.objects` re-exports them.
"""

from collections.abc import Iterable

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput
from nova_lite.resources import normalize_resource_class
from nova_lite.traits import trait_set

#: PCI device types, Nova's strings: a plain device, an SR-IOV physical
#: function, a virtual function, and a VF that backs a vDPA device.
PCI_DEV_TYPES = frozenset({"type-PCI", "type-PF", "type-VF", "vdpa"})


@attrs.frozen
class CpuTopology:
    """Sockets, cores per socket and threads per core of a host.

    ``cells`` is the number of NUMA cells (Nova's libvirt driver reports
    it; 1 when a report leaves it out).
    """

    sockets: int = attrs.field(default=1, validator=v.positive_int)
    cores: int = attrs.field(default=1, validator=v.positive_int)
    threads: int = attrs.field(default=1, validator=v.positive_int)
    cells: int = attrs.field(default=1, validator=v.positive_int)


@attrs.frozen
class MaxPhysAddr:
    """The host CPU's physical address size: ``bits`` wide, libvirt ``mode``
    (``"passthrough"`` or ``"emulate"``)."""

    mode: str = attrs.field(validator=v.string)
    bits: int = attrs.field(validator=v.positive_int)


def _features(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class CpuInfo:
    """What Nova's ``cpu_info`` JSON carried, typed.

    ``maxphysaddr`` is None when the host does not report it.
    """

    arch: str = attrs.field(default="x86_64", validator=v.string)
    model: str = attrs.field(default="", validator=v.string)
    vendor: str = attrs.field(default="", validator=v.string)
    topology: CpuTopology = attrs.field(factory=CpuTopology,
                                        validator=v.instance_of(CpuTopology))
    features: frozenset[str] = attrs.field(factory=frozenset, converter=_features)
    maxphysaddr: MaxPhysAddr | None = attrs.field(
        default=None, validator=attrs.validators.optional(
            v.instance_of(MaxPhysAddr)))


@attrs.frozen
class SupportedInstance:
    """One (architecture, hypervisor type, VM mode) a node can run."""

    arch: str = attrs.field(validator=v.non_empty_str)
    hypervisor_type: str = attrs.field(validator=v.non_empty_str)
    vm_mode: str = attrs.field(validator=v.non_empty_str)


@attrs.frozen
class MemPage:
    """Pages of one size on a NUMA cell: ``size_kb`` KiB each, ``total`` pages."""

    size_kb: int = attrs.field(validator=v.positive_int)
    total: int = attrs.field(validator=v.non_negative_int)
    used: int = attrs.field(default=0, validator=v.non_negative_int)


def _sibling_sets(value: Iterable[Iterable[int]]) -> tuple[frozenset[int], ...]:
    return tuple(v.frozen_int_set(x) for x in value)


def _mempages(value: Iterable[MemPage] | None) -> tuple[MemPage, ...]:
    return v.records(MemPage, value, "NUMACell.mempages")


@attrs.frozen
class NUMACell:
    """One host NUMA cell.

    ``cpuset`` holds the CPUs for shared (floating) vCPUs, ``pcpuset`` those
    for dedicated (pinned) vCPUs; ``siblings`` groups hyperthread siblings;
    ``memory_mb`` is the cell's memory in MiB.
    """

    id: int = attrs.field(validator=v.non_negative_int)
    cpuset: frozenset[int] = attrs.field(converter=v.frozen_int_set)
    memory_mb: int = attrs.field(validator=v.non_negative_int)
    pcpuset: frozenset[int] = attrs.field(factory=frozenset, converter=v.frozen_int_set)
    siblings: tuple[frozenset[int], ...] = attrs.field(factory=tuple, converter=_sibling_sets)
    mempages: tuple[MemPage, ...] = attrs.field(factory=tuple, converter=_mempages)

    @property
    def all_cpus(self) -> frozenset[int]:
        """Every CPU of the cell, shared and dedicated."""
        return self.cpuset | self.pcpuset


def _numa_cells(value: Iterable[NUMACell] | None) -> tuple[NUMACell, ...]:
    return v.records(NUMACell, value, "NUMATopology.cells")


@attrs.frozen
class NUMATopology:
    """A host's NUMA cells."""

    cells: tuple[NUMACell, ...] = attrs.field(converter=_numa_cells)

    def __attrs_post_init__(self) -> None:
        ids = [c.id for c in self.cells]
        if len(set(ids)) != len(ids):
            raise InvalidInput(f"NUMATopology has duplicate cell ids: {ids}")

    def cell(self, cell_id: int) -> NUMACell:
        """The cell with ``cell_id``; raises KeyError naming it."""
        for c in self.cells:
            if c.id == cell_id:
                return c
        raise KeyError(f"no NUMA cell {cell_id}")


def _device_class(value: object) -> str | None:
    if value is None:
        return None
    try:
        return normalize_resource_class(value)
    except InvalidInput as exc:
        raise InvalidInput(f"PciDevice.resource_class: {exc}") from None


def _device_traits(value: Iterable[str] | None) -> frozenset[str]:
    return trait_set(value, "PciDevice.traits")


@attrs.frozen
class PciDevice:
    """A PCI device the host can pass through.

    ``address`` is the PCI address ("0000:81:00.1"); ``vendor_id`` and
    ``product_id`` are 4-digit hex strings; ``parent_addr`` is the PF of a VF.
    ``resource_class`` (optional) is the class the device is counted in
    when PCI devices are reported as child providers (``[pci]
    report_in_placement``; Nova's device_spec ``resource_class`` tag): a
    standard class or ``CUSTOM_*``, a bare name being normalised as Nova
    does (``"a100"`` -> ``CUSTOM_A100``); None:
    ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``.  ``traits`` are the device's own
    (``os-traits`` names or ``CUSTOM_*``; Nova's device_spec ``traits`` tag),
    carried by its provider and matched by an alias's ``traits``.
    """

    address: str = attrs.field(validator=v.non_empty_str)
    vendor_id: str = attrs.field(validator=v.non_empty_str)
    product_id: str = attrs.field(validator=v.non_empty_str)
    dev_type: str = attrs.field(default="type-PCI", validator=v.one_of(PCI_DEV_TYPES))
    numa_node: int | None = attrs.field(
        default=None, validator=v.optional(v.non_negative_int))
    parent_addr: str | None = attrs.field(default=None, validator=v.optional(v.string))
    resource_class: str | None = attrs.field(default=None, converter=_device_class)
    traits: frozenset[str] = attrs.field(factory=frozenset, converter=_device_traits)

    def to_dict(self) -> dict[str, object]:
        """A JSON-serialisable dict (``resource_class`` and ``traits`` only when set)."""
        out: dict[str, object] = {
            "address": self.address, "vendor_id": self.vendor_id,
            "product_id": self.product_id, "dev_type": self.dev_type,
            "numa_node": self.numa_node, "parent_addr": self.parent_addr}
        if self.resource_class is not None:
            out["resource_class"] = self.resource_class
        if self.traits:
            out["traits"] = sorted(self.traits)
        return out
