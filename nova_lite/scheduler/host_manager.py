"""``HostManager``: the scheduler's view of every compute node, and its choices.

The view is refreshed from the records on every request (or, with
``nodes_max_age``, once that many seconds passed), incrementally: a cheap
fingerprint of the node rows says whether anything changed, then only the
nodes whose generation moved are read again, in one read.  Service rows are
read again when one is added, removed, enabled or disabled, and at least
every :data:`SERVICES_MAX_AGE` seconds for the heartbeats, and the host
aggregates with them (a change to an aggregate is seen within that time): a heartbeat
seen up to that much late only makes a service look older, so a dead
service is noticed within ``service_down_time`` plus that, and a live one
(beating every ``report_interval``) never looks down while
``report_interval + SERVICES_MAX_AGE < service_down_time``.  Each pick is consumed in the
view at once, so back-to-back requests spread before the claims land.
Every request first passes through Nova's request filters
(:mod:`~nova_lite.scheduler.request_filters`), which add the aggregates it
must or must not land in, on the aggregates as last read.
"""

import heapq
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import attrs
import stevedore

from nova_lite import conf
from nova_lite import validators as v
from nova_lite.db.aggregates import Aggregate, host_zone
from nova_lite.db.node_changes import NodeChangeTracker
from nova_lite.db.services import ServiceRecord
from nova_lite.db.store import Store
from nova_lite.exception import InvalidConfig, InvalidInput
from nova_lite.objects import Flavor
from nova_lite.scheduler import host_checks, request_filters
from nova_lite.scheduler.filters import AvailabilityZoneFilter, MemberOfFilter, TraitsFilter
from nova_lite.scheduler.host_index import HostIndex
from nova_lite.scheduler.host_state import HostState
from nova_lite.scheduler.report import FilterReport, NoValidHost, summarise
from nova_lite.scheduler.request import RequestSpec, as_request_spec
from nova_lite.scheduler.weighers import weights

LOG = logging.getLogger(__name__)

FILTER_GROUP = "nova_lite.scheduler.filters"
WEIGHER_GROUP = "nova_lite.scheduler.weighers"
ALL_WEIGHERS = ("all_weighers", "nova.scheduler.weights.all_weighers")
#: Above this many changed nodes a refresh reads every node at once.
_BULK_RELOAD = 1000
#: Service rows are re-read at least this often (s), whatever their fingerprint says.
SERVICES_MAX_AGE = 5.0


@attrs.frozen
class Selection:
    """A chosen node: ``host``, ``nodename``, the ``limits`` for its claim
    (Nova's keys ``memory_mb``, ``disk_gb``, ``vcpu``: total x ratio) and
    ``alternates``: further Selections to try if the claim loses."""

    host: str
    nodename: str
    limits: dict[str, float] = attrs.field(factory=dict)
    alternates: tuple["Selection", ...] = ()


def _load(group: str, names: Sequence[str], option: str,
          settings: conf.Settings) -> tuple[Any, ...]:
    """Instances of the entry point classes ``names`` of ``group``."""
    manager: stevedore.ExtensionManager = stevedore.ExtensionManager(
        group, invoke_on_load=False)
    installed = {ext.name: ext.plugin for ext in manager}
    if group == WEIGHER_GROUP and any(n in ALL_WEIGHERS for n in names):
        names = sorted(installed)
    missing = [n for n in names if n not in installed]
    if missing:
        raise InvalidConfig(option, ",".join(names),
                            f"unknown {', '.join(missing)}; installed: "
                            f"{', '.join(sorted(installed)) or 'none'}")
    return tuple(installed[n](settings) for n in names)


def _by_host(aggregates: Sequence[Aggregate]) -> dict[str, tuple[Aggregate, ...]]:
    """``{host: its aggregates}`` of ``aggregates``."""
    found: dict[str, list[Aggregate]] = {}
    for agg in aggregates:
        for host in agg.hosts:
            found.setdefault(host, []).append(agg)
    return {host: tuple(aggs) for host, aggs in found.items()}


class HostManager:
    """Chooses compute nodes from the records of a :class:`~nova_lite.db.Store`.

    ``settings``: :class:`~nova_lite.conf.Settings` (``enabled_filters``,
    ``weight_classes``, the weight multipliers, ``service_down_time``,
    ``host_subset_size``: each pick is a random one of that many best nodes,
    and ``max_attempts``, which sets how many alternates each Selection
    carries: ``max_attempts - 1``, the best nodes after the one picked).
    ``services_max_age``: seconds after which the service rows are read
    again for their heartbeats (default
    :data:`SERVICES_MAX_AGE`).  ``indexed``: keep the hosts in order of each
    weigher's value so a request looks at the best ones only (the default;
    it applies when every filter decides on one host alone and every weigher
    weighs a HostState amount, see :mod:`nova_lite.scheduler.host_checks`);
    False filters and weighs every host on every request.  Both choose the
    same hosts.  ``nodes_max_age``: seconds a request may reuse the view
    without asking the records what changed (default: the settings'
    ``[scheduler] nodes_max_age``, itself 0: every request asks).  Within
    that time the view counts this manager's own picks but not other
    schedulers' claims nor service changes; a claim still decides on the
    records in its transaction, and a lost one moves to the next alternate.
    A wrong argument raises :class:`~nova_lite.exception.InvalidInput`
    naming it (:class:`~nova_lite.exception.InvalidType` for a wrong type).
    """

    def __init__(self, store: Store, settings: conf.Settings | None = None, *,
                 services_max_age: float = SERVICES_MAX_AGE, indexed: bool = True,
                 nodes_max_age: float | None = None) -> None:
        v.check_type(store, Store, "HostManager store")
        v.check_type(settings, conf.Settings, "HostManager settings", optional=True)
        v.check_seconds(services_max_age, "HostManager services_max_age")
        if nodes_max_age is not None:
            v.check_seconds(nodes_max_age, "HostManager nodes_max_age")
        self.store = store
        self.settings = settings if settings is not None else conf.Settings()
        #: The filters in the order they run: the aggregate membership
        #: (member_of), traits and availability zone checks (always on, as
        #: Placement's and Nova's request filter), then the enabled ones.
        self._member_of = MemberOfFilter(self.settings)
        self.filters = [self._member_of, TraitsFilter(self.settings),
                        AvailabilityZoneFilter(self.settings), *_load(
            FILTER_GROUP, self.settings.enabled_filters, "[filter_scheduler] enabled_filters",
            self.settings)]
        self.weighers = _load(WEIGHER_GROUP, self.settings.weight_classes,
                              "[filter_scheduler] weight_classes", self.settings)
        specs = host_checks.weigh_specs(self.weighers)
        #: The states in order of each weigher's value, or None: every request
        #: then filters and weighs every host.
        self._index = HostIndex(specs) if indexed and specs is not None \
            and host_checks.per_host(self.filters) else None
        self._states: dict[str, HostState] = {}   # node uuid -> HostState
        self._ordered: list[HostState] = []       # sorted by (host, nodename)
        self._changes = NodeChangeTracker(store, _BULK_RELOAD)
        self._services: dict[str, ServiceRecord] = {}   # by host
        self._aggregates: dict[str, tuple[Aggregate, ...]] = {}   # by host
        self._all_aggregates: tuple[Aggregate, ...] = ()   # every one, by name
        self._services_key: tuple[tuple[int, ...], float] | None = None   # (fingerprint, read at)
        self.services_max_age = services_max_age
        self.nodes_max_age = self.settings.nodes_max_age if nodes_max_age is None \
            else nodes_max_age
        self._random = random.Random()   # host_subset_size's choice
        self._refreshed_at: float | None = None   # time.monotonic() of the last refresh

    # -- the view -------------------------------------------------------------
    def refresh(self) -> list[HostState]:
        """Bring the view up to date with the records; returns the HostStates.

        Two aggregate queries say whether any node or service row changed;
        only then are the changed nodes, or the service rows, read again
        (the service rows also every :data:`SERVICES_MAX_AGE` seconds, for
        the heartbeats).
        """
        nodes_key, services_key = self.store.change_fingerprints()
        touched: Sequence[HostState] = self._reload_nodes(nodes_key) \
            if nodes_key != self._changes.fingerprint else ()
        now = time.monotonic()
        stale = self._services_key is None or services_key != self._services_key[0] \
            or now - self._services_key[1] >= self.services_max_age
        if stale:
            self._services = {s.host: s for s in self.store.list_services()}
            self._all_aggregates = tuple(self.store.aggregates.list())
            self._aggregates = _by_host(self._all_aggregates)
            self._services_key = (services_key, now)
            touched = self._ordered
        for state in touched:
            state.service = self._services.get(state.host)
            state.aggregates = self._aggregates.get(state.host, ())
        self._refreshed_at = now
        return self._ordered

    def _reload_nodes(self, fingerprint: dict[int, tuple[int, int, int]]) -> list[HostState]:
        """Re-read the nodes of the fingerprint buckets that changed; returns
        the HostStates that are new or changed."""
        changes = self._changes.changes(fingerprint, self._states)
        reorder = bool(changes.gone)
        touched = []
        for node in changes.fresh:
            state = self._states.get(node.uuid)
            if state is None:
                state = self._states[node.uuid] = HostState(node)
                reorder = True
            elif state.generation != node.generation or state.host != node.host:
                reorder = reorder or state.host != node.host
                state.update_from_node(node)
                state.host = node.host
            else:
                continue
            touched.append(state)
            if self._index is not None:
                self._index.put(state)
        for uuid in changes.gone:
            self._states.pop(uuid, None)
            if self._index is not None:
                self._index.discard(uuid)
        if reorder:
            self._ordered = sorted(self._states.values(), key=lambda s: (s.host, s.nodename))
        LOG.debug("Scheduler view: %d nodes, %d re-read, %d gone", len(self._states),
                  len(changes.fresh), len(changes.gone))
        return touched

    def host_zone(self, host: str) -> str:
        """The availability zone of ``host`` as this view last read its
        aggregates (``default_availability_zone`` for a host in no zone)."""
        return host_zone(self._aggregates.get(host, ()),
                         self.settings.default_availability_zone)

    def get_host_states(self) -> list[HostState]:
        """Every node's HostState, refreshed (sorted by host and node name)."""
        return list(self.refresh())

    # -- choosing -------------------------------------------------------------
    def select_destinations(self, request: RequestSpec | Flavor,
                            num_instances: int = 1) -> list[Selection]:
        """Choose a node for each of ``num_instances`` instances of ``request``.

        ``request``: a :class:`RequestSpec` or a plain Flavor.  Returns a
        list of :class:`Selection`, one per instance; each pick is counted
        in the view before the next.  Raises :class:`NoValidHost` (nothing
        is counted) with a per-filter report when any instance finds no host.
        """
        spec = as_request_spec(request)
        if isinstance(num_instances, bool) or not isinstance(num_instances, int) \
                or num_instances < 1:
            raise InvalidInput(f"num_instances must be an integer >= 1, got {num_instances!r}")
        if self._refreshed_at is None or self.nodes_max_age <= 0 \
                or time.monotonic() - self._refreshed_at >= self.nodes_max_age:
            self.refresh()
        spec = self._request_filters(spec)
        states = self._ordered
        ignored = frozenset(spec.ignore_hosts)
        indexed = self._index is not None and not spec.force_hosts
        if spec.force_hosts:
            states = [s for s in states if s.host in spec.force_hosts]
        if ignored and not indexed:
            states = [s for s in states if s.host not in ignored]
        subset = self.settings.host_subset_size
        saved = []
        selections: list[Selection] = []
        try:
            for placed in range(num_instances):
                ranked = self._rank_indexed(spec, ignored, placed) if indexed \
                    else self._rank(states, spec, placed)
                chosen = ranked[0]
                if subset > 1:
                    chosen = ranked.pop(self._random.randrange(min(subset, len(ranked))))
                    ranked = [chosen, *ranked[:self.settings.max_attempts - 1]]
                saved.append((chosen, chosen.node, chosen.consumed))
                chosen.consume(spec)
                self._reindex(chosen)
                selections.append(Selection(
                    host=chosen.host, nodename=chosen.nodename, limits=chosen.limits(),
                    alternates=tuple(Selection(host=s.host, nodename=s.nodename,
                                               limits=s.limits()) for s in ranked[1:])))
        except NoValidHost:
            for state, node, consumed in reversed(saved):
                state.restore(node, consumed)
                self._reindex(state)
            raise
        LOG.info("Selected %s for %d x %s", ", ".join(
            f"{s.host}/{s.nodename}" for s in selections), num_instances, spec.flavor.name)
        return selections

    def _request_filters(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` with the aggregates Nova's request filters add
        (:mod:`~nova_lite.scheduler.request_filters`); NoValidHost if one fails."""
        try:
            filtered = request_filters.process(spec, self._all_aggregates, self.settings)
        except request_filters.RequestFilterFailed as exc:
            count = len(self._ordered)
            raise NoValidHost(spec.flavor.name, count, [FilterReport(
                filter=exc.filter, considered=count, removed=count, reason=exc.reason,
                reason_count=count)]) from None
        self._member_of.explain({a.uuid: a.name for a in self._all_aggregates},
                                filtered.required, filtered.forbidden)
        return filtered.spec

    def _ranked_count(self) -> int:
        """How many of the best hosts a pick needs: the subset it chooses from,
        and the alternates that follow whichever it chooses."""
        subset = self.settings.host_subset_size
        return self.settings.max_attempts if subset <= 1 \
            else subset + self.settings.max_attempts - 1

    def _reindex(self, state: HostState) -> None:
        if self._index is not None:
            self._index.put(state)

    def _rank_indexed(self, spec: RequestSpec, ignored: frozenset[str],
                      placed: int) -> list[HostState]:
        """:meth:`_rank` of every state whose host is not ``ignored``, through the index.

        Only when no host passes are all of them filtered, for the report.
        """
        assert self._index is not None, "only an indexed manager ranks through its index"
        passes, minimums = host_checks.host_test(self.filters, spec, time.time(), ignored)
        assert self._index is not None   # the caller checked: this path is the index's
        ranked = self._index.best(self._states, passes, self._ranked_count(), minimums,
                                  self._ordered)
        if ranked:
            return ranked
        return self._rank([s for s in self._ordered if s.host not in ignored], spec, placed)

    def _rank(self, states: Sequence[HostState], spec: RequestSpec,
              placed: int) -> list[HostState]:
        """The best ``max_attempts`` passing states, best first; NoValidHost if none."""
        now = time.time()
        passing = list(states)
        report: list[FilterReport] = []
        for flt in self.filters:
            if not flt.applies(spec):
                continue
            considered = len(passing)
            passing, rejected = flt.filter_all(passing, spec, now)
            report.append(summarise(flt.name, considered, rejected))
            if LOG.isEnabledFor(logging.DEBUG):
                for state, reason in rejected:
                    LOG.debug("%s removed %s/%s: %s", flt.name, state.host, state.nodename,
                              reason)
            if not passing:
                break
        if not passing:
            raise NoValidHost(spec.flavor.name, len(states), report, placed)
        totals = weights(passing, spec, self.weighers)
        best = heapq.nlargest(self._ranked_count(), range(len(passing)),
                              key=totals.__getitem__)
        return [passing[i] for i in best]
