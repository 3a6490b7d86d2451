"""Prometheus metrics: capacity from the records, claims and audits of this process.

:class:`NodeCollector` and :class:`ServiceCollector` read the records at
every scrape (in bulk, through a :class:`~nova_lite.cluster.NodeCache`
that re-reads only the nodes whose generation moved) and give, per (host, node,
resource class), the gauges ``nova_lite_resource_total``, ``_reserved``,
``_allocation_ratio``, ``_capacity``, ``_used``, ``_free`` and ``_over``
(in the class's unit: CPUs, MiB, GiB or units), where capacity is
``floor((total - reserved) x ratio)`` as :meth:`~nova_lite.objects.ComputeNode.capacity`
computes it and free is never negative, and the PCI devices per kind
(``nova_lite_pci_devices``, ``_in_use``, ``_free``); past ``[metrics]
per_node_series_max_nodes`` nodes (``per_node_series = auto``) they are
summed per host instead (``nova_lite_host_*``, see
:mod:`nova_lite.node_metrics`), and ``nova_lite_per_node_series`` says
which.  Then ``nova_lite_service_up`` and ``nova_lite_service_enabled``
per compute service (up: a heartbeat within ``service_down_time``
seconds).

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
  the last views comparison of ``host`` found.

The findings are not process-local: :class:`FindingsCollector` reads what
each compute service recorded of its last leak search (every pass), so
every process that serves metrics gives the same
``nova_lite_leak_findings{host, kind}`` and
``nova_lite_leak_findings_recorded_timestamp_seconds{host}``.

:class:`Exporter` renders them all (the nodes' lines cached per node
generation by :class:`NodeText`, byte for byte what prometheus_client
writes); :class:`MetricsServer` serves it over HTTP (waitress) and
:func:`write_textfile` writes it atomically for node_exporter's textfile
collector.  :func:`registry` gives the same metrics as a prometheus_client
registry, to embed in another program's.
"""

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from nova_lite import cluster, conf, reports
from nova_lite.node_metrics import NodeCollector, NodeText, node_values
from nova_lite.web_server import DEFAULT_BIND, BackgroundServer

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    from nova_lite.conf import Settings
    from nova_lite.db import Store

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
#: The admitted claims' series, looked up once: every claim counts on it.
_ADMITTED = _CLAIMS.labels("admitted", NO_REASON)
_PROCESS_METRICS = (_CLAIMS, _REASONS, _AUDIT_SECONDS, _DIFFERENCES)

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
        _ADMITTED.inc(admitted)
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


class ProcessCollector(Collector):
    """The process-local metrics (claims, audits) as one collector."""

    def collect(self) -> Iterator:
        for metric in _PROCESS_METRICS:
            yield from metric.collect()


class ServiceCollector(Collector):
    """Compute services up/enabled and the node count, read from ``store``
    (``settings`` gives ``service_down_time``, s; None: the defaults)."""

    def __init__(self, store: "Store", settings: "Settings | None",
                 cache: cluster.NodeCache) -> None:
        self.store = store
        self.settings = settings if settings is not None else conf.Settings()
        self.cache = cache

    def collect(self) -> Iterator:
        yield GaugeMetricFamily(f"{PREFIX}_compute_nodes", "Compute node records.",
                                value=len(self.cache.nodes()))
        up = GaugeMetricFamily(f"{PREFIX}_service_up", "1 if the compute service's last "
                               "heartbeat is within service_down_time seconds, else 0.",
                               labels=["host", "binary"])
        enabled = GaugeMetricFamily(f"{PREFIX}_service_enabled", "1 if the compute service "
                                    "is enabled, 0 if disabled.", labels=["host", "binary"])
        now = time.time()
        for service in self.store.list_services():
            state, status = reports.service_state(service, self.settings.service_down_time,
                                                  now)
            up.add_metric([service.host, service.binary], 1 if state == "up" else 0)
            enabled.add_metric([service.host, service.binary], 1 if status == "enabled" else 0)
        yield up
        yield enabled


class FindingsCollector(Collector):
    """The findings each compute service recorded of its last leak search,
    read from ``store`` at every scrape: per (host, kind) a count, and per
    host when they were recorded (epoch s)."""

    def __init__(self, store: "Store") -> None:
        self.store = store

    def collect(self) -> Iterator:
        counts = GaugeMetricFamily(f"{PREFIX}_leak_findings", "Findings of each kind of the "
                                   "last leak search each compute service recorded.",
                                   labels=["host", "kind"])
        when = GaugeMetricFamily(f"{PREFIX}_leak_findings_recorded_timestamp_seconds",
                                 "Since when the recorded findings are these: when they "
                                 "last changed (Unix time, seconds).", labels=["host"])
        for recorded in self.store.recorded_findings():
            for kind, n in recorded.counts().items():
                counts.add_metric([recorded.host, kind], n)
            when.add_metric([recorded.host], recorded.recorded_at)
        yield counts
        yield when


class Exporter:
    """What ``metrics serve``, ``metrics textfile`` and the compute service expose.

    The process metrics, then (given a ``store``) the capacity and PCI
    families of every node or host (:class:`~nova_lite.node_metrics.NodeText`,
    per ``settings``' ``[metrics] per_node_series``) and the services
    (:class:`ServiceCollector`).  :meth:`render` gives the text format.
    """

    def __init__(self, store: "Store | None" = None,
                 settings: "Settings | None" = None) -> None:
        self.process = CollectorRegistry(auto_describe=False)
        self.process.register(ProcessCollector())
        self.services: CollectorRegistry | None = None
        self.nodes: NodeText | None = None
        if store is not None:
            cache = cluster.NodeCache(store)
            self.nodes = NodeText(cache, settings)
            self.services = CollectorRegistry(auto_describe=False)
            self.services.register(ServiceCollector(store, settings, cache))
            self.services.register(FindingsCollector(store))

    def warm_up(self) -> threading.Thread:
        """Read and format every node once, in a daemon thread, and return it.

        The first read of a large fleet takes a while (about 1 s of CPU
        at 100,000 nodes on PostgreSQL); done at start, it leaves a scrape that comes later
        only the changes to read, within Prometheus' scrape timeout.  A
        scrape that comes meanwhile waits for the read.  A failure is
        logged, and the first scrape reads again.
        """
        def run() -> None:
            started = time.monotonic()
            try:
                if self.nodes is not None:
                    self.nodes.render()
            except Exception:   # noqa: BLE001 - the first scrape reads again
                LOG.warning("Metrics: reading the nodes at start failed; the first "
                            "scrape reads them", exc_info=True)
            else:
                LOG.info("Metrics: nodes read at start in %.1f s", time.monotonic() - started)
        thread = threading.Thread(target=run, name="metrics-warm-up", daemon=True)
        thread.start()
        return thread

    def render(self) -> bytes:
        """Every metric in Prometheus' text exposition format (version 0.0.4)."""
        out = [prometheus_client.generate_latest(self.process)]
        if self.nodes is not None and self.services is not None:
            out.append(self.nodes.render().encode())
            out.append(prometheus_client.generate_latest(self.services))
        return b"".join(out)


def registry(store: "Store | None" = None,
             settings: "Settings | None" = None) -> CollectorRegistry:
    """A prometheus_client registry with the same metrics as :class:`Exporter`
    (for embedding in another program's registry; slower on big fleets)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ProcessCollector())
    if store is not None:
        cache = cluster.NodeCache(store)
        reg.register(NodeCollector(cache, settings))
        reg.register(ServiceCollector(store, settings, cache))
        reg.register(FindingsCollector(store))
    return reg


def render(source: "Exporter | CollectorRegistry") -> bytes:
    """The text format of an :class:`Exporter` or a registry."""
    if isinstance(source, Exporter):
        return source.render()
    return prometheus_client.generate_latest(source)


def write_textfile(path: str, reg: "Exporter | CollectorRegistry") -> None:
    """Write ``reg`` (an :class:`Exporter` or a registry) to ``path`` for
    node_exporter's textfile collector, atomically.

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


def wsgi_app(source: "Exporter | CollectorRegistry") -> "WSGIApplication":
    """A WSGI application serving ``source`` (an :class:`Exporter` or a registry):
    ``GET /metrics`` (or ``/``) in the text format; other paths 404, other
    methods 405."""
    def app(environ: "WSGIEnvironment", start_response: "StartResponse") -> list[bytes]:
        path, method = environ.get("PATH_INFO", "/"), environ.get("REQUEST_METHOD", "GET")
        if path not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"Not found: metrics are at /metrics\n"]
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Content-Type", "text/plain"),
                                                      ("Allow", "GET, HEAD")])
            return [b"Method not allowed: GET /metrics\n"]
        body = render(source)
        start_response("200 OK", [("Content-Type", prometheus_client.CONTENT_TYPE_LATEST),
                                  ("Content-Length", str(len(body)))])
        return [b"" if method == "HEAD" else body]
    return app


class MetricsServer(BackgroundServer):
    """A waitress server of ``reg`` (an :class:`Exporter` or a registry) at
    /metrics on ``bind``:``port`` (0: a free port), in a daemon thread:
    ``port``, ``start()``, ``stop()``."""

    def __init__(self, reg: "Exporter | CollectorRegistry", port: int = 0,
                 bind: str = DEFAULT_BIND) -> None:
        super().__init__(wsgi_app(reg), bind, port, what="metrics")

    def start(self) -> "MetricsServer":
        super().start()
        LOG.info("Serving metrics on http://%s:%d/metrics", self.bind, self.port)
        return self


__all__ = ["Exporter", "NodeText", "NodeCollector", "ServiceCollector", "ProcessCollector",
           "FindingsCollector", "MetricsServer", "registry", "render", "write_textfile",
           "wsgi_app", "node_values", "record_claims", "record_audit_duration",
           "record_differences",
           "reason_label", "NO_REASON", "RESOURCE_AUDIT", "VIEWS_AUDIT"]
