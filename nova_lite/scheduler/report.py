"""``NoValidHost`` and its per-filter report."""

import collections

import attrs

from nova_lite.exception import NovaLiteError


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

    def __str__(self):
        text = f"{self.filter} removed {self.removed} of {self.considered} hosts"
        return f"{text}: {self.reason}" if self.reason else text


def summarise(name, considered, rejected):
    """A FilterReport from ``(state, reason)`` pairs."""
    if not rejected:
        return FilterReport(filter=name, considered=considered, removed=0)
    reason, count = collections.Counter(r for _, r in rejected).most_common(1)[0]
    return FilterReport(filter=name, considered=considered, removed=len(rejected),
                        reason=reason, reason_count=count)


class NoValidHost(NovaLiteError):
    """No host can take the request.

    ``report``: a tuple of :class:`FilterReport`, one per filter that ran,
    in order; the message lists those that removed hosts.
    """

    def __init__(self, flavor_name, total_hosts, report, placed=0):
        self.flavor_name = flavor_name
        self.total_hosts = total_hosts
        self.report = tuple(report)
        self.placed = placed
        removing = [str(r) for r in self.report if r.removed]
        if total_hosts == 0:
            why = "no compute nodes are recorded"
        elif removing:
            why = "; ".join(removing)
        else:
            why = "no host passed"
        which = f" for instance {placed + 1}" if placed else ""
        super().__init__(f"No valid host was found for flavor {flavor_name!r}{which} "
                         f"among {total_hosts} hosts: {why}")
