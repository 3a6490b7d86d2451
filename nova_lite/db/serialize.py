"""JSON text for the records kept in database columns, and back."""

import functools
from collections.abc import Iterable, Sequence
import json

import attrs

from nova_lite.objects import Flavor, InstanceNUMACell, InstanceNUMATopology, PciRequest


def dumps(value: object) -> str:
    """Compact, key-sorted JSON (stable text, so equal records compare equal)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=1024)   # flavors are frozen; a claim writes one twice
def flavor_to_json(flavor: Flavor) -> str:
    """A Flavor as JSON text."""
    data = attrs.asdict(flavor)
    data["extra_specs"] = dict(flavor.extra_specs)
    return dumps(data)


@functools.lru_cache(maxsize=1024)   # frozen records; a host's rows name few flavors
def flavor_from_json(text: str) -> Flavor:
    """A Flavor from :func:`flavor_to_json` text."""
    return Flavor(**json.loads(text))


def numa_to_json(topology: InstanceNUMATopology | None) -> str | None:
    """An InstanceNUMATopology (or None) as JSON text (or None)."""
    if topology is None:
        return None
    return dumps([{
        "id": c.id, "cpuset": sorted(c.cpuset), "memory_mb": c.memory_mb,
        "cpu_policy": c.cpu_policy, "pagesize_kb": c.pagesize_kb, "host_cell": c.host_cell,
        "cpu_pinning": {str(k): val for k, val in c.cpu_pinning.items()},
    } for c in topology.cells])


def numa_from_json(text: str | None) -> InstanceNUMATopology | None:
    """An InstanceNUMATopology (or None) from :func:`numa_to_json` text."""
    if not text:
        return None
    cells = []
    for c in json.loads(text):
        c["cpu_pinning"] = {int(k): val for k, val in c["cpu_pinning"].items()}
        cells.append(InstanceNUMACell(**c))
    return InstanceNUMATopology(cells=cells)


def pci_requests_to_json(requests: Sequence[PciRequest]) -> str | None:
    """PciRequest records as JSON text (None when there are none)."""
    return dumps([attrs.asdict(r) for r in requests]) if requests else None


def pci_requests_from_json(text: str | None) -> tuple[PciRequest, ...]:
    """PciRequest records from :func:`pci_requests_to_json` text."""
    return tuple(PciRequest(**r) for r in json.loads(text)) if text else ()


def strings_to_json(values: Iterable[str]) -> str | None:
    """A sequence of strings as JSON text (None when empty)."""
    return dumps(list(values)) if values else None


def strings_from_json(text: str | None) -> tuple[str, ...]:
    """A tuple of strings from :func:`strings_to_json` text."""
    return tuple(json.loads(text)) if text else ()
