"""The decision: does a request fit a node, and where do its NUMA cells and PCI devices go.

Pure functions of (node record, request), as Nomad's ``AllocsFit``: the
node (a :class:`~nova_lite.objects.ComputeNode`) carries its inventories,
its usage, its owner and the driver's last report, so nothing else is
read.  The store calls :meth:`NodeClaims.decide` with the node as recorded
at the generation it commits against, so NUMA and PCI are claimed under
the same lock as everything else.
"""

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from nova_lite import pci_providers
from nova_lite.exception import ComputeResourcesUnavailable, PciClaimError
from nova_lite.model.fit import amount_problems, usage_bounds
from nova_lite.model.nested import place
from nova_lite.model.plans import MAX_AMOUNT, ClaimAsk, ClaimPlan, ClaimRequest
from nova_lite.model.usage import with_allocation
from nova_lite.numa import (
    NUMA_FIT_FAILED, fit_instance_to_host, numa_fit_problem, numa_usage_for)
from nova_lite.objects import (
    Allocation, ComputeNode, Instance, InstanceNUMATopology, PciRequest, nested_amounts)
from nova_lite.pci import PciStats
from nova_lite.providers import split_request
from nova_lite.traits import TraitRequest, flavor_traits
from nova_lite.validators import replaced, unchecked_maker


@attrs.frozen
class Decision:
    """Where a request landed, or why it cannot."""

    reasons: tuple[str, ...] = ()
    numa_topology: InstanceNUMATopology | None = None     # as placed
    pci_devices: tuple[str, ...] = ()
    #: ``{child provider name: {rc: amount}}`` of the classes only children offer.
    providers: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)


def owner_problems(node: ComputeNode, host: str) -> list[str]:
    """Why ``host`` may not claim on ``node`` (empty if it may)."""
    problems = []
    if node.host != host:
        problems.append(f"Node {node.nodename} is owned by host {node.host}, not {host}")
    if not node.reported:
        problems.append(f"Node {node.nodename} is no longer reported by the virt driver of "
                        f"host {node.host}")
    return problems


def decide(node: ComputeNode, requested: Mapping[str, int], limits: Any,
           numa_request: InstanceNUMATopology | None = None,
           pci_requests: Sequence[PciRequest] = (),
           extra_specs: Mapping[str, str] | None = None) -> Decision:
    """Check ``requested`` amounts plus NUMA and PCI against ``node``'s usage.

    ``node`` is the ComputeNode (inventories, usage and the driver's
    report); returns a :class:`Decision` with every failing reason.
    Classes only the node's child providers offer land on one child each
    (:func:`nova_lite.model.nested.place`); the traits the flavor's
    ``extra_specs`` require and the node itself lacks must be on that
    child, and those they forbid not.
    """
    resources = node.resources
    children = resources.providers if resources is not None else ()
    nested: Mapping[str, Mapping[str, int]] = {}
    nested_reasons: tuple[str, ...] = ()
    tree = None
    if children:
        requested, on_children = split_request(node.inventories, children, requested)
        if on_children:
            wanted = flavor_traits(extra_specs) if extra_specs else TraitRequest()
            tree = pci_providers.tree_of(node.nodename, resources)
            direct = pci_providers.direct_pci_problems(tree, on_children)
            if direct:
                on_children = {rc: n for rc, n in on_children.items()
                               if rc not in tree.classes}   # type: ignore[union-attr]
            landed = place(pci_providers.other_children(children, tree), node.provider_usage,
                           on_children, required_traits=wanted.required - node.traits,
                           forbidden_traits=wanted.forbidden)
            nested, nested_reasons = landed.amounts, tuple(direct) + landed.reasons
    reasons = amount_problems(node.inventories, node.usage, requested, limits)
    reasons.extend(nested_reasons)
    placed: InstanceNUMATopology | None = None
    numa_cells: set[int] | None = None
    pci = None
    if pci_requests:
        devices = resources.pci_devices if resources is not None else ()
        pci = PciStats(devices=devices, in_use=node.pci_in_use)
    if numa_request is not None:
        host = resources.numa_topology if resources is not None else None
        if host is None:
            reasons.append(f"{NUMA_FIT_FAILED}: the node reports no NUMA topology")
        else:
            kwargs: dict[str, Any] = dict(
                usage=numa_usage_for(host, node.numa_placements),
                cpu_allocation_ratio=node.inventory("VCPU").allocation_ratio,
                ram_allocation_ratio=node.inventory("MEMORY_MB").allocation_ratio,
                pci=pci, pci_requests=tuple(pci_requests))
            placed = fit_instance_to_host(host, numa_request, **kwargs)
            if placed is None:
                problem = numa_fit_problem(host, numa_request, **kwargs)
                reasons.append(problem if problem is not None else NUMA_FIT_FAILED)
            else:
                numa_cells = {c.host_cell for c in placed.cells if c.host_cell is not None}
    addresses: tuple[str, ...] = ()
    if pci is not None:
        try:
            addresses = pci.claim(tuple(pci_requests), numa_cells=numa_cells)
        except PciClaimError as exc:
            reasons.append(str(exc))
    if addresses and children:
        if tree is None:
            tree = pci_providers.tree_of(node.nodename, resources)
        if tree is not None:
            nested, problems = _land_pci(node, tree, addresses, nested)
            reasons.extend(problems)
    return Decision(reasons=tuple(reasons), numa_topology=placed, pci_devices=addresses,
                    providers=nested)


def _land_pci(node: ComputeNode, tree: "pci_providers.PciTree", addresses: Sequence[str],
              nested: Mapping[str, Mapping[str, int]]
              ) -> tuple[dict[str, dict[str, int]], list[str]]:
    """``nested`` with one unit on the provider of each device of
    ``addresses`` (as :class:`~nova_lite.pci.PciStats` picked them), and
    why a provider cannot take them (its records disagree with the devices
    in use: the claim is refused rather than go over)."""
    out = {name: dict(per) for name, per in nested.items()}
    problems: list[str] = []
    inventories = {child.name: child.inventories for child in tree.children}
    for name, per in sorted(pci_providers.pci_amounts(tree, addresses).items()):
        into = out.setdefault(name, {})
        for rc, n in per.items():
            used = node.provider_usage.get(name, {}).get(rc, 0) + into.get(rc, 0)
            found = amount_problems({rc: inventories[name][rc]}, {rc: used}, {rc: n})
            problems.extend(f"{name}: {problem}" for problem in found)
            into[rc] = into.get(rc, 0) + n
    return out, problems


def _with_nested(requested: Mapping[str, int], providers: Mapping[str, Mapping[str, int]]
                 ) -> Mapping[str, int]:
    """``requested`` plus the amounts on ``providers`` of classes it does not
    name (the PCI providers' units: an allocation's ``resources`` hold what
    its children hold too)."""
    extra: dict[str, int] = {}
    for per in providers.values():
        for rc, n in per.items():
            if rc not in requested:
                extra[rc] = extra.get(rc, 0) + n
    return {**requested, **extra} if extra else requested


def decide_claims(node: ComputeNode, host: str, nodename: str, asks: Sequence[ClaimAsk],
                  limits: Any) -> tuple[ClaimPlan, ...]:
    """The ClaimPlans of ``asks`` on ``node``, each decided with the ones before it counted.

    ``node``: the ComputeNode as recorded; ``host``: the claiming host.
    Raises :class:`~nova_lite.exception.ComputeResourcesUnavailable` with
    every reason of the first ask that does not fit (and so none is
    admitted).
    """
    problems = owner_problems(node, host)
    if problems:
        raise ComputeResourcesUnavailable(problems)
    plans = []
    for ask in asks:
        usage, requested = node.usage, ask.requested
        oversized = [rc for rc, n in requested.items()
                     if n > MAX_AMOUNT or usage.get(rc, 0) + n > MAX_AMOUNT]
        if oversized:
            raise ComputeResourcesUnavailable([
                f"{rc}: requested {requested[rc]} is more than nova-lite records ({MAX_AMOUNT})"
                for rc in sorted(oversized)])
        bounds = _amounts_only_bounds(node, ask, limits)
        if bounds is not None and _within(usage, requested, bounds):
            # The same test as decide's, read off the bounds the plan
            # carries anyway (see usage_bounds): no reason to give.
            decision = _AMOUNTS_FIT
        else:
            decision = decide(node, ask.requested, limits, ask.numa_request,
                              ask.instance.pci_requests, ask.flavor.extra_specs)
            if decision.reasons:
                raise ComputeResourcesUnavailable(decision.reasons)
            bounds = plan_bounds(node, ask, limits)
        migration, instance = ask.migration, ask.instance
        consumer, kind = (instance.uuid, "instance") if migration is None \
            else (migration.uuid, "migration")
        if decision is _AMOUNTS_FIT:
            # Amounts alone, each part a checked record's: nothing to convert.
            requested = ask.requested
            alloc = _amounts_allocation(
                consumer, kind, instance.uuid, node.uuid,
                requested if type(requested) is MappingProxyType
                else MappingProxyType(dict(requested)), ask.flavor)
        else:
            alloc = Allocation(
                consumer_uuid=consumer, consumer_type=kind, instance_uuid=instance.uuid,
                node_uuid=node.uuid, resources=_with_nested(ask.requested, decision.providers),
                flavor=ask.flavor, numa_topology=decision.numa_topology,
                pci_devices=decision.pci_devices, providers=decision.providers)
        placed = None
        if migration is None and decision is _AMOUNTS_FIT and not instance.pci_devices:
            placed = _placed(instance, host, nodename)
        elif migration is None:
            # Only what the decision placed is copied in (a copy checks each
            # field it is given): NUMA cells if any, and the PCI devices if
            # the instance had any or gets some.
            placing: dict[str, Any] = {"host": host, "node": nodename}
            if decision.numa_topology is not None:
                placing["numa_topology"] = decision.numa_topology
            if decision.pci_devices or instance.pci_devices:
                placing["pci_devices"] = decision.pci_devices
            placed = replaced(instance, **placing)
        plans.append(ClaimPlan(allocation=alloc, instance=placed, migration=migration,
                               bounds=bounds))
        if len(plans) < len(asks):
            node = with_allocation(node, alloc)
    return tuple(plans)


#: The decision of a request of amounts alone that fits: nothing to place.
_AMOUNTS_FIT = Decision()
#: ``_place_checked(source, host, node)``: ``source`` (an Instance) with its
#: host and node set to names that passed the Instance's checks before.
_place_checked = unchecked_maker(
    Instance, "_place_checked", ("source", "host", "node"),
    {f.name: (f.name if f.name in ("host", "node") else f"source.{f.name}")
     for f in attrs.fields(Instance)})
#: The ``(host, node)`` names an Instance was placed on, so checked, lately.
_CHECKED_PLACES: set[tuple[str, str]] = set()
#: The most pairs :data:`_CHECKED_PLACES` keeps (all are dropped when it is full).
_CHECKED_PLACES_MOST = 4096


def _placed(instance: Instance, host: str, nodename: str) -> Instance:
    """``instance`` on ``host``/``nodename``: ``replaced(instance, host=host,
    node=nodename)``, the names' checks run once per pair (they depend on
    the names alone, and every other field is the checked record's)."""
    place = (host, nodename)
    if place in _CHECKED_PLACES:
        return _place_checked(instance, host, nodename)
    placed = replaced(instance, host=host, node=nodename)
    if len(_CHECKED_PLACES) >= _CHECKED_PLACES_MOST:
        _CHECKED_PLACES.clear()
    _CHECKED_PLACES.add(place)
    return placed


#: ``_amounts_allocation(consumer_uuid, consumer_type, instance_uuid,
#: node_uuid, resources, flavor)``: the Allocation of a request of amounts
#: alone, from values in the form its converters give (``resources`` a
#: read-only mapping no one changes), without running them again.
_amounts_allocation = unchecked_maker(
    Allocation, "_amounts_allocation",
    ("consumer_uuid", "consumer_type", "instance_uuid", "node_uuid", "resources", "flavor"),
    {"consumer_uuid": "consumer_uuid", "consumer_type": "consumer_type",
     "instance_uuid": "instance_uuid", "node_uuid": "node_uuid", "resources": "resources",
     "flavor": "flavor", "numa_topology": "None", "pci_devices": "()",
     "providers": "_NO_PROVIDERS"},
    {"_NO_PROVIDERS": nested_amounts({})})


#: ``{(id(inventories), id(requested), children): (inventories, requested,
#: bounds)}``: the bounds of a plain request without scheduler limits, for as
#: long as a node's records keep one inventories mapping (each claim copies
#: the record with its usage alone changed) and a flavor one request
#: (:meth:`~nova_lite.model.plans.ClaimAsk.build` caches it).  The entries
#: hold their keys' objects, so an id is never another object's.
_PLAIN_BOUNDS: dict[tuple[int, int, bool], tuple[Any, Any, Mapping[str, int] | None]] = {}
#: The most entries of :data:`_PLAIN_BOUNDS` (all are dropped when it is full).
_PLAIN_BOUNDS_MOST = 256


def _amounts_only_bounds(node: ComputeNode, ask: ClaimAsk, limits: Any
                         ) -> Mapping[str, int] | None:
    """:func:`plan_bounds` of a request that asks the node only for amounts of
    classes it offers itself, in whole units of its inventories' steps (no
    NUMA cell, no PCI device, nothing only a child provider offers); None for
    any other.  Read-only: without limits, one mapping serves every claim of
    the same request on the same inventories."""
    if ask.numa_request is not None or ask.instance.pci_requests:
        return None
    inventories, requested = node.inventories, ask.requested
    resources = node.resources
    children = resources is not None and bool(resources.providers)
    if limits is None:
        key = (id(inventories), id(requested), children)
        hit = _PLAIN_BOUNDS.get(key)
        if hit is not None and hit[0] is inventories and hit[1] is requested:
            return hit[2]
    bounds: Mapping[str, int] | None = None
    if all(n <= 0 or (rc in inventories and inventories[rc].unit_problem(n) is None)
           for rc, n in requested.items()):
        found = plan_bounds(node, ask, limits)
        bounds = None if found is None else MappingProxyType(found)
    if limits is None:
        if len(_PLAIN_BOUNDS) >= _PLAIN_BOUNDS_MOST:
            _PLAIN_BOUNDS.clear()
        _PLAIN_BOUNDS[key] = (inventories, requested, bounds)
    return bounds


def _within(usage: Mapping[str, int], requested: Mapping[str, int],
            bounds: Mapping[str, int]) -> bool:
    """Whether ``requested``, whose units :func:`_amounts_only_bounds` checked,
    passes :func:`~nova_lite.model.fit.amount_problems` on a node of
    ``usage``: each positive amount keeps its class's usage within the bound."""
    for rc, n in requested.items():
        if n > 0 and usage.get(rc, 0) + n > bounds[rc]:
            return False
    return True


def plan_bounds(node: ComputeNode, ask: ClaimAsk, limits: Any) -> dict[str, int] | None:
    """The plan's ``bounds`` (:class:`~nova_lite.model.plans.ClaimPlan`): for a request
    that depends on the node only through its usage of each class (no NUMA
    cell, no PCI device to place), the most each class may hold with it."""
    if ask.numa_request is not None or ask.instance.pci_requests:
        return None
    resources = node.resources
    if resources is not None and resources.providers \
            and any(rc not in node.inventories for rc in ask.requested):
        return None   # a child provider's room is not a bound on the node's usage
    bounds = usage_bounds(node.inventories, ask.requested, limits)
    return {rc: min(most, MAX_AMOUNT) for rc, most in bounds.items()}


def _asks(value: Iterable[ClaimAsk]) -> tuple[ClaimAsk, ...]:
    return tuple(value)


@attrs.frozen
class NodeClaims:
    """The claims of one transaction on one node: all of them are admitted or none.

    ``host`` is the claiming compute service, ``nodename`` the node,
    ``asks`` one :class:`~nova_lite.model.plans.ClaimAsk` per claim (in
    order) and ``limits`` the scheduler's limits (Nova's keys), or None.
    """

    host: str
    nodename: str
    asks: tuple[ClaimAsk, ...] = attrs.field(converter=_asks)
    limits: Any = None

    @property
    def requests(self) -> list[ClaimRequest]:
        """What the store checks under each instance row's lock, one per ask."""
        return [ClaimRequest(ask.instance.uuid, ask.migration) for ask in self.asks]

    def decide(self, node: ComputeNode) -> tuple[ClaimPlan, ...]:
        """:func:`decide_claims` of these claims on ``node``: one plan per ask."""
        return decide_claims(node, self.host, self.nodename, self.asks, self.limits)
