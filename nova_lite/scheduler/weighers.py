"""Host weighers: higher is better.

A weigher is a class registered under ``nova_lite.scheduler.weighers``
(Nova's names: ``RAMWeigher``, ``CPUWeigher``, ``DiskWeigher``) and chosen
with ``[filter_scheduler] weight_classes`` (``all_weighers`` takes every
installed one).  Each weigher's raw values are normalised to 0..1 over the
hosts that passed the filters and multiplied by its multiplier option
(``ram_weight_multiplier``, ...): positive spreads (emptier hosts first),
negative packs.
"""

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, ClassVar

from nova_lite import conf

if TYPE_CHECKING:
    from nova_lite.scheduler.host_state import HostState
    from nova_lite.scheduler.request import RequestSpec


class BaseHostWeigher:
    """A weigher; ``settings`` is the scheduler's :class:`~nova_lite.conf.Settings`."""

    #: The Settings field holding this weigher's multiplier (None: 1.0).
    multiplier_option: ClassVar[str | None] = None
    #: The HostState attribute weighed (an integer amount), or None for a
    #: weigher that overrides :meth:`values`.
    attr: ClassVar[str | None] = None
    #: The name reports use (the class name by default).
    name: str | None = None

    def __init__(self, settings: conf.Settings) -> None:
        self.settings = settings
        if self.name is None:
            self.name = type(self).__name__

    @property
    def multiplier(self) -> float:
        """The multiplier from settings (1.0 without an option)."""
        if self.multiplier_option is None:
            return 1.0
        return float(getattr(self.settings, self.multiplier_option))

    def values(self, states: Sequence["HostState"], spec: "RequestSpec") -> list[float]:
        """The raw value of each host, in order (a list of numbers): by default
        each state's :attr:`attr`."""
        if self.attr is None:
            raise NotImplementedError
        return [getattr(s, self.attr) for s in states]


class RAMWeigher(BaseHostWeigher):
    """Free memory in MB."""

    multiplier_option = "ram_weight_multiplier"
    attr = "free_ram_mb"


class CPUWeigher(BaseHostWeigher):
    """Free vCPUs."""

    multiplier_option = "cpu_weight_multiplier"
    attr = "free_vcpus"


class DiskWeigher(BaseHostWeigher):
    """Free disk in GB."""

    multiplier_option = "disk_weight_multiplier"
    attr = "free_disk_gb"


def weights(states: Sequence["HostState"], spec: "RequestSpec",
            weighers: Iterable[BaseHostWeigher]) -> list[float]:
    """The total weight of each host (a list in ``states``' order)."""
    totals = [0.0] * len(states)
    for weigher in weighers:
        multiplier = weigher.multiplier
        if not multiplier:
            continue
        values = weigher.values(states, spec)
        low, high = min(values), max(values)
        if high == low:
            continue   # every host alike: this weigher decides nothing
        scale = multiplier / (high - low)
        totals = [t + (value - low) * scale for t, value in zip(totals, values)]
    return totals
