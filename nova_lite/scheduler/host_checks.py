"""The enabled filters and weighers as the HostIndex can use them, or None.

The index serves a request when every enabled filter decides on one host
alone: the built-in ones, and any filter that only overrides
``host_reason`` (its ``filter_all`` is BaseHostFilter's).  Weighers must
weigh an integer HostState attribute (``attr``, values not overridden).
Anything else (a filter judging the hosts together, a weigher computing
its own values) makes the HostManager filter and weigh every host.
"""

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from nova_lite.db.services import heartbeat_deadline
from nova_lite.scheduler import filters as flt
from nova_lite.scheduler import weighers as wgh
from nova_lite.scheduler.host_index import INDEXABLE, WeighSpec

if TYPE_CHECKING:
    from nova_lite.scheduler.host_state import HostState
    from nova_lite.scheduler.request import RequestSpec

# A check of one host: True if it passes.
_Check = Callable[["HostState"], bool]

_PER_HOST = (flt.BaseHostFilter.filter_all, flt.ComputeFilter.filter_all,
             flt._AmountFilter.filter_all)


def weigh_specs(weighers: Iterable[wgh.BaseHostWeigher]) -> tuple[WeighSpec, ...] | None:
    """WeighSpec records for ``weighers`` (those with a non-zero multiplier), or None."""
    specs: list[WeighSpec] = []
    for w in weighers:
        if not w.multiplier:
            continue   # the full pass skips it too
        attr = getattr(w, "attr", None)
        if type(w).values is not wgh.BaseHostWeigher.values or attr not in INDEXABLE:
            return None
        specs.append(WeighSpec(attr=attr, multiplier=w.multiplier))
    return tuple(specs)


def per_host(filters: Iterable[flt.BaseHostFilter]) -> bool:
    """True if every filter of ``filters`` decides on one host alone."""
    return all(type(f).filter_all in _PER_HOST for f in filters)


def host_test(filters: Iterable[flt.BaseHostFilter], spec: "RequestSpec", now: float,
              ignored: frozenset[str] = frozenset()) -> tuple[_Check, dict[str, int]]:
    """``(passes, minimums)`` for one request.

    ``passes(state)``: True if ``state`` passes every filter that applies to
    ``spec`` at ``now`` (epoch seconds) and its host is not in ``ignored``;
    ``minimums``: ``{HostState attribute: amount}`` every passing state holds.
    """
    checks: list[_Check] = []
    minimums: dict[str, int] = {}
    for f in filters:
        if not f.applies(spec):
            continue
        if isinstance(f, flt._AmountFilter) and type(f).filter_all is flt._AmountFilter.filter_all:
            rc, attr, _ = f.kind(spec)
            need = spec.requested.get(rc, 0)
            checks.append(_at_least(attr, need))
            if attr in INDEXABLE:
                minimums[attr] = max(need, minimums.get(attr, 0))
        elif type(f).filter_all is flt.ComputeFilter.filter_all:
            checks.append(_compute_up(f.settings.service_down_time, now))
        else:
            checks.append(_no_reason(f, spec, now))

    def passes(state: "HostState") -> bool:
        if ignored and state.host in ignored:
            return False
        for check in checks:
            if not check(state):
                return False
        return True
    return passes, minimums


def _at_least(attr: str, need: int) -> _Check:
    def check(state: "HostState") -> bool:
        return getattr(state, attr) >= need
    return check


def _compute_up(down_time: float, now: float) -> _Check:
    # ServiceRecord.is_up as one deadline (see ComputeFilter.filter_all).
    deadline = heartbeat_deadline(down_time, now)

    def check(state: "HostState") -> bool:
        # ComputeFilter.host_reason is None, without building the reason.
        service, node = state.service, state.node
        return (service is not None and not service.disabled
                and service.updated_at >= deadline and bool(node.host)
                and getattr(node, "reported", True) and not node.last_error)
    return check


def _no_reason(f: flt.BaseHostFilter, spec: "RequestSpec", now: float) -> _Check:
    def check(state: "HostState") -> bool:
        return f.host_reason(state, spec, now) is None
    return check
