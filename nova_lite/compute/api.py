"""Building instances: schedule, claim on the chosen node, spawn.

:func:`build` is the whole path a build request takes::

    from nova_lite.compute import api
    from nova_lite.scheduler import RequestSpec

    result = api.build(store, RequestSpec(flavor, project_id="demo"), num_instances=2,
                       trackers={"host1": rt1, "host2": rt2})
    result.instances        # the placed Instance records (host, node set)

Each chosen node is claimed through its own host's ResourceTracker; a
claim that loses (another build took the room first:
ComputeResourcesUnavailable) is retried on the Selection's alternates in
order.  Instances scheduled to the same node are claimed together in one
transaction, all or none (``ResourceTracker.instance_claims``).
If a group finds no node at all, every claim this build made is given back
and :class:`BuildFailed` lists every attempt.
"""

import collections
import logging
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs

from nova_lite import objects
from nova_lite.compute.claims import Claim, ComputeResourcesUnavailable
from nova_lite.exception import BuildFailed, NovaLiteError
from nova_lite.scheduler import HostManager, RequestSpec, Selection
from nova_lite.scheduler.request import as_request_spec

if TYPE_CHECKING:
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.conf import Settings
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

# ``{host: ResourceTracker}`` or a callable ``host -> ResourceTracker``.
_Trackers: TypeAlias = "Mapping[str, ResourceTracker] | Callable[[str], ResourceTracker | None]"


@attrs.frozen
class BuildResult:
    """What a build did: the placed ``instances`` (in request order), and
    ``attempts``: ``(host, nodename, reason)`` of each claim that lost first."""

    instances: tuple[objects.Instance, ...]
    attempts: tuple[tuple[str, str, str], ...] = ()


def _tracker_for(trackers: _Trackers, host: str) -> "ResourceTracker":
    tracker = trackers(host) if callable(trackers) else trackers.get(host)
    if tracker is None:
        raise NovaLiteError(f"No resource tracker for host {host!r} in this build")
    return tracker


def _claim_group(tracker: "ResourceTracker", instances: Sequence[objects.Instance], nodename: str,
                 limits: Mapping[str, float] | None) -> list[Claim]:
    """Claim ``instances`` on one node in one transaction: all or none."""
    return list(tracker.instance_claims(instances, nodename, limits=limits))


def build(store: "Store", request: RequestSpec | objects.Flavor, num_instances: int = 1, *,
          trackers: _Trackers, host_manager: HostManager | None = None,
          settings: "Settings | None" = None, spawn: bool = True,
          display_name: str = "") -> BuildResult:
    """Schedule, claim and (``spawn``) start ``num_instances`` instances of ``request``.

    ``request``: a RequestSpec or a Flavor; ``trackers``: ``{host:
    ResourceTracker}`` or a callable ``host -> ResourceTracker``;
    ``host_manager``: a HostManager to reuse (its view spreads consecutive
    builds), else one is made with ``settings``.  With ``spawn`` each
    claimed instance is spawned through its tracker's driver and recorded
    "active"; a failed spawn gives its claim back, records the instance
    "error" (on no node, as Nova does) and raises.  Returns a
    :class:`BuildResult`; raises NoValidHost (nothing claimed) or
    :class:`BuildFailed` (every node tried lost; nothing kept).
    """
    spec = as_request_spec(request)
    manager = host_manager or HostManager(store, settings)
    selections = manager.select_destinations(spec, num_instances)
    instances = [objects.Instance(
        uuid=str(uuidlib.uuid4()), flavor=spec.flavor, project_id=spec.project_id or "",
        numa_topology=spec.numa_topology, pci_requests=spec.pci_requests,
        display_name=display_name if num_instances == 1 or not display_name
        else f"{display_name}-{i + 1}") for i in range(num_instances)]
    groups: collections.OrderedDict[tuple[str, str], tuple[Selection, list[objects.Instance]]] \
        = collections.OrderedDict()
    for inst, sel in zip(instances, selections):
        groups.setdefault((sel.host, sel.nodename), (sel, []))[1].append(inst)
    held: list[tuple[ResourceTracker, Claim]] = []
    attempts: list[tuple[str, str, str]] = []
    try:
        for sel, members in groups.values():
            held.extend(_claim_with_alternates(sel, members, trackers, attempts))
    except BaseException:
        for _, claim in held:
            claim.abort()
        raise
    placed: dict[str, objects.Instance] = {}
    for tracker, claim in held:
        inst = claim.instance
        if spawn:
            try:
                tracker.driver.spawn(inst)
            except Exception:
                LOG.exception("Spawn of instance %s on %s/%s failed: claim given back, "
                              "instance recorded %s", inst.uuid, inst.host, inst.node,
                              objects.ERROR)
                claim.abort()
                tracker.update_usage(attrs.evolve(inst, host=None, node=None, pci_devices=(),
                                                  vm_state=objects.ERROR))
                raise
            inst = attrs.evolve(inst, vm_state=objects.ACTIVE)
            tracker.update_usage(inst)
        placed[inst.uuid] = inst
    return BuildResult(instances=tuple(placed[i.uuid] for i in instances),
                       attempts=tuple(attempts))


def _claim_with_alternates(
        selection: Selection, members: Sequence[objects.Instance], trackers: _Trackers,
        attempts: list[tuple[str, str, str]],
) -> list[tuple["ResourceTracker", Claim]]:
    """``[(tracker, claim)]`` for ``members`` on the selection or its alternates."""
    for candidate in (selection, *selection.alternates):
        tracker = _tracker_for(trackers, candidate.host)
        try:
            claims = _claim_group(tracker, members, candidate.nodename, candidate.limits)
        except ComputeResourcesUnavailable as exc:
            LOG.info("Claim of %d instance(s) on %s/%s lost (%s); trying the next alternate",
                     len(members), candidate.host, candidate.nodename, exc)
            attempts.append((candidate.host, candidate.nodename, str(exc)))
            continue
        return [(tracker, claim) for claim in claims]
    raise BuildFailed(attempts)
