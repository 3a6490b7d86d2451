"""The scheduler: host states from the records, filters, weighers, choices.

Public names: :class:`HostManager`, :class:`RequestSpec`,
:class:`Selection`, :class:`NoValidHost`.
"""

from nova_lite.scheduler.host_manager import HostManager, Selection
from nova_lite.scheduler.report import FilterReport, NoValidHost
from nova_lite.scheduler.request import RequestSpec

__all__ = ["FilterReport", "HostManager", "NoValidHost", "RequestSpec", "Selection"]
