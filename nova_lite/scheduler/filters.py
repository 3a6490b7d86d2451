"""Host filters: each says whether a host can take a request, and why not."""

from nova_lite.compute import accounting
from nova_lite.objects import ZERO_OVERHEAD


def compute_filter(host_state, flavor):
    """Reject hosts whose service is down or whose last audit failed."""
    if not host_state.service_up:
        return "compute service is down"
    if host_state.last_error:
        return f"last audit failed: {host_state.last_error}"
    return None


def resources_filter(host_state, flavor):
    """Reject hosts without room for ``flavor`` (no overhead: the claim adds it)."""
    requested = accounting.requested_resources(flavor, ZERO_OVERHEAD)
    used = {rc: host_state.capacity[rc] - host_state.free[rc] for rc in host_state.capacity}
    reasons = accounting.amount_problems(host_state.node.inventories, used, requested)
    return "; ".join(reasons) or None


DEFAULT_FILTERS = (compute_filter, resources_filter)
