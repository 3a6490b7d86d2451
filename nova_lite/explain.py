"""Why a node's free amount is what it is: the sum, line by line.

For every resource class of one compute node:

- the total the driver reported, minus reserved (and the option or driver
  report that set it), times the allocation ratio (and where it came
  from) gives ``capacity = floor((total - reserved) x ratio)``;
- then every consumer holding some of it, with its amount: each instance
  with its flavor and the driver's overhead, each in-progress migration
  (incoming, or the instance of an outgoing one), and anything held by a
  consumer that is deleted or gone;
- then ``free`` (never negative) and ``over``.

It ends with culprits (:class:`Culprit`) and a verdict.  Everything is
computed from the records (:func:`explain`, a pure function); the
hypervisor's guests are compared only when the caller gives them (a
driver is available): without them the explanation says so.

:func:`explain_node` is the public entry: it reads the records of one node
from a :class:`~nova_lite.db.Store` and calls :func:`explain`.  Amounts are
in each class's unit: VCPU and PCPU count CPUs, MEMORY_MB is MiB, DISK_GB
is GiB, custom classes count units.
"""

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import findings, reports
from nova_lite.compute import accounting
from nova_lite.exception import InvalidInput, NodeNotFound
from nova_lite.objects import (
    ZERO_OVERHEAD, Allocation, ComputeNode, Instance, InstanceNUMATopology, Migration)
from nova_lite.resources import Inventory

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.db.snapshot import RecordsSnapshot
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

# The culprit kinds, from the one vocabulary of nova_lite.findings.
STALE_ALLOCATION = findings.STALE_ALLOCATION
UNKNOWN_GUEST = findings.UNKNOWN_GUEST
OVER_COMMIT = findings.OVER_COMMIT
SHRUNKEN_HOST = findings.SHRUNKEN_HOST
MISSING_ALLOCATION = findings.MISSING_ALLOCATION
#: Every culprit kind, in the order they are reported.
CULPRIT_KINDS = findings.CULPRIT_KINDS

#: Roles of a consumer line.
INSTANCE, OUTGOING, INCOMING, SAME_NODE_RESIZE, STALE, MISSING = (
    "instance", "outgoing migration", "incoming migration", "resize on this node", "stale",
    "missing allocation")
ROLES = (INSTANCE, OUTGOING, INCOMING, SAME_NODE_RESIZE, STALE, MISSING)

#: Note used when no guest list was given.
NO_DRIVER_NOTE = ("guests were not compared: no driver was used, this explanation comes "
                  "from the records alone")


@attrs.frozen
class ConsumerLine:
    """One consumer's share of one resource class on the node.

    ``amount`` is what its allocation holds (0 for a live instance that
    holds none); ``flavor_amount`` what its flavor asks for and
    ``overhead`` the rest (the driver's overhead at claim time).
    ``state`` is the instance's vm_state or the migration's status (None
    when the consumer has no record).  ``stale`` is True when no live
    record backs the allocation; ``detail`` says why, in words.
    """

    consumer_uuid: str
    consumer_type: str
    instance_uuid: str
    role: str = attrs.field(validator=attrs.validators.in_(ROLES))
    flavor: str
    amount: int
    flavor_amount: int
    overhead: int
    state: str | None = None
    stale: bool = False
    detail: str = ""


@attrs.frozen
class ResourceExplanation:
    """The sum of one resource class of one node, line by line.

    ``detected`` is the total the driver reported at the last audit (None
    if it reported none); ``total``, ``reserved`` and ``ratio`` the
    recorded inventory; ``reserved_sources`` and ``ratio_source`` say which
    option or report set them; ``capacity`` is
    ``floor((total - reserved) x ratio)`` (``capacity_formula`` shows it);
    ``consumers`` hold ``used`` between them; ``free`` = max(0, capacity -
    used), never negative, and ``over`` = max(0, used - capacity).
    ``provider`` names the child provider the class is on
    (:mod:`nova_lite.providers`; None: the node itself).
    """

    resource_class: str
    detected: int | None
    total: int
    reserved: int
    reserved_sources: tuple[str, ...]
    ratio: float | None
    ratio_source: str
    capacity: int
    capacity_formula: str
    consumers: tuple[ConsumerLine, ...]
    used: int
    free: int
    over: int
    notes: tuple[str, ...] = ()
    provider: str | None = None


def _culprit_resources(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


@attrs.frozen
class Culprit:
    """One reason free is not what the records of live consumers say.

    ``kind`` is one of :data:`CULPRIT_KINDS`; ``subject`` names the
    consumer, guest or node; ``resources`` maps class -> amount involved
    (held by a stale allocation, or held beyond capacity).
    """

    kind: str = attrs.field(validator=attrs.validators.in_(CULPRIT_KINDS))
    subject: str
    resources: dict[str, int] = attrs.field(factory=dict, converter=_culprit_resources)
    detail: str = ""


@attrs.frozen
class NodeExplanation:
    """Why one node's free amounts are what they are.

    ``guests_compared`` is False when no guest list was given (no driver):
    ``note`` then says so and no :data:`UNKNOWN_GUEST` can be named.
    ``verdict`` is ``"consistent"`` or names every culprit.
    """

    host: str
    nodename: str
    node_uuid: str
    generation: int
    reported: bool
    resources: tuple[ResourceExplanation, ...]
    culprits: tuple[Culprit, ...]
    verdict: str
    guests_compared: bool = False
    note: str | None = None

    @property
    def consistent(self) -> bool:
        """True when no culprit was found."""
        return not self.culprits

    def resource(self, rc: str) -> ResourceExplanation:
        """The :class:`ResourceExplanation` of ``rc`` (KeyError if the node has none)."""
        for line in self.resources:
            if line.resource_class == rc:
                return line
        raise KeyError(rc)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (with ``consistent``)."""
        data = attrs.asdict(self)
        data["consistent"] = self.consistent
        return data


def _origin(settings: "Settings", field: str) -> str:
    """``"the default"`` or ``"configuration"`` for a Settings field's value."""
    default = attrs.fields_dict(type(settings))[field].default
    return "the default" if getattr(settings, field) == default else "configuration"


def _reserved_sources(rc: str, inv: Inventory | None, node: ComputeNode,
                      settings: "Settings | None") -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Which option or report set ``inv.reserved``, and a note if it differs now."""
    sources, notes = [], []
    configured = 0
    option = reports._OPTIONS.get(rc, (None, None))[0]   # noqa: SLF001 - one shared table
    if option is not None and settings is not None:
        value = getattr(settings, option)
        configured = math.ceil(value / 1024) if rc == reports.DISK_GB else value
        unit = " (MB, rounded up to whole GB)" if rc == reports.DISK_GB else ""
        sources.append(f"{option} = {value}{unit} from {_origin(settings, option)}")
    driver = (node.resources.reserved if node.resources is not None else {}).get(rc, 0)
    if driver:
        sources.append(f"the driver's report reserves {driver}")
    expected = configured + driver
    if inv is not None and settings is not None and inv.reserved != expected:
        if expected > inv.total and inv.reserved == inv.total:
            notes.append(f"reserved {expected} is more than the total {inv.total}: all of it "
                         "is reserved (the host shrank below its reservation?)")
        else:
            notes.append(f"recorded reserved {inv.reserved} differs from what the settings "
                         f"and the driver give now ({expected}): the next audit records it")
    if not sources:
        sources.append("nothing reserves any")
    return tuple(sources), tuple(notes)


def _ratio_source(rc: str, inv: Inventory | None,
                  settings: "Settings | None") -> tuple[str, tuple[str, ...]]:
    """Where the ratio comes from, and a note if the settings now give another."""
    kind = reports._OPTIONS.get(rc, (None, None))[1]   # noqa: SLF001 - one shared table
    if kind is None:
        if inv is not None and inv.allocation_ratio != 1:
            # A custom class with a ratio of its own: a provider.yaml file's.
            return (f"{float(inv.allocation_ratio)} as recorded: this class's own "
                    "inventory (provider.yaml) sets it"), ()
        return "fixed at 1.0: this class is never over-committed", ()
    if settings is None:
        return "recorded inventory (no settings given)", ()
    explicit = getattr(settings, f"{kind}_allocation_ratio")
    if explicit is not None:
        source = f"{kind}_allocation_ratio = {explicit} from configuration"
    else:
        field = f"initial_{kind}_allocation_ratio"
        source = (f"{field} = {getattr(settings, field)} from {_origin(settings, field)} "
                  f"({kind}_allocation_ratio is unset)")
    effective = settings.allocation_ratio(kind)
    notes: tuple[str, ...] = ()
    if inv is not None and inv.allocation_ratio != effective:
        notes = (f"recorded ratio {float(inv.allocation_ratio)} differs from the settings' "
                 f"{float(effective)}: the next audit records it",)
    return source, notes


def _flavor_amounts(alloc_or_instance: Allocation | Instance,
                    numa: InstanceNUMATopology | None) -> dict[str, int]:
    return accounting.requested_resources(alloc_or_instance.flavor, ZERO_OVERHEAD, numa)


def _why_stale(alloc: Allocation, node: ComputeNode, instances: Mapping[str, Instance],
               migrations: Mapping[str, Migration]) -> tuple[str | None, str | None]:
    """Why ``alloc`` is stale (None if a live record backs it), and the consumer's state."""
    if alloc.consumer_type == "migration":
        mig = migrations.get(alloc.consumer_uuid)
        if mig is None:
            return "no migration record exists", None
        if not mig.in_progress:
            return f"its migration is {mig.status}", mig.status
        return None, mig.status
    inst = instances.get(alloc.consumer_uuid)
    if inst is None:
        return "no instance record exists (the consumer is gone)", None
    if not inst.holds_resources:
        return f"the instance is {inst.vm_state}", inst.vm_state
    if (inst.host, inst.node) != (node.host, node.nodename):
        return f"the instance is recorded on {inst.host}/{inst.node}", inst.vm_state
    return None, inst.vm_state


def _role(alloc: Allocation, node: ComputeNode, instances: Mapping[str, Instance],
          migrations: Mapping[str, Migration]) -> tuple[str, str]:
    """``(role, detail)`` of a live allocation."""
    if alloc.consumer_type == "migration":
        mig = migrations[alloc.consumer_uuid]
        if mig.same_node:
            return SAME_NODE_RESIZE, (f"{mig.migration_type} of instance {mig.instance_uuid} "
                                      f"to {mig.new_flavor.name} on this node ({mig.status})")
        return INCOMING, (f"{mig.migration_type} of instance {mig.instance_uuid} from "
                          f"{mig.source_compute}/{mig.source_node} ({mig.status})")
    inst = instances[alloc.consumer_uuid]
    for mig in migrations.values():
        if mig.in_progress and mig.instance_uuid == inst.uuid and not mig.same_node and \
                (mig.source_compute, mig.source_node) == (node.host, node.nodename):
            return OUTGOING, (f"{mig.migration_type} {mig.uuid} to {mig.dest_compute}/"
                              f"{mig.dest_node} ({mig.status}): the source keeps "
                              f"{inst.flavor.name} until it is confirmed")
    return INSTANCE, f"project {inst.project_id or '-'}"


def _consumer_lines(
        node: ComputeNode, allocations: Iterable[Allocation], instances: Mapping[str, Instance],
        migrations: Mapping[str, Migration],
) -> tuple[dict[tuple[str | None, str], list[ConsumerLine]], list[Culprit]]:
    """``({(provider, rc): [ConsumerLine]}, [Culprit])`` for the node's allocations and
    live instances (``provider``: a child provider's name, None for the node itself)."""
    per_rc: dict[tuple[str | None, str], list[ConsumerLine]] = {}
    culprits: list[Culprit] = []
    held: set[str] = set()
    for alloc in sorted(allocations, key=lambda a: (a.instance_uuid, a.consumer_uuid)):
        held.add(alloc.consumer_uuid)
        why, state = _why_stale(alloc, node, instances, migrations)
        if why is not None:
            role, detail = STALE, f"held but {why}"
            culprits.append(Culprit(STALE_ALLOCATION, alloc.consumer_uuid,
                                    dict(alloc.resources),
                                    f"the {alloc.consumer_type} {alloc.consumer_uuid} holds "
                                    f"{_amounts(alloc.resources)} but {why}"))
        else:
            role, detail = _role(alloc, node, instances, migrations)
        flavor = _flavor_amounts(alloc, alloc.numa_topology)
        for where, rc, amount in _held(alloc):
            per_rc.setdefault((where, rc), []).append(ConsumerLine(
                consumer_uuid=alloc.consumer_uuid, consumer_type=alloc.consumer_type,
                instance_uuid=alloc.instance_uuid, role=role, flavor=alloc.flavor.name,
                amount=amount, flavor_amount=flavor.get(rc, 0),
                overhead=amount - flavor.get(rc, 0), state=state, stale=why is not None,
                detail=detail))
    # ``instances`` holds the whole host's: those of this node are picked
    # first, so a host of many nodes is not read once per node in full.
    here = [i for i in instances.values()
            if i.node == node.nodename and i.host == node.host and i.uuid not in held]
    for inst in sorted(here, key=lambda i: i.uuid):
        if not inst.holds_resources:
            continue
        flavor = _flavor_amounts(inst, inst.numa_topology)
        culprits.append(Culprit(MISSING_ALLOCATION, inst.uuid, flavor,
                                f"the instance ({inst.flavor.name}, {inst.vm_state}) is "
                                "recorded on this node but holds nothing: the next audit "
                                "restores it"))
        for rc, amount in flavor.items():
            per_rc.setdefault((None, rc), []).append(ConsumerLine(
                consumer_uuid=inst.uuid, consumer_type="instance", instance_uuid=inst.uuid,
                role=MISSING, flavor=inst.flavor.name, amount=0, flavor_amount=amount,
                overhead=0, state=inst.vm_state, detail="recorded here but holds nothing"))
    return per_rc, culprits


def _held(alloc: Allocation) -> list[tuple[str | None, str, int]]:
    """``(provider, rc, amount)`` of what ``alloc`` holds: on the node itself
    (provider None) and on each child provider it names."""
    on_children: dict[str, int] = {}
    out: list[tuple[str | None, str, int]] = []
    for name, per in sorted(alloc.providers.items()):
        for rc, amount in sorted(per.items()):
            on_children[rc] = on_children.get(rc, 0) + amount
            if amount:
                out.append((name, rc, amount))
    for rc, amount in alloc.resources.items():
        own = amount - on_children.get(rc, 0)
        if own:
            out.append((None, rc, own))
    return out


def _amounts(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items()) if n) or "nothing"


def _capacity_culprit(rc: str, inv: Inventory | None, used: int, capacity: int,
                      ratio_source: str) -> Culprit | None:
    """SHRUNKEN_HOST or OVER_COMMIT for a class held beyond capacity (None if not)."""
    over = used - capacity
    if over <= 0 or inv is None:
        return None
    physical = inv.total - inv.reserved
    if used <= physical:
        return Culprit(OVER_COMMIT, rc, {rc: over},
                       f"{rc}: {used} held, the host offers {physical} after reserved, but "
                       f"the ratio {float(inv.allocation_ratio)} ({ratio_source}) leaves "
                       f"capacity {capacity}: {over} over")
    return Culprit(SHRUNKEN_HOST, rc, {rc: over},
                   f"{rc}: {used} held but capacity is {capacity} (total {inv.total}, "
                   f"reserved {inv.reserved}, ratio {float(inv.allocation_ratio)}): the "
                   f"reported total dropped (or reserved grew, or the ratio was lowered) "
                   f"under consumers admitted before; {over} over")


def unknown_guests(host: str, guests: Iterable[str], instances: Mapping[str, Instance],
                   migrations: Mapping[str, Migration]) -> list[Culprit]:
    """A :data:`UNKNOWN_GUEST` Culprit per guest of ``host`` no live record backs.

    ``guests``: guest uuids the driver lists; ``instances``/``migrations``:
    ``{uuid: record}`` holding at least the host's live instances and its
    in-progress migrations (a guest of a moving instance is backed).
    """
    backed = {i.uuid for i in instances.values() if i.holds_resources and i.host == host}
    moving = {m.instance_uuid for m in migrations.values()
              if m.in_progress and host in (m.source_compute, m.dest_compute)}
    found = []
    for guest in sorted(set(guests) - backed - moving):
        inst = instances.get(guest)
        why = ("no instance record exists" if inst is None else
               f"its record is {inst.vm_state}" if not inst.holds_resources else
               f"its record is on {inst.host}/{inst.node}")
        found.append(Culprit(UNKNOWN_GUEST, guest, {},
                             f"the hypervisor of host {host} has guest {guest} but {why}: "
                             "what it uses is not accounted"))
    return found


def _verdict(culprits: Sequence[Culprit]) -> str:
    if not culprits:
        return "consistent"
    words = {STALE_ALLOCATION: "stale allocation", UNKNOWN_GUEST: "unknown guest",
             SHRUNKEN_HOST: "shrunken host", OVER_COMMIT: "over-commit by ratio",
             MISSING_ALLOCATION: "missing allocation"}
    parts = [f"{words[c.kind]} {c.subject}" + (f" ({_amounts(c.resources)})"
                                                if c.resources else "") for c in culprits]
    return f"{len(culprits)} culprit(s): " + "; ".join(parts)


def node_culprits(node: ComputeNode, allocations: Iterable[Allocation],
                  instances: Mapping[str, Instance], migrations: Mapping[str, Migration],
                  settings: "Settings | None" = None,
                  guests: Iterable[str] | None = None) -> tuple[Culprit, ...]:
    """The culprits of :func:`explain` (its ``culprits``, in its order) with
    none of its per-class breakdown: what the leak search of every pass
    needs of each node.  A class is looked at further only when it is held
    beyond its capacity.  Same arguments as :func:`explain`."""
    instances = dict(instances)
    migrations = dict(migrations)
    _, culprits = _consumer_lines(node, allocations, instances, migrations)
    capacity_culprits = []
    for rc in sorted(node.inventories):
        inv = node.inventories[rc]
        capacity, used = node.capacity(rc), node.used(rc)
        if used <= capacity:
            continue
        found = _capacity_culprit(rc, inv, used, capacity, _ratio_source(rc, inv, settings)[0])
        if found is not None:
            capacity_culprits.append(found)
    report = node.resources
    for child in sorted(report.providers if report is not None else (), key=lambda c: c.name):
        held = node.provider_usage.get(child.name, {})
        for rc in sorted(child.inventories):
            inv = child.inventories[rc]
            found = _capacity_culprit(rc, inv, held.get(rc, 0), inv.capacity, _CHILD_SOURCE)
            if found is not None:
                capacity_culprits.append(attrs.evolve(
                    found, subject=f"{child.name}/{found.subject}"))
    if guests is not None:
        culprits.extend(unknown_guests(node.host, guests, instances, migrations))
    culprits.extend(capacity_culprits)
    culprits.sort(key=lambda c: CULPRIT_KINDS.index(c.kind))
    return tuple(culprits)


def explain(node: ComputeNode, allocations: Iterable[Allocation], instances: Mapping[str, Instance],
            migrations: Mapping[str, Migration], settings: "Settings | None" = None,
            guests: Iterable[str] | None = None) -> NodeExplanation:
    """The :class:`NodeExplanation` of ``node`` from records alone (pure).

    ``node``: the :class:`~nova_lite.objects.ComputeNode` as recorded;
    ``allocations``: its Allocation records; ``instances``: ``{uuid:
    Instance}`` holding at least the consumers of those allocations and
    the live instances of the node's host (deleted ones included; a
    consumer missing here has no record); ``migrations``: ``{uuid:
    Migration}`` holding the migrations of those consumers and the
    in-progress ones touching the node; ``settings``: the Settings whose
    option names and values explain reserved and ratios (None: only the
    recorded inventory is shown); ``guests``: the uuids of the guests the
    hypervisor lists, or None when no driver was used.
    """
    allocations = tuple(allocations)
    instances = dict(instances)
    migrations = dict(migrations)
    per_rc, _ = _consumer_lines(node, allocations, instances, migrations)
    report = node.resources
    detected = report.totals() if report is not None else {}
    resources = []
    own_classes = {rc for where, rc in per_rc if where is None}
    for rc in sorted(set(node.inventories) | set(detected) | set(node.usage) | own_classes):
        inv = node.inventories.get(rc)
        sources, reserved_notes = _reserved_sources(rc, inv, node, settings)
        ratio_source, ratio_notes = _ratio_source(rc, inv, settings)
        capacity, used = node.capacity(rc), node.used(rc)
        lines = tuple(per_rc.get((None, rc), ()))
        summed = sum(line.amount for line in lines)
        notes = list(reserved_notes) + list(ratio_notes)
        if inv is None:
            formula = "no inventory: capacity 0"
        else:
            formula = (f"floor(({inv.total} - {inv.reserved}) x {float(inv.allocation_ratio)})"
                       f" = {inv.capacity}")
            if capacity != inv.capacity:
                notes.append(f"the driver's reserved units in use count as used, not also as "
                             f"reserved: capacity {capacity}")
        if summed != used:
            notes.append(f"the node record counts {used} used but its allocations sum to "
                         f"{summed}")
        if rc in detected and inv is not None and detected[rc] != inv.total:
            notes.append(f"the driver reported {detected[rc]} but the inventory records "
                         f"{inv.total}")
        resources.append(ResourceExplanation(
            resource_class=rc, detected=detected.get(rc), total=inv.total if inv else 0,
            reserved=inv.reserved if inv else 0, reserved_sources=sources,
            ratio=float(inv.allocation_ratio) if inv else None, ratio_source=ratio_source,
            capacity=capacity, capacity_formula=formula, consumers=lines, used=used,
            free=node.free(rc), over=node.over(rc), notes=tuple(notes)))
    resources.extend(_children_explained(node, per_rc))
    # One rule for the culprits, whoever asks: the leak search asks for them alone.
    culprits = node_culprits(node, allocations, instances, migrations, settings, guests)
    return NodeExplanation(
        host=node.host, nodename=node.nodename, node_uuid=node.uuid,
        generation=node.generation, reported=node.reported, resources=tuple(resources),
        culprits=tuple(culprits), verdict=_verdict(culprits),
        guests_compared=guests is not None, note=None if guests is not None else NO_DRIVER_NOTE)


#: Where a child provider's reserved amount and ratio come from.
_CHILD_SOURCE = "the driver's report of the child provider"


def _children_explained(node: ComputeNode,
                        per_rc: Mapping[tuple[str | None, str], Sequence[ConsumerLine]]
                        ) -> list[ResourceExplanation]:
    """One ResourceExplanation per class of each child provider as reported,
    and per class an allocation holds on a child no longer reported."""
    report = node.resources
    children = {c.name: c for c in report.providers} if report is not None else {}
    keys: set[tuple[str, str]] = {(child.name, rc) for child in children.values()
                                  for rc in child.inventories}
    keys |= {(where, rc) for where, rc in per_rc if where is not None}
    out = []
    for name, rc in sorted(keys):
        child = children.get(name)
        inv = child.inventories.get(rc) if child is not None else None
        lines = tuple(per_rc.get((name, rc), ()))
        used = node.provider_usage.get(name, {}).get(rc, 0)
        summed = sum(line.amount for line in lines)
        capacity = inv.capacity if inv is not None else 0
        notes = []
        if child is None:
            notes.append(f"the driver no longer reports child provider {name}")
        if summed != used:
            notes.append(f"the records count {used} used but its allocations sum to {summed}")
        out.append(ResourceExplanation(
            resource_class=rc, detected=inv.total if inv is not None else None,
            total=inv.total if inv is not None else 0,
            reserved=inv.reserved if inv is not None else 0,
            reserved_sources=(_CHILD_SOURCE,) if inv is not None else (),
            ratio=float(inv.allocation_ratio) if inv is not None else None,
            ratio_source=_CHILD_SOURCE if inv is not None else "no inventory",
            capacity=capacity,
            capacity_formula=(f"floor(({inv.total} - {inv.reserved}) x "
                              f"{float(inv.allocation_ratio)}) = {inv.capacity}"
                              if inv is not None else "no inventory: capacity 0"),
            consumers=lines, used=used, free=max(0, capacity - used),
            over=max(0, used - capacity), notes=tuple(notes), provider=name))
    return out


def find_node(store: "Store", node_ident: str, host: str | None = None) -> ComputeNode:
    """The node record named ``node_ident`` (name or uuid), on ``host`` if given.

    Raises :class:`NodeNotFound` naming it (and the known nodes) or
    :class:`InvalidInput` if the name is on several hosts.
    """
    if not isinstance(node_ident, str) or not node_ident.strip():
        raise InvalidInput(f"node must be a node name or uuid, got {node_ident!r}")
    nodes = store.get_compute_nodes(host)
    found = [n for n in nodes if node_ident in (n.nodename, n.uuid)]
    if not found:
        raise NodeNotFound(node_ident, host)
    if len(found) > 1:
        raise InvalidInput(f"Compute node {node_ident!r} exists on several hosts "
                           f"({', '.join(sorted(n.host for n in found))}); give its host")
    return found[0]


def gather(store: "Store",
           node: ComputeNode) -> tuple[list[Allocation], dict[str, Instance], dict[str, Migration]]:
    """``(allocations, instances, migrations)`` :func:`explain` needs for ``node``,
    read at one moment (:meth:`~nova_lite.db.Store.records_snapshot`)."""
    return gather_from(store.records_snapshot(node.host), node)


def gather_from(
        snap: "RecordsSnapshot", node: ComputeNode,
) -> tuple[list[Allocation], dict[str, Instance], dict[str, Migration]]:
    """``(allocations, instances, migrations)`` for ``node`` from a
    :class:`~nova_lite.db.snapshot.RecordsSnapshot` that holds its host."""
    allocations = snap.allocations_on(node.uuid)
    held = {a.consumer_uuid for a in allocations} | {a.instance_uuid for a in allocations}
    instances = {i.uuid: i for i in snap.holding_instances_of(node.host)}
    instances.update((u, snap.instances[u]) for u in held if u in snap.instances)
    migrations = {m.uuid: m for m in snap.moves_touching(node.host, node.nodename)}
    migrations.update((u, snap.migrations[u]) for u in held if u in snap.migrations)
    return allocations, instances, migrations


def explain_node(store: "Store", node_ident: str, settings: "Settings | None",
                 host: str | None = None, guests: Iterable[str] | None = None) -> NodeExplanation:
    """Explain one node's free amounts from the records of ``store``.

    ``node_ident`` is a node name or uuid (``host`` narrows a name found on
    several hosts); ``settings`` explain reserved amounts and ratios;
    ``guests`` (optional) are the guest uuids a driver lists on the node's
    host.  Reads only.  Returns a :class:`NodeExplanation`; raises
    :class:`NodeNotFound` or :class:`InvalidInput` naming a bad node.
    """
    node = find_node(store, node_ident, host)
    allocations, instances, migrations = gather(store, node)
    result = explain(node, allocations, instances, migrations, settings, guests)
    for culprit in result.culprits:
        LOG.info("Node %s/%s: %s %s: %s", node.host, node.nodename, culprit.kind,
                 culprit.subject, culprit.detail)
    return result


__all__ = ["explain_node", "explain", "find_node", "node_culprits", "gather", "gather_from",
           "unknown_guests", "NodeExplanation",
           "ResourceExplanation", "ConsumerLine", "Culprit", "CULPRIT_KINDS",
           "STALE_ALLOCATION", "UNKNOWN_GUEST", "OVER_COMMIT", "SHRUNKEN_HOST",
           "MISSING_ALLOCATION"]
