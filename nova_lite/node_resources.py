"""``NodeResources``: what a driver reports about one node, typed.

It carries what Nova's ``get_available_resource`` dict carried.  Legacy
dicts are accepted through :meth:`NodeResources.from_dict`, which reports
every missing or malformed key at once.
"""

import json
import logging
import math
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput, InvalidNodeResources
from nova_lite.providers import ChildProvider, check_tree, child_from_dict
from nova_lite.traits import all_known, trait_problem, trait_set
from nova_lite.host_topology import (
    CpuInfo, CpuTopology, MaxPhysAddr, MemPage, NUMACell, NUMATopology, PciDevice,
    SupportedInstance)
from nova_lite.resources import (
    DISK_GB as _DISK_GB, MEMORY_MB as _MEMORY_MB, PCPU as _PCPU, VCPU as _VCPU,
    normalize_resource_class, validate_resource_class)

LOG = logging.getLogger(__name__)


def _reserved_mapping(value: Mapping[str, int] | None) -> "types.MappingProxyType[str, int]":
    if not value:   # what almost every report carries
        return v.frozen_mapping(None)
    proxy = v.frozen_mapping(value, "NodeResources.reserved")
    out: dict[str, int] = {}
    for rc, amount in proxy.items():
        rc = validate_resource_class(str(rc))
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
            raise InvalidInput(
                f"NodeResources.reserved[{rc}] must be a non-negative integer, got {amount!r}")
        out[rc] = amount
    return v.frozen_mapping(out)


def _traits(value: Iterable[str] | None) -> frozenset[str]:
    return trait_set(value, "NodeResources.traits")


def _stats(value: Mapping[str, object] | None) -> Mapping[str, str]:
    return v.str_mapping(value, "NodeResources.stats")


def _pci_devices(value: Iterable[PciDevice] | None) -> tuple[PciDevice, ...]:
    return v.records(PciDevice, value, "NodeResources.pci_devices")


def _providers(value: Iterable[ChildProvider] | None) -> tuple[ChildProvider, ...]:
    children = v.records(ChildProvider, value, "NodeResources.providers")
    check_tree(children, "NodeResources.providers")
    return children


def _supported_instances(
        value: Iterable[SupportedInstance] | None) -> tuple[SupportedInstance, ...]:
    return v.records(SupportedInstance, value, "NodeResources.supported_instances")


@attrs.frozen
class NodeResources:
    """One node's resources as its driver sees them.

    Sizes: ``memory_mb``/``memory_mb_used`` in MiB; ``local_gb``,
    ``local_gb_used`` and ``disk_available_least`` in GiB (the last may be
    negative when guest disks are over-committed).  ``vcpus`` counts CPUs
    for shared vCPUs, ``pcpus`` CPUs dedicated to pinned guests.
    ``resource_class`` names a bare-metal node's single custom class.
    ``reserved`` holds amounts the driver itself holds back per resource
    class (added to the configured reserved host amounts).  ``traits``
    names the node's qualitative features (:mod:`nova_lite.traits`:
    standard ``os-traits`` names and ``CUSTOM_*``); the audit records them
    as :func:`nova_lite.traits.node_traits` makes them (with the traits of
    the driver's capabilities, and ``COMPUTE_NODE``).  ``providers`` are the
    devices the node accounts for apart, nested under it
    (:class:`nova_lite.providers.ChildProvider`: a physical GPU with its
    ``VGPU`` inventory, say).
    """

    vcpus: int = attrs.field(validator=v.non_negative_int)
    memory_mb: int = attrs.field(validator=v.non_negative_int)
    local_gb: int = attrs.field(validator=v.non_negative_int)
    vcpus_used: int = attrs.field(default=0, validator=v.non_negative_int)
    memory_mb_used: int = attrs.field(default=0, validator=v.non_negative_int)
    local_gb_used: int = attrs.field(default=0, validator=v.non_negative_int)
    disk_available_least: int | None = attrs.field(default=None, validator=v.optional(v.any_int))
    hypervisor_type: str = attrs.field(default="fake", validator=v.string)
    hypervisor_version: int = attrs.field(default=0, validator=v.non_negative_int)
    hypervisor_hostname: str = attrs.field(default="", validator=v.string)
    cpu_info: CpuInfo | None = attrs.field(
        default=None, validator=v.optional(v.instance_of(CpuInfo)))
    numa_topology: NUMATopology | None = attrs.field(
        default=None,
        validator=v.optional(v.instance_of(NUMATopology)))
    pci_devices: tuple[PciDevice, ...] = attrs.field(factory=tuple, converter=_pci_devices)
    stats: Mapping[str, str] = attrs.field(factory=dict, converter=_stats, hash=False)
    supported_instances: tuple[SupportedInstance, ...] = attrs.field(
        factory=tuple, converter=_supported_instances)
    resource_class: str | None = attrs.field(
        default=None, validator=v.optional(v.name()))
    uuid: str | None = attrs.field(default=None, validator=v.optional(v.non_empty_str))
    pcpus: int = attrs.field(default=0, validator=v.non_negative_int)
    reserved: Mapping[str, int] = attrs.field(
        factory=dict, converter=_reserved_mapping, hash=False)
    traits: frozenset[str] = attrs.field(factory=frozenset, converter=_traits)
    providers: tuple[ChildProvider, ...] = attrs.field(factory=tuple, converter=_providers)

    def __attrs_post_init__(self) -> None:
        if not self.reserved:
            return
        totals = self.totals()
        for rc, amount in self.reserved.items():
            total = totals.get(rc, 0)
            if amount > total:
                raise InvalidInput(
                    f"NodeResources.reserved[{rc}] = {amount} is greater than the "
                    f"total {total}")

    def totals(self) -> dict[str, int]:
        """Total amount per resource class this report offers (zeros left out)."""
        totals = {_VCPU: self.vcpus, _PCPU: self.pcpus, _MEMORY_MB: self.memory_mb,
                  _DISK_GB: self.local_gb}
        if self.resource_class:
            totals[self.resource_class] = 1
        return {rc: n for rc, n in totals.items() if n}

    @classmethod
    def from_dict(cls, data: Any, nodename: str | None = None) -> "NodeResources":
        """Build a record from a Nova-style resources dict.

        Reads what Nova's in-tree drivers return, key for key, with
        Nova's conversions: numbers become integers as Nova's ComputeNode
        object makes them (``int()``: 97.85 GiB is 97, -0.4 is 0), JSON
        strings are decoded (``cpu_info``, ``numa_topology``,
        ``pci_passthrough_devices``), versioned-object primitives are
        unwrapped, a raw ``resource_class`` (``"baremetal"``) is normalised
        (``CUSTOM_BAREMETAL``), keys nova-lite does not use are ignored.
        A negative ``*_used`` figure (the hypervisor's own view, which
        Nova's libvirt driver may report) is read as 0 with a WARNING.

        Raises :class:`InvalidNodeResources` listing every missing or
        malformed key (its ``problems`` attribute holds one entry each).
        """
        return _LegacyParser(data, nodename).parse()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict that :meth:`from_dict` reads back
        (``providers`` only when there are any)."""
        out: dict[str, Any] = {
            "vcpus": self.vcpus, "memory_mb": self.memory_mb, "local_gb": self.local_gb,
            "vcpus_used": self.vcpus_used, "memory_mb_used": self.memory_mb_used,
            "local_gb_used": self.local_gb_used,
            "disk_available_least": self.disk_available_least,
            "hypervisor_type": self.hypervisor_type,
            "hypervisor_version": self.hypervisor_version,
            "hypervisor_hostname": self.hypervisor_hostname,
            "cpu_info": None if self.cpu_info is None else {
                "arch": self.cpu_info.arch, "model": self.cpu_info.model,
                "vendor": self.cpu_info.vendor,
                "topology": attrs.asdict(self.cpu_info.topology),
                "features": sorted(self.cpu_info.features),
                "maxphysaddr": None if self.cpu_info.maxphysaddr is None
                else attrs.asdict(self.cpu_info.maxphysaddr)},
            "numa_topology": None if self.numa_topology is None else {
                "cells": [_cell_to_dict(c) for c in self.numa_topology.cells]},
            "pci_passthrough_devices": [d.to_dict() for d in self.pci_devices],
            "stats": dict(self.stats),
            "supported_instances": [
                [s.arch, s.hypervisor_type, s.vm_mode] for s in self.supported_instances],
            "resource_class": self.resource_class, "uuid": self.uuid,
            "pcpus": self.pcpus, "reserved": dict(self.reserved),
            "traits": sorted(self.traits),
        }
        if self.providers:
            out["providers"] = [child.to_dict() for child in self.providers]
        return out


def _cell_to_dict(cell: NUMACell) -> dict[str, Any]:
    return {"id": cell.id, "cpuset": sorted(cell.cpuset), "pcpuset": sorted(cell.pcpuset),
            "memory_mb": cell.memory_mb, "siblings": [sorted(s) for s in cell.siblings],
            "mempages": [attrs.asdict(p) for p in cell.mempages]}


_PCI_KEYS = tuple(f.name for f in attrs.fields(PciDevice))


def _unwrap(value: Any) -> Any:
    """The data of a Nova versioned-object primitive ({"nova_object.data": ...})."""
    while isinstance(value, dict) and "nova_object.data" in value:
        value = value["nova_object.data"]
    return value


def _known(data: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """Only ``keys`` of ``data``: Nova's dicts carry extras (label, dev_id, ...)."""
    return {k: data[k] for k in keys if k in data}


def _mempage(page: Any) -> MemPage:
    if isinstance(page, MemPage):
        return page
    page = _unwrap(page)
    # Nova's "reserved" pages are held outside the claims, like "used" here.
    return MemPage(size_kb=page["size_kb"], total=page["total"],
                   used=page.get("used", 0) + page.get("reserved", 0))


_REQUIRED_INTS = ("vcpus", "memory_mb", "local_gb", "vcpus_used", "memory_mb_used",
                  "local_gb_used")
_REQUIRED_STRS = ("hypervisor_type", "hypervisor_hostname")


class _LegacyParser:
    """Reads a legacy dict, collecting every problem before raising."""

    def __init__(self, data: Any, nodename: str | None) -> None:
        self.data = data
        self.nodename = nodename
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def parse(self) -> NodeResources:
        data = self.data
        if not isinstance(data, dict):
            raise InvalidNodeResources(
                [f"expected a dict of resources, got {type(data).__name__}"], self.nodename)
        fields: dict[str, Any] = {}
        for key in _REQUIRED_INTS:
            fields[key] = self.integer(key, required=True, minimum=0,
                                       clamp=key.endswith("_used"))
        fields["hypervisor_version"] = self.integer("hypervisor_version", required=True,
                                                    minimum=0)
        for key in _REQUIRED_STRS:
            fields[key] = self.string(key, required=True)
        fields["disk_available_least"] = self.integer("disk_available_least")
        fields["pcpus"] = self.integer("pcpus", minimum=0, default=0)
        fields["cpu_info"] = self.guarded("cpu_info", self.cpu_info)
        fields["numa_topology"] = self.guarded("numa_topology", self.numa_topology)
        fields["pci_devices"] = self.guarded("pci_passthrough_devices", self.pci_devices) or ()
        fields["supported_instances"] = self.guarded(
            "supported_instances", self.supported_instances) or ()
        fields["stats"] = self.guarded("stats", self.stats) or {}
        fields["resource_class"] = self.resource_class()
        fields["uuid"] = self.string("uuid")
        fields["reserved"] = self.reserved(fields)
        fields["traits"] = self.traits()
        fields["providers"] = self.guarded("providers", self.providers) or ()
        if self.problems:
            raise InvalidNodeResources(self.problems, self.nodename)
        try:
            return NodeResources(**{k: val for k, val in fields.items() if val is not None
                                    or k in ("disk_available_least",)})
        except InvalidInput as exc:
            raise InvalidNodeResources([str(exc)], self.nodename) from None

    def integer(self, key: str, required: bool = False, minimum: int | None = None,
                default: int | None = None, clamp: bool = False) -> int | None:
        """The integer at ``key``, converted as Nova's IntegerField does.

        ``clamp``: a value below ``minimum`` is read as ``minimum`` with a
        WARNING (for the hypervisor's own ``*_used`` view) instead of
        being a problem.
        """
        if key not in self.data or self.data[key] is None:
            if required:
                self.problem(f"missing key {key!r}")
            return default
        value = _nova_int(self.data[key])
        if value is None:
            self.problem(f"{key!r} must be an integer, got {self.data[key]!r}")
            return default
        if minimum is not None and value < minimum:
            if clamp:
                LOG.warning("Node %s reports %s=%r; reading it as %d (it is the "
                            "hypervisor's own view, which nova-lite only logs)",
                            self.nodename, key, self.data[key], minimum)
                return minimum
            self.problem(f"{key!r} must be >= {minimum}, got {value}")
            return default
        if abs(value) > v.MAX_AMOUNT:
            self.problem(f"{key!r} is absurdly large: {value}")
            return default
        return value

    def reserved(self, fields: Mapping[str, Any]) -> dict[str, int]:
        """The driver's own reserved amounts, checked against the parsed totals."""
        value = self.data.get("reserved")
        if value is None or value == {}:
            return {}
        if not isinstance(value, dict):
            self.problem(f"'reserved' must be a mapping of resource class to amount, "
                         f"got {value!r}")
            return {}
        totals = {"VCPU": fields.get("vcpus"), "PCPU": fields.get("pcpus"),
                  "MEMORY_MB": fields.get("memory_mb"), "DISK_GB": fields.get("local_gb")}
        if fields.get("resource_class"):
            totals[fields["resource_class"]] = 1
        out: dict[str, int] = {}
        for rc, amount in value.items():
            try:
                rc = validate_resource_class(rc)
            except InvalidInput as exc:
                self.problem(f"'reserved' is malformed: {exc}")
                continue
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                self.problem(f"'reserved[{rc}]' must be a non-negative integer, got {amount!r}")
                continue
            total = totals.get(rc, 0)
            if total is not None and amount > total:
                self.problem(f"'reserved[{rc}]' = {amount} is greater than the total {total}")
                continue
            out[rc] = amount
        return out

    def traits(self) -> frozenset[str]:
        """The ``traits`` list (absent: none), every bad name a problem."""
        value = self.data.get("traits")
        if value is None:
            return frozenset()
        if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
            self.problem(f"'traits' must be a list of trait names, got {value!r:.80}")
            return frozenset()
        try:
            names = frozenset(value)
        except TypeError:   # an unhashable item: named below
            names = None
        if names is not None and all_known(names):
            return names   # every name known to be a trait (a record read back)
        good = set()
        for name in value:
            problem = trait_problem(name)
            if problem is None:
                good.add(name)
            else:
                self.problem(f"'traits': {problem}")
        return frozenset(good)

    def resource_class(self) -> str | None:
        """A standard or ``CUSTOM_*`` class as it is; a raw one normalised
        as Nova's ironic driver does (``"gpu_a100 (8x)"`` -> ``CUSTOM_GPU_A100_8X_``)."""
        raw = self.string("resource_class")
        if raw is None or not raw.strip():
            return None
        try:
            return validate_resource_class(raw)
        except InvalidInput:
            return normalize_resource_class(raw)

    def string(self, key: str, required: bool = False) -> str | None:
        if key not in self.data or self.data[key] is None:
            if required:
                self.problem(f"missing key {key!r}")
            return None
        value = self.data[key]
        if not isinstance(value, str):
            self.problem(f"{key!r} must be a string, got {value!r}")
            return None
        return value

    def guarded(self, key: str, parse: Callable[[Any], Any]) -> Any:
        value = self.data.get(key)
        if value is None or value == "" or value == {}:
            return None
        if isinstance(value, str) and key != "stats":
            try:
                value = json.loads(value)
            except ValueError as exc:
                self.problem(f"{key!r} is not valid JSON: {exc}")
                return None
        try:
            return parse(value)
        except (InvalidInput, TypeError, ValueError, KeyError, AttributeError) as exc:
            self.problem(f"{key!r} is malformed: {exc}")
            return None

    @staticmethod
    def cpu_info(value: Any) -> CpuInfo:
        if isinstance(value, CpuInfo):
            return value
        if not isinstance(value, dict):
            raise InvalidInput(f"expected a mapping, got {value!r}")
        topo = value.get("topology") or {}
        if not isinstance(topo, dict):
            raise InvalidInput(f"topology must be a mapping, got {topo!r}")
        topology = CpuTopology(**{k: _strict_int(f"topology.{k}", topo[k]) for k in
                                  ("sockets", "cores", "threads", "cells")
                                  if topo.get(k) is not None})
        maxphys = value.get("maxphysaddr")
        if maxphys:
            maxphys = MaxPhysAddr(mode=maxphys.get("mode", ""),
                                  bits=_strict_int("maxphysaddr.bits", maxphys.get("bits")))
        return CpuInfo(arch=value.get("arch") or "", model=value.get("model") or "",
                       vendor=value.get("vendor") or "", topology=topology,
                       features=value.get("features") or (), maxphysaddr=maxphys or None)

    @staticmethod
    def numa_topology(value: Any) -> NUMATopology:
        if isinstance(value, NUMATopology):
            return value
        value = _unwrap(value)
        cells: list[NUMACell] = []
        for cell in value["cells"]:
            cell = _unwrap(cell)
            cells.append(NUMACell(
                id=cell["id"], cpuset=cell.get("cpuset", ()),
                pcpuset=cell.get("pcpuset", ()),
                memory_mb=cell.get("memory_mb", cell.get("memory")),
                siblings=cell.get("siblings", ()),
                mempages=[_mempage(p) for p in cell.get("mempages", ())]))
        return NUMATopology(cells=cells)

    @staticmethod
    def pci_devices(value: Iterable[Any]) -> tuple[PciDevice, ...]:
        return tuple(d if isinstance(d, PciDevice) else PciDevice(**_known(_unwrap(d), _PCI_KEYS))
                     for d in value)

    @staticmethod
    def providers(value: Any) -> tuple[ChildProvider, ...]:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
            raise InvalidInput(f"expected a list of child providers, got {value!r:.80}")
        children = tuple(c if isinstance(c, ChildProvider) else child_from_dict(c)
                         for c in value)
        check_tree(children, "'providers'")
        return children

    @staticmethod
    def supported_instances(value: Iterable[Any]) -> tuple[SupportedInstance, ...]:
        return tuple(s if isinstance(s, SupportedInstance) else SupportedInstance(*s)
                     for s in value)

    @staticmethod
    def stats(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise InvalidInput(f"expected a mapping, got {value!r}")
        # Nova's stats are nullable strings (Ironic's cpu_arch may be None):
        # an unset one is left out rather than read as the text "None".
        return {k: val for k, val in value.items() if val is not None}


def _nova_int(value: object) -> int | None:
    """``value`` as Nova's IntegerField coerces it (``int()``), or None if it
    is not a finite number or integer text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _strict_int(what: str, value: object) -> int:
    number = _nova_int(value)
    if number is None:
        raise InvalidInput(f"{what} must be an integer, got {value!r}")
    return number
