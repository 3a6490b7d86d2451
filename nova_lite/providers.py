"""Child resource providers: devices a node accounts for apart from itself.

A compute node is the root provider of a tree.  A device whose capacity is
accounted apart from the node's own (one physical GPU with its ``VGPU``
inventory, a PCI device or pool) is a :class:`ChildProvider` the driver
reports in ``NodeResources.providers``, with
inventories and traits of its own, as Placement's nested providers are.

A claim that asks for a class the node itself does not offer lands that
amount on one child that offers it (:func:`nova_lite.model.nested.place`): the one with the most
room, so claims spread over a node's GPUs and fill each exactly.  An
allocation records where each such amount went
(``Allocation.providers``, by child name), and a
node's usage of each child is the sum of those
(``ComputeNode.provider_usage``).  Each child has a
generation of its own in the records (``resource_providers``), moved by
every change of its inventories, traits or allocations.
"""

import functools
import uuid as uuid_mod
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput
from nova_lite.resources import Inventory, validate_resource_class
from nova_lite.traits import trait_set

#: Namespace of child provider uuids: ``uuid5(NAMESPACE, "<node uuid>/<name>")``.
NAMESPACE = uuid_mod.UUID("6f0c7d5e-64a4-4d0b-9a8e-3c2f1b7d9e11")
#: The classes a node offers itself, never a child (they have their own
#: allocation columns).
NODE_CLASSES = frozenset({"VCPU", "PCPU", "MEMORY_MB", "DISK_GB"})
#: The longest child provider name (Placement's limit on provider names).
MAX_NAME = 200


@functools.lru_cache(maxsize=65536)
def child_uuid(node_uuid: str, name: str) -> str:
    """The stable uuid of child ``name`` of node ``node_uuid`` (the same in
    every process, so a claim needs no read to name it)."""
    return str(uuid_mod.uuid5(NAMESPACE, f"{node_uuid}/{name}"))


def _inventories(value: Mapping[str, Inventory] | None) -> Mapping[str, Inventory]:
    proxy = v.frozen_mapping(value, "ChildProvider.inventories")
    out = {}
    for rc, inv in proxy.items():
        rc = validate_resource_class(str(rc))
        if rc in NODE_CLASSES:
            raise InvalidInput(f"ChildProvider.inventories: {rc} is the node's own class; a "
                               "child provider offers other classes (VGPU, CUSTOM_*)")
        if not isinstance(inv, Inventory):
            raise InvalidInput(f"ChildProvider.inventories[{rc}] must be an Inventory, "
                               f"got {type(inv).__name__}")
        out[rc] = inv
    return v.frozen_mapping(out)


def _traits(value: Iterable[str] | None) -> frozenset[str]:
    return trait_set(value, "ChildProvider.traits")


def _name(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise InvalidInput(f"ChildProvider.{attribute.name} must be a non-empty string of at "
                           f"most {MAX_NAME} characters, got {value!r:.80}")


@attrs.frozen
class ChildProvider:
    """One device a node accounts for apart: a provider nested under the node.

    ``name`` is unique among the node's children (Nova's libvirt driver
    names a GPU ``<nodename>_<pci address>``, e.g. ``cmp1_pci_0000_84_00_0``);
    ``inventories`` maps resource class to :class:`~nova_lite.resources.Inventory`
    (amounts in the class's unit: one ``VGPU`` is one mediated device);
    ``traits`` are the device's own (``os-traits`` names or ``CUSTOM_*``);
    ``parent`` names another child it nests under (None: the node itself).
    """

    name: str = attrs.field(validator=_name)
    inventories: Mapping[str, Inventory] = attrs.field(
        factory=dict, converter=_inventories, hash=False)
    traits: frozenset[str] = attrs.field(factory=frozenset, converter=_traits)
    parent: str | None = attrs.field(default=None, validator=v.optional(_name))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict that :func:`child_from_dict` reads back."""
        return {"name": self.name, "parent": self.parent, "traits": sorted(self.traits),
                "inventories": {rc: _inventory_dict(inv)
                                for rc, inv in sorted(self.inventories.items())}}


def _inventory_dict(inv: Inventory) -> dict[str, Any]:
    ratio = inv.allocation_ratio
    return {"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit,
            "max_unit": inv.max_unit, "step_size": inv.step_size,
            "allocation_ratio": str(ratio) if ratio.denominator != 1 else ratio.numerator}


_INVENTORY_KEYS = frozenset({"total", "reserved", "min_unit", "max_unit", "step_size",
                             "allocation_ratio"})


def child_from_dict(data: Any) -> ChildProvider:
    """A :class:`ChildProvider` from a dict as :meth:`ChildProvider.to_dict` makes it.

    Raises :class:`~nova_lite.exception.InvalidInput` naming what is wrong.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput(f"a child provider must be a mapping, got {data!r:.80}")
    unknown = sorted(set(data) - {"name", "parent", "traits", "inventories"})
    if unknown:
        raise InvalidInput(f"child provider {data.get('name')!r}: unknown keys {unknown}")
    raw = data.get("inventories") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"child provider {data.get('name')!r}: 'inventories' must be a "
                           f"mapping of resource class to inventory, got {raw!r:.80}")
    inventories = {}
    for rc, fields in raw.items():
        if not isinstance(fields, Mapping) or "total" not in fields \
                or set(fields) - _INVENTORY_KEYS:
            raise InvalidInput(
                f"child provider {data.get('name')!r}: inventory {rc} must be a mapping with "
                f"'total' and only {sorted(_INVENTORY_KEYS)}, got {fields!r:.80}")
        values = dict(fields)
        if "allocation_ratio" in values:
            values["allocation_ratio"] = Fraction(str(values["allocation_ratio"]))
        try:
            inventories[rc] = Inventory(**values)
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise InvalidInput(f"child provider {data.get('name')!r}: inventory {rc}: "
                               f"{exc}") from None
    return ChildProvider(name=data.get("name", ""), parent=data.get("parent"),
                         traits=data.get("traits") or (), inventories=inventories)


def check_tree(children: Iterable[ChildProvider], what: str = "providers") -> None:
    """Raise :class:`~nova_lite.exception.InvalidInput` unless ``children``
    form a tree under the node: unique names, every parent a child named
    here, no cycle."""
    by_name: dict[str, ChildProvider] = {}
    for child in children:
        if child.name in by_name:
            raise InvalidInput(f"{what}: two child providers are named {child.name!r}")
        by_name[child.name] = child
    for child in by_name.values():
        seen = {child.name}
        parent = child.parent
        while parent is not None:
            if parent not in by_name:
                raise InvalidInput(f"{what}: child provider {child.name!r} names parent "
                                   f"{parent!r}, which is not one of the node's children")
            if parent in seen:
                raise InvalidInput(f"{what}: child provider {child.name!r} is its own "
                                   "ancestor")
            seen.add(parent)
            parent = by_name[parent].parent


def child_classes(children: Iterable[ChildProvider]) -> frozenset[str]:
    """Every resource class some child offers."""
    return frozenset(rc for child in children for rc in child.inventories)


def split_request(root_classes: Iterable[str], children: Iterable[ChildProvider],
                  requested: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """``(on the node, on children)``: the classes of ``requested`` the node
    itself offers (or that nobody offers: the node's check then refuses them),
    and those only children offer."""
    own = frozenset(root_classes)
    nested = child_classes(children) - own
    root = {rc: n for rc, n in requested.items() if rc not in nested}
    child = {rc: n for rc, n in requested.items() if rc in nested}
    return root, child


def add_usage(usage: Mapping[str, Mapping[str, int]],
              amounts: Mapping[str, Mapping[str, int]], sign: int = 1
              ) -> dict[str, dict[str, int]]:
    """``usage`` with ``amounts`` (``{name: {rc: n}}``) added (``sign=-1``: removed);
    zeros are left out."""
    out = {name: dict(per) for name, per in usage.items()}
    for name, per in amounts.items():
        into = out.setdefault(name, {})
        for rc, n in per.items():
            into[rc] = into.get(rc, 0) + sign * n
            if not into[rc]:
                del into[rc]
        if not into:
            del out[name]
    return out
