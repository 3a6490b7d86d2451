"""Where a claim's amounts of classes only a node's children offer land.

A pure function of the node's child providers, their usage and the request
(see :mod:`nova_lite.providers`).
"""

from collections.abc import Iterable, Mapping

import attrs

from nova_lite import validators as v
from nova_lite.model.fit import amount_problems
from nova_lite.providers import ChildProvider


@attrs.frozen
class Placement:
    """Where a request's child classes landed (``{child name: {rc: amount}}``),
    or every reason they cannot."""

    amounts: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict,
                                                           converter=v.frozen_mapping)
    reasons: tuple[str, ...] = ()


def place(children: Iterable[ChildProvider], usage: Mapping[str, Mapping[str, int]],
          requested: Mapping[str, int], required_traits: Iterable[str] = (),
          forbidden_traits: Iterable[str] = ()) -> Placement:
    """Land each class of ``requested`` on one child that offers it and has room.

    ``usage`` is each child's usage (``{name: {rc: amount}}``).  The child
    with the most free units of the class wins (ties: by name), so claims
    spread over a node's devices and fill each one exactly; an amount is
    never split over two children.  ``required_traits`` (those the node
    itself lacks) must be on the child chosen, ``forbidden_traits`` not.
    """
    required, forbidden = frozenset(required_traits), frozenset(forbidden_traits)
    taken: dict[str, dict[str, int]] = {}
    reasons = []
    candidates = sorted(children, key=lambda c: c.name)
    for rc, amount in sorted(requested.items()):
        if amount <= 0:
            continue
        best, best_free = None, -1
        # The claim's hot path: room is plain arithmetic; the words of a
        # refusal are built only when no child has room.
        for child in candidates:
            inv = child.inventories.get(rc)
            if inv is None or (required and not required <= child.traits) \
                    or (forbidden and forbidden & child.traits):
                continue
            used = usage.get(child.name, {}).get(rc, 0) + taken.get(child.name, {}).get(rc, 0)
            free = inv.capacity - used
            if amount <= free and free > best_free and inv.unit_problem(amount) is None:
                best, best_free = child, free
        if best is None:
            reasons.append(_no_room(candidates, usage, taken, rc, amount, required, forbidden))
            continue
        taken.setdefault(best.name, {})[rc] = amount
    return Placement(amounts=taken if not reasons else {}, reasons=tuple(reasons))


def _no_room(candidates: Iterable[ChildProvider], usage: Mapping[str, Mapping[str, int]],
             taken: Mapping[str, Mapping[str, int]], rc: str, amount: int,
             required: frozenset[str], forbidden: frozenset[str]) -> str:
    """Why no child of ``candidates`` takes ``amount`` of ``rc``, child by child."""
    why = []
    for child in candidates:
        inv = child.inventories.get(rc)
        if inv is None:
            continue
        missing = sorted(required - child.traits)
        present = sorted(forbidden & child.traits)
        if missing or present:
            why.append(f"{child.name}: lacks trait {', '.join(missing)}" if missing
                       else f"{child.name}: has forbidden trait {', '.join(present)}")
            continue
        used = usage.get(child.name, {}).get(rc, 0) + taken.get(child.name, {}).get(rc, 0)
        problems = amount_problems({rc: inv}, {rc: used}, {rc: amount})
        if problems:
            why.append(f"{child.name}: {problems[0]}")
    detail = "; ".join(why) if why else "no child provider offers it"
    return f"{rc}: no child provider has room for {amount} ({detail})"
