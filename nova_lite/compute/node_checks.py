"""What a driver says about its nodes, checked before anything is recorded.

The same limits on every backend (SQLite stores what PostgreSQL refuses):
a node name is a name as :func:`nova_lite.validators.text_problem` checks
it (a non-blank string of at most 255 characters with no control
character); a node uuid is a canonical UUID; a resource class fits its
column.  A bad node is reported by name (escaped) in the audit's failed
nodes; the others are recorded.
"""

import logging
import uuid as uuidlib

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput, InvalidNodeResources
from nova_lite.objects import NodeResources

LOG = logging.getLogger(__name__)


@attrs.frozen
class NodeListing:
    """A driver's node list, checked: ``valid`` names in order, ``invalid``
    ``{printable name: reason}``."""

    valid: tuple[str, ...] = ()
    invalid: dict[str, str] = attrs.field(factory=dict)


def name_problem(name: object, what: str = "node name") -> str | None:
    """Why ``name`` cannot be recorded as a host or node name (None if it can)."""
    return v.text_problem(name, what, v.NAME_LENGTH)


def storable(name: object) -> bool:
    """True if ``name`` can be recorded (so a node record can carry its error)."""
    return name_problem(name) is None


def node_names(listing: object, host: str) -> NodeListing:
    """Check what ``get_available_nodes`` returned; raises InvalidInput if it is
    not a list of names at all (nothing is recorded then).

    Duplicates are recorded once (with a WARNING); a name that cannot be
    recorded goes to ``invalid`` with its reason.
    """
    if isinstance(listing, (str, bytes)) or not isinstance(listing, (list, tuple, set,
                                                                       frozenset)):
        raise InvalidInput(f"get_available_nodes() of the virt driver of host {host} returned "
                           f"{type(listing).__name__} {v.printable(repr(listing)[:80])}, not a "
                           "list of node names")
    valid: list[str] = []
    invalid: dict[str, str] = {}
    seen: set[str] = set()
    for name in listing:
        problem = name_problem(name)
        if problem is not None:
            invalid[v.printable(name)] = f"InvalidNodeName: {problem}"
            LOG.error("Skipping a node of host %s in this audit: %s", host, problem)
            continue
        if name in seen:
            LOG.warning("The virt driver of host %s lists node %s more than once; recording "
                        "it once", host, v.printable(name))
            continue
        seen.add(name)
        valid.append(name)
    return NodeListing(valid=tuple(valid), invalid=invalid)


def check_report(nodename: str, report: NodeResources) -> None:
    """Raise InvalidNodeResources if ``report`` carries what no backend can record."""
    problems: list[str] = []
    if report.uuid is not None:
        try:
            canonical = str(uuidlib.UUID(str(report.uuid)))
        except ValueError:
            canonical = None
        if canonical != str(report.uuid).lower() or len(str(report.uuid)) != 36:
            problems.append(f"'uuid' {v.printable(str(report.uuid)[:60])!r} is not a canonical "
                            "UUID (36 characters, 8-4-4-4-12 hex digits)")
    for field in ("hypervisor_hostname", "hypervisor_type", "resource_class"):
        value = getattr(report, field, None)
        if isinstance(value, str) and "\x00" in value:
            problems.append(f"'{field}' contains a NUL byte")
    if problems:
        raise InvalidNodeResources(problems, nodename=nodename)
