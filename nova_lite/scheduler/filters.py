"""Host filters: each removes the hosts that cannot take a request, and says why.

A filter is a class registered under the entry point group
``nova_lite.scheduler.filters`` (Nova's names: ``ComputeFilter``,
``RamFilter``, ``CoreFilter``, ``DiskFilter``, ``NUMATopologyFilter``,
``PciPassthroughFilter``; and ``ResourceClassFilter`` for custom classes)
and chosen with ``[filter_scheduler] enabled_filters``.  :class:`TraitsFilter`
is not among them: the HostManager always applies it first, as Placement
answers trait requests in Nova.  A third-party
filter subclasses :class:`BaseHostFilter` and overrides
:meth:`~BaseHostFilter.host_reason`.
"""

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, cast

from nova_lite.compute import accounting
from nova_lite.db.services import heartbeat_deadline

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
    extra specs, as bare-metal flavors do) cover it.  Nova leaves this to
    Placement; nova-lite has no Placement, so it is a filter."""

    _OWN = frozenset({accounting.VCPU, accounting.PCPU, accounting.MEMORY_MB,
                      accounting.DISK_GB})

    def _others(self, spec: "RequestSpec") -> dict[str, int]:
        return {rc: n for rc, n in spec.requested.items() if rc not in self._OWN and n > 0}

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(self._others(spec))

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        short = [f"free {rc} {state.free(rc)} < {n}" for rc, n in sorted(
            self._others(spec).items()) if state.free(rc) < n]
        return "; ".join(short) or None


class NUMATopologyFilter(BaseHostFilter):
    """The instance's NUMA topology fits the host's cells (as the claim will place it)."""

    def applies(self, spec: "RequestSpec") -> bool:
        return spec.numa_request is not None

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, spec.numa_request, ())
        return "; ".join(decision.reasons) or None


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
        return spec.traits.reason(state.node.traits)


class PciPassthroughFilter(BaseHostFilter):
    """The host has free PCI devices for every PCI request."""

    def applies(self, spec: "RequestSpec") -> bool:
        return bool(spec.pci_requests)

    def host_reason(self, state: "HostState", spec: "RequestSpec", now: float) -> str | None:
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, None, spec.pci_requests)
        return "; ".join(decision.reasons) or None
