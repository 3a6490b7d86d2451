"""Whether amounts fit a node: inventories, usage and the scheduler's limits.

Pure functions over records: :func:`amount_problems` gives every reason a
request does not fit, in Nova's words; :func:`usage_bounds` the same test
as a bound on each class's usage, which a database can check against the
usage it holds when the decision was made on an older record.
"""

import math
from collections.abc import Mapping
from typing import Any

from nova_lite.exception import InvalidInput
from nova_lite.resources import DISK_GB, MEMORY_MB, PCPU, VCPU, Inventory

#: Nova's scheduler limit keys -> resource class.
LIMIT_KEYS = {"memory_mb": MEMORY_MB, "disk_gb": DISK_GB, "vcpu": VCPU}
#: (label, unit) of each class in rejection reasons, in Nova's words.
_WORDS = {MEMORY_MB: ("memory", "MB"), DISK_GB: ("disk", "GB"), VCPU: ("vcpu", "VCPU"),
          PCPU: ("pcpu", "PCPU")}
#: The order reasons are reported in (Nova tests memory, then disk, then vCPUs).
_ORDER = {MEMORY_MB: 0, DISK_GB: 1, VCPU: 2, PCPU: 3}


def _free_text(rc: str, free: float, requested: int) -> str:
    label, unit = _WORDS.get(rc, (rc, rc))
    return f"Free {label} {max(0, free):.2f} {unit} < requested {requested} {unit}"


def amount_problems(inventories: Mapping[str, Inventory], used: Mapping[str, int],
                    requested: Mapping[str, int], limits: Any = None) -> list[str]:
    """Every reason ``requested`` does not fit, in Nova's words (may be empty).

    Only classes with a positive request are checked, so a node over
    capacity still accepts changes that make it no worse.  ``limits``
    (Nova's scheduler keys, a mapping or an object with ``to_dict()`` such
    as Nova's SchedulerLimits) narrow free to ``limit - reserved - used``.
    Free is never negative, in the decision or in the words.
    """
    limit_by_rc = _limits_by_class(limits)
    problems = {}   # rc -> reason; reported in Nova's order of classes
    for rc, amount in requested.items():
        if amount <= 0:
            continue
        inv = inventories.get(rc)
        in_use = used.get(rc, 0)
        if inv is None:
            problems[rc] = _free_text(rc, 0, amount)
            continue
        free = max(0, _usage_bound(inv, limit_by_rc.get(rc)) - in_use)
        if amount > free:
            problems[rc] = _free_text(rc, free, amount)
            continue   # one reason per dimension: the amount is the first problem
        unit_problem = inv.unit_problem(amount)
        if unit_problem:
            problems[rc] = f"{rc}: {unit_problem}"
    return [problems[rc] for rc in sorted(problems, key=lambda r: (_ORDER.get(r, 9), r))]


def _usage_bound(inv: Inventory, limit: float | None) -> float:
    """The most of ``inv``'s class a node may hold: its capacity, narrowed to
    ``limit - reserved`` by a scheduler limit (None: no limit; may be a float)."""
    if limit is None:
        return inv.capacity
    return min(inv.capacity, limit - inv.reserved)


def usage_bounds(inventories: Mapping[str, Inventory], requested: Mapping[str, int],
                 limits: Any = None) -> dict[str, int]:
    """``{rc: most}``: for each class ``requested`` asks a positive amount of,
    the most the node's usage of it may reach with the request added (whole
    units).

    The usage half of :func:`amount_problems`: with ``inventories`` unchanged,
    ``requested`` passes its amount checks exactly when ``used[rc] +
    requested[rc] <= most`` for every class here (and its unit checks, which
    do not depend on usage).  A database can then check a claim decided on
    a stale record against the usage it holds now.
    """
    limit_by_rc = _limits_by_class(limits)
    bounds = {}
    for rc, amount in requested.items():
        if amount > 0:
            inv = inventories[rc]
            bounds[rc] = math.floor(_usage_bound(inv, limit_by_rc.get(rc)))
    return bounds


def _limits_by_class(limits: Any) -> dict[str, float]:
    """``{rc: limit}`` from scheduler ``limits``: None, a mapping, or an object
    with ``to_dict()`` (Nova's SchedulerLimits); InvalidInput otherwise."""
    if limits is None:
        return {}
    to_dict = getattr(limits, "to_dict", None)
    if callable(to_dict) and not isinstance(limits, Mapping):
        limits = to_dict()
    if not isinstance(limits, Mapping):
        raise InvalidInput(f"limits must be a mapping of Nova's scheduler keys "
                           f"({', '.join(sorted(LIMIT_KEYS))}) to numbers, or an object "
                           f"with to_dict(), got {type(limits).__name__} {limits!r:.80}")
    out = {}
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            continue   # e.g. numa_topology limits: handled by NUMA fitting
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise InvalidInput(f"limit {key!r} must be a finite number, got {value!r}")
        out[LIMIT_KEYS[key]] = value
    return out
