"""The read-only JSON API and the overview page, as one WSGI application.

Routes (every one GET or HEAD; any other method is answered 405):

=====================================  ============================================
``/``                                  the overview page (HTML, polls the API)
``/v1/openapi.json``                   the OpenAPI 3 document of these routes
``/v1/cluster``                        totals per resource class over every node
``/v1/hypervisors``                    one row per compute node (``hypervisor list``)
``/v1/hypervisors/statistics``         totals (``hypervisor stats``)
``/v1/hypervisors/{node}``             one node per resource class (``hypervisor show``)
``/v1/hosts``                          per host: its nodes' totals per class, service state
``/v1/hosts/{host}``                   Nova's host-describe rows (``host describe``)
``/v1/services``                       compute services: up/down, enabled/disabled
``/v1/nodes/{node}/explain``           why a node's free is what it is (``node explain``)
``/v1/findings``                       the audit's leak findings (``audit``, records only)
=====================================  ============================================

Errors are JSON ``{"error": {"code": N, "title": ..., "message": ...}}``:
404 for an unknown node, host or path, 400 for a bad query parameter, 405
for a method other than GET/HEAD, 503 when the database fails.  Nothing
is ever written: the store should be opened read-only.
"""

import importlib.resources
import json
import logging
import time

import attrs
import sqlalchemy as sa
from werkzeug import exceptions as http
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from nova_lite import cluster, explain, leaks, reports
from nova_lite.api import openapi
from nova_lite.exception import InvalidInput, NodeNotFound, StoreError

LOG = logging.getLogger(__name__)

#: Every route: (path, endpoint).  The OpenAPI document describes each.
ROUTES = (
    ("/", "page"),
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
QUERY = {"page": ("interval",), "hypervisor": ("host",), "explain": ("host",),
         "findings": ("host", "node")}


class BadQuery(http.BadRequest):
    """A query parameter that is unknown or has a bad value (400)."""


def page_html() -> bytes:
    """The overview page shipped with the package (``nova_lite/api/static/index.html``)."""
    return importlib.resources.files("nova_lite.api").joinpath(
        "static/index.html").read_bytes()


def _json(data, status=200) -> Response:
    return Response(json.dumps(data, sort_keys=True) + "\n", status=status,
                    mimetype="application/json",
                    headers={"Cache-Control": "no-store"})


def error_response(code: int, title: str, message: str) -> Response:
    """The JSON error body every failure gets."""
    return _json({"error": {"code": code, "title": title, "message": message}}, code)


class ApiApp:
    """The WSGI application over ``store`` (opened read-only) and ``settings``.

    ``settings`` gives ``service_down_time`` (s) and ``migration_stuck_age``
    (s), and explains reserved amounts and ratios in ``node explain``.
    """

    def __init__(self, store, settings) -> None:
        self.store = store
        self.settings = settings
        self.cache = cluster.NodeCache(store)
        self.url_map = Map([Rule(path, endpoint=endpoint, methods=["GET"])
                            for path, endpoint in ROUTES], strict_slashes=False)
        self._page = page_html()

    # -- WSGI ---------------------------------------------------------------------
    def __call__(self, environ, start_response):
        return self.dispatch(Request(environ))(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        """The response to ``request``: the endpoint's, or a JSON error."""
        adapter = self.url_map.bind_to_environ(request.environ)
        try:
            endpoint, args = adapter.match()
            allowed = QUERY.get(endpoint, ())
            unknown = sorted(set(request.args) - set(allowed))
            if unknown:
                raise BadQuery(f"unknown query parameter(s) {', '.join(unknown)}; this path "
                               f"takes {', '.join(allowed) or 'none'}")
            return getattr(self, f"get_{endpoint}")(request, **args)
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
            LOG.error("API %s %s: database failure: %s", request.method, request.path, exc)
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return error_response(503, "Service Unavailable", f"database failure: {text}")

    # -- helpers ------------------------------------------------------------------
    def _query(self, request, name):
        value = request.args.get(name)
        if value is not None and not value.strip():
            raise BadQuery(f"query parameter {name!r} must not be empty")
        return value

    def _services(self):
        from nova_lite.cli.service import list_services
        return list_services(self.store)

    # -- endpoints ----------------------------------------------------------------
    def get_page(self, request):
        return Response(self._page, mimetype="text/html",
                        headers={"Cache-Control": "no-store"})

    def get_openapi(self, request):
        return _json(openapi.document())

    def get_cluster(self, request):
        totals = self.cache.totals()
        return _json(dict(totals.to_dict(), generated_at=time.time()))

    def get_hypervisors(self, request):
        rows = reports.hypervisor_rows(self.store.get_compute_nodes(), self._services(),
                                       self.store.list_instances(),
                                       self.settings.service_down_time)
        return _json({"hypervisors": [attrs.asdict(r) for r in rows]})

    def get_hypervisor_stats(self, request):
        stats = reports.hypervisor_stats(self.store.get_compute_nodes(),
                                         self.store.list_instances())
        return _json({"hypervisor_statistics": attrs.asdict(stats)})

    def get_hypervisor(self, request, node):
        host = self._query(request, "host")
        found = explain.find_node(self.store, node, host)
        services = [s for s in self._services() if s.host == found.host]
        state, status = reports.service_state(services[0] if services else None,
                                              self.settings.service_down_time)
        lines = reports.resource_lines(found, self.settings)
        return _json({"hypervisor": {
            "uuid": found.uuid, "host": found.host, "nodename": found.nodename,
            "generation": found.generation, "state": state, "status": status,
            "last_error": found.last_error,
            "resources": [attrs.asdict(line) for line in lines]}})

    def get_hosts(self, request):
        nodes = self.cache.nodes()
        services = {s.host: s for s in self._services()}
        by_host = {}
        for node in nodes:
            by_host.setdefault(node.host, []).append(node)
        hosts = []
        for host in sorted(set(by_host) | set(services)):
            state, status = reports.service_state(services.get(host),
                                                  self.settings.service_down_time)
            hosts.append({"host": host, "state": state, "status": status,
                          "nodes": len(by_host.get(host, ())),
                          "resources": [attrs.asdict(t) for t in
                                        cluster.class_totals(by_host.get(host, ()))]})
        return _json({"hosts": hosts})

    def get_host(self, request, host):
        nodes = self.store.get_compute_nodes()
        if not any(n.host == host for n in nodes):
            known = ", ".join(sorted({n.host for n in nodes})) or "none"
            raise http.NotFound(f"No compute nodes on host {host!r}; known hosts: {known}")
        rows = reports.host_describe(host, nodes, self.store.list_instances(host=host))
        return _json({"host": [attrs.asdict(r) for r in rows]})

    def get_services(self, request):
        now = time.time()
        out = []
        for service in self._services():
            state, status = reports.service_state(service, self.settings.service_down_time,
                                                  now)
            out.append({"host": service.host, "binary": service.binary, "state": state,
                        "status": status, "updated_at": service.updated_at,
                        "disabled_reason": service.disabled_reason})
        return _json({"services": out})

    def get_explain(self, request, node):
        host = self._query(request, "host")
        result = explain.explain_node(self.store, node, self.settings, host=host)
        return _json({"explanation": result.to_dict()})

    def get_findings(self, request):
        host = self._query(request, "host")
        node = self._query(request, "node")
        report = leaks.find_leaks(self.store, self.settings, host=host, nodename=node)
        return _json({"findings": report.to_dicts(), "clean": report.clean,
                      "guests_compared": report.guests_compared,
                      "migration_stuck_age": report.migration_stuck_age})


def make_app(store, settings) -> ApiApp:
    """The API's WSGI application over ``store`` and ``settings``."""
    return ApiApp(store, settings)


__all__ = ["ApiApp", "make_app", "ROUTES", "page_html", "error_response"]
