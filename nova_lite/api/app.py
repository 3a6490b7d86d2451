"""The read-only JSON API and the overview page, as one WSGI application.

Routes (every one GET or HEAD; any other method is answered 405):

=====================================  ============================================
``/``                                  the overview page (HTML, polls the API)
``/static/page.css``                   the page's style sheet
``/static/page.js``                    the page's script
``/static/favicon.svg``                the page's icon
``/v1/openapi.json``                   the OpenAPI 3 document of these routes
``/v1/cluster``                        totals per resource class over every node
``/v1/hypervisors``                    a page of compute nodes (``hypervisor list``)
``/v1/hypervisors/statistics``         totals (``hypervisor stats``)
``/v1/hypervisors/{node}``             one node per resource class (``hypervisor show``)
``/v1/hosts``                          per host: its nodes' totals per class, service state
``/v1/hosts/{host}``                   Nova's host-describe rows (``host describe``)
``/v1/services``                       compute services: up/down, enabled/disabled
``/v1/nodes/{node}/explain``           why a node's free is what it is (``node explain``)
``/v1/findings``                       the audit's leak findings (``audit``, records only)
=====================================  ============================================

``/v1/hypervisors`` pages as Nova's lists do: ``limit`` (1 to ``[api]
max_limit``, default ``max_limit``) nodes sorted by host and node name,
after the node whose uuid is ``marker``; ``hypervisors_links`` holds a
``next`` link while more follow.  The page comes from the node cache
(:class:`~nova_lite.cluster.NodeCache`), its running guests from one
grouped count of the page's hosts.

Errors are JSON ``{"error": {"code": N, "title": ..., "message": ...}}``
(:mod:`nova_lite.api.errors`): 404 for an unknown node, host or path (in
the path or in a query parameter, see :mod:`nova_lite.api.query`), 400 for
a bad query parameter, 405 for a method other than GET/HEAD, 503 when the
database fails (naming the kind of failure, never the database URL), 500
for anything else.  Every response, errors included, carries
``X-Content-Type-Options: nosniff`` and the :data:`CONTENT_SECURITY_POLICY`
the page is written to meet (no inline script or style).  Nothing is ever
written: the store should be opened read-only.
"""

import importlib.resources
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs
import sqlalchemy as sa
from werkzeug import exceptions as http
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from nova_lite import cluster, explain, leaks, reports
from nova_lite.api import openapi, query
from nova_lite.api.errors import (
    BadQuery, UnknownName, database_failure, echo, error_response)
from nova_lite.api.errors import json_response
from nova_lite.exception import InvalidInput, MarkerNotFound, NodeNotFound, StoreError
from nova_lite.findings import TASKS_WAITING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIEnvironment

    from nova_lite.conf import Settings
    from nova_lite.db import ServiceRecord, Store
    from nova_lite.objects import ComputeNode

LOG = logging.getLogger(__name__)

#: Every route: (path, endpoint).  The OpenAPI document describes each.
ROUTES = (
    ("/", "page"),
    ("/static/page.css", "page_css"),
    ("/static/page.js", "page_js"),
    ("/static/favicon.svg", "favicon"),
    ("/v1/openapi.json", "openapi"),
    ("/v1/cluster", "cluster"),
    ("/v1/hypervisors", "hypervisors"),
    ("/v1/hypervisors/statistics", "hypervisor_stats"),
    ("/v1/hypervisors/<node>", "hypervisor"),
    ("/v1/hosts", "hosts"),
    ("/v1/hosts/<host>", "host"),
    ("/v1/services", "services"),
    ("/v1/nodes/<node>/explain", "explain"),
    ("/v1/findings", "findings"),
)

#: Query parameters each endpoint accepts (any other is a 400).
QUERY = query.QUERY

#: Rows of gone nodes the hypervisor row cache may hold before it is pruned.
ROW_CACHE_SLACK = 10000

#: How many known hosts a 404 for an unknown host lists.
KNOWN_SHOWN = 20

#: The Content-Security-Policy of every response: the page loads its style,
#: script and data from this server only, runs no inline script or style,
#: and cannot be framed.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")
#: Headers every response carries, errors included.
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff",
                    "Content-Security-Policy": CONTENT_SECURITY_POLICY}

#: The page's files: endpoint -> (file in ``nova_lite/api/static``, content type).
STATIC = {"page": ("index.html", "text/html; charset=utf-8"),
          "page_css": ("page.css", "text/css; charset=utf-8"),
          "page_js": ("page.js", "text/javascript; charset=utf-8"),
          "favicon": ("favicon.svg", "image/svg+xml")}


def static_file(name: str) -> bytes:
    """A file of the page shipped with the package (``nova_lite/api/static/<name>``)."""
    return importlib.resources.files("nova_lite.api").joinpath(f"static/{name}").read_bytes()


def page_html() -> bytes:
    """The overview page shipped with the package (``nova_lite/api/static/index.html``)."""
    return static_file("index.html")


class ApiApp:
    """The WSGI application over ``store`` (opened read-only) and ``settings``.

    ``settings`` gives ``service_down_time`` (s) and ``migration_stuck_age``
    (s), and explains reserved amounts and ratios in ``node explain``.
    """

    def __init__(self, store: "Store", settings: "Settings") -> None:
        self.store = store
        self.settings = settings
        self.cache = cluster.NodeCache(store)
        # node uuid -> ((generation, host, name), the figures of its hypervisor row)
        self._rows: dict[str, tuple[tuple[int, str, str], dict[str, Any]]] = {}
        self._rows_limit = ROW_CACHE_SLACK
        self.url_map = Map([Rule(path, endpoint=endpoint, methods=["GET"])
                            for path, endpoint in ROUTES], strict_slashes=False)
        self._static = {endpoint: (static_file(name), ctype)
                        for endpoint, (name, ctype) in STATIC.items()}

    def warm_up(self) -> threading.Thread:
        """Read every node record into the node cache once, in a daemon thread,
        and return it: the first read of a large fleet takes most of a
        second (about 0.7 s of CPU at 100,000 nodes), which the first request
        then does not wait for unless it comes meanwhile.  A failure is logged; the first
        request reads again."""
        def run() -> None:
            try:
                self.cache.nodes()
            except Exception:   # noqa: BLE001 - the first request reads again
                LOG.warning("API: reading the nodes at start failed; the first request "
                            "reads them", exc_info=True)
        thread = threading.Thread(target=run, name="api-warm-up", daemon=True)
        thread.start()
        return thread

    # -- WSGI ---------------------------------------------------------------------
    def __call__(self, environ: "WSGIEnvironment",
                 start_response: "StartResponse") -> Iterable[bytes]:
        return self.dispatch(Request(environ))(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        """The response to ``request`` (the endpoint's, or a JSON error), with
        :data:`SECURITY_HEADERS`."""
        response = self._respond(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    def _respond(self, request: Request) -> Response:
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
            params = query.checked(endpoint, request.args, self._records,
                                   self.settings.api_max_limit)
            return getattr(self, f"get_{endpoint}")(params, **args)
        except http.MethodNotAllowed as exc:
            response = error_response(405, "Method Not Allowed",
                                      f"{request.method} is not allowed: this API is "
                                      "read-only (GET and HEAD only)")
            response.headers["Allow"] = ", ".join(exc.valid_methods or ("GET", "HEAD"))
            return response
        except http.HTTPException as exc:
            return error_response(exc.code or 500, exc.name, exc.description or exc.name)
        except NodeNotFound as exc:
            return error_response(404, "Not Found", str(exc))
        except InvalidInput as exc:
            return error_response(400, "Bad Request", str(exc))
        except (StoreError, sa.exc.SQLAlchemyError) as exc:
            what = database_failure(exc)
            LOG.warning("API %s %s: database unavailable (%s): %s", request.method,
                        request.path, what, exc)
            return error_response(503, "Service Unavailable", f"database unavailable: {what}")
        except Exception:
            LOG.exception("API %s %s: internal error", request.method, request.path)
            return error_response(500, "Internal Server Error",
                                  "internal error; the server's log has the details")

    # -- helpers ------------------------------------------------------------------
    def _records(self) -> tuple[list["ServiceRecord"], list["ComputeNode"]]:
        """``(services, nodes)`` against which a host or node parameter is checked."""
        return self._services(), self.cache.nodes()

    def _services(self) -> list["ServiceRecord"]:
        return self.store.list_services()

    def _zones(self) -> tuple[dict[str, str], str]:
        """``({host: its availability zone}, the zone of a host in none)``, as
        ``service list`` shows them."""
        default = self.settings.default_availability_zone
        return self.store.aggregates.host_zones(default), default

    def _static_response(self, endpoint: str) -> Response:
        body, ctype = self._static[endpoint]
        return Response(body, content_type=ctype, headers={"Cache-Control": "no-store"})

    # -- endpoints ----------------------------------------------------------------
    def get_page(self, params: dict[str, Any]) -> Response:
        return self._static_response("page")

    def get_page_css(self, params: dict[str, Any]) -> Response:
        return self._static_response("page_css")

    def get_page_js(self, params: dict[str, Any]) -> Response:
        return self._static_response("page_js")

    def get_favicon(self, params: dict[str, Any]) -> Response:
        return self._static_response("favicon")

    def get_openapi(self, params: dict[str, Any]) -> Response:
        return json_response(openapi.document(self.settings.api_max_limit))

    def get_cluster(self, params: dict[str, Any]) -> Response:
        totals = self.cache.totals()
        return json_response(dict(totals.to_dict(), generated_at=time.time()))

    def get_hypervisors(self, params: dict[str, Any]) -> Response:
        limit = params.get("limit", self.settings.api_max_limit)
        try:
            nodes, more = self.cache.page(limit, params.get("marker"))
        except MarkerNotFound as exc:
            raise BadQuery(f"query parameter 'marker': {exc}") from None
        running = self.store.count_live_instances({n.host for n in nodes})
        services = {s.host: s for s in self._services()}
        now = time.time()
        rows = []
        for node in nodes:
            state, status = reports.service_state(services.get(node.host),
                                                  self.settings.service_down_time, now)
            rows.append(dict(self._row_figures(node), state=state, status=status,
                             running_vms=running.get((node.host, node.nodename), 0)))
        if len(self._rows) > self._rows_limit:
            self._forget_rows()
        links = [{"rel": "next", "href": "/v1/hypervisors?" + urllib.parse.urlencode(
            {"limit": limit, "marker": nodes[-1].uuid})}] if more else []
        return json_response({"hypervisors": rows, "hypervisors_links": links})

    def _row_figures(self, node: "ComputeNode") -> dict[str, Any]:
        """The fields of ``node``'s :class:`~nova_lite.reports.HypervisorRow` that
        come from its record alone, computed once per generation of the node."""
        key = (node.generation, node.host, node.nodename)
        cached = self._rows.get(node.uuid)
        if cached is not None and cached[0] == key:
            return cached[1]
        row = attrs.asdict(reports.hypervisor_rows([node], (), (), 0, running={})[0])
        for name in ("state", "status", "running_vms"):
            del row[name]
        self._rows[node.uuid] = (key, row)
        return row

    def _forget_rows(self) -> None:
        """Drop the cached rows of nodes that are gone; prune again at twice the rest."""
        live = {n.uuid for n in self.cache.nodes()}
        for uuid in [u for u in list(self._rows) if u not in live]:
            self._rows.pop(uuid, None)
        self._rows_limit = 2 * len(self._rows) + ROW_CACHE_SLACK

    def get_hypervisor_stats(self, params: dict[str, Any]) -> Response:
        stats = reports.hypervisor_stats(self.store.get_compute_nodes(),
                                         self.store.list_instances())
        return json_response({"hypervisor_statistics": attrs.asdict(stats)})

    def get_hypervisor(self, params: dict[str, Any], node: str) -> Response:
        host = params.get("host")
        found = explain.find_node(self.store, node, host)
        services = [s for s in self._services() if s.host == found.host]
        state, status = reports.service_state(services[0] if services else None,
                                              self.settings.service_down_time)
        lines = reports.resource_lines(found, self.settings)
        zones, default_zone = self._zones()
        return json_response({"hypervisor": {
            "uuid": found.uuid, "host": found.host, "nodename": found.nodename,
            "zone": zones.get(found.host, default_zone),
            "generation": found.generation, "state": state, "status": status,
            "last_error": found.last_error, "traits": sorted(found.traits),
            "pci_devices": [attrs.asdict(d) for d in reports.pci_device_lines(found)],
            "providers": [attrs.asdict(p) for p in reports.provider_lines(
                found, self._child_generations(found))],
            "resources": [attrs.asdict(line) for line in lines]}})

    def _child_generations(self, node: "ComputeNode") -> dict[str, int] | None:
        if node.resources is None or not node.resources.providers:
            return None
        return {c.provider.name: c.generation
                for c in self.store.child_providers([node.uuid]).get(node.uuid, ())}

    def get_hosts(self, params: dict[str, Any]) -> Response:
        nodes = self.cache.nodes()
        services = {s.host: s for s in self._services()}
        zones, default_zone = self._zones()
        by_host: dict[str, list[ComputeNode]] = {}
        for node in nodes:
            by_host.setdefault(node.host, []).append(node)
        hosts = []
        for host in sorted(set(by_host) | set(services)):
            state, status = reports.service_state(services.get(host),
                                                  self.settings.service_down_time)
            own = by_host.get(host, ())
            devices = [d for node in own for d in reports.pci_device_lines(node)]
            children = [p for node in own for p in reports.provider_lines(node)]
            child_totals: dict[str, dict[str, int]] = {}
            for child in children:
                for inv in child.inventories:
                    into = child_totals.setdefault(inv.resource_class,
                                                   {"capacity": 0, "used": 0, "free": 0})
                    into["capacity"] += inv.capacity
                    into["used"] += inv.used
                    into["free"] += inv.free
            hosts.append({"host": host, "zone": zones.get(host, default_zone),
                          "state": state, "status": status, "nodes": len(own),
                          "resources": [attrs.asdict(t) for t in cluster.class_totals(own)],
                          "traits": sorted(set().union(*(n.traits for n in own))),
                          "pci_devices": {"total": len(devices),
                                          "in_use": sum(d.in_use for d in devices),
                                          "free": sum(d.free for d in devices)},
                          "providers": {"total": len(children),
                                        "resources": dict(sorted(child_totals.items()))}})
        return json_response({"hosts": hosts})

    def get_host(self, params: dict[str, Any], host: str) -> Response:
        nodes = self.store.get_compute_nodes()
        if not any(n.host == host for n in nodes):
            known = sorted({n.host for n in nodes})
            shown = ", ".join(known[:KNOWN_SHOWN]) or "none"
            if len(known) > KNOWN_SHOWN:
                shown += f" and {len(known) - KNOWN_SHOWN} more (see /v1/hosts)"
            raise UnknownName(f"No compute nodes on host {echo(host)}; known hosts: {shown}")
        rows = reports.host_describe(host, nodes, self.store.list_instances(host=host))
        return json_response({"host": [attrs.asdict(r) for r in rows]})

    def get_services(self, params: dict[str, Any]) -> Response:
        now = time.time()
        zones, default_zone = self._zones()
        out = []
        for service in self._services():
            state, status = reports.service_state(service, self.settings.service_down_time,
                                                  now)
            out.append({"host": service.host, "binary": service.binary,
                        "zone": zones.get(service.host, default_zone), "state": state,
                        "status": status, "updated_at": service.updated_at,
                        "disabled_reason": service.disabled_reason})
        return json_response({"services": out})

    def get_explain(self, params: dict[str, Any], node: str) -> Response:
        host = params.get("host")
        result = explain.explain_node(self.store, node, self.settings, host=host)
        return json_response({"explanation": result.to_dict()})

    def get_findings(self, params: dict[str, Any]) -> Response:
        host = params.get("host")
        node = params.get("node")
        report = leaks.find_leaks(self.store, self.settings, host=host, nodename=node)
        stored = self.store.recorded_findings(host)
        recorded = [{"host": r.host, "recorded_at": r.recorded_at, "counts": r.counts()}
                    for r in stored]
        # Work waiting for a host whose service is down: only a live peer's
        # search finds it, so it comes from the recorded findings.
        waiting = [f.to_dict() for r in stored for f in r.findings
                   if f.kind == TASKS_WAITING and node is None]
        return json_response({"findings": report.to_dicts() + waiting,
                              "clean": report.clean and not waiting,
                              "guests_compared": report.guests_compared,
                              "migration_stuck_age": report.migration_stuck_age,
                              "recorded": recorded})


def make_app(store: "Store", settings: "Settings") -> ApiApp:
    """The API's WSGI application over ``store`` and ``settings``."""
    return ApiApp(store, settings)


__all__ = ["ApiApp", "make_app", "ROUTES", "QUERY", "STATIC", "SECURITY_HEADERS",
           "CONTENT_SECURITY_POLICY", "page_html", "static_file", "error_response"]
