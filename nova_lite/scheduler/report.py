"""``NoValidHost`` and its per-filter report."""

import collections
from collections.abc import Sequence

import attrs

from nova_lite.exception import NoValidHost  # noqa: F401 - public name here too


@attrs.frozen
class FilterReport:
    """What one filter did to one request.

    ``considered``: hosts it saw; ``removed``: hosts it removed;
    ``reason``: the most common reason among them (``reason_count`` hosts
    gave it exactly).
    """

    filter: str
    considered: int
    removed: int
    reason: str | None = None
    reason_count: int = 0

    def __str__(self) -> str:
        text = f"{self.filter} removed {self.removed} of {self.considered} hosts"
        return f"{text}: {self.reason}" if self.reason else text


def summarise(name: str, considered: int, rejected: Sequence[tuple[object, str]]) -> FilterReport:
    """A FilterReport from ``(state, reason)`` pairs."""
    if not rejected:
        return FilterReport(filter=name, considered=considered, removed=0)
    reason, count = collections.Counter(r for _, r in rejected).most_common(1)[0]
    return FilterReport(filter=name, considered=considered, removed=len(rejected),
                        reason=reason, reason_count=count)


