"""``NoValidHost`` and its per-filter report."""

import collections
from collections.abc import Sequence

import attrs

from nova_lite.exception import NoValidHost  # noqa: F401 - public name here too


#: How many distinct reasons of one filter a report names.
MAX_REASONS = 5


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


@attrs.frozen
class FilterReport:
    """What one filter did to one request.

    ``considered``: hosts it saw; ``removed``: hosts it removed;
    ``reason``: the most common reason among them (``reason_count`` hosts
    gave it exactly); ``others``: the next most common reasons with their
    host counts (up to :data:`MAX_REASONS` in all), and ``unnamed`` how
    many distinct reasons are left out.  So a traits check that removed
    hosts for different traits names each trait.
    """

    filter: str
    considered: int
    removed: int
    reason: str | None = None
    reason_count: int = 0
    others: tuple[tuple[str, int], ...] = ()
    unnamed: int = 0

    def __str__(self) -> str:
        text = f"{self.filter} removed {self.removed} of {self.considered} hosts"
        if not self.reason:
            return text
        if not self.others:
            return f"{text}: {self.reason}"
        named = [(self.reason, self.reason_count), *self.others]
        text += ": " + "; ".join(f"{reason} ({_hosts(count)})" for reason, count in named)
        if self.unnamed:
            text += f"; and {self.unnamed} other reason(s)"
        return text


def summarise(name: str, considered: int, rejected: Sequence[tuple[object, str]]) -> FilterReport:
    """A FilterReport from ``(state, reason)`` pairs."""
    if not rejected:
        return FilterReport(filter=name, considered=considered, removed=0)
    counts = collections.Counter(r for _, r in rejected)
    common = counts.most_common(MAX_REASONS)
    (reason, count), others = common[0], tuple(common[1:])
    return FilterReport(filter=name, considered=considered, removed=len(rejected),
                        reason=reason, reason_count=count, others=others,
                        unnamed=len(counts) - len(common))
