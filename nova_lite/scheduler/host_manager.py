"""``HostManager``: the scheduler's view of every compute node, and its choices.

The view is refreshed from the records on every request (or, with
``nodes_max_age``, once that many seconds passed), incrementally, through a
:class:`~nova_lite.db.node_changes.ChangeReader`: one read transaction asks
the indexed change sequence for the node rows changed since the last look
(only those are read again, however many), the nodes deleted, the service
rows added, enabled, disabled or deleted, and the host aggregates when one
changed; only the HostStates of those nodes and hosts are touched.

Heartbeats do not move the change sequence (a heartbeat stays one cheap
statement), so the view keeps each service's last heartbeat as read and
reads a service row again, by its key, before that heartbeat would make it
look down (within :data:`SERVICES_MAX_AGE` of that moment), and then at
most once every :data:`SERVICES_MAX_AGE` seconds while its heartbeat does
not move: a dead service is noticed within ``service_down_time`` plus that,
and a live one (beating every ``report_interval``) never looks down.
Each pick is consumed in the view at once, so back-to-back requests
spread before the claims land.  Every request first passes through Nova's
request filters (:mod:`~nova_lite.scheduler.request_filters`), which add
the aggregates it must or must not land in, on the aggregates as last read.
"""

import heapq
import logging
import random
import time
from collections.abc import Sequence
from typing import Any

import attrs
import stevedore

from nova_lite import conf, heap
from nova_lite import validators as v
from nova_lite.db.aggregates import Aggregate, host_zone
from nova_lite.db.node_changes import ChangeReader, Changes
from nova_lite.db.services import COMPUTE_BINARY, ServiceRecord
from nova_lite.db.store import Store
from nova_lite.exception import InvalidConfig, InvalidInput
from nova_lite.objects import ComputeNode, Flavor
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
#: A service row whose heartbeat would make it look down within this many
#: seconds is read again; one whose heartbeat did not move since is read
#: again at most this often (s).
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
    #: The node's record as the view read it, when no pick of the view was
    #: counted on it since (else None): a claim may decide on it first.
    node: ComputeNode | None = attrs.field(default=None, eq=False, repr=False)


def _recorded(state: HostState) -> ComputeNode | None:
    """``state``'s node as read, unless a pick of this view was counted on it."""
    return state.node if state.consumed == 0 else None


def _selection(chosen: HostState, alternates: Sequence[HostState]) -> Selection:
    """The Selection of ``chosen`` (before its pick is counted), ``alternates`` after it."""
    return Selection(host=chosen.host, nodename=chosen.nodename, limits=chosen.limits(),
                     node=_recorded(chosen),
                     alternates=tuple(Selection(host=s.host, nodename=s.nodename,
                                                limits=s.limits(), node=_recorded(s))
                                      for s in alternates))


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
    ``services_max_age``: seconds (default :data:`SERVICES_MAX_AGE`) before
    a service's heartbeat as last read would make it look down that its row
    is read again, and the least time between two reads of a row whose
    heartbeat did not move.  ``indexed``: keep the hosts in order of each
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
        self._changes = ChangeReader(store, binary=COMPUTE_BINARY, aggregates=True)
        self._by_host: dict[str, list[HostState]] = {}   # host -> its nodes' states
        self._services: dict[str, ServiceRecord] = {}   # by host
        # (heartbeat as read, host), soonest first; entries of an older read are skipped.
        self._beats: list[tuple[float, str]] = []
        # host -> time.monotonic() of a read that found its heartbeat had not moved
        self._stalled: dict[str, float] = {}
        self._aggregates: dict[str, tuple[Aggregate, ...]] = {}   # by host
        self._all_aggregates: tuple[Aggregate, ...] = ()   # every one, by name
        self.services_max_age = services_max_age
        self.nodes_max_age = self.settings.nodes_max_age if nodes_max_age is None \
            else nodes_max_age
        self._random = random.Random()   # host_subset_size's choice
        self._refreshed_at: float | None = None   # time.monotonic() of the last refresh

    # -- the view -------------------------------------------------------------
    def refresh(self) -> list[HostState]:
        """Bring the view up to date with the records; returns the HostStates.

        One read transaction: the node and service rows changed since the
        last look, the service rows whose heartbeat is due for a look
        (see the module docstring), and the aggregates if one changed.
        A full read runs within :func:`nova_lite.heap.full_read`.
        """
        with heap.full_read(self._changes.full_due(), lambda: len(self._states)):
            return self._refresh()

    def _refresh(self) -> list[HostState]:
        now, monotonic = time.time(), time.monotonic()
        due = self._due_heartbeats(now, monotonic)
        changes = self._changes.read(self._states, due)
        touched = self._apply_nodes(changes)
        hosts = self._apply_services(changes, due, monotonic)
        if changes.aggregates is not None:
            by_host = _by_host(changes.aggregates)
            hosts.update(h for h in set(by_host) | set(self._aggregates)
                         if by_host.get(h) != self._aggregates.get(h))
            self._all_aggregates, self._aggregates = changes.aggregates, by_host
        if changes.full:
            touched = self._ordered
        else:
            touched.extend(s for h in hosts for s in self._by_host.get(h, ()))
        for state in touched:
            state.service = self._services.get(state.host)
            state.aggregates = self._aggregates.get(state.host, ())
        self._refreshed_at = monotonic
        return self._ordered

    def _due_heartbeats(self, now: float, monotonic: float) -> list[str]:
        """The hosts whose service row is read again this time: those whose
        heartbeat as read would look down within ``services_max_age``
        seconds, but not within that time of a read that found it stalled."""
        horizon = now - self.settings.service_down_time + self.services_max_age
        due = []
        while self._beats and self._beats[0][0] < horizon:
            beat, host = heapq.heappop(self._beats)
            held = self._services.get(host)
            if held is not None and held.updated_at == beat and host not in self._stalled:
                due.append(host)
        due.extend(h for h, at in self._stalled.items()
                   if monotonic - at >= self.services_max_age)
        return due

    def _apply_services(self, changes: Changes, due: list[str], monotonic: float) -> set[str]:
        """Take the service rows of ``changes``; returns the hosts whose row changed."""
        if changes.full:
            hosts = set(self._services)
            self._services, self._beats, self._stalled = {}, [], {}
        else:
            hosts = set(changes.gone_services)
            for host in changes.gone_services:
                self._services.pop(host, None)
                self._stalled.pop(host, None)
        read = {s.host for s in changes.services}
        for host in due:
            if host not in read:   # no row any more
                hosts.add(host)
                self._services.pop(host, None)
                self._stalled.pop(host, None)
        for record in changes.services:
            held = self._services.get(record.host)
            if held is None or held.updated_at != record.updated_at:
                self._stalled.pop(record.host, None)
                heapq.heappush(self._beats, (record.updated_at, record.host))
            elif record.host in due:
                self._stalled[record.host] = monotonic
            if held != record:
                hosts.add(record.host)
                self._services[record.host] = record
        return hosts

    def _apply_nodes(self, changes: Changes) -> list[HostState]:
        """Take the node records of ``changes``; returns the HostStates that
        are new or changed."""
        gone = set(changes.gone_nodes)
        if changes.full:
            gone |= set(self._states) - {node.uuid for node in changes.nodes}
        reorder = bool(gone) or changes.full
        touched = []
        for node in changes.nodes:
            state = self._states.get(node.uuid)
            if state is None:
                state = self._states[node.uuid] = HostState(node)
                self._by_host.setdefault(state.host, []).append(state)
                reorder = True
            elif state.generation != node.generation or state.host != node.host:
                if state.host != node.host:
                    reorder = True
                    self._forget_host(state)
                    self._by_host.setdefault(node.host, []).append(state)
                state.update_from_node(node)
                state.host = node.host
            else:
                continue
            touched.append(state)
            if self._index is not None:
                self._index.put(state)
        for uuid in gone:
            state = self._states.pop(uuid, None)
            if state is not None:
                self._forget_host(state)
            if self._index is not None:
                self._index.discard(uuid)
        if reorder:
            self._ordered = sorted(self._states.values(), key=lambda s: (s.host, s.nodename))
        LOG.debug("Scheduler view: %d nodes, %d re-read, %d gone", len(self._states),
                  len(changes.nodes), len(gone))
        return touched

    def _forget_host(self, state: HostState) -> None:
        states = self._by_host.get(state.host, [])
        if state in states:
            states.remove(state)
        if not states:
            self._by_host.pop(state.host, None)

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
                selection = _selection(chosen, ranked[1:])
                chosen.consume(spec)
                self._reindex(chosen)
                selections.append(selection)
        except NoValidHost:
            for state, node, consumed in reversed(saved):
                state.restore(node, consumed)
                self._reindex(state)
            raise
        LOG.info("Selected %s for %d x %s", ", ".join(
            f"{s.host}/{s.nodename}" for s in selections), num_instances, spec.flavor.name)
        return selections

    def saw(self, node: ComputeNode) -> None:
        """Take ``node``, a record newer than the view's (the node as recorded
        after a claim on one of its picks), into the view: the next refresh
        does not read that node again unless it changed since."""
        state = self._states.get(node.uuid)
        if state is None or state.host != node.host or node.generation <= state.generation:
            return
        state.update_from_node(node)
        self._reindex(state)

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
