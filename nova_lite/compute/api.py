"""Asking the hosts for work: build and delete through the records.

The records are the only channel to the hosts.  :func:`build` schedules,
claims on the chosen nodes and records a build task for each instance's
host, in the transaction of the build's (last) claim: a build task is never
recorded without its claim, and a claim that fails records none.  That
host's compute service spawns it on its own driver and records it active
(or error, with the reason, its claim given back).  :func:`delete`
records a delete task for the instance's host; ``force`` on a host whose
service is down deletes the record at once and frees its claim (Nova's
local delete), and the host destroys the guest when it comes back.
:func:`wait` waits for tasks to finish, with a deadline::

    from nova_lite.compute import api
    from nova_lite.scheduler import RequestSpec

    result = api.build(store, RequestSpec(flavor, project_id="demo"), num_instances=2)
    result.instances        # the claimed Instance records (host, node set), building
    done = api.wait(store, result.tasks, timeout=60)

Each chosen node is claimed for its host (``trackers``: ``{host:
ResourceTracker}`` or a callable; by default a tracker per host that claims
through the records alone, without loading any driver here); a claim that
loses (another build took the room first: ComputeResourcesUnavailable) is
retried on the Selection's alternates in order; the claim first decides on
the scheduler's record of the node (``Selection.node``), which its
transaction checks, and the scheduler's view then takes the node as the
claim left it.  Instances scheduled to the same node are claimed together
in one transaction, all or none (``ResourceTracker.build_claims``).  If a
group finds no node at all, every claim this build made is given back and
:class:`BuildFailed` lists every attempt.

A claim made here counts the flavor alone: a host whose driver adds an
overhead per instance claims it again with the overhead before spawning.
"""

import collections
import logging
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

import attrs

from nova_lite import objects, pci_alias, work
from nova_lite.compute.claims import Claim, ComputeResourcesUnavailable
from nova_lite.exception import (
    BuildFailed, InstanceStateConflict, InvalidInput, NovaLiteError)
from nova_lite.scheduler import HostManager, RequestSpec, Selection
from nova_lite.scheduler.request import as_request_spec
from nova_lite.validators import replaced
from nova_lite.virt.driver import ComputeDriver
from nova_lite.work import Task, WorkRequest

if TYPE_CHECKING:
    from nova_lite.compute.resource_tracker import BuildClaims, ResourceTracker
    from nova_lite.conf import Settings
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)

# ``{host: ResourceTracker}`` or a callable ``host -> ResourceTracker``.
_Trackers: TypeAlias = "Mapping[str, ResourceTracker] | Callable[[str], ResourceTracker | None]"


@attrs.frozen
class BuildResult:
    """What a build did: the claimed ``instances`` (in request order, each
    building on its host and node), ``tasks``: the build task recorded for
    each, in the same order, and ``attempts``: ``(host, nodename, reason)``
    of each claim that lost first."""

    instances: tuple[objects.Instance, ...]
    attempts: tuple[tuple[str, str, str], ...] = ()
    tasks: tuple[Task, ...] = ()


class _ClaimOnlyDriver(ComputeDriver):
    """The driver of a tracker that only claims through the records: the
    host's own driver (and its overhead) is not loaded in this process."""

    def init_host(self, host: str) -> None:
        self.host = host

    def get_available_nodes(self, refresh: bool = False) -> list[str]:
        raise NotImplementedError("a claim-only tracker lists no nodes")

    def get_available_resource(self, nodename: str) -> objects.NodeResources:
        raise NotImplementedError("a claim-only tracker reports no node")


class RecordsTrackers:
    """``host -> ResourceTracker`` that claims through the records alone (no
    driver of the host is loaded here; the host adds its overhead itself)."""

    def __init__(self, store: "Store", settings: "Settings | None" = None) -> None:
        self.store = store
        self.settings = settings
        self.made: dict[str, ResourceTracker] = {}

    def __call__(self, host: str) -> "ResourceTracker":
        from nova_lite.compute.resource_tracker import ResourceTracker
        from nova_lite.provider_config import NO_PROVIDER_CONFIGS
        tracker = self.made.get(host)
        if tracker is None:
            driver = _ClaimOnlyDriver(settings=self.settings)
            driver.init_host(host)
            # It never audits: the host's own provider.yaml files are the
            # host's business, not read here.
            tracker = self.made[host] = ResourceTracker(
                host, driver, store=self.store, settings=self.settings,
                provider_configs=NO_PROVIDER_CONFIGS)
        return tracker


def _tracker_for(trackers: _Trackers, host: str) -> "ResourceTracker":
    tracker = trackers(host) if callable(trackers) else trackers.get(host)
    if tracker is None:
        raise NovaLiteError(f"No resource tracker for host {host!r} in this build")
    return tracker


def _claim_group(tracker: "ResourceTracker", instances: Sequence[objects.Instance],
                 selection: Selection, tasks: Sequence[WorkRequest]) -> "BuildClaims":
    """Claim ``instances`` on the selection's node, ``tasks`` recorded with
    them, in one transaction: all or none."""
    return tracker.build_claims(instances, selection.nodename, limits=selection.limits,
                                tasks=tasks, seen=selection.node)


def with_alias_requests(spec: RequestSpec, settings: "Settings") -> RequestSpec:
    """``spec`` with the PCI requests of its flavor's ``pci_passthrough:alias``
    extra spec (``[pci] alias`` of ``settings`` names the devices) when it
    has none of its own.

    :raises InvalidInput: the extra spec is malformed or names no alias.
    """
    if spec.pci_requests or pci_alias.EXTRA_SPEC not in spec.flavor.extra_specs:
        return spec
    return attrs.evolve(spec, pci_requests=pci_alias.flavor_pci_requests(
        spec.flavor.extra_specs, settings.pci_aliases, f"flavor {spec.flavor.name}"))


def with_schedule_zone(spec: RequestSpec, settings: "Settings") -> RequestSpec:
    """``spec`` in ``[DEFAULT] default_schedule_zone`` of ``settings`` when it
    names no zone and that option is set (Nova's API does the same)."""
    if spec.availability_zone is not None or settings.default_schedule_zone is None:
        return spec
    return attrs.evolve(spec, availability_zone=settings.default_schedule_zone)


def build(store: "Store", request: RequestSpec | objects.Flavor, num_instances: int = 1, *,
          trackers: "_Trackers | None" = None, host_manager: HostManager | None = None,
          settings: "Settings | None" = None, display_name: str = "") -> BuildResult:
    """Schedule and claim ``num_instances`` instances of ``request``; record a
    build task for each on its host.  Returns at once (see :func:`wait`).

    :param store: the records.
    :param request: a RequestSpec or a Flavor.
    :param num_instances: how many (>= 1).
    :param trackers: ``{host: ResourceTracker}`` or a callable ``host ->
        ResourceTracker`` to claim with; None: :class:`RecordsTrackers`.
    :param host_manager: a HostManager to reuse (its view spreads
        consecutive builds), else one is made with ``settings``.
    :param settings: the settings of the scheduler and the trackers.
    :param display_name: the servers' name (``-N`` added with several).
    :returns: a :class:`BuildResult`: the instances, building, and their
        tasks.  Each records its ``availability_zone``: the one requested
        (or ``default_schedule_zone``), else that of the host it was
        claimed on.
    :raises nova_lite.scheduler.NoValidHost: nothing was claimed.
    :raises BuildFailed: every node tried lost; nothing is kept.
    """
    if isinstance(num_instances, bool) or not isinstance(num_instances, int) \
            or num_instances < 1:
        raise InvalidInput(f"num_instances must be an integer >= 1, got {num_instances!r}")
    spec = as_request_spec(request)
    manager = host_manager or HostManager(store, settings)
    spec = with_alias_requests(spec, settings or manager.settings)
    spec = with_schedule_zone(spec, settings or manager.settings)
    claimers = trackers if trackers is not None else RecordsTrackers(store, settings)
    selections = manager.select_destinations(spec, num_instances)
    instances = [objects.Instance(
        uuid=str(uuidlib.uuid4()), flavor=spec.flavor, project_id=spec.project_id or "",
        numa_topology=spec.numa_topology, pci_requests=spec.pci_requests,
        availability_zone=spec.availability_zone,
        display_name=display_name if num_instances == 1 or not display_name
        else f"{display_name}-{i + 1}") for i in range(num_instances)]
    groups: collections.OrderedDict[tuple[str, str], tuple[Selection, list[objects.Instance]]] \
        = collections.OrderedDict()
    for inst, sel in zip(instances, selections):
        groups.setdefault((sel.host, sel.nodename), (sel, []))[1].append(inst)
    held: list[tuple[ResourceTracker, Claim]] = []
    attempts: list[tuple[str, str, str]] = []
    placed: dict[str, tuple[str, str]] = {}   # instance uuid -> (host, node) claimed

    def build_work(members: Sequence[objects.Instance], host: str,
                   nodename: str) -> list[WorkRequest]:
        """The build task of every instance, in request order, ``members`` on
        ``host``/``nodename`` and the others where they were claimed."""
        here = {m.uuid: (host, nodename) for m in members}
        return [WorkRequest(host=where[0], kind=work.BUILD, instance_uuid=i.uuid,
                            params={"node": where[1]})
                for i in instances for where in (here.get(i.uuid) or placed[i.uuid],)]

    tasks: tuple[Task, ...] = ()
    try:
        last = len(groups) - 1
        for index, (sel, members) in enumerate(groups.values()):
            # The build tasks are recorded with the last group's claim, in
            # its transaction: a build task is never recorded without its
            # claim, and a build whose last claim fails records none.
            made = _claim_with_alternates(
                sel, members, claimers, attempts,
                None if spec.availability_zone is not None else manager.host_zone,
                build_work if index == last else None)
            held.extend((made.tracker, claim) for claim in made.claims)
            placed.update((c.instance.uuid, (str(c.instance.host), str(c.instance.node)))
                          for c in made.claims)
            manager.saw(made.node)
            tasks = made.tasks or tasks
        claimed = {claim.instance.uuid: claim.instance for _, claim in held}
        ordered = [claimed[i.uuid] for i in instances]
    except BaseException:
        for _, claim in held:
            try:
                claim.abort()
            except NovaLiteError as exc:   # the host's build check gives it back later
                LOG.warning("Claim of instance %s not given back: %s", claim.instance.uuid, exc)
        raise
    for inst in ordered:
        LOG.info("Instance %s claimed on %s/%s: build recorded for its host", inst.uuid,
                 inst.host, inst.node)
    return BuildResult(instances=tuple(ordered), attempts=tuple(attempts), tasks=tuple(tasks))


@attrs.frozen
class DeleteResult:
    """What :func:`delete` did: ``task`` is the delete recorded for the host
    (None when the record was deleted here at once); ``local`` is True for a
    delete done here (no host, or ``force`` with the host's service down)."""

    instance: objects.Instance
    task: Task | None
    local: bool


def service_is_up(store: "Store", host: str, settings: "Settings | None" = None) -> bool:
    """Whether ``host``'s compute service is up (heartbeat within
    ``service_down_time``)."""
    from nova_lite.conf import Settings
    down_time = (settings or Settings()).service_down_time
    now = time.time()
    return any(s.is_up(down_time, now) for s in store.list_services(host))


def delete(store: "Store", instance: objects.Instance, *, force: bool = False,
           settings: "Settings | None" = None) -> DeleteResult:
    """Delete ``instance`` through its host, or here when it has no host or
    ``force`` is given and its host's service is down.

    A delete through the host records a delete task (the instance's
    task_state becomes ``deleting``); the host destroys the guest and frees
    the claim.  An open delete task already recorded is reused.  A local
    delete records the instance deleted, frees its claim at once and
    cancels its waiting tasks; its host, when it comes back, handles the
    guest it still runs per ``running_deleted_instance_action``.

    :raises nova_lite.exception.InstanceNotFound: no record.
    :raises nova_lite.exception.InstanceStateConflict: already deleted.
    """
    instance = store.get_instance(instance.uuid)   # as recorded now
    if instance.vm_state == objects.DELETED:
        raise InstanceStateConflict(instance.uuid, objects.DELETED, objects.DELETED,
                                    "it is already deleted")
    local = instance.host is None or (force and not service_is_up(store, instance.host,
                                                                  settings))
    if local:
        store.tasks.cancel_open(instance.uuid, "the instance was deleted locally")
        store.record_instance_state(attrs.evolve(instance, vm_state=objects.DELETED,
                                                 task_state=None))
        LOG.info("Instance %s deleted locally%s: its claim is freed", instance.uuid,
                 f" (host {instance.host} is down)" if instance.host else "")
        return DeleteResult(instance=instance, task=None, local=True)
    for task in store.tasks.find(instance_uuid=instance.uuid, states=work.OPEN_STATES,
                                 kinds=(work.DELETE,)):
        return DeleteResult(instance=instance, task=task, local=False)
    (task,) = store.tasks.record(
        [WorkRequest(host=str(instance.host), kind=work.DELETE, instance_uuid=instance.uuid)],
        instance_task_states={instance.uuid: "deleting"})
    return DeleteResult(instance=instance, task=task, local=False)


class WorkTimeout(NovaLiteError):
    """Tasks were still open at a :func:`wait`'s deadline; ``open`` lists them."""

    def __init__(self, open_tasks: Sequence[Task], timeout: float) -> None:
        self.open = tuple(open_tasks)
        listed = ", ".join(f"{t.kind} of {t.instance_uuid or t.host} on host {t.host} "
                           f"({t.state})" for t in self.open[:5])
        more = f" and {len(self.open) - 5} more" if len(self.open) > 5 else ""
        super().__init__(f"{len(self.open)} task(s) not finished after {timeout:g} s: "
                         f"{listed}{more}")


def wait(store: "Store", tasks: Sequence[Task], timeout: float,
         interval: float = 0.05) -> list[Task]:
    """Wait until every one of ``tasks`` is finished (done, failed or
    cancelled), at most ``timeout`` seconds; returns them as recorded, in
    order.  Raises :class:`WorkTimeout` listing those still open."""
    ids = [t.id for t in tasks]
    deadline = time.monotonic() + timeout
    while True:
        now = {t.id: t for t in store.tasks.find(ids=ids)} if ids else {}
        if all(not now[i].is_open for i in ids):
            return [now[i] for i in ids]
        if time.monotonic() >= deadline:
            raise WorkTimeout([now[i] for i in ids if now[i].is_open], timeout)
        time.sleep(interval)


@attrs.frozen
class _GroupClaimed:
    """The claims of one group on the node it landed on, by ``tracker``;
    ``tasks``: those recorded with them; ``node``: that node as they left it."""

    tracker: "ResourceTracker"
    claims: tuple[Claim, ...]
    tasks: tuple[Task, ...]
    node: objects.ComputeNode


def _claim_with_alternates(
        selection: Selection, members: Sequence[objects.Instance], trackers: _Trackers,
        attempts: list[tuple[str, str, str]], zone_of: Callable[[str], str] | None = None,
        work_for: Callable[[Sequence[objects.Instance], str, str], list[WorkRequest]]
        | None = None) -> _GroupClaimed:
    """The claims of ``members`` on the selection or its alternates; ``zone_of``
    (a host's zone), when given, sets the zone each records; ``work_for``
    (``members``, host, node), when given, the tasks recorded with them."""
    for candidate in (selection, *selection.alternates):
        tracker = _tracker_for(trackers, candidate.host)
        here = members if zone_of is None else [
            replaced(m, availability_zone=zone_of(candidate.host)) for m in members]
        tasks = work_for(members, candidate.host, candidate.nodename) if work_for else []
        try:
            made = _claim_group(tracker, here, candidate, tasks)
        except ComputeResourcesUnavailable as exc:
            LOG.info("Claim of %d instance(s) on %s/%s lost (%s); trying the next alternate",
                     len(members), candidate.host, candidate.nodename, exc)
            attempts.append((candidate.host, candidate.nodename, str(exc)))
            continue
        return _GroupClaimed(tracker=tracker, claims=made.claims, tasks=made.tasks,
                             node=made.node)
    raise BuildFailed(attempts)
