"""``RequestSpec``: what a build asks the scheduler for."""

from collections.abc import Iterable

import attrs

from nova_lite import validators as v
from nova_lite.compute import accounting
from nova_lite.exception import InvalidInput
from nova_lite.objects import ZERO_OVERHEAD, Flavor, InstanceNUMATopology, PciRequest


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _pci_requests(value: Iterable[PciRequest] | None) -> tuple[PciRequest, ...]:
    return v.records(PciRequest, value)


@attrs.frozen
class RequestSpec:
    """One build request.

    ``flavor``: the size; ``project_id``: the owner (recorded on the
    instances); ``numa_topology``: an InstanceNUMATopology (default: the one
    the flavor's ``hw:`` extra specs imply); ``pci_requests``: PciRequest
    records; ``ignore_hosts``: hosts never chosen; ``force_hosts``: if given,
    only these hosts are considered.
    """

    flavor: Flavor = attrs.field(validator=attrs.validators.instance_of(Flavor))
    project_id: str | None = attrs.field(default=None, validator=v.optional(v.string))
    numa_topology: InstanceNUMATopology | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(attrs.validators.instance_of(InstanceNUMATopology)))
    pci_requests: tuple[PciRequest, ...] = attrs.field(factory=tuple, converter=_pci_requests)
    ignore_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_names)
    force_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_names)

    @property
    def numa_request(self):
        """The NUMA topology asked for: explicit, else the flavor's, else None."""
        return self.numa_topology or accounting.flavor_numa_request(self.flavor)

    @property
    def requested(self):
        """``{resource class: amount}`` of the flavor (no overhead: the claim adds it)."""
        return accounting.requested_resources(self.flavor, ZERO_OVERHEAD, self.numa_request)


def as_request_spec(request):
    """A RequestSpec from a RequestSpec or a plain Flavor; else InvalidInput."""
    if isinstance(request, RequestSpec):
        return request
    if isinstance(request, Flavor):
        return RequestSpec(flavor=request)
    raise InvalidInput(f"request must be a RequestSpec or a Flavor, got {request!r}")
