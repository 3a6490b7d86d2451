"""The records of each node's child providers (``resource_providers``).

The audit keeps them as the driver last reported them
(:func:`sync_children`, in the transaction that records the report); a
claim that lands amounts on children moves each one's generation in its
own transaction (:func:`bump_children`), under the node's lock; the views
read them (:func:`children_of`).
"""

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from nova_lite import pci_providers
from nova_lite.db import models, rows, serialize as ser
from nova_lite.exception import InvalidInput
from nova_lite.model.nested import place
from nova_lite.objects import Allocation
from nova_lite.providers import ChildProvider, child_from_dict, child_uuid, split_request
from nova_lite.traits import flavor_traits

T_RP = models.resource_providers


@attrs.frozen
class ChildRecord:
    """A child provider as recorded: its report, uuid, parent's uuid and generation."""

    provider: ChildProvider
    uuid: str
    root_uuid: str
    parent_uuid: str
    generation: int


def _row_values(node_uuid: str, child: ChildProvider) -> dict[str, Any]:
    data = child.to_dict()
    parent = node_uuid if child.parent is None else child_uuid(node_uuid, child.parent)
    return dict(uuid=child_uuid(node_uuid, child.name), root_uuid=node_uuid,
                parent_uuid=parent, name=child.name,
                inventories=ser.dumps(data["inventories"]), traits=ser.dumps(data["traits"]))


def sync_children(conn: sa.Connection, node_uuid: str, children: Sequence[ChildProvider],
                  now: float | None = None) -> bool:
    """Record ``children`` as node ``node_uuid``'s; True if any row changed.

    A child whose inventories, traits or parent changed moves to its next
    generation; a new one starts at 0; one no longer reported is removed
    (the allocations that named it stay, and the audit finds them).
    """
    now = time.time() if now is None else now
    stored = {r.name: r for r in conn.execute(T_RP.select().where(T_RP.c.root_uuid == node_uuid))}
    changed = False
    wanted = {child.name: _row_values(node_uuid, child) for child in children}
    for name, values in wanted.items():
        row = stored.get(name)
        if row is None:
            conn.execute(T_RP.insert().values(dict(values, generation=0, created_at=now,
                                                   updated_at=now)))
            changed = True
        elif (row.inventories, row.traits, row.parent_uuid) != (
                values["inventories"], values["traits"], values["parent_uuid"]):
            conn.execute(T_RP.update().where(T_RP.c.uuid == row.uuid).values(
                inventories=values["inventories"], traits=values["traits"],
                parent_uuid=values["parent_uuid"], generation=T_RP.c.generation + 1,
                updated_at=now))
            changed = True
    gone = [row.uuid for name, row in stored.items() if name not in wanted]
    if gone:
        conn.execute(T_RP.delete().where(T_RP.c.uuid.in_(gone)))
        changed = True
    return changed


# One statement, compiled once per dialect on the claim's direct path.
BUMP_CHILD = T_RP.update().where(
    T_RP.c.uuid == sa.bindparam("child"), T_RP.c.root_uuid == sa.bindparam("root")).values(
    generation=T_RP.c.generation + sa.literal_column("1"), updated_at=sa.bindparam("now"))


def bump_values(node_uuid: str, name: str, now: float) -> dict[str, Any]:
    """The values of :data:`BUMP_CHILD` for child ``name`` of node ``node_uuid``."""
    return {"child": child_uuid(node_uuid, name), "root": node_uuid, "now": now}


def bump_children(conn: Any, node_uuid: str, names: Iterable[str], now: float,
                  missing_ok: bool = False) -> None:
    """Move each named child of ``node_uuid`` to its next generation (a claim
    or a release changed its allocations).

    Runs under the node's lock, in the transaction that writes the
    allocations.  Raises :class:`~nova_lite.exception.InvalidInput` if a
    child has no record (its node's report changed since the decision:
    the claim is refused and nothing is written), unless ``missing_ok``
    (an allocation removed from a child that is gone).
    """
    for name in sorted(set(names)):
        moved = conn.execute(BUMP_CHILD, bump_values(node_uuid, name, now)).rowcount
        if moved != 1 and not missing_ok:
            raise InvalidInput(f"child provider {name} of node {node_uuid}, named by this "
                               "claim, is no longer recorded; nothing was claimed: try again")


def delete_allocations(conn: sa.Connection, where: sa.ColumnElement[bool],
                       now: float | None = None) -> int:
    """Delete the allocations ``where``; each child provider one of them held
    amounts on moves to its next generation (a child no longer recorded is
    left alone).  Returns how many allocations were deleted."""
    found = conn.execute(models.allocations.delete().where(where).returning(
        models.allocations.c.node_uuid, models.allocations.c.providers)).all()
    now = time.time() if now is None else now
    for node_uuid, on_children in found:
        if on_children:
            bump_children(conn, node_uuid, json.loads(on_children), now, missing_ok=True)
    return len(found)


def children_of(conn: sa.Connection, node_uuids: Iterable[str]
                ) -> dict[str, list[ChildRecord]]:
    """``{node uuid: [ChildRecord, ...]}`` (by name) of ``node_uuids``' children."""
    uuids = list(node_uuids)
    found: list[Any] = []
    for i in range(0, len(uuids), 500):
        found.extend(conn.execute(T_RP.select().where(T_RP.c.root_uuid.in_(uuids[i:i + 500]))))
    names = {row.uuid: row.name for row in found}
    out: dict[str, list[ChildRecord]] = {}
    for row in sorted(found, key=lambda r: (r.root_uuid, r.name)):
        out.setdefault(row.root_uuid, []).append(_record(row, names))
    return out


def _record(row: Any, names: Mapping[str, str]) -> ChildRecord:
    parent = None if row.parent_uuid == row.root_uuid else names.get(row.parent_uuid)
    try:
        provider = child_from_dict({"name": row.name, "parent": parent,
                                    "traits": json.loads(row.traits),
                                    "inventories": json.loads(row.inventories)})
    except (InvalidInput, ValueError) as exc:
        raise InvalidInput(f"resource provider {row.uuid} ({row.name}) is recorded "
                           f"malformed: {exc}") from None
    return ChildRecord(provider=provider, uuid=row.uuid, root_uuid=row.root_uuid,
                       parent_uuid=row.parent_uuid, generation=row.generation)


def land_on_children(conn: sa.Connection, alloc: Allocation, now: float) -> Allocation:
    """``alloc`` (rebuilt by an audit from its consumer's flavor) with the
    amounts of classes only its node's children offer landed on them.

    As a claim would place them (:func:`nova_lite.model.nested.place`, with
    the flavor's traits) where there is room; where there is none, on the
    child offering the class with the most room left, since the consumer
    does hold it (the child then shows as over).  Each child it lands on
    moves to its next generation.
    """
    node = rows.load_node(conn, alloc.node_uuid)
    report = node.resources
    if report is None or not report.providers:
        return alloc
    tree = pci_providers.tree_of(node.nodename, report)
    children = pci_providers.other_children(report.providers, tree)
    _, nested = split_request(node.inventories, report.providers, alloc.resources)
    if tree is not None:
        nested = {rc: n for rc, n in nested.items() if rc not in tree.classes}
    amounts: dict[str, dict[str, int]] = {}
    if nested:
        wanted = flavor_traits(alloc.flavor.extra_specs)
        landed = place(children, node.provider_usage, nested,
                       required_traits=wanted.required - node.traits,
                       forbidden_traits=wanted.forbidden)
        amounts = {k: dict(v) for k, v in landed.amounts.items()}
        if landed.reasons:
            amounts = {}
            for rc, n in sorted(nested.items()):
                offering = [c for c in children if rc in c.inventories]
                best = max(offering, key=lambda c: (
                    c.inventories[rc].capacity
                    - node.provider_usage.get(c.name, {}).get(rc, 0), c.name))
                amounts.setdefault(best.name, {})[rc] = n
    resources = dict(alloc.resources)
    if tree is not None and alloc.pci_devices:
        # The devices the consumer holds are on their own providers.
        for name, per in pci_providers.pci_amounts(tree, alloc.pci_devices).items():
            into = amounts.setdefault(name, {})
            for rc, n in per.items():
                into[rc] = into.get(rc, 0) + n
                resources[rc] = resources.get(rc, 0) + n
    if not amounts:
        return alloc
    bump_children(conn, alloc.node_uuid, amounts, now)
    return attrs.evolve(alloc, providers=amounts, resources=resources)
