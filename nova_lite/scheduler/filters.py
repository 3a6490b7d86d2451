"""Host filters: each removes the hosts that cannot take a request, and says why.

A filter is a class registered under the entry point group
``nova_lite.scheduler.filters`` (Nova's names: ``ComputeFilter``,
``RamFilter``, ``CoreFilter``, ``DiskFilter``, ``NUMATopologyFilter``,
``PciPassthroughFilter``; and ``ResourceClassFilter`` for custom classes)
and chosen with ``[filter_scheduler] enabled_filters``;
``AggregateInstanceExtraSpecsFilter`` matches flavor extra specs with host
aggregate metadata.  :class:`MemberOfFilter`, :class:`TraitsFilter` and
:class:`AvailabilityZoneFilter` are not chosen: the HostManager always
applies them first, as Placement answers aggregate and trait requests and
Nova's request filter maps a zone in Nova.  A third-party
filter subclasses :class:`BaseHostFilter` and overrides
:meth:`~BaseHostFilter.host_reason`.
"""

import logging
import operator
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, cast

from nova_lite import pci_providers
from nova_lite.compute import accounting
from nova_lite.db.services import heartbeat_deadline
from nova_lite.model.nested import place
from nova_lite.providers import split_request
from nova_lite.traits import TraitRequest

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.scheduler.host_state import HostState
    from nova_lite.scheduler.request import RequestSpec

# What filter_all returns: the passing HostStates, and (state, reason) for the others.
_Filtered = tuple[list["HostState"], list[tuple["HostState", str]]]

LOG = logging.getLogger(__name__)


class BaseHostFilter:
    """A host filter; ``settings`` is the scheduler's :class:`~nova_lite.conf.Settings`."""

    #: The name reports use (the entry point name by default).
    name: str | None = None

    def __init__(self, settings: "Settings") -> None:
        self.settings = settings
        if self.name is None:
            self.name = type(self).__name__

    def applies(self, spec: "RequestSpec") -> bool:
        """False when this request cannot be refused by this filter (it is skipped)."""
        return True

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        """Why ``state`` (a HostState) cannot take ``spec`` at ``now`` (epoch s),
        or None if it can."""
        raise NotImplementedError

    def filter_all(self, states: Sequence["HostState"], spec: "RequestSpec",
                   now: float) -> _Filtered:
        """``(passing, rejected)``: passing HostStates, and ``(state, reason)`` pairs."""
        passing: list[HostState] = []
        rejected: list[tuple[HostState, str]] = []
        for state in states:
            reason = self.host_reason(state, spec, now)
            if reason is None:
                passing.append(state)
            else:
                rejected.append((state, reason))
        return passing, rejected


class ComputeFilter(BaseHostFilter):
    """The node's compute service is enabled and up (heartbeat within
    ``service_down_time`` seconds), and the node is owned, reported by its
    driver and its last audit succeeded."""

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        node, service = state.node, state.service
        if not node.host:
            return "node has no owning compute service"
        if not getattr(node, "reported", True):
            return "node is no longer reported by its driver"
        if service is None:
            return "no compute service record for the host"
        if service.disabled:
            reason = service.disabled_reason
            return f"compute service disabled ({reason})" if reason else \
                "compute service disabled"
        if not service.is_up(self.settings.service_down_time, now):
            return (f"compute service down (no heartbeat within service_down_time "
                    f"{self.settings.service_down_time:g} s)")
        if node.last_error:
            return f"last audit of the node failed: {node.last_error}"
        return None

    def filter_all(self, states: Sequence["HostState"], spec: "RequestSpec",
                   now: float) -> _Filtered:
        # Fast path: most hosts pass; only the others get a reason.  "Up" is
        # ServiceRecord.is_up, as one deadline for every host: a call per host
        # would cost about 1 ms a request at 10,000 hosts.
        deadline = heartbeat_deadline(self.settings.service_down_time, now)
        passing = [s for s in states if s.service is not None
                   and not s.service.disabled and s.service.updated_at >= deadline
                   and s.node.host and getattr(s.node, "reported", True)
                   and not s.node.last_error]
        if len(passing) == len(states):
            return passing, []
        return super().filter_all(states, spec, now)


class _AmountFilter(BaseHostFilter):
    """Free amount of one resource class (capacity after reserved and the
    allocation ratio, minus usage) must cover the flavor's request."""

    #: The HostState attribute holding the free amount, the resource class,
    #: its word and its unit in reasons (set by each subclass).
    attr: ClassVar[str | None] = None
    rc: ClassVar[str | None] = None
    label: ClassVar[str | None] = None
    unit: ClassVar[str | None] = None

    def kind(self, spec: "RequestSpec") -> tuple[str, str, str]:
        """``(resource class, HostState attribute, label)`` this request is checked on."""
        if self.rc is None or self.attr is None or self.label is None:
            raise TypeError(f"{type(self).__name__} must set rc, attr and label")
        return self.rc, self.attr, self.label

    def applies(self, spec: "RequestSpec") -> bool:
        return spec.requested.get(self.kind(spec)[0], 0) > 0

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        rc, attr, label = self.kind(spec)
        need, free = spec.requested.get(rc, 0), getattr(state, attr)
        if free >= need:
            return None
        return f"free {label} {free}{self.unit} < {need}{self.unit}"

    def filter_all(self, states: Sequence["HostState"], spec: "RequestSpec",
                   now: float) -> _Filtered:
        rc, attr, _ = self.kind(spec)
        need = spec.requested.get(rc, 0)
        passing = [s for s in states if getattr(s, attr) >= need]
        if len(passing) == len(states):
            return passing, []
        # host_reason is never None where free < need.
        return passing, [(s, cast(str, self.host_reason(s, spec, now))) for s in states
                         if getattr(s, attr) < need]


class RamFilter(_AmountFilter):
    """Free memory (MB) covers the flavor's ``memory_mb``."""

    attr, rc, label, unit = "free_ram_mb", accounting.MEMORY_MB, "memory", " MB"


class DiskFilter(_AmountFilter):
    """Free disk (GB) covers root + ephemeral + swap (rounded up to GB)."""

    attr, rc, label, unit = "free_disk_gb", accounting.DISK_GB, "disk", " GB"


class CoreFilter(_AmountFilter):
    """Free vCPUs (or pinned CPUs, ``hw:cpu_policy=dedicated``) cover the flavor's."""

    unit = ""

    def kind(self, spec: "RequestSpec") -> tuple[str, str, str]:
        if accounting.PCPU in spec.requested:
            return accounting.PCPU, "free_pcpus", "pcpus"
        return accounting.VCPU, "free_vcpus", "vcpus"


class ResourceClassFilter(BaseHostFilter):
    """Free amounts of every other class the flavor asks for (``resources:CUSTOM_*``
    extra specs, as bare-metal flavors do; ``resources:VGPU``) cover it.
    Nova leaves this to Placement; nova-lite has no Placement, so it is a
    filter.  A class only the node's child providers offer must fit on one
    child, as the claim will place it (:func:`nova_lite.model.nested.place`)."""

    _OWN = frozenset({accounting.VCPU, accounting.PCPU, accounting.MEMORY_MB,
                      accounting.DISK_GB})

    def _others(self, spec: "RequestSpec") -> dict[str, int]:
        return {rc: n for rc, n in spec.requested.items() if rc not in self._OWN and n > 0}

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(self._others(spec))

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        node = state.node
        children = node.resources.providers if node.resources is not None else ()
        own, nested = split_request(node.inventories, children, self._others(spec))
        short = [f"free {rc} {state.free(rc)} < {n}" for rc, n in sorted(own.items())
                 if state.free(rc) < n]
        if nested:
            tree = pci_providers.tree_of(node.nodename, node.resources)
            direct = pci_providers.direct_pci_problems(tree, nested)
            short.extend(direct)
            if direct:   # PCI classes are the PciPassthroughFilter's
                nested = {rc: n for rc, n in nested.items()
                          if rc not in tree.classes}   # type: ignore[union-attr]
            short.extend(place(pci_providers.other_children(children, tree),
                               node.provider_usage, nested,
                               required_traits=spec.traits.required - node.traits,
                               forbidden_traits=spec.traits.forbidden).reasons)
        return "; ".join(short) or None


class NUMATopologyFilter(BaseHostFilter):
    """The instance's NUMA topology fits the host's cells (as the claim will place it)."""

    def applies(self, spec: "RequestSpec") -> bool:
        return spec.numa_request is not None

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, spec.numa_request, ())
        return "; ".join(decision.reasons) or None


class MemberOfFilter(BaseHostFilter):
    """The host is in an aggregate of every set of ``RequestSpec.member_of``
    and in none of ``RequestSpec.forbidden_aggregates`` (Placement's
    ``member_of=in:...`` and ``member_of=!in:...``).

    Always on and first: Placement answers ``member_of`` before Nova's
    filters run.  Its reasons name the aggregates (by name when the
    scheduler knows it) and why they were asked for: see :meth:`explain`.
    """

    name = "MemberOf"

    def __init__(self, settings: "Settings") -> None:
        super().__init__(settings)
        self.names: dict[str, str] = {}
        self._required_notes: dict[frozenset[str], str] = {}
        self._forbidden_notes: dict[str, str] = {}

    def explain(self, names: dict[str, str], required: dict[frozenset[str], str],
                forbidden: dict[str, str]) -> None:
        """Name the aggregates in reasons: ``names`` maps aggregate uuids to
        names; ``required`` says why a set of ``member_of`` was asked for and
        ``forbidden`` why an aggregate is forbidden (the request filters'
        words; what is not there was asked for by the caller)."""
        self.names = names
        self._required_notes = required
        self._forbidden_notes = forbidden

    def _label(self, uuids: frozenset[str]) -> str:
        return ", ".join(sorted(self.names.get(u, u) for u in uuids))

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(spec.member_of or spec.forbidden_aggregates)

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        mine = {a.uuid for a in state.aggregates}
        for group in spec.member_of:
            if not mine & group:
                why = self._required_notes.get(group, "member_of")
                return f"host is in none of the aggregates {self._label(group)} ({why})"
        bad = mine & spec.forbidden_aggregates
        if bad:
            whys = sorted({self._forbidden_notes.get(u, "forbidden by the request")
                           for u in bad})
            return f"host is in forbidden aggregate(s) {self._label(frozenset(bad))} " \
                   f"({'; '.join(whys)})"
        return None


class TraitsFilter(BaseHostFilter):
    """The node has every trait the flavor requires and none it forbids
    (``trait:<NAME>=required|forbidden``).

    Always on, before the enabled filters, and not one of them: Placement
    answers Nova's trait requests whatever filters are enabled, and so does
    the HostManager.  Its reason names each missing or forbidden trait."""

    name = "Traits"

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(spec.traits)

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        node = state.node
        reason = spec.traits.reason(node.traits)
        if reason is None or node.resources is None or not node.resources.providers:
            return reason
        # A required trait may be on a child provider the request lands on
        # (the claim checks which); a forbidden one counts on the node itself.
        tree = node.traits.union(*(c.traits for c in node.resources.providers))
        missing = spec.traits.required - tree
        present = spec.traits.forbidden & node.traits
        return TraitRequest(required=missing, forbidden=present).reason(frozenset(present))


class PciPassthroughFilter(BaseHostFilter):
    """The host has free PCI devices for every PCI request."""

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(spec.pci_requests)

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, None, spec.pci_requests)
        return "; ".join(decision.reasons) or None


class AvailabilityZoneFilter(BaseHostFilter):
    """The host is in the availability zone the request asks for
    (``RequestSpec.availability_zone``, ``server create --availability-zone``).

    A host's zone is the ``availability_zone`` of its aggregates, or
    ``default_availability_zone`` (``nova``) when none of them has one.
    Always on, before the enabled filters, as Nova 34 always maps a
    requested zone to its aggregates before asking Placement; naming it in
    ``enabled_filters`` (older Nova's default list did) changes nothing.
    """

    name = "AvailabilityZone"

    def applies(self, spec: "RequestSpec") -> bool:
        return spec.availability_zone is not None

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        from nova_lite.db.aggregates import host_zone
        zone = host_zone(state.aggregates, self.settings.default_availability_zone)
        if spec.availability_zone in zone.split(","):
            return None
        return f"host is in availability zone {zone!r}, not {spec.availability_zone!r}"


_SPEC_SCOPE = "aggregate_instance_extra_specs"


def _number_op(test: Callable[[float, float], bool]) -> Callable[[str, list[str]], bool]:
    def match(value: str, words: list[str]) -> bool:
        try:
            return test(float(value), float(words[0]))
        except ValueError:
            return False
    return match


def _text_op(test: Callable[[str, str], bool]) -> Callable[[str, list[str]], bool]:
    return lambda value, words: test(value, words[0])


# Nova's extra spec operators (nova.scheduler.filters.extra_specs_ops):
# "= N" means at least N, "s==" compares text, "<in>" a substring.
_SPEC_OPS: dict[str, Callable[[str, list[str]], bool]] = {
    "=": _number_op(operator.ge), "==": _number_op(operator.eq),
    "!=": _number_op(operator.ne), ">=": _number_op(operator.ge),
    "<=": _number_op(operator.le),
    "s==": _text_op(operator.eq), "s!=": _text_op(operator.ne), "s<": _text_op(operator.lt),
    "s<=": _text_op(operator.le), "s>": _text_op(operator.gt), "s>=": _text_op(operator.ge),
    "<in>": _text_op(lambda value, word: word in value),
    "<all-in>": lambda value, words: all(word in value for word in words),
}


def spec_matches(value: str, requirement: str) -> bool:
    """Whether ``value`` (an aggregate's metadata value) meets ``requirement``
    (a flavor extra spec value), with Nova's operators: ``= 4`` (at least),
    ``== 4``, ``!= 4``, ``>= 4``, ``<= 4``, ``s== text`` and the other text
    comparisons, ``<in> part``, ``<all-in> a b``, ``<or> a <or> b``; a
    requirement without an operator must equal the value."""
    words = requirement.split()
    op = words.pop(0) if words else None
    if op == "<or>":
        return value in words[::2]
    method = _SPEC_OPS.get(op) if op is not None else None
    if method is None:
        return value == requirement
    return bool(words) and method(value, words)


class AggregateInstanceExtraSpecsFilter(BaseHostFilter):
    """The host's aggregates' metadata meets the flavor's extra specs (Nova's filter).

    Each extra spec without a scope (``ssd=true``) or with the scope
    ``aggregate_instance_extra_specs:`` must be met by a value of that key
    in one of the host's aggregates (values split at commas), with Nova's
    operators (:func:`spec_matches`); specs of other scopes (``hw:``,
    ``resources:``, ``trait:``...) are left to the other filters.
    """

    def _wanted(self, spec: "RequestSpec") -> list[tuple[str, str]]:
        wanted = []
        for key, requirement in spec.flavor.extra_specs.items():
            scope, sep, rest = key.partition(":")
            if sep and scope != _SPEC_SCOPE:
                continue
            wanted.append((rest if sep else key, requirement))
        return wanted

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(self._wanted(spec))

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        metadata: dict[str, set[str]] = {}
        for aggregate in state.aggregates:
            for key, value in aggregate.metadata.items():
                metadata.setdefault(key, set()).update(x.strip() for x in value.split(","))
        for key, requirement in self._wanted(spec):
            values = metadata.get(key)
            if not values:
                return f"extra spec {key} is in none of the host's aggregates"
            if not any(spec_matches(value, requirement) for value in sorted(values)):
                return (f"extra spec {key}={requirement!r} is not met by the host's "
                        f"aggregates ({', '.join(sorted(values))})")
        return None
