"""Host filters: each removes the hosts that cannot take a request, and says why.

A filter is a class registered under the entry point group
``nova_lite.scheduler.filters`` (Nova's names: ``ComputeFilter``,
``RamFilter``, ``CoreFilter``, ``DiskFilter``, ``NUMATopologyFilter``,
``PciPassthroughFilter``; and ``ResourceClassFilter`` for custom classes)
and chosen with ``[filter_scheduler] enabled_filters``.  A third-party
filter subclasses :class:`BaseHostFilter` and overrides
:meth:`~BaseHostFilter.host_reason`.
"""

import logging
from typing import ClassVar

from nova_lite.compute import accounting

LOG = logging.getLogger(__name__)


class BaseHostFilter:
    """A host filter; ``settings`` is the scheduler's :class:`~nova_lite.conf.Settings`."""

    #: The name reports use (the entry point name by default).
    name: str | None = None

    def __init__(self, settings):
        self.settings = settings
        if self.name is None:
            self.name = type(self).__name__

    def applies(self, spec):
        """False when this request cannot be refused by this filter (it is skipped)."""
        return True

    def host_reason(self, state, spec, now):
        """Why ``state`` (a HostState) cannot take ``spec``, or None if it can."""
        raise NotImplementedError

    def filter_all(self, states, spec, now):
        """``(passing, rejected)``: passing HostStates, and ``(state, reason)`` pairs."""
        passing, rejected = [], []
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

    def host_reason(self, state, spec, now):
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

    def filter_all(self, states, spec, now):
        # Fast path: most hosts pass; only the others get a reason.
        down_time = self.settings.service_down_time
        passing = [s for s in states if s.service is not None
                   and not s.service.disabled and s.service.is_up(down_time, now)
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

    def kind(self, spec):
        """``(resource class, HostState attribute, label)`` this request is checked on."""
        return self.rc, self.attr, self.label

    def applies(self, spec):
        return spec.requested.get(self.kind(spec)[0], 0) > 0

    def host_reason(self, state, spec, now):
        rc, attr, label = self.kind(spec)
        need, free = spec.requested.get(rc, 0), getattr(state, attr)
        if free >= need:
            return None
        return f"free {label} {free}{self.unit} < {need}{self.unit}"

    def filter_all(self, states, spec, now):
        rc, attr, _ = self.kind(spec)
        need = spec.requested.get(rc, 0)
        passing = [s for s in states if getattr(s, attr) >= need]
        if len(passing) == len(states):
            return passing, []
        return passing, [(s, self.host_reason(s, spec, now)) for s in states
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

    def kind(self, spec):
        if accounting.PCPU in spec.requested:
            return accounting.PCPU, "free_pcpus", "pcpus"
        return accounting.VCPU, "free_vcpus", "vcpus"


class ResourceClassFilter(BaseHostFilter):
    """Free amounts of every other class the flavor asks for (``resources:CUSTOM_*``
    extra specs, as bare-metal flavors do) cover it.  Nova leaves this to
    Placement; nova-lite has no Placement, so it is a filter."""

    _OWN = frozenset({accounting.VCPU, accounting.PCPU, accounting.MEMORY_MB,
                      accounting.DISK_GB})

    def _others(self, spec):
        return {rc: n for rc, n in spec.requested.items() if rc not in self._OWN and n > 0}

    def applies(self, spec):
        return bool(self._others(spec))

    def host_reason(self, state, spec, now):
        short = [f"free {rc} {state.free(rc)} < {n}" for rc, n in sorted(
            self._others(spec).items()) if state.free(rc) < n]
        return "; ".join(short) or None


class NUMATopologyFilter(BaseHostFilter):
    """The instance's NUMA topology fits the host's cells (as the claim will place it)."""

    def applies(self, spec):
        return spec.numa_request is not None

    def host_reason(self, state, spec, now):
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, spec.numa_request, ())
        return "; ".join(decision.reasons) or None


class PciPassthroughFilter(BaseHostFilter):
    """The host has free PCI devices for every PCI request."""

    def applies(self, spec):
        return bool(spec.pci_requests)

    def host_reason(self, state, spec, now):
        from nova_lite.compute import placement
        decision = placement.decide(state.node, {}, None, None, spec.pci_requests)
        return "; ".join(decision.reasons) or None
