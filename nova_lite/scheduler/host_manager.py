"""``HostManager``: reads the records and picks hosts for a flavor."""

import logging
import time

import attrs

from nova_lite import conf
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.scheduler import filters as filters_mod
from nova_lite.scheduler import weighers as weighers_mod
from nova_lite.scheduler.host_state import HostState

LOG = logging.getLogger(__name__)


@attrs.frozen
class Selection:
    """A chosen host, with the limits to pass to its claim."""

    host: str
    nodename: str
    limits: object


class HostManager:
    """The scheduler's view over a :class:`~nova_lite.db.Store`."""

    def __init__(self, store, settings=None, filters=filters_mod.DEFAULT_FILTERS,
                 weighers=weighers_mod.DEFAULT_WEIGHERS):
        self.store = store
        self.settings = settings or conf.Settings()
        self.filters = tuple(filters)
        self.weighers = tuple(weighers)

    def get_host_states(self):
        """A HostState per live compute node record."""
        now = time.time()
        up = {s.host for s in self.store.list_services(COMPUTE_BINARY)
              if s.is_up(self.settings.service_down_time, now)}
        return [HostState.from_node(n, n.host in up) for n in self.store.get_compute_nodes()]

    def select_destinations(self, flavor, count=1):
        """Up to ``count`` best hosts for ``flavor``; rejections logged at DEBUG."""
        passing = []
        for state in self.get_host_states():
            reasons = [r for f in self.filters if (r := f(state, flavor))]
            if reasons:
                LOG.debug("Host %s/%s filtered out for %s: %s", state.host, state.nodename,
                          flavor.name, "; ".join(reasons))
                continue
            passing.append(state)
        chosen = weighers_mod.weigh(passing, self.weighers)[:count]
        return [Selection(host=s.host, nodename=s.nodename, limits=s.limits()) for s in chosen]
