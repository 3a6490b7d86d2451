"""``NodeCache``: this service's share of the fleet, refreshed once per audit.

A refresh makes, in this order:

1. the fleet listing (one source call per page, never one per node);
2. the list of this host's instances (after the nodes, so an instance that
   lands on a node between the two calls is seen as ours, not as a stranger);
3. the live compute services, which place every node on a hash ring.

A node is this service's when it carries one of this host's instances, or
when it carries no instance and the ring gives it to this host.  A node that
carries another service's instance is never taken.
"""

import logging
import threading
import time

import attrs

from nova_lite_ironic.exception import SourceError
from nova_lite_ironic.hash_ring import HashRing, normalize_host

LOG = logging.getLogger(__name__)

# Why a listed node is not this service's.
OTHER_OWNER = "owned by another service on the hash ring"
FOREIGN_INSTANCE = "carries an instance of another service"


@attrs.frozen
class FleetView:
    """The outcome of one refresh.

    ``nodes``: uuid -> node for this service's nodes.  ``fleet_size``: nodes
    listed in all.  ``hosts``: the ring's hosts (lower case).  ``skipped``: uuid -> reason
    for listed nodes left to others.  ``refreshed_at``: monotonic seconds.
    ``duration``: seconds the refresh took.
    """

    nodes: dict
    fleet_size: int
    hosts: frozenset
    skipped: dict
    refreshed_at: float
    duration: float = 0.0


class NodeCache:
    """This host's nodes out of ``source``.

    ``service_view`` gives the live hosts, ``instance_view`` this host's
    instances (see :mod:`nova_lite_ironic.peers`).  ``ring_points`` is the
    number of ring points per host.  Errors of the source, and of the views
    (as ``SourceError``), propagate from :meth:`refresh`; the previous view is
    kept.
    """

    def __init__(self, source, host, service_view, instance_view, ring_points=128,
                 clock=time.monotonic):
        self.source = source
        self.host = host
        self.service_view = service_view
        self.instance_view = instance_view
        self.ring_points = ring_points
        self.clock = clock
        self._lock = threading.Lock()
        self.view = None
        self._ring = None

    def refresh(self):
        """List the fleet and recompute this host's share; returns the :class:`FleetView`."""
        started = self.clock()
        fleet = self.source.list_nodes()                        # 1. nodes first
        try:
            mine = set(self.instance_view.instance_uuids(self.host))  # 2. then instances
            hosts = frozenset(normalize_host(h) for h in                  # 3. ring
                              set(self.service_view.live_hosts()) | {self.host})
        except Exception as exc:  # noqa: BLE001  (a store or callable of the core)
            raise SourceError(f"reading the instances of host {self.host} or the live "
                              f"compute services failed: {exc}") from exc
        ring = self._ring_for(hosts)
        owned, skipped = {}, {}
        for node in fleet:
            if node.instance_uuid:
                if node.instance_uuid in mine:
                    owned[node.uuid] = node
                else:
                    skipped[node.uuid] = FOREIGN_INSTANCE
            elif ring.owns(self.host, node.uuid):
                owned[node.uuid] = node
            else:
                skipped[node.uuid] = OTHER_OWNER
        view = FleetView(nodes=owned, fleet_size=len(fleet), hosts=hosts, skipped=skipped,
                         refreshed_at=self.clock(), duration=self.clock() - started)
        with self._lock:
            previous, self.view = self.view, view
        self._log_changes(previous, view)
        return view

    def _ring_for(self, hosts):
        if self._ring is None or self._ring.hosts != hosts:
            if self._ring is not None:
                LOG.info("Compute services sharing the bare-metal fleet changed: %s -> %s",
                         sorted(self._ring.hosts), sorted(hosts))
            self._ring = HashRing(hosts, points_per_host=self.ring_points)
        return self._ring

    def _log_changes(self, previous, view):
        LOG.debug("Refreshed %d of %d bare-metal node(s) for host %s in %.3f s",
                  len(view.nodes), view.fleet_size, self.host, view.duration)
        if previous is None:
            return
        gained = set(view.nodes) - set(previous.nodes)
        lost = set(previous.nodes) - set(view.nodes)
        if gained or lost:
            LOG.info("Host %s now manages %d bare-metal node(s): +%d, -%d", self.host,
                     len(view.nodes), len(gained), len(lost))

    @property
    def age(self):
        """Seconds since the last refresh (None if never refreshed)."""
        view = self.view
        return None if view is None else self.clock() - view.refreshed_at

    def get(self, node_uuid):
        """This host's cached node, or None."""
        view = self.view
        return None if view is None else view.nodes.get(node_uuid)

    def nodenames(self):
        """This host's node uuids, sorted (empty before the first refresh)."""
        view = self.view
        return [] if view is None else sorted(view.nodes)

    def put(self, node):
        """Record a fresher copy of one of this host's nodes (after a deploy)."""
        with self._lock:
            if self.view is not None:   # copy on write: readers may be iterating
                owned = dict(self.view.nodes)
                owned[node.uuid] = node
                skipped = {k: v for k, v in self.view.skipped.items() if k != node.uuid}
                self.view = attrs.evolve(self.view, nodes=owned, skipped=skipped)
