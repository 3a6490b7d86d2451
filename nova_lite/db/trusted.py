"""Node records built from rows, without checking again what was checked when written.

Private to :mod:`nova_lite.db`.  A full read of a large fleet builds one
:class:`~nova_lite.objects.ComputeNode` and one
:class:`~nova_lite.objects.NodeResources` per node; running every
validator and converter again on values the records held when they were
written (and the database holds since) is most of that read's time, and
a copy per node of what every node of a kind reports alike (CPU info,
supported instances, traits) most of its memory.  So:

- :func:`node_record` (and :func:`unused_node`, for a node without
  usage) builds a ``ComputeNode`` from values already in the form its
  converters give (read-only mappings, tuples, frozensets), without
  running them again: :func:`new_node` sets each field through its slot,
  in a function written out field by field;
- :func:`report` parses a node's stored report once per *kind* of report:
  the text with the node's own hostname and uuid replaced by a
  placeholder is the key; the node's record is that kind's record with
  its own hostname and uuid set.  A report whose hostname or uuid is
  found anywhere else in its text, or that is not in that form, is
  parsed whole, as :meth:`NodeResources.from_dict` always does.  Records
  parsed whole share their equal parts (CPU info, supported instances,
  traits, stats) with the records parsed before them.

Nothing here ever takes a value from outside the database: drivers'
reports go through :meth:`NodeResources.from_dict` and the records'
validators as they always did.
"""

import functools
import json
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from nova_lite.exception import InvalidInput
from nova_lite.objects import ComputeNode, InstanceNUMATopology, NodeResources, nested_amounts
from nova_lite.resources import Inventory
from nova_lite.validators import unchecked_maker

_R = TypeVar("_R")
_NEW = object.__new__
_SET = object.__setattr__
#: Stands in for a node's hostname and uuid in the key of its kind of report.
_PLACEHOLDER = "@"
_QUOTED_PLACEHOLDER = json.dumps(_PLACEHOLDER)
#: Fields of NodeResources that many nodes report alike: shared, not copied.
_SHARED_FIELDS = ("cpu_info", "supported_instances", "traits", "stats", "hypervisor_type")
_NO_AMOUNTS: Mapping[str, Any] = types.MappingProxyType({})
_NO_PCI: frozenset[str] = frozenset()
#: What ``nested_amounts`` makes of no provider usage.
_NO_PROVIDER_USAGE = nested_amounts({})
#: ``json.dumps`` of a str (the same C encoder, without its dispatch).
_quoted: Callable[[str], str] = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]


_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(a.name for a in attrs.fields(cls)) for cls in (ComputeNode, NodeResources)}

#: ``new_node(**every field)``: a ComputeNode of values already in the form
#: its converters give.
new_node: Callable[..., ComputeNode] = unchecked_maker(
    ComputeNode, "new_node", _FIELDS[ComputeNode], {f: f for f in _FIELDS[ComputeNode]})
#: ``_with_identity(kind, hostname, uuid)``: a copy of a kind's NodeResources
#: with the node's own hostname and uuid.
_IDENTITY = {"hypervisor_hostname": "hostname", "uuid": "uuid"}
_with_identity: Callable[[NodeResources, str, str], NodeResources] = unchecked_maker(
    NodeResources, "_with_identity", ("kind", "hostname", "uuid"),
    {f: _IDENTITY.get(f, f"kind.{f}") for f in _FIELDS[NodeResources]})


def _replace(record: _R, **changes: Any) -> _R:
    """A copy of ``record`` with ``changes`` (values of the types the
    fields hold, already valid for them), its validators not run."""
    copy = _NEW(type(record))
    for name in _FIELDS[type(record)]:
        _SET(copy, name, getattr(record, name))
    for name, value in changes.items():
        _SET(copy, name, value)
    return copy


def node_record(row: Any, inventories: Mapping[str, Inventory], usage: dict[str, int],
                resources: NodeResources | None, numa: tuple[InstanceNUMATopology, ...],
                pci: frozenset[str],
                provider_usage: Mapping[str, Mapping[str, int]]) -> ComputeNode:
    """The ComputeNode of a ``compute_nodes`` row (``uuid``, ``host``,
    ``nodename``, ``generation``, ``last_error``, ``reported``) with what
    was read with it: ``usage`` and a dict ``inventories`` are the
    record's own from now on (never changed afterwards); a read-only
    ``inventories`` (shared by nodes that offer the same) and
    ``provider_usage`` are taken as they are."""
    return new_node(
        uuid=row.uuid, host=sys.intern(row.host), nodename=row.nodename,
        generation=row.generation,
        inventories=inventories if isinstance(inventories, types.MappingProxyType)
        else types.MappingProxyType(inventories) if inventories else _NO_AMOUNTS,
        usage=types.MappingProxyType(usage) if usage else _NO_AMOUNTS,
        resources=resources, numa_placements=numa, pci_in_use=pci,
        provider_usage=provider_usage, last_error=row.last_error,
        reported=bool(row.reported))


def unused_node(uuid: str, host: str, nodename: str, generation: int, last_error: str | None,
                reported: bool, inventories: Mapping[str, Inventory],
                resources: NodeResources | None) -> ComputeNode:
    """:func:`node_record` of a node without usage (no allocation holds
    anything of it) from its columns' values; ``inventories``: a read-only
    mapping (shared by the nodes that offer the same)."""
    return new_node(
        uuid=uuid, host=sys.intern(host), nodename=nodename, generation=generation,
        inventories=inventories, usage=_NO_AMOUNTS, resources=resources, numa_placements=(),
        pci_in_use=_NO_PCI, provider_usage=_NO_PROVIDER_USAGE, last_error=last_error,
        reported=bool(reported))


def renewed(node: ComputeNode, generation: int, inventories: dict[str, Inventory],
            usage: dict[str, int]) -> ComputeNode:
    """A copy of ``node`` at ``generation`` with new ``inventories`` (the same
    classes and amounts offered, their ``used`` changed) and ``usage`` (of
    the standard classes only: no NUMA cells, PCI devices or child
    providers' amounts); both dicts are the record's own from now on."""
    return _replace(node, generation=generation,
                    inventories=types.MappingProxyType(inventories) if inventories
                    else _NO_AMOUNTS,
                    usage=types.MappingProxyType(usage) if usage else _NO_AMOUNTS,
                    numa_placements=(), pci_in_use=frozenset(), provider_usage=_NO_AMOUNTS)


# Sized for a view of every node of a large fleet whose reports differ in
# more than hostname and uuid: each re-read node must not parse its report
# again.
@functools.lru_cache(maxsize=32768)
def parsed(text: str) -> NodeResources:
    """The NodeResources of a stored report, parsed whole (once per text),
    sharing its common parts with the records parsed before it."""
    record = NodeResources.from_dict(json.loads(text))
    return _replace(record, **{name: _shared(getattr(record, name)) for name in _SHARED_FIELDS})


_COMMON: dict[Any, Any] = {}
_COMMON_MAX = 65536


def _shared(value: _R) -> _R:
    """The value equal to ``value`` seen first (``value`` itself the first time)."""
    if len(_COMMON) > _COMMON_MAX:   # a fleet of many kinds: start again
        _COMMON.clear()
    try:
        return _COMMON.setdefault(value, value)
    except TypeError:   # an unhashable value (a mapping): shared by its items
        key = (type(value), tuple(sorted(value.items())))   # type: ignore[attr-defined]
        return _COMMON.setdefault(key, value)   # type: ignore[no-any-return]


@functools.lru_cache(maxsize=1024)
def _kind(template: str) -> NodeResources | None:
    """The record of a kind of report (``template``: a report with its
    hostname and uuid as :data:`_PLACEHOLDER`), or None if they are not
    where a report keeps them."""
    try:
        record = parsed(template)
    except InvalidInput:   # the whole text is parsed, and says what is wrong
        return None
    if record.hypervisor_hostname != _PLACEHOLDER or record.uuid != _PLACEHOLDER:
        return None
    return record


def report(text: str, uuid: str | None, hostname: str | None) -> NodeResources:
    """The NodeResources of the stored report ``text`` of the node with
    this ``uuid`` and (usually) this ``hostname``: the record of its kind
    with the two set, or, when the text is not of that form, parsed
    whole."""
    if uuid and hostname and uuid != hostname and _PLACEHOLDER not in (uuid, hostname):
        quoted_uuid, quoted_host = _quoted(uuid), _quoted(hostname)
        if text.count(quoted_uuid) == 1 and text.count(quoted_host) == 1:
            kind = _kind(text.replace(quoted_uuid, _QUOTED_PLACEHOLDER).replace(
                quoted_host, _QUOTED_PLACEHOLDER))
            if kind is not None:
                return _with_identity(kind, hostname, uuid)
    return parsed(text)


def cache_clear() -> None:
    """Forget every parsed report (tests)."""
    parsed.cache_clear()
    _kind.cache_clear()
    _COMMON.clear()
