"""Query parameters of the API: which each path takes, and what a good value is.

Checked before any endpoint reads a finding or an explanation, so a bad
request is answered at once and reads nothing more:

- a parameter the path does not take, one given twice, or an empty one
  is a 400 naming it;
- ``interval`` (the page's poll period) is a number of seconds from
  :data:`MIN_INTERVAL_S` to :data:`MAX_INTERVAL_S` written as plain decimal
  digits with an optional fraction (``2``, ``2.5``: no sign, exponent or
  spaces), else a 400;
- ``host`` must name a host with a compute service or a compute node
  record, and ``node`` a compute node by name or uuid, else a 404 naming
  it: an unknown name never reads as an empty, clean answer;
- ``limit`` (the size of a page) is a whole number from 1 to ``[api]
  max_limit`` written as plain decimal digits, else a 400; ``marker`` (the
  uuid of the previous page's last item) is checked by the endpoint, which
  answers a 400 naming it when no item has it (as Nova does).
"""

import re
from collections.abc import Callable, Iterable
from typing import Any

from nova_lite.api.errors import BadQuery, UnknownName, echo
from nova_lite.conf import DEFAULT_MAX_LIMIT

#: Query parameters each endpoint takes (any other is a 400).
QUERY = {"page": ("interval",), "hypervisor": ("host",), "explain": ("host",),
         "findings": ("host", "node"), "hypervisors": ("limit", "marker")}

#: Shortest poll period the page accepts and uses (seconds).
MIN_INTERVAL_S = 1
#: Longest poll period the page accepts and uses (seconds).
MAX_INTERVAL_S = 3600
#: The page's poll period when ``interval`` is not given (seconds).
DEFAULT_INTERVAL_S = 5

_DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")
_DIGITS = re.compile(r"[0-9]+")


def parse_interval(text: str) -> float:
    """The poll period ``text`` gives, in seconds; :class:`BadQuery` unless it is in range."""
    if not _DECIMAL.fullmatch(text) or not \
            MIN_INTERVAL_S <= float(text) <= MAX_INTERVAL_S:
        raise BadQuery(f"query parameter 'interval' must be a number of seconds from "
                       f"{MIN_INTERVAL_S} to {MAX_INTERVAL_S} (such as 5 or 2.5), "
                       f"got {echo(text)}")
    return float(text)


def parse_limit(text: str, max_limit: int) -> int:
    """The page size ``text`` gives; :class:`BadQuery` unless it is 1 to ``max_limit``."""
    if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= max_limit:
        raise BadQuery(f"query parameter 'limit' must be a whole number from 1 to "
                       f"{max_limit} ([api] max_limit), got {echo(text)}")
    return int(text)


def check_host(host: str, services: Iterable[Any], nodes: Iterable[Any]) -> str:
    """``host`` if a service or node record names it, else :class:`UnknownName`.

    ``services`` and ``nodes`` are the service and compute node records.
    """
    if any(s.host == host for s in services) or any(n.host == host for n in nodes):
        return host
    raise UnknownName(f"Unknown host {echo(host)} (query parameter 'host'): no compute "
                      "service or compute node is recorded on it")


def check_node(node: str, nodes: Iterable[Any]) -> str:
    """``node`` if a compute node record has it as name or uuid, else :class:`UnknownName`."""
    if any(node in (n.nodename, n.uuid) for n in nodes):
        return node
    raise UnknownName(f"Unknown compute node {echo(node)} (query parameter 'node'): no "
                      "compute node record has this name or uuid")


def checked(endpoint: str, args: Any,
            records: Callable[[], tuple[Iterable[Any], Iterable[Any]]],
            max_limit: int = DEFAULT_MAX_LIMIT) -> dict[str, Any]:
    """The query of a request to ``endpoint``, every value checked.

    ``args``: the request's query (a werkzeug ``MultiDict``); ``records``:
    a callable returning ``(services, nodes)``, called only when a host
    or node is to be checked; ``max_limit``: the largest ``limit``.
    Returns ``{name: value}`` (``interval`` as a float, ``limit`` as an
    int); raises :class:`BadQuery` (400) or :class:`UnknownName` (404).
    """
    allowed = QUERY.get(endpoint, ())
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise BadQuery(f"unknown query parameter(s) {', '.join(echo(u) for u in unknown)}; "
                       f"this path takes {', '.join(allowed) or 'none'}")
    values: dict[str, Any] = {}
    for name in allowed:
        given = args.getlist(name)
        if len(given) > 1:
            raise BadQuery(f"query parameter {name!r} is given {len(given)} times; give it "
                           "once")
        if given and not given[0].strip():
            raise BadQuery(f"query parameter {name!r} must not be empty")
        if given:
            values[name] = given[0]
    if "interval" in values:
        values["interval"] = parse_interval(values["interval"])
    if "limit" in values:
        values["limit"] = parse_limit(values["limit"], max_limit)
    if "host" in values or "node" in values:
        services, nodes = records()
        if "host" in values:
            check_host(values["host"], services, nodes)
        if "node" in values:
            check_node(values["node"], nodes)
    return values


__all__ = ["QUERY", "MIN_INTERVAL_S", "MAX_INTERVAL_S", "DEFAULT_INTERVAL_S",
           "parse_interval", "parse_limit", "check_host", "check_node", "checked"]
