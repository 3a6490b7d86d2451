"""The OpenAPI 3.1 document of the read-only API (served at ``/v1/openapi.json``).

The schemas of the records are built from their attrs classes (the same
classes the command line prints), so the document cannot drift from what
the API returns; tests check every route is described and every response
matches its schema.
"""

import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from nova_lite import cluster, explain, leaks, reports
from nova_lite.api import query
from nova_lite.conf import DEFAULT_MAX_LIMIT

VERSION = "1.0.0"

#: What the ``zone`` field of a service, host or hypervisor says.
ZONE_TEXT = ("The host's availability zone: that of its host aggregates (several "
             "joined by ','), else [DEFAULT] default_availability_zone.")

_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean"}
#: Fields whose value may be null although their annotation does not say so.
_NULLABLE = {"HypervisorRow": {"hypervisor_type"},
             "PciDeviceLine": {"numa_node", "parent_addr", "provider"},
             "ProviderLine": {"parent", "generation"},
             "ResourceLine": {"detected", "configured_reserved", "configured_ratio", "ratio"},
             "Finding": {"host", "nodename"}}


def _field_schema(tp: Any, nullable: bool = False) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _field_schema(args[0], nullable=True) if len(args) == 1 else {}
    if tp in _TYPES:
        return {"type": [_TYPES[tp], "null"] if nullable else _TYPES[tp]}
    if origin is dict:
        return {"type": ["object", "null"] if nullable else "object",
                "additionalProperties": _field_schema(typing.get_args(tp)[1])}
    if origin in (tuple, list):
        item = typing.get_args(tp)[0]
        return {"type": "array", "items": _ref(item) if attrs.has(item) else
                _field_schema(item)}
    return {}


#: One host's recorded findings in /v1/findings.
_RECORDED = {"type": "object", "required": ["host", "recorded_at", "counts"],
             "properties": {"host": {"type": "string"},
                            "recorded_at": {"type": "number"},
                            "counts": {"type": "object",
                                       "additionalProperties": {"type": "integer"}}}}


def _ref(cls: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{cls.__name__}"}


def record_schema(cls: type, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON schema of the attrs record ``cls`` (every field required)."""
    hints = typing.get_type_hints(cls)
    nullable = _NULLABLE.get(cls.__name__, set())
    props = {f.name: _field_schema(hints[f.name], f.name in nullable)
             for f in attrs.fields(cls)}
    props.update(extra or {})
    return {"type": "object", "required": sorted(props), "properties": props}


def _list_of(key: str, cls: type) -> dict[str, Any]:
    return {"type": "object", "required": [key],
            "properties": {key: {"type": "array", "items": _ref(cls)}}}


def _ok(schema: Mapping[str, Any], text: str) -> dict[str, Any]:
    return {"200": {"description": text,
                    "content": {"application/json": {"schema": schema}}}}


_ERROR = {"$ref": "#/components/responses/Error"}


def _get(summary: str, description: str, responses: Mapping[str, Any],
         parameters: Iterable[Mapping[str, Any]] = (),
         errors: Iterable[str] = ("400", "503")) -> dict[str, Any]:
    """A GET operation; every one may also answer 405 and 500."""
    answers = dict(responses)
    for code in (*errors, "405", "500"):
        answers[code] = _ERROR
    return {"get": {"summary": summary, "description": description,
                    "parameters": list(parameters), "responses": answers}}


def _param(name: str, where: str, text: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required or where == "path",
            "description": text, "schema": {"type": "string", "minLength": 1}}


_NODE = _param("node", "path", "Node name or uuid.")
_HOST_Q = _param("host", "query", "Host of the node, if its name is on several hosts: a host "
                 "with a compute service or compute node record (404 otherwise).")


def _file(summary: str, description: str, content_type: str) -> dict[str, Any]:
    return _get(summary, description,
                {"200": {"description": content_type, "content": {content_type: {}}}},
                errors=("400",))


def _interval() -> dict[str, Any]:
    return {"name": "interval", "in": "query", "required": False,
            "description": f"Seconds between the page's polls: a number from "
                           f"{query.MIN_INTERVAL_S} to {query.MAX_INTERVAL_S} written as "
                           f"plain decimal digits with an optional fraction (2, 2.5; no "
                           f"sign, exponent or spaces), 400 otherwise; default "
                           f"{query.DEFAULT_INTERVAL_S}.",
            "schema": {"type": "number", "minimum": query.MIN_INTERVAL_S,
                       "maximum": query.MAX_INTERVAL_S,
                       "default": query.DEFAULT_INTERVAL_S}}


#: One link of a paged list (Nova's ``*_links``).
_LINK = {"type": "object", "required": ["rel", "href"],
         "properties": {"rel": {"enum": ["next"]}, "href": {"type": "string"}}}


def _limit(max_limit: int) -> dict[str, Any]:
    return {"name": "limit", "in": "query", "required": False,
            "description": f"Most nodes the page gives: a whole number from 1 to "
                           f"{max_limit} ([api] max_limit) written as plain decimal "
                           f"digits, 400 otherwise; default {max_limit}.",
            "schema": {"type": "integer", "minimum": 1, "maximum": max_limit,
                       "default": max_limit}}


def document(max_limit: int = DEFAULT_MAX_LIMIT) -> dict[str, Any]:
    """The OpenAPI document, as a dict (``max_limit``: ``[api] max_limit``)."""
    schemas = {
        "ClassTotals": record_schema(cluster.ClassTotals),
        "ClusterTotals": record_schema(cluster.ClusterTotals,
                                       {"generated_at": {"type": "number"}}),
        "HypervisorRow": record_schema(reports.HypervisorRow),
        "HypervisorStats": record_schema(reports.HypervisorStats),
        "ResourceLine": record_schema(reports.ResourceLine),
        "PciDeviceLine": record_schema(reports.PciDeviceLine),
        "ProviderInventoryLine": record_schema(reports.ProviderInventoryLine),
        "ProviderLine": record_schema(reports.ProviderLine),
        "HostUsageRow": record_schema(reports.HostUsageRow),
        "Finding": record_schema(leaks.Finding),
        "Service": {"type": "object",
                    "required": ["host", "binary", "zone", "state", "status", "updated_at",
                                 "disabled_reason"],
                    "properties": {"host": {"type": "string"}, "binary": {"type": "string"},
                                   "zone": {"type": "string", "description": ZONE_TEXT},
                                   "state": {"enum": ["up", "down"]},
                                   "status": {"enum": ["enabled", "disabled"]},
                                   "updated_at": {"type": "number"},
                                   "disabled_reason": {"type": ["string", "null"]}}},
        "Host": {"type": "object", "required": ["host", "zone", "state", "status", "nodes",
                                                "resources", "traits", "pci_devices",
                                                "providers"],
                 "properties": {"host": {"type": "string"},
                                "zone": {"type": "string", "description": ZONE_TEXT},
                                "state": {"enum": ["up", "down"]},
                                "status": {"enum": ["enabled", "disabled"]},
                                "nodes": {"type": "integer"},
                                "resources": {"type": "array",
                                              "items": _ref(cluster.ClassTotals)},
                                "traits": {"type": "array", "items": {"type": "string"}},
                                "pci_devices": {
                                    "type": "object", "required": ["total", "in_use", "free"],
                                    "properties": {"total": {"type": "integer"},
                                                   "in_use": {"type": "integer"},
                                                   "free": {"type": "integer"}}},
                                "providers": {
                                    "type": "object",
                                    "description": "The hosts' child providers (devices "
                                                   "accounted apart, such as GPUs): how many, "
                                                   "and per class their capacity, used and "
                                                   "free summed.",
                                    "required": ["total", "resources"],
                                    "properties": {"total": {"type": "integer"},
                                                   "resources": {
                                                       "type": "object",
                                                       "additionalProperties": {
                                                           "type": "object"}}}}}},
        "Hypervisor": {"type": "object",
                       "required": ["uuid", "host", "nodename", "zone", "generation",
                                    "state", "status", "last_error", "traits", "pci_devices",
                                    "providers", "resources"],
                       "properties": {"uuid": {"type": "string"},
                                      "host": {"type": "string"},
                                      "zone": {"type": "string", "description": ZONE_TEXT},
                                      "nodename": {"type": "string"},
                                      "generation": {"type": "integer"},
                                      "state": {"enum": ["up", "down"]},
                                      "status": {"enum": ["enabled", "disabled"]},
                                      "last_error": {"type": ["string", "null"]},
                                      "traits": {"type": "array",
                                                 "items": {"type": "string"}},
                                      "pci_devices": {"type": "array", "items": _ref(
                                          reports.PciDeviceLine)},
                                      "providers": {"type": "array", "items": _ref(
                                          reports.ProviderLine)},
                                      "resources": {"type": "array",
                                                    "items": _ref(reports.ResourceLine)}}},
        "NodeExplanation": {"type": "object",
                            "required": [f.name for f in attrs.fields(explain.NodeExplanation)]
                            + ["consistent"],
                            "properties": {"host": {"type": "string"},
                                           "nodename": {"type": "string"},
                                           "verdict": {"type": "string"},
                                           "consistent": {"type": "boolean"},
                                           "resources": {"type": "array"},
                                           "culprits": {"type": "array"}}},
        "Error": {"type": "object", "required": ["error"],
                  "properties": {"error": {
                      "type": "object", "required": ["code", "title", "message"],
                      "properties": {"code": {"type": "integer"}, "title": {"type": "string"},
                                     "message": {"type": "string"}}}}},
    }
    paths = {
        "/": _get("The overview page",
                  "HTML page that polls this API: cluster totals, a usage bar per host, the "
                  "audit's findings.  Its style and script are the files under /static.",
                  {"200": {"description": "HTML", "content": {"text/html": {}}}},
                  [_interval()], errors=("400",)),
        "/static/page.css": _file("The page's style", "The overview page's style sheet.",
                                  "text/css"),
        "/static/page.js": _file("The page's script", "The overview page's script: polls "
                                 "the API every interval seconds, never more often than "
                                 f"every {query.MIN_INTERVAL_S} s.", "text/javascript"),
        "/static/favicon.svg": _file("The page's icon", "The overview page's icon (SVG).",
                                     "image/svg+xml"),
        "/v1/openapi.json": _get("This document", "The OpenAPI 3.1 document of the API.",
                                 _ok({"type": "object", "required": ["openapi", "paths"]},
                                     "The document"), errors=("400",)),
        "/v1/cluster": _get(
            "Cluster totals", "Per resource class, summed over every node: total, "
            "reserved, capacity (floor((total - reserved) x ratio) per node), used, free "
            "(never negative) and over, in the class's unit (CPUs, MiB, GiB).",
            _ok(_ref(cluster.ClusterTotals), "Totals")),
        "/v1/hypervisors": _get(
            "Compute nodes, a page at a time",
            "One row per compute node, as 'hypervisor list', sorted by host and node "
            "name: up to limit of them after the node whose uuid is marker.  While more "
            "follow, hypervisors_links holds a 'next' link (the same limit, the marker of "
            "this page's last node); it is empty on the last page.  An unknown marker "
            "(a node deleted since the previous page, say) is a 400.",
            _ok({"type": "object", "required": ["hypervisors", "hypervisors_links"],
                 "properties": {"hypervisors": {"type": "array",
                                                "items": _ref(reports.HypervisorRow)},
                                "hypervisors_links": {"type": "array", "items": _LINK}}},
                "Nodes"),
            [_limit(max_limit), _param(
                "marker", "query", "The uuid of the last node of the previous page: the "
                "page starts after it (400 if no compute node has it).")]),
        "/v1/hypervisors/statistics": _get(
            "Totals", "Totals across nodes, as 'hypervisor stats'.",
            _ok({"type": "object", "required": ["hypervisor_statistics"],
                 "properties": {"hypervisor_statistics": _ref(reports.HypervisorStats)}},
                "Totals")),
        "/v1/hypervisors/{node}": _get(
            "One compute node", "Per resource class detected, configured and effective "
            "values, as 'hypervisor show'.",
            _ok({"type": "object", "required": ["hypervisor"],
                 "properties": {"hypervisor": {"$ref": "#/components/schemas/Hypervisor"}}},
                "The node"), [_NODE, _HOST_Q], ("400", "404", "503")),
        "/v1/hosts": _get(
            "Hosts", "Per host: service state and its nodes' totals per resource class.",
            _ok({"type": "object", "required": ["hosts"],
                 "properties": {"hosts": {"type": "array",
                                          "items": {"$ref": "#/components/schemas/Host"}}}},
                "Hosts")),
        "/v1/hosts/{host}": _get(
            "Describe a host", "Nova's host-describe rows, as 'host describe'.",
            _ok(_list_of("host", reports.HostUsageRow), "Rows"),
            [_param("host", "path", "Compute host.")], ("400", "404", "503")),
        "/v1/services": _get(
            "Compute services", "Up (heartbeat within service_down_time) or down, enabled "
            "or disabled.",
            _ok({"type": "object", "required": ["services"],
                 "properties": {"services": {"type": "array", "items": {
                     "$ref": "#/components/schemas/Service"}}}}, "Services")),
        "/v1/nodes/{node}/explain": _get(
            "Explain a node", "Why the node's free is what it is, as 'node explain' "
            "(from the records alone).",
            _ok({"type": "object", "required": ["explanation"],
                 "properties": {"explanation": {
                     "$ref": "#/components/schemas/NodeExplanation"}}}, "The explanation"),
            [_NODE, _HOST_Q], ("400", "404", "503")),
        "/v1/findings": _get(
            "Leak findings", "The audit's findings from one snapshot of the records (stale "
            "allocations, stuck and waiting moves, instances whose node is gone, nodes over "
            "capacity), as 'audit' lists them; guests are not compared.  'recorded' gives, "
            "per host, the counts of each kind its compute service recorded at its last "
            "pass (the figures of the metrics).",
            _ok({"type": "object", "required": ["findings", "clean", "guests_compared",
                                                "migration_stuck_age", "recorded"],
                 "properties": {"findings": {"type": "array", "items": _ref(leaks.Finding)},
                                "clean": {"type": "boolean"},
                                "guests_compared": {"type": "boolean"},
                                "migration_stuck_age": {"type": "number"},
                                "recorded": {"type": "array", "items": _RECORDED}}},
                "Findings"),
            [_param("host", "query", "Only this host's nodes: a host with a compute service "
                    "or compute node record (404 otherwise; an unknown host is never "
                    "reported clean)."),
             _param("node", "query", "Only this node, by name or uuid (404 if no compute "
                    "node record has it).")],
            ("400", "404", "503")),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "nova-lite read-only API", "version": VERSION,
                 "description": "Read-only views of the records: GET (and HEAD) only. "
                                "Every response, errors included, carries "
                                "X-Content-Type-Options: nosniff and a "
                                "Content-Security-Policy allowing this server's own "
                                "script, style and data only."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": {"description": "An error, as JSON",
                                    "content": {"application/json": {
                                        "schema": {"$ref": "#/components/schemas/Error"}}}}},
        },
    }


__all__ = ["document", "record_schema", "VERSION"]
