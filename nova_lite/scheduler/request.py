"""``RequestSpec``: what a build asks the scheduler for."""

import uuid as uuidlib
from collections.abc import Iterable
from typing import Any, cast

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


def _aggregate_uuid(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidType(f"RequestSpec.{field}: aggregate uuids must be strings, got "
                          f"{type(value).__name__} {value!r:.60}")
    try:
        return str(uuidlib.UUID(value.strip()))
    except ValueError:
        raise InvalidInput(f"RequestSpec.{field}: {value!r:.60} is not an aggregate "
                           "uuid") from None


def _uuid_set(value: "str | Iterable[str]", field: str, prefix: str) -> frozenset[str]:
    """Aggregate uuids from an iterable, or from Placement's ``prefix`` syntax
    (``in:UUID,UUID`` for member_of, ``!in:UUID,UUID`` for forbidden)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith(prefix):
            text = text[len(prefix):]
        elif prefix == "!in:" and text.startswith("!"):
            text = text[1:]
        items: list[object] = [u for u in text.split(",")]
    elif isinstance(value, bytes) or not hasattr(value, "__iter__"):
        raise InvalidType(f"RequestSpec.{field}: expected aggregate uuids, got "
                          f"{type(value).__name__} {value!r:.60}")
    else:
        items = list(value)
    if not items:
        raise InvalidInput(f"RequestSpec.{field}: an empty set of aggregates matches no host")
    return frozenset(_aggregate_uuid(u, field) for u in items)


def _member_of(value: Iterable["str | Iterable[str]"] | None
               ) -> tuple[frozenset[str], ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidType(f"RequestSpec.member_of: expected a sequence of aggregate sets, "
                          f"got {type(value).__name__} {value!r:.60}")
    groups = []
    for group in value:
        if isinstance(group, str) and group.strip().startswith("!"):
            raise InvalidInput(f"RequestSpec.member_of: {group!r:.60} forbids aggregates: "
                               "give it as forbidden_aggregates")
        groups.append(_uuid_set(group, "member_of", "in:"))
    return tuple(dict.fromkeys(groups))


def _forbidden(value: "str | Iterable[str] | None") -> frozenset[str]:
    if value is None:
        return frozenset()
    if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
        value = list(value)
        if not value:
            return frozenset()
    return _uuid_set(value, "forbidden_aggregates", "!in:")


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
    ``member_of``: the host aggregates the host must be in, as Placement's
    ``member_of``: a sequence of sets of aggregate uuids; the host must be
    in at least one aggregate of every set (each set is ``in:A,B``: any of
    them).  A set may be given as an iterable of uuids, one uuid, or the
    text ``in:UUID,UUID``.  ``forbidden_aggregates``: aggregate uuids the
    host must be in none of (Placement's ``member_of=!in:UUID,UUID``; an
    iterable or that text).  The scheduler adds to both from its request
    filters (:mod:`nova_lite.scheduler.request_filters`).
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
    member_of: tuple[frozenset[str], ...] = attrs.field(factory=tuple, converter=_member_of)
    forbidden_aggregates: frozenset[str] = attrs.field(factory=frozenset, converter=_forbidden)
    traits: TraitRequest = attrs.field(init=False, eq=False, repr=False)
    # What the properties below work out from the fields, once: a request is
    # asked them for every host it is checked against.
    _worked_out: dict[str, Any] = attrs.field(init=False, factory=dict, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "traits", flavor_traits(
            self.flavor.extra_specs, f"flavor {self.flavor.name}"))

    @property
    def numa_request(self) -> InstanceNUMATopology | None:
        """The NUMA topology asked for: explicit, else the flavor's, else None."""
        if "numa" not in self._worked_out:
            self._worked_out["numa"] = \
                self.numa_topology or accounting.flavor_numa_request(self.flavor)
        return cast(InstanceNUMATopology | None, self._worked_out["numa"])

    @property
    def requested(self) -> dict[str, int]:
        """``{resource class: amount}`` of the flavor (no overhead: the claim adds it)."""
        found = self._worked_out.get("requested")
        if found is None:
            found = self._worked_out["requested"] = accounting.requested_resources(
                self.flavor, ZERO_OVERHEAD, self.numa_request)
        return dict(found)


def as_request_spec(request: "RequestSpec | Flavor") -> RequestSpec:
    """A RequestSpec from a RequestSpec or a plain Flavor; else InvalidInput."""
    if isinstance(request, RequestSpec):
        return request
    if isinstance(request, Flavor):
        return RequestSpec(flavor=request)
    raise InvalidInput(f"request must be a RequestSpec or a Flavor, got {request!r}")
