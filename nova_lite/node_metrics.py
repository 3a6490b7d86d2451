"""The metrics of the compute nodes: capacity and PCI devices, per node or per host.

Per node (``[metrics] per_node_series`` ``always``, or ``auto`` while the
fleet has at most ``per_node_series_max_nodes`` nodes), the gauges are
labelled by host and node:

- ``nova_lite_resource_{total,reserved,allocation_ratio,capacity,used,free,over}
  {host, node, resource_class}`` (in the class's unit);
- ``nova_lite_provider_resource_{total,reserved,allocation_ratio,capacity,
  used,free,over}{host, node, provider, resource_class}``: the same for each
  class of each of a node's child providers (:mod:`nova_lite.providers`: a
  GPU's ``VGPU``), ``provider`` naming the child;
- ``nova_lite_pci_devices``, ``nova_lite_pci_devices_in_use`` and
  ``nova_lite_pci_devices_free`` ``{host, node, vendor_id, product_id,
  dev_type}`` (devices).

Per host (``never``, or ``auto`` past that size) they are summed over each
host's nodes, so a scrape grows with the hosts, not the nodes:

- ``nova_lite_host_compute_nodes{host}``: the host's node records;
- ``nova_lite_host_resource_{total,reserved,capacity,used,free,over}
  {host, resource_class}`` (a ratio does not sum: none per host);
- ``nova_lite_host_provider_resource_{total,reserved,capacity,used,free,over}
  {host, resource_class}``: the same summed over the host's child providers;
- ``nova_lite_host_pci_devices``, ``_in_use`` and ``_free`` ``{host,
  vendor_id, product_id, dev_type}``.

``nova_lite_per_node_series`` (no labels) is 1 per node, 0 per host.

:class:`NodeText` renders them in the text format, each node's (or
host's) lines formatted once per generation of its node(s);
:class:`NodeCollector` gives the same families to a prometheus_client
registry (a test holds the two byte for byte equal).
"""

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from nova_lite import cluster, conf, reports

if TYPE_CHECKING:
    from nova_lite.conf import Settings
    from nova_lite.objects import ComputeNode

PREFIX = "nova_lite"
#: ``[metrics] per_node_series`` values.
AUTO, ALWAYS, NEVER = conf.PER_NODE_SERIES

#: Capacity gauges: (suffix, help).
_NODE_GAUGES = (
    ("total", "Total the node offers (inventory total)"),
    ("reserved", "Reserved for the host (inventory reserved)"),
    ("allocation_ratio", "Allocation (over-commit) ratio"),
    ("capacity", "Capacity: floor((total - reserved) x allocation_ratio)"),
    ("used", "Held by instances and in-progress migrations"),
    ("free", "max(0, capacity - used): never negative"),
    ("over", "max(0, used - capacity): held beyond capacity"),
)
#: PCI gauges: (suffix, help).
_PCI_GAUGES = (
    ("", "PCI devices for passthrough the driver reports"),
    ("_in_use", "PCI devices for passthrough a claim holds"),
    ("_free", "PCI devices for passthrough a claim could take now (not a PF with a VF "
              "in use, nor a VF of a PF in use)"),
)
_UNITS = "in the class's unit: CPUs for VCPU/PCPU, MiB for MEMORY_MB, GiB for DISK_GB"
_RATIO = 2   # index of allocation_ratio in _NODE_GAUGES: not summed per host
_PCI_KEY = ("vendor_id", "product_id", "dev_type")


@attrs.frozen
class Family:
    """One gauge family: its name, help text and label names."""

    name: str
    help: str
    labels: tuple[str, ...]


def _resource_help(suffix: str, text: str, scope: str) -> str:
    unit = "no unit" if suffix == "allocation_ratio" else _UNITS
    return f"{text}{scope} ({unit})."


#: The families per node, in the order they are written.
NODE_FAMILIES = (
    *(Family(f"{PREFIX}_resource_{suffix}", _resource_help(suffix, text, ""),
             ("host", "node", "resource_class")) for suffix, text in _NODE_GAUGES),
    *(Family(f"{PREFIX}_pci_devices{suffix}", f"{text}, per kind (devices).",
             ("host", "node", *_PCI_KEY)) for suffix, text in _PCI_GAUGES),
    *(Family(f"{PREFIX}_provider_resource_{suffix}", _resource_help(
        suffix, text, ", of one child provider of the node (a GPU, say)"),
             ("host", "node", "provider", "resource_class")) for suffix, text in _NODE_GAUGES),
)
#: The families per host, in the order they are written.
HOST_FAMILIES = (
    Family(f"{PREFIX}_host_compute_nodes", "Compute node records of the host.", ("host",)),
    *(Family(f"{PREFIX}_host_resource_{suffix}",
             _resource_help(suffix, text, ", summed over the host's nodes"),
             ("host", "resource_class"))
      for i, (suffix, text) in enumerate(_NODE_GAUGES) if i != _RATIO),
    *(Family(f"{PREFIX}_host_pci_devices{suffix}",
             f"{text}, per kind, summed over the host's nodes (devices).",
             ("host", *_PCI_KEY)) for suffix, text in _PCI_GAUGES),
    *(Family(f"{PREFIX}_host_provider_resource_{suffix}",
             _resource_help(suffix, text, ", summed over the child providers of the host's "
                                          "nodes"),
             ("host", "resource_class"))
      for i, (suffix, text) in enumerate(_NODE_GAUGES) if i != _RATIO),
)
#: The gauge that says which series a scrape gives.
MODE_FAMILY = Family(f"{PREFIX}_per_node_series",
                     "1 if the capacity and PCI gauges are per node (nova_lite_resource_*, "
                     "nova_lite_pci_devices*), 0 if per host (nova_lite_host_*): see "
                     "[metrics] per_node_series.", ())

#: Samples of the families, one list per family: ``(label values, value)``.
Samples = list[list[tuple[tuple[str, ...], float]]]


def node_values(node: "ComputeNode") -> Iterator[tuple[str, tuple[float, ...]]]:
    """``(resource class, (total, reserved, ratio, capacity, used, free, over))`` of
    each class ``node`` offers or uses, sorted; capacity, free and over as
    the node's own ``capacity``, ``free`` and ``over`` give them (free never negative)."""
    for rc, total, reserved, capacity, used, free, over in cluster.node_figures(node):
        yield rc, (total, reserved, float(node.inventory(rc).allocation_ratio), capacity,
                   used, free, over)


def _values_memo() -> "Callable[[ComputeNode], list[tuple[str, tuple[float, ...]]]]":
    """:func:`node_values` as a list, computed once for the nodes without
    usage that share one inventories mapping (nodes of one kind); for the
    nodes of one call only (their mappings are known by identity)."""
    seen: dict[int, tuple[object, list[tuple[str, tuple[float, ...]]]]] = {}

    def values(node: "ComputeNode") -> list[tuple[str, tuple[float, ...]]]:
        if node.usage:
            return list(node_values(node))
        found = seen.get(id(node.inventories))
        if found is None or found[0] is not node.inventories:
            found = seen[id(node.inventories)] = (node.inventories, list(node_values(node)))
        return found[1]
    return values


def child_values(node: "ComputeNode"
                 ) -> Iterator[tuple[str, str, tuple[float, ...]]]:
    """``(child provider, resource class, (total, reserved, ratio, capacity, used,
    free, over))`` of each class of each of ``node``'s child providers, sorted."""
    for line in reports.provider_lines(node):
        for inv in line.inventories:
            yield line.name, inv.resource_class, (inv.total, inv.reserved, inv.ratio,
                                                  inv.capacity, inv.used, inv.free, inv.over)


def pci_values(node: "ComputeNode") -> list[tuple[tuple[str, str, str], tuple[int, int, int]]]:
    """``((vendor_id, product_id, dev_type), (devices, in use, free))`` of each kind
    of PCI device ``node`` reports, sorted."""
    kinds: dict[tuple[str, str, str], list[int]] = {}
    for dev in reports.pci_device_lines(node):
        counts = kinds.setdefault((dev.vendor_id, dev.product_id, dev.dev_type), [0, 0, 0])
        counts[0] += 1
        counts[1] += dev.in_use
        counts[2] += dev.free
    return [(kind, (c[0], c[1], c[2])) for kind, c in sorted(kinds.items())]


def node_samples(node: "ComputeNode") -> Samples:
    """The samples of :data:`NODE_FAMILIES` for one node."""
    out: Samples = [[] for _ in NODE_FAMILIES]
    for rc, values in node_values(node):
        for i, amount in enumerate(values):
            out[i].append(((node.host, node.nodename, rc), amount))
    for kind, counts in pci_values(node):
        for i, count in enumerate(counts):
            out[len(_NODE_GAUGES) + i].append(((node.host, node.nodename, *kind), count))
    first = len(_NODE_GAUGES) + len(_PCI_GAUGES)
    for child, rc, values in child_values(node):
        for i, amount in enumerate(values):
            out[first + i].append(((node.host, node.nodename, child, rc), amount))
    return out


def host_samples(host: str, nodes: Sequence["ComputeNode"]) -> Samples:
    """The samples of :data:`HOST_FAMILIES` for ``host`` and its ``nodes``."""
    resources: dict[str, list[float]] = {}
    children: dict[str, list[float]] = {}
    pci: dict[tuple[str, str, str], list[int]] = {}
    values_of = _values_memo()
    for node, count in _alike(nodes):
        for _, rc, values in child_values(node):
            _add(children.setdefault(rc, [0] * len(_NODE_GAUGES)), values, count)
        for rc, values in values_of(node):
            _add(resources.setdefault(rc, [0] * len(_NODE_GAUGES)), values, count)
        for kind, counts in pci_values(node):
            _add(pci.setdefault(kind, [0, 0, 0]), counts, count)
    out: Samples = [[((host,), len(nodes))]]
    for i in range(len(_NODE_GAUGES)):
        if i != _RATIO:
            out.append([((host, rc), sums[i]) for rc, sums in sorted(resources.items())])
    for i in range(len(_PCI_GAUGES)):
        out.append([((host, *kind), totals[i]) for kind, totals in sorted(pci.items())])
    for i in range(len(_NODE_GAUGES)):
        if i != _RATIO:
            out.append([((host, rc), sums[i]) for rc, sums in sorted(children.items())])
    return out


def _add(sums: list[Any], values: Sequence[float], count: int) -> None:
    """Add ``values`` to ``sums``, index by index, ``count`` times: whole
    numbers, so a product is the same as that many additions (but for the
    ratios, which no sum shows)."""
    for i, amount in enumerate(values):
        sums[i] += amount * count


def _alike(nodes: Iterable["ComputeNode"]) -> list[tuple["ComputeNode", int]]:
    """``[(node, count)]``: ``nodes`` with each group of nodes whose samples
    are equal as one of them and their number.

    Nodes with no usage (on themselves or a child provider) nor device in
    use, that share an inventories mapping and a report's PCI devices and
    child providers (nodes of one kind, as a full read gives them: one
    object each, for all of them), count the same in every sum.
    """
    out: list[tuple[ComputeNode, int]] = []
    groups: dict[tuple[int, int, int], list[Any]] = {}
    for node in nodes:
        report = node.resources
        if node.usage or node.provider_usage or node.pci_in_use:
            out.append((node, 1))
            continue
        key = (id(node.inventories), id(report.pci_devices) if report is not None else 0,
               id(report.providers) if report is not None else 0)
        group = groups.get(key)
        if group is None:
            groups[key] = [node, 1]
        else:
            group[1] += 1
    out.extend((node, count) for node, count in groups.values())
    return out


def per_node(settings: "Settings", nodes: int) -> bool:
    """Whether a fleet of ``nodes`` nodes gets per-node series under ``settings``."""
    mode = settings.metrics_per_node_series
    return mode == ALWAYS or (mode == AUTO and
                              nodes <= settings.metrics_per_node_series_max_nodes)


def by_host(nodes: Iterable["ComputeNode"]) -> list[tuple[str, list["ComputeNode"]]]:
    """``[(host, its nodes)]`` of ``nodes``, sorted by host (nodes keep their order)."""
    hosts: dict[str, list[ComputeNode]] = {}
    for node in nodes:
        hosts.setdefault(node.host, []).append(node)
    return sorted(hosts.items())


class NodeCollector(Collector):
    """The node families, read from ``cache`` (a :class:`~nova_lite.cluster.NodeCache`)
    at every collection; ``settings`` choose per node or per host."""

    def __init__(self, cache: cluster.NodeCache, settings: "Settings | None" = None) -> None:
        self.cache = cache
        self.settings = settings if settings is not None else conf.Settings()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nodes = self.cache.nodes()
        detailed = per_node(self.settings, len(nodes))
        yield GaugeMetricFamily(MODE_FAMILY.name, MODE_FAMILY.help, value=int(detailed))
        specs = NODE_FAMILIES if detailed else HOST_FAMILIES
        families = [GaugeMetricFamily(f.name, f.help, labels=f.labels) for f in specs]
        parts = ([node_samples(n) for n in nodes] if detailed else
                 [host_samples(host, own) for host, own in by_host(nodes)])
        for samples in parts:
            for family, lines in zip(families, samples):
                for labels, amount in lines:
                    family.add_metric(labels, amount)
        yield from families


def _label_value(value: str) -> str:
    # As prometheus_client escapes label values in the text format.
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _head(family: Family) -> str:
    text = family.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {family.name} {text}\n# TYPE {family.name} gauge\n"


def _lines(specs: Sequence[Family], samples: Samples) -> tuple[str, ...]:
    out = []
    for family, lines in zip(specs, samples):
        text = []
        order = sorted(range(len(family.labels)), key=lambda i: family.labels[i])
        for labels, amount in lines:   # label names sorted, as prometheus_client writes
            pairs = ",".join(f'{family.labels[i]}="{_label_value(labels[i])}"'
                             for i in order)
            text.append(f"{family.name}{{{pairs}}} {floatToGoString(amount)}\n")
        out.append("".join(text))
    return tuple(out)


class NodeText:
    """The text exposition of :class:`NodeCollector`'s families, cached.

    Byte for byte what ``prometheus_client.generate_latest`` writes for
    them (a test holds it to that), but each node's lines (per node) or
    each host's (per host) are formatted once per generation of the
    node(s): a scrape of an unchanged fleet joins cached strings instead
    of formatting every sample again.  ``settings`` choose per node or
    per host, at every scrape, by the number of nodes then.
    """

    def __init__(self, cache: cluster.NodeCache, settings: "Settings | None" = None) -> None:
        self.cache = cache
        self.settings = settings if settings is not None else conf.Settings()
        self._nodes: dict[str, tuple[Any, tuple[str, ...]]] = {}   # uuid -> (key, lines)
        self._hosts: dict[str, tuple[Any, tuple[str, ...]]] = {}   # host -> (key, lines)
        self._lock = threading.Lock()

    def _node_lines(self, node: "ComputeNode") -> tuple[str, ...]:
        key = (node.generation, node.host, node.nodename)
        cached = self._nodes.get(node.uuid)
        if cached is not None and cached[0] == key:
            return cached[1]
        lines = _lines(NODE_FAMILIES, node_samples(node))
        self._nodes[node.uuid] = (key, lines)
        return lines

    def _host_lines(self, host: str, nodes: Sequence["ComputeNode"]) -> tuple[str, ...]:
        key = tuple((n.uuid, n.generation, n.nodename) for n in nodes)
        cached = self._hosts.get(host)
        if cached is not None and cached[0] == key:
            return cached[1]
        lines = _lines(HOST_FAMILIES, host_samples(host, nodes))
        self._hosts[host] = (key, lines)
        return lines

    def render(self) -> str:
        """The mode gauge and the node families' text, HELP and TYPE lines
        included (thread-safe)."""
        nodes = self.cache.nodes()
        detailed = per_node(self.settings, len(nodes))
        with self._lock:
            if detailed:
                self._hosts.clear()
                parts = [self._node_lines(n) for n in nodes]
                if len(self._nodes) > len(nodes):   # forget nodes that are gone
                    live = {n.uuid for n in nodes}
                    for uuid in [u for u in self._nodes if u not in live]:
                        del self._nodes[uuid]
            else:
                self._nodes.clear()
                hosts = by_host(nodes)
                parts = [self._host_lines(host, own) for host, own in hosts]
                if len(self._hosts) > len(hosts):
                    live_hosts = {host for host, _ in hosts}
                    for gone in [h for h in self._hosts if h not in live_hosts]:
                        del self._hosts[gone]
        specs = NODE_FAMILIES if detailed else HOST_FAMILIES
        mode = _head(MODE_FAMILY) + f"{MODE_FAMILY.name} {floatToGoString(int(detailed))}\n"
        return mode + "".join(_head(family) + "".join(lines[i] for lines in parts)
                              for i, family in enumerate(specs))


__all__ = ["NodeText", "NodeCollector", "Family", "NODE_FAMILIES", "HOST_FAMILIES",
           "MODE_FAMILY", "node_values", "child_values", "pci_values", "node_samples",
           "host_samples",
           "per_node", "by_host", "AUTO", "ALWAYS", "NEVER"]
