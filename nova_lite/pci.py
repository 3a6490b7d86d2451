"""PCI passthrough devices: pools, availability and claims.

A host's passthrough devices are summarised as pools keyed by
``(vendor_id, product_id, numa_node, dev_type)``.  :class:`PciStats` answers
whether requests fit and which devices a claim takes; it is immutable and
never allocates anything itself: the caller records the returned addresses
(e.g. ``attrs.evolve(stats, in_use=stats.in_use | set(addresses))`` or
:meth:`PciStats.with_claimed`).

SR-IOV rule (as in Nova): a physical function (PF) with any of its virtual
functions (VFs) in use is not free, and a VF whose PF is in use is not free.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput, PciClaimError
from nova_lite.objects import PciDevice, PciRequest
from nova_lite.pci_providers import device_class


@attrs.frozen
class PciPool:
    """Devices sharing vendor, product, NUMA node and type; counts in devices."""

    vendor_id: str
    product_id: str
    numa_node: int | None
    dev_type: str
    count: int
    free: int


def _address_key(address: str) -> tuple[int, tuple[int, ...], str]:
    """Sort key putting "0000:81:00.1" in bus order (hex fields compared as numbers)."""
    fields = address.replace(".", ":").split(":")
    try:
        return (0, tuple(int(f, 16) for f in fields), address)
    except ValueError:
        return (1, (), address)


def _sorted_devices(devices: Iterable[PciDevice] | None) -> tuple[PciDevice, ...]:
    devices = tuple(sorted(v.records(PciDevice, devices), key=lambda d: _address_key(d.address)))
    seen: set[str] = set()
    for dev in devices:
        if dev.address in seen:
            raise InvalidInput(f"duplicate PCI device address {dev.address!r}")
        seen.add(dev.address)
    return devices


def _address_set(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        raise InvalidInput(f"in_use must be a collection of addresses, got {value!r}")
    return frozenset(value)


def _numa_cells(numa_cells: Iterable[int] | None) -> frozenset[int] | None:
    if numa_cells is None:
        return None
    return v.frozen_int_set(numa_cells)


def _check_requests(requests: Iterable[PciRequest] | None) -> tuple[PciRequest, ...]:
    return v.records(PciRequest, requests)


def _numa_allowed(dev: PciDevice, request: PciRequest, numa_cells: Collection[int] | None) -> bool:
    """Whether the request's NUMA policy lets ``dev`` serve these cells."""
    if numa_cells is None or request.numa_policy == "preferred":
        return True
    if dev.numa_node in numa_cells:
        return True
    return request.numa_policy == "legacy" and dev.numa_node is None


def _preference(dev: PciDevice,
                numa_cells: Collection[int] | None) -> tuple[int, tuple[int, tuple[int, ...], str]]:
    """Order key: NUMA-local devices first, then lowest address."""
    local = numa_cells is not None and dev.numa_node in numa_cells
    return (0 if local else 1, _address_key(dev.address))


@attrs.frozen
class PciStats:
    """Passthrough devices of one node and which of them are allocated.

    :param devices: the node's :class:`PciDevice` records (unique addresses).
    :param in_use: addresses already allocated (unknown ones are ignored).
    """

    devices: tuple[PciDevice, ...] = attrs.field(converter=_sorted_devices)
    in_use: frozenset[str] = attrs.field(factory=frozenset, converter=_address_set)
    _children: Mapping[str, frozenset[str]] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        children: dict[str, set[str]] = {}
        for dev in self.devices:
            if dev.parent_addr is not None:
                children.setdefault(dev.parent_addr, set()).add(dev.address)
        object.__setattr__(self, "_children", {k: frozenset(c) for k, c in children.items()})

    def _is_free(self, dev: PciDevice, taken: AbstractSet[str]) -> bool:
        if dev.address in taken or dev.parent_addr in taken:
            return False
        return not (self._children.get(dev.address, frozenset()) & taken)

    def free_devices(self) -> tuple[PciDevice, ...]:
        """Devices that can be claimed now, lowest address first."""
        return tuple(d for d in self.devices if self._is_free(d, self.in_use))

    def pools(self) -> tuple[PciPool, ...]:
        """One :class:`PciPool` per (vendor, product, NUMA node, type), sorted."""
        counts: dict[tuple[str, str, int | None, str], tuple[int, int]] = {}
        for dev in self.devices:
            key = (dev.vendor_id, dev.product_id, dev.numa_node, dev.dev_type)
            total, free = counts.get(key, (0, 0))
            counts[key] = (total + 1, free + self._is_free(dev, self.in_use))
        order = sorted(counts, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2], k[3]))
        return tuple(PciPool(*key, count=counts[key][0], free=counts[key][1]) for key in order)

    def _pick(self, request: PciRequest, numa_cells: Collection[int] | None,
              taken: AbstractSet[str]) -> list[str]:
        candidates = sorted(
            (d for d in self.devices
             if d.vendor_id == request.vendor_id and d.product_id == request.product_id
             and (request.dev_type is None or d.dev_type == request.dev_type)
             # As Nova: a VF backing a vDPA device serves vDPA ports only, never
             # a flavor's PCI alias.
             and d.dev_type != "vdpa"
             and (request.resource_class is None
                  or device_class(d) == request.resource_class)
             and d.traits.issuperset(request.traits)
             and _numa_allowed(d, request, numa_cells)),
            key=lambda d: _preference(d, numa_cells))
        picked: list[str] = []
        taken = set(taken)
        for dev in candidates:
            if len(picked) < request.count and self._is_free(dev, taken):
                picked.append(dev.address)
                taken.add(dev.address)
        if len(picked) < request.count:
            raise PciClaimError(request, len(picked), numa_cells)
        return picked

    def claim(self, requests: Sequence[PciRequest],
              numa_cells: Iterable[int] | None = None) -> tuple[str, ...]:
        """Choose devices for ``requests``, in order, without changing anything.

        :param requests: :class:`PciRequest` records; each takes ``count``
            free devices of its vendor:product.
        :param numa_cells: host NUMA cell ids the instance runs on, or None
            for an instance without NUMA topology (any device will do).
            Per request, ``numa_policy`` 'required' takes only devices on
            those cells, 'legacy' also devices with no NUMA node, and
            'preferred' any device, those on the cells first.
        :returns: the chosen addresses, request by request; within each,
            devices on ``numa_cells`` first, then lowest address first.
        :raises PciClaimError: naming the first request that cannot be met.
        """
        cells = _numa_cells(numa_cells)
        taken = set(self.in_use)
        chosen = []
        for request in _check_requests(requests):
            picked = self._pick(request, cells, frozenset(taken))
            taken.update(picked)
            chosen.extend(picked)
        return tuple(chosen)

    def supports(self, requests: Sequence[PciRequest],
                 numa_cells: Iterable[int] | None = None) -> bool:
        """True if :meth:`claim` would succeed with the same arguments."""
        try:
            self.claim(requests, numa_cells)
        except PciClaimError:
            return False
        return True

    def with_claimed(self, addresses: Iterable[str]) -> "PciStats":
        """A copy with ``addresses`` added to ``in_use``."""
        return attrs.evolve(self, in_use=self.in_use | _address_set(addresses))

    def with_released(self, addresses: Iterable[str]) -> "PciStats":
        """A copy with ``addresses`` removed from ``in_use``."""
        return attrs.evolve(self, in_use=self.in_use - _address_set(addresses))
