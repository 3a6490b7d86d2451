"""``RequestSpec``: what a build asks the scheduler for."""

from collections.abc import Iterable

import attrs

from nova_lite import validators as v
from nova_lite.compute import accounting
from nova_lite.exception import InvalidInput, InvalidType
from nova_lite.objects import ZERO_OVERHEAD, Flavor, InstanceNUMATopology, PciRequest
from nova_lite.traits import TraitRequest, flavor_traits


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bytes) or not hasattr(value, "__iter__"):
        raise InvalidType(f"expected a host name or a sequence of host names, got "
                          f"{type(value).__name__} {value!r:.60}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise InvalidType(f"host names must be strings, got {type(name).__name__} "
                              f"{name!r:.60}")
    return names


def _pci_requests(value: Iterable[PciRequest] | None) -> tuple[PciRequest, ...]:
    return v.records(PciRequest, value, "RequestSpec.pci_requests")


@attrs.frozen
class RequestSpec:
    """One build request.

    ``flavor``: the size; ``project_id``: the owner (recorded on the
    instances); ``numa_topology``: an InstanceNUMATopology (default: the one
    the flavor's ``hw:`` extra specs imply); ``pci_requests``: PciRequest
    records; ``ignore_hosts``: hosts never chosen; ``force_hosts``: if given,
    only these hosts are considered (a host name or a sequence of them);
    ``availability_zone``: the zone the instances must be built in (None:
    any; see :class:`~nova_lite.scheduler.filters.AvailabilityZoneFilter`).  A
    wrong value raises :class:`~nova_lite.exception.InvalidInput` naming the
    field (:class:`~nova_lite.exception.InvalidType` for a wrong type).
    ``traits`` (not an argument): the traits the flavor's
    ``trait:<NAME>=required|forbidden`` extra specs ask for; a bad one
    raises InvalidInput when the RequestSpec is made.
    """

    flavor: Flavor = attrs.field(validator=v.instance_of(Flavor))
    project_id: str | None = attrs.field(default=None, validator=v.optional(v.name(empty=True)))
    numa_topology: InstanceNUMATopology | None = attrs.field(
        default=None, validator=v.optional(v.instance_of(InstanceNUMATopology)))
    pci_requests: tuple[PciRequest, ...] = attrs.field(factory=tuple, converter=_pci_requests)
    ignore_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_names)
    force_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_names)
    availability_zone: str | None = attrs.field(default=None,
                                                validator=v.optional(v.name()))
    traits: TraitRequest = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "traits", flavor_traits(
            self.flavor.extra_specs, f"flavor {self.flavor.name}"))

    @property
    def numa_request(self) -> InstanceNUMATopology | None:
        """The NUMA topology asked for: explicit, else the flavor's, else None."""
        return self.numa_topology or accounting.flavor_numa_request(self.flavor)

    @property
    def requested(self) -> dict[str, int]:
        """``{resource class: amount}`` of the flavor (no overhead: the claim adds it)."""
        return accounting.requested_resources(self.flavor, ZERO_OVERHEAD, self.numa_request)


def as_request_spec(request: "RequestSpec | Flavor") -> RequestSpec:
    """A RequestSpec from a RequestSpec or a plain Flavor; else InvalidInput."""
    if isinstance(request, RequestSpec):
        return request
    if isinstance(request, Flavor):
        return RequestSpec(flavor=request)
    raise InvalidInput(f"request must be a RequestSpec or a Flavor, got {request!r}")
