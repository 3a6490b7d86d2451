"""Prometheus metrics: capacity from the records, claims and audits of this process.

:class:`StoreCollector` reads the records at every scrape (in bulk, through
a :class:`~nova_lite.cluster.NodeCache`) and gives, per (host, node,
resource class), the gauges ``nova_lite_resource_total``, ``_reserved``,
``_allocation_ratio``, ``_capacity``, ``_used``, ``_free`` and ``_over``
(in the class's unit: CPUs, MiB, GiB or units), where capacity is
``floor((total - reserved) x ratio)`` as :meth:`ComputeNode.capacity`
computes it and free is never negative; then ``nova_lite_service_up`` and
``nova_lite_service_enabled`` per compute service (up: a heartbeat within
``service_down_time`` seconds).

The process-local metrics are fed by the code paths themselves, cheaply:

- ``nova_lite_claims_total{result, reason}``: every instance claim decided
  by a :class:`~nova_lite.compute.resource_tracker.ResourceTracker` in this
  process (``result`` ``admitted`` or ``rejected``; ``reason`` ``none``
  for an admitted claim, else the first failing dimension: a resource
  class, ``numa``, ``pci``, ``node_owner`` or ``other``), and
  ``nova_lite_claim_rejection_reasons_total{reason}`` counting every
  reason of every rejection;
- ``nova_lite_audit_duration_seconds{audit}``: how long each resource
  audit (``audit="resources"``, the compute service's periodic pass) or
  views comparison (``audit="views"``, ``nova-lite audit``) took;
- ``nova_lite_audit_differences{host, kind}``: differences of each kind
  the last views comparison of ``host`` found, and
  ``nova_lite_leak_findings{kind}``: findings of each kind of the last
  leak search (:func:`nova_lite.leaks.find_leaks`) in this process.

:func:`registry` builds a registry with both; :func:`serve` serves it over
HTTP (waitress) and :func:`write_textfile` writes it atomically for
node_exporter's textfile collector.
"""

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: F401
from prometheus_client.registry import Collector, CollectorRegistry

from nova_lite import cluster, reports
from nova_lite.web_server import DEFAULT_BIND, BackgroundServer

LOG = logging.getLogger(__name__)

PREFIX = "nova_lite"
#: Reason label of an admitted claim.
NO_REASON = "none"
#: ``audit`` label values of the audit duration.
RESOURCE_AUDIT, VIEWS_AUDIT = "resources", "views"

_CLAIMS = prometheus_client.Counter(
    "nova_lite_claims", "Instance claims decided in this process, by result and the first "
    "failing dimension (reason 'none' when admitted).", ["result", "reason"], registry=None)
_REASONS = prometheus_client.Counter(
    "nova_lite_claim_rejection_reasons", "Every reason of every rejected claim in this "
    "process (a claim may fail on several dimensions).", ["reason"], registry=None)
_AUDIT_SECONDS = prometheus_client.Histogram(
    "nova_lite_audit_duration_seconds", "Duration of audits run in this process (seconds): "
    "'resources' is the periodic resource audit, 'views' the hypervisor/tracker/records "
    "comparison.", ["audit"], registry=None,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
_DIFFERENCES = prometheus_client.Gauge(
    "nova_lite_audit_differences", "Differences of each kind found by the last views "
    "comparison of the host in this process.", ["host", "kind"], registry=None)
_FINDINGS = prometheus_client.Gauge(
    "nova_lite_leak_findings", "Findings of each kind of the last leak search in this "
    "process.", ["kind"], registry=None)
_PROCESS_METRICS = (_CLAIMS, _REASONS, _AUDIT_SECONDS, _DIFFERENCES, _FINDINGS)

_WORDS = {"memory": "MEMORY_MB", "disk": "DISK_GB", "vcpu": "VCPU", "pcpu": "PCPU"}
_FREE = re.compile(r"^Free (\w+) ")
_CLASS = re.compile(r"^([A-Z][A-Z0-9_]*): ")


def reason_label(reason: str) -> str:
    """A small, fixed label for one rejection reason (Nova's words) of a claim."""
    found = _FREE.match(reason)
    if found:
        return _WORDS.get(found.group(1), found.group(1))
    found = _CLASS.match(reason)
    if found:
        return found.group(1)
    if reason.startswith("Node ") and ("owned by" in reason or "no longer reported" in reason):
        return "node_owner"
    lowered = reason.lower()
    for word in ("numa", "pci"):
        if word in lowered:
            return word
    return "other"


def record_claims(admitted: int = 0, reasons: Iterable[str] = (), rejected: int = 0) -> None:
    """Count ``admitted`` admitted claims, or ``rejected`` claims refused for ``reasons``."""
    if admitted:
        _CLAIMS.labels("admitted", NO_REASON).inc(admitted)
    if rejected:
        labels = [reason_label(r) for r in reasons] or ["other"]
        _CLAIMS.labels("rejected", labels[0]).inc(rejected)
        for label in labels:
            _REASONS.labels(label).inc(rejected)


def record_audit_duration(audit: str, seconds: float) -> None:
    """Record that one audit of kind ``audit`` took ``seconds``."""
    _AUDIT_SECONDS.labels(audit).observe(max(0.0, seconds))


def record_differences(host: str, kinds: Iterable[str], found: Iterable[str]) -> None:
    """Set the difference counts of ``host``: every kind of ``kinds``, counted in ``found``."""
    found = list(found)
    for kind in kinds:
        _DIFFERENCES.labels(host, kind).set(found.count(kind))


def record_findings(kinds: Iterable[str], found: Iterable[str]) -> None:
    """Set the leak finding counts: every kind of ``kinds``, counted in ``found``."""
    found = list(found)
    for kind in kinds:
        _FINDINGS.labels(kind).set(found.count(kind))


class ProcessCollector(Collector):
    """The process-local metrics (claims, audits) as one collector."""

    def collect(self) -> Iterator:
        for metric in _PROCESS_METRICS:
            yield from metric.collect()


#: Per-node gauges: (suffix, help).
_NODE_GAUGES = (
    ("total", "Total the node offers (inventory total)"),
    ("reserved", "Reserved for the host (inventory reserved)"),
    ("allocation_ratio", "Allocation (over-commit) ratio"),
    ("capacity", "Capacity: floor((total - reserved) x allocation_ratio)"),
    ("used", "Held by instances and in-progress migrations"),
    ("free", "max(0, capacity - used): never negative"),
    ("over", "max(0, used - capacity): held beyond capacity"),
)
_UNITS = "in the class's unit: CPUs for VCPU/PCPU, MiB for MEMORY_MB, GiB for DISK_GB"


class StoreCollector(Collector):
    """Capacity per (node, resource class) and service state, read from ``store``.

    ``settings`` gives ``service_down_time`` (s).  ``cache`` (a
    :class:`~nova_lite.cluster.NodeCache`) is made when not given.
    """

    def __init__(self, store, settings, cache: cluster.NodeCache | None = None) -> None:
        self.store = store
        self.settings = settings
        self.cache = cache if cache is not None else cluster.NodeCache(store)

    def collect(self) -> Iterator:
        from nova_lite.cli.service import list_services
        families = {suffix: GaugeMetricFamily(
            f"{PREFIX}_resource_{suffix}",
            f"{text} (no unit)." if suffix == "allocation_ratio" else f"{text} ({_UNITS}).",
            labels=["host", "node", "resource_class"]) for suffix, text in _NODE_GAUGES}
        nodes = self.cache.nodes()
        for node in nodes:
            for rc in cluster.node_classes(node):
                inv = node.inventory(rc)
                labels = [node.host, node.nodename, rc]
                capacity, used = node.capacity(rc), node.used(rc)
                families["total"].add_metric(labels, inv.total)
                families["reserved"].add_metric(labels, inv.reserved)
                families["allocation_ratio"].add_metric(labels, float(inv.allocation_ratio))
                families["capacity"].add_metric(labels, capacity)
                families["used"].add_metric(labels, used)
                families["free"].add_metric(labels, max(0, capacity - used))
                families["over"].add_metric(labels, max(0, used - capacity))
        yield from families.values()
        yield GaugeMetricFamily(f"{PREFIX}_compute_nodes", "Compute node records.",
                                value=len(nodes))
        up = GaugeMetricFamily(f"{PREFIX}_service_up", "1 if the compute service's last "
                               "heartbeat is within service_down_time seconds, else 0.",
                               labels=["host", "binary"])
        enabled = GaugeMetricFamily(f"{PREFIX}_service_enabled", "1 if the compute service "
                                    "is enabled, 0 if disabled.", labels=["host", "binary"])
        now = time.time()
        for service in list_services(self.store):
            state, status = reports.service_state(service, self.settings.service_down_time,
                                                  now)
            up.add_metric([service.host, service.binary], 1 if state == "up" else 0)
            enabled.add_metric([service.host, service.binary], 1 if status == "enabled" else 0)
        yield up
        yield enabled


def registry(store=None, settings=None) -> CollectorRegistry:
    """A registry with the process metrics and, given a ``store``, its records' metrics."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ProcessCollector())
    if store is not None:
        reg.register(StoreCollector(store, settings))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text exposition format."""
    return prometheus_client.generate_latest(reg)


def write_textfile(path: str, reg: CollectorRegistry) -> None:
    """Write ``reg`` to ``path`` for node_exporter's textfile collector, atomically.

    The text goes to a temporary file in the same directory, is flushed to
    disk, then renamed over ``path``: a reader sees the old file or the new
    one, never half of one.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}."
                                  f"{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(render(reg))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def wsgi_app(reg: CollectorRegistry):
    """A WSGI application serving ``reg`` at every path (``/metrics`` by convention)."""
    return prometheus_client.make_wsgi_app(reg)


class MetricsServer(BackgroundServer):
    """A waitress server of ``reg`` at /metrics on ``bind``:``port`` (0: a free port),
    in a daemon thread: :attr:`port`, :meth:`start`, :meth:`stop`."""

    def __init__(self, reg: CollectorRegistry, port: int = 0, bind: str = DEFAULT_BIND):
        super().__init__(wsgi_app(reg), bind, port, what="metrics")

    def start(self) -> "MetricsServer":
        super().start()
        LOG.info("Serving metrics on http://%s:%d/metrics", self.bind, self.port)
        return self


__all__ = ["StoreCollector", "ProcessCollector", "MetricsServer", "registry", "render",
           "write_textfile", "wsgi_app", "record_claims", "record_audit_duration",
           "record_differences", "record_findings", "reason_label", "NO_REASON",
           "RESOURCE_AUDIT", "VIEWS_AUDIT"]
