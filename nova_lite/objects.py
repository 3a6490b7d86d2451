"""Typed records that cross nova-lite's public boundaries.

All records are frozen attrs classes: build a changed copy with
``attrs.evolve(record, field=value)``.  Units are in the field names
(``memory_mb`` is MiB, ``*_gb`` is GiB, ``swap`` is MiB as in Nova).
"""

import types
from collections.abc import Iterable, Iterator, Mapping

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidType
from nova_lite.holds import (  # noqa: F401 - public names of this module
    ACTIVE, BUILDING, DELETED, ERROR, MIGRATION_IN_PROGRESS, PAUSED, RESCUED, RESIZED,
    SHELVED, SHELVED_OFFLOADED, SOFT_DELETED, STATES_WITHOUT_RESOURCES, STOPPED, SUSPENDED,
    UNSHELVE_TASK_STATES, VM_STATES, instance_holds, migration_holds)
from nova_lite.host_topology import (  # noqa: F401 - public names of this module
    PCI_DEV_TYPES, CpuInfo, CpuTopology, MaxPhysAddr, MemPage, NUMACell, NUMATopology,
    PciDevice, SupportedInstance)
from nova_lite.node_resources import NodeResources  # noqa: F401 - public name
from nova_lite.resources import Inventory
from nova_lite.traits import trait_set

CPU_POLICIES = frozenset({"shared", "dedicated"})
PCI_NUMA_POLICIES = frozenset({"legacy", "required", "preferred"})


@attrs.frozen
class Overhead:
    """Extra resources a driver needs for one instance beyond its flavor."""

    memory_mb: int = attrs.field(default=0, validator=v.non_negative_int)
    disk_gb: int = attrs.field(default=0, validator=v.non_negative_int)
    vcpus: int = attrs.field(default=0, validator=v.non_negative_int)


ZERO_OVERHEAD = Overhead()


@attrs.frozen
class InstanceNUMACell:
    """One guest NUMA cell request, and where it landed once claimed.

    ``cpuset`` holds guest vCPU ids; with ``cpu_policy="dedicated"`` each gets
    its own host CPU (``cpu_pinning`` maps guest vCPU -> host CPU once
    claimed); ``host_cell`` is the host cell chosen by the claim.
    """

    id: int = attrs.field(validator=v.non_negative_int)
    cpuset: frozenset[int] = attrs.field(converter=v.frozen_int_set)
    memory_mb: int = attrs.field(validator=v.positive_int)
    cpu_policy: str = attrs.field(default="shared", validator=v.one_of(CPU_POLICIES))
    pagesize_kb: int | None = attrs.field(default=None, validator=v.optional(v.positive_int))
    host_cell: int | None = attrs.field(
        default=None, validator=v.optional(v.non_negative_int))
    cpu_pinning: Mapping[int, int] = attrs.field(
        factory=dict, converter=v.frozen_mapping, hash=False)

    @property
    def pinned_host_cpus(self) -> frozenset[int]:
        """Host CPUs this cell holds pinned (empty unless dedicated and claimed)."""
        return frozenset(self.cpu_pinning.values())


def _instance_numa_cells(
        value: Iterable[InstanceNUMACell] | None) -> tuple[InstanceNUMACell, ...]:
    return v.records(InstanceNUMACell, value, "InstanceNUMATopology.cells")


@attrs.frozen
class InstanceNUMATopology:
    """An instance's NUMA cells."""

    cells: tuple[InstanceNUMACell, ...] = attrs.field(converter=_instance_numa_cells)

    @property
    def is_placed(self) -> bool:
        """True once every cell has a host cell."""
        return all(c.host_cell is not None for c in self.cells)


def _sorted_traits(value: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(sorted(trait_set(value, "PciRequest.traits")))


@attrs.frozen
class PciRequest:
    """A request for ``count`` devices of one vendor/product (and, with
    ``dev_type``, of that device type only: ``type-PCI``, ``type-PF`` or
    ``type-VF``); ``alias_name`` names the ``[pci] alias`` it came from."""

    count: int = attrs.field(validator=v.positive_int)
    vendor_id: str = attrs.field(validator=v.non_empty_str)
    product_id: str = attrs.field(validator=v.non_empty_str)
    alias_name: str | None = attrs.field(default=None, validator=v.optional(v.string))
    numa_policy: str = attrs.field(default="legacy", validator=v.one_of(PCI_NUMA_POLICIES))
    dev_type: str | None = attrs.field(default=None, validator=v.optional(v.one_of(
        PCI_DEV_TYPES)))
    #: With it, only devices counted in this class (their ``resource_class``,
    #: else ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``) serve the request.
    resource_class: str | None = attrs.field(default=None, validator=v.optional(v.string))
    #: Traits every device serving the request has (sorted names).
    traits: tuple[str, ...] = attrs.field(factory=tuple, converter=_sorted_traits)


def _pci_requests(value: Iterable[PciRequest] | None) -> tuple[PciRequest, ...]:
    return v.records(PciRequest, value, "Instance.pci_requests")


def _optional_pci_requests(value: Iterable[PciRequest] | None
                           ) -> tuple[PciRequest, ...] | None:
    return None if value is None else v.records(PciRequest, value,
                                                "Migration.new_pci_requests")


def _addresses(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidType(f"pci_devices must be a sequence of PCI addresses, got "
                          f"{type(value).__name__} {value!r:.60}")
    return tuple(value)


def _flavor_extra_specs(value: Mapping[str, object] | None) -> Mapping[str, str]:
    return v.str_mapping(value, "Flavor.extra_specs")


@attrs.frozen(cache_hash=True)   # hashed on every claim (cached JSON)
class Flavor:
    """An instance size.

    ``memory_mb`` and ``swap`` are MiB; ``root_gb`` and ``ephemeral_gb`` GiB.
    ``extra_specs`` may hold Nova's ``resources:<CLASS>=<amount>`` overrides
    (e.g. ``resources:CUSTOM_BAREMETAL=1`` with ``resources:VCPU=0``).
    """

    name: str = attrs.field(validator=v.non_empty_str)
    vcpus: int = attrs.field(validator=v.positive_int)
    memory_mb: int = attrs.field(validator=v.positive_int)
    root_gb: int = attrs.field(default=0, validator=v.non_negative_int)
    ephemeral_gb: int = attrs.field(default=0, validator=v.non_negative_int)
    swap: int = attrs.field(default=0, validator=v.non_negative_int)
    extra_specs: Mapping[str, str] = attrs.field(
        factory=dict, converter=_flavor_extra_specs, hash=False)
    flavorid: str | None = attrs.field(default=None, validator=v.optional(v.string))


@attrs.frozen
class Instance:
    """An instance as the tracker sees it.

    ``host``/``node`` are where it lives once claimed; ``vm_state`` uses
    Nova's strings (``objects.ACTIVE``, ``objects.DELETED``, ...);
    ``availability_zone`` is the zone it was built in (None: not recorded,
    as for records written before instances kept it).  The
    strings the records hold are checked as they are recorded: ``uuid`` at
    most 36 characters, the others at most 255, none with a control
    character (:func:`nova_lite.validators.text_problem`).
    """

    uuid: str = attrs.field(validator=v.name(v.UUID_LENGTH))
    flavor: Flavor = attrs.field(validator=v.instance_of(Flavor))
    project_id: str = attrs.field(default="", validator=v.name(empty=True))
    user_id: str = attrs.field(default="", validator=v.name(empty=True))
    host: str | None = attrs.field(default=None, validator=v.optional(v.name()))
    node: str | None = attrs.field(default=None, validator=v.optional(v.name()))
    vm_state: str = attrs.field(default=BUILDING, validator=v.one_of(VM_STATES))
    task_state: str | None = attrs.field(default=None, validator=v.optional(v.name()))
    numa_topology: InstanceNUMATopology | None = attrs.field(
        default=None, validator=v.optional(v.instance_of(InstanceNUMATopology)))
    pci_requests: tuple[PciRequest, ...] = attrs.field(factory=tuple, converter=_pci_requests)
    pci_devices: tuple[str, ...] = attrs.field(factory=tuple, converter=_addresses)
    display_name: str = attrs.field(default="", validator=v.string)
    availability_zone: str | None = attrs.field(default=None, validator=v.optional(v.name()))

    @property
    def holds_resources(self) -> bool:
        """Whether this record holds resources (on its node, if it has one).

        :func:`nova_lite.holds.instance_holds` with ``placed`` from its own
        host and node: False when deleted, and when shelve-offloaded unless
        it was placed by an unshelve's claim (or its task is an unshelve).
        """
        return instance_holds(self.vm_state, self.task_state,
                              placed=self.host is not None and self.node is not None)

    @staticmethod
    def state_holds_resources(vm_state: str, task_state: str | None) -> bool:
        """Whether recording ``vm_state``/``task_state`` keeps an instance's claim.

        The state alone (:func:`nova_lite.holds.instance_holds` with
        ``placed=False``): recording ``shelved_offloaded`` without an
        unshelve task is the offload, which frees the instance.
        """
        return instance_holds(vm_state, task_state, placed=False)


@attrs.frozen
class Migration:
    """A resize or migration between (or within) nodes.

    Its strings are checked as :class:`Instance`'s are.
    ``new_pci_requests``: the PCI requests the move claimed on the
    destination, which become the instance's on confirm (a resize: the new
    flavor's ``pci_passthrough:alias`` requests and the instance's own
    requests that came from no alias); None: the instance's own (a
    migration, or a move recorded before migrations kept them).
    """

    uuid: str = attrs.field(validator=v.name(v.UUID_LENGTH))
    instance_uuid: str = attrs.field(validator=v.name(v.UUID_LENGTH))
    source_compute: str = attrs.field(validator=v.name())
    source_node: str = attrs.field(validator=v.name())
    dest_compute: str = attrs.field(validator=v.name())
    dest_node: str = attrs.field(validator=v.name())
    old_flavor: Flavor = attrs.field(validator=v.instance_of(Flavor))
    new_flavor: Flavor = attrs.field(validator=v.instance_of(Flavor))
    status: str = attrs.field(default="pre-migrating", validator=v.name())
    migration_type: str = attrs.field(
        default="resize", validator=v.one_of({"resize", "migration", "live-migration",
                                              "evacuation"}))
    new_pci_requests: tuple[PciRequest, ...] | None = attrs.field(
        default=None, converter=_optional_pci_requests)

    @property
    def in_progress(self) -> bool:
        """True while it holds resources (:func:`nova_lite.holds.migration_holds`)."""
        return migration_holds(self.status)

    @property
    def same_node(self) -> bool:
        """True for a resize that stays on one node (both flavors count)."""
        return (self.source_compute, self.source_node) == (self.dest_compute, self.dest_node)


_NO_AMOUNTS: Mapping[str, Mapping[str, int]] = types.MappingProxyType({})


def nested_amounts(value: Mapping[str, Mapping[str, int]] | None
                    ) -> Mapping[str, Mapping[str, int]]:
    """``{provider name: {rc: amount}}`` as read-only mappings."""
    if not value:
        return _NO_AMOUNTS
    if isinstance(value, types.MappingProxyType) and all(
            isinstance(per, types.MappingProxyType) for per in value.values()):
        return value   # already converted: a record rebuilt by attrs.evolve
    return v.frozen_mapping({name: v.frozen_mapping(per, f"amounts of provider {name}")
                             for name, per in v.frozen_mapping(value, "providers").items()})


@attrs.frozen
class Allocation:
    """What one consumer (an instance, or a migration) holds on one node.

    ``resources`` maps resource class -> amount (flavor plus overhead);
    ``numa_topology`` and ``pci_devices`` (PCI addresses) are what the claim
    placed on the node; ``providers`` (``{child name: {rc: amount}}``) says
    which of the node's child providers hold the amounts of classes only
    children offer (:mod:`nova_lite.providers`): those amounts are in
    ``resources`` too.
    """

    consumer_uuid: str
    consumer_type: str = attrs.field(validator=v.one_of({"instance", "migration"}))
    instance_uuid: str
    node_uuid: str
    resources: Mapping[str, int] = attrs.field(converter=v.frozen_mapping, hash=False)
    flavor: Flavor
    numa_topology: InstanceNUMATopology | None = None
    pci_devices: tuple[str, ...] = attrs.field(factory=tuple, converter=_addresses)
    providers: Mapping[str, Mapping[str, int]] = attrs.field(
        factory=dict, converter=nested_amounts, hash=False)


@attrs.frozen
class NUMACellUsage:
    """What claims hold on one host NUMA cell."""

    id: int
    pinned_cpus: frozenset[int] = frozenset()
    shared_vcpus: int = 0
    memory_mb: int = 0
    pages_used: Mapping[int, int] = attrs.field(
        factory=dict, converter=v.frozen_mapping, hash=False)


def _cell_usage(host_cell: NUMACell, inst_cells: Iterable[InstanceNUMACell]) -> NUMACellUsage:
    pinned: set[int] = set()
    pages: dict[int, int] = {}
    shared, memory = 0, 0
    for cell in inst_cells:
        memory += cell.memory_mb
        if cell.cpu_policy == "dedicated":
            pinned |= cell.pinned_host_cpus
        else:
            shared += len(cell.cpuset)
        if cell.pagesize_kb is not None:
            size = cell.pagesize_kb
            pages[size] = pages.get(size, 0) + cell.memory_mb * 1024 // size
    return NUMACellUsage(id=host_cell.id, pinned_cpus=frozenset(pinned),
                         shared_vcpus=shared, memory_mb=memory, pages_used=pages)


def _placed_cells(
        placed: Iterable[InstanceNUMATopology | None]) -> Iterator[InstanceNUMACell]:
    for topology in placed:
        if topology is None:
            continue
        yield from (cell for cell in topology.cells if cell.host_cell is not None)


def numa_usage_for(host: NUMATopology | None,
                   placed: Iterable[InstanceNUMATopology | None]) -> tuple[NUMACellUsage, ...]:
    """Sum what placed instance topologies hold on each host cell.

    :param host: the host's cells.
    :param placed: instance topologies returned by
        :func:`nova_lite.numa.fit_instance_to_host` (None entries, unplaced
        cells and cells on unknown host cells are skipped).
    :returns: one :class:`NUMACellUsage` per host cell, in ``host.cells``
        order: memory (MiB) of every cell, shared vCPUs, pinned host CPUs
        and pages (count per size in KiB) of cells with a page size.
    """
    cells = list(_placed_cells(placed))
    return tuple(_cell_usage(hc, [c for c in cells if c.host_cell == hc.id])
                 for hc in (host.cells if host is not None else ()))


#: The inventory of a class a node does not offer (records are frozen: one for all).
_NOT_OFFERED = Inventory(total=0)


def _address_set(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class ComputeNode:
    """A compute node record as tracked: inventories, usage and views.

    ``usage`` counts instances and in-progress migrations only (on the node
    itself: what they hold on its child providers is ``provider_usage``); reserved
    host amounts live in ``inventories`` (so free = max(0, capacity - used),
    and over is the excess).
    ``resources`` is the last report the driver gave (the hypervisor view).
    """

    uuid: str
    host: str
    nodename: str
    generation: int = 0
    inventories: Mapping[str, Inventory] = attrs.field(
        factory=dict, converter=v.frozen_mapping, hash=False)
    usage: Mapping[str, int] = attrs.field(factory=dict, converter=v.frozen_mapping, hash=False)
    resources: NodeResources | None = attrs.field(default=None, hash=False)
    numa_placements: tuple[InstanceNUMATopology, ...] = attrs.field(factory=tuple, hash=False)
    pci_in_use: frozenset[str] = attrs.field(
        factory=frozenset, converter=_address_set, hash=False)
    #: Each child provider's usage, ``{child name: {rc: amount}}`` (the
    #: sums of the allocations' ``providers``); ``usage`` is the node's own.
    provider_usage: Mapping[str, Mapping[str, int]] = attrs.field(
        factory=dict, converter=nested_amounts, hash=False)
    last_error: str | None = attrs.field(default=None, hash=False)
    #: False once the driver stops listing the node: its record is kept, but
    #: it admits no claim and the scheduler does not offer it.
    reported: bool = attrs.field(default=True, hash=False)

    @property
    def traits(self) -> frozenset[str]:
        """The node's traits as last recorded (its driver's report with the
        traits of the driver's capabilities); empty before any report."""
        return self.resources.traits if self.resources is not None else frozenset()

    def numa_usage(self) -> tuple[NUMACellUsage, ...]:
        """Per host NUMA cell usage (NUMACellUsage records, see
        :func:`numa_usage_for`); () without NUMA."""
        topology = self.resources.numa_topology if self.resources is not None else None
        if topology is None:
            return ()
        return numa_usage_for(topology, self.numa_placements)

    def inventory(self, rc: str) -> Inventory:
        """The :class:`Inventory` of ``rc`` (an empty one if not offered).

        :param rc: a resource class name (``VCPU``, ``MEMORY_MB``, ...).
        :returns: its inventory.
        """
        inv = self.inventories.get(str(rc))
        return inv if inv is not None else _NOT_OFFERED

    def capacity(self, rc: str) -> int:
        """Usable amount of ``rc``: ``floor((total - reserved) x ratio)``.

        Reserved units of the driver's own (``resources.reserved``: a
        bare-metal node is reserved while deployed) that are in use count
        as used, not also as reserved: see :meth:`Inventory.capacity_in_use`.
        So a deployed bare-metal node shows capacity 1, used 1, free 0 and
        over 0, and still admits no claim.

        :param rc: a resource class name.
        :returns: its usable amount, in the class's unit (MiB for
            ``MEMORY_MB``, GiB for ``DISK_GB``).
        """
        inv = self.inventory(rc)
        used = self.used(rc)
        if used <= inv.capacity:
            return inv.capacity
        covering = getattr(self.resources, "reserved", None) or {}
        return inv.capacity_in_use(used, covering.get(str(rc), 0))

    def used(self, rc: str) -> int:
        """Amount of ``rc`` held by instances and migrations.

        :param rc: a resource class name.
        :returns: the amount held, in the class's unit.
        """
        return self.usage.get(str(rc), 0)

    def free(self, rc: str) -> int:
        """``max(0, capacity(rc) - used(rc))``: never negative.

        :param rc: a resource class name.
        :returns: the amount free, in the class's unit.
        """
        return max(0, self.capacity(rc) - self.used(rc))

    def over(self, rc: str) -> int:
        """``max(0, used(rc) - capacity(rc))``: what is held beyond capacity
        (the node shrank, a ratio was lowered, ...).

        :param rc: a resource class name.
        :returns: the amount held beyond capacity, in the class's unit.
        """
        return max(0, self.used(rc) - self.capacity(rc))

    def over_classes(self) -> dict[str, int]:
        """``{rc: over}`` for every class held beyond its capacity (empty if none).

        :returns: ``{resource class: amount held beyond capacity}``.
        """
        classes = set(self.inventories) | set(self.usage)
        return {rc: self.over(rc) for rc in sorted(classes) if self.over(rc)}
