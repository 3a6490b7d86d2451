"""A host's audit as work: asked through the records, done by the host's compute service.

The audit compares a host's hypervisor view with the records, so it runs
where the host's driver is.  :func:`ask` records an ``audit`` task for the
host (:class:`~nova_lite.audit_report.AuditRequest` as its parameters) and
waits for it; the host's compute service takes it and :func:`audit` (its
handler, in :data:`HANDLERS`) builds the report with the service's own
tracker and driver (:func:`nova_lite.audit_report.build_report`), heals
there when asked, and records the report as the task's result::

    from nova_lite.audit_report import AuditRequest
    from nova_lite.compute import audit_work

    report = audit_work.ask(store, "compute1", AuditRequest(heal=True), timeout=60,
                            settings=settings)

A host whose compute service is down cannot answer: :func:`ask` raises
:class:`HostDown` at once and records nothing, or, if the service goes
down while the task waits, cancels the task first.  At the deadline a task
still waiting is cancelled (:class:`AuditTimeout`); one already taken runs
to its end and records its report all the same.
"""

import importlib.metadata
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import work
from nova_lite.audit_report import AuditRequest, build_report, in_order
from nova_lite.db.services import ServiceRecord
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.exception import MigrationNotFound, NodeNotFound, NovaLiteError
from nova_lite.virt import loader
from nova_lite.work import Task, WorkRequest

if TYPE_CHECKING:
    from nova_lite.compute.work_handlers import Handler, Job
    from nova_lite.conf import Settings
    from nova_lite.db.store import Store
    from nova_lite.virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

#: Seconds between two looks at the host's heartbeat while :func:`ask` waits.
SERVICE_CHECK_INTERVAL = 1.0


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class HostDown(NovaLiteError):
    """The host's compute service is down (or was never recorded): it cannot
    audit.  ``last_heartbeat`` (epoch s, None: no service record); ``task``:
    the audit task recorded before the service went down, now cancelled (or
    still open when it had been taken already), or None."""

    def __init__(self, host: str, service: ServiceRecord | None, service_down_time: float,
                 task: Task | None = None) -> None:
        self.host = host
        self.last_heartbeat = None if service is None else service.updated_at
        self.task = task
        if service is None:
            text = f"host {host} has no compute service record"
        else:
            text = (f"the compute service of host {host} is down (last heartbeat at "
                    f"{_when(service.updated_at)}, service_down_time {service_down_time:g} s)")
        super().__init__(text)


class AuditTimeout(NovaLiteError):
    """No report within the deadline.  ``task`` as last read; ``cancelled``:
    whether it was still waiting and is now cancelled."""

    def __init__(self, task: Task, timeout: float, cancelled: bool) -> None:
        self.task = task
        self.timeout = timeout
        self.cancelled = cancelled
        fate = (f"its audit (task {task.id}) was still waiting and is cancelled" if cancelled
                else f"its audit (task {task.id}) is {task.state} there; its report will be "
                     "recorded as that task's result")
        super().__init__(f"No report from the compute service of host {task.host} within "
                         f"{timeout:g} s: {fate}")


class AuditFailed(NovaLiteError):
    """The host's audit ended without a report; ``task`` says how and why."""

    def __init__(self, task: Task) -> None:
        self.task = task
        super().__init__(f"The audit of host {task.host} (task {task.id}) {task.state}: "
                         f"{task.detail or 'no reason recorded'}")


def compute_service(store: "Store", host: str) -> ServiceRecord | None:
    """``host``'s compute service record, or None."""
    return next(iter(store.list_services(host, binary=COMPUTE_BINARY)), None)


def check_request(store: "Store", host: str, request: AuditRequest) -> AuditRequest:
    """Refuse, from the records, what the host would refuse, before anything
    is recorded: a node the host has no record of (NodeNotFound), a named
    migration not in progress on the host or node (MigrationNotFound).
    Returns the request with its node named by name (a uuid is accepted)."""
    nodes = store.get_compute_nodes(host)
    scope = {(n.host, n.nodename) for n in nodes}
    if request.node is not None:
        named = [n for n in nodes if request.node in (n.nodename, n.uuid)]
        if not named:
            raise NodeNotFound(request.node, host)
        scope = {(n.host, n.nodename) for n in named}
        request = attrs.evolve(request, node=named[0].nodename)
    if not request.migrations:
        return request
    moving = {m.uuid for m in store.list_migrations(in_progress_only=True)
              if {(m.source_compute, m.source_node), (m.dest_compute, m.dest_node)} & scope}
    for uuid in request.migrations:
        if uuid not in moving:
            raise MigrationNotFound(uuid, f"in progress on node {request.node}"
                                    if request.node else f"in progress on host {host}")
    return request


def ask(store: "Store", host: str, request: AuditRequest, *, timeout: float,
        settings: "Settings", interval: float = 0.05,
        clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Have ``host``'s compute service audit it; returns its report.

    :param store: the records (written: the task).
    :param host: the host to audit.
    :param request: what to do there.
    :param timeout: seconds to wait for the report.
    :param settings: ``service_down_time`` (s) tells a service that is down.
    :param interval: seconds between two reads of the task.
    :param clock: the monotonic clock (s) the deadline is timed with.
    :returns: the report (fields in order), as the host recorded it.
    :raises HostDown: the host's service is down: nothing is recorded, or
        the task recorded is cancelled.
    :raises AuditTimeout: no report at the deadline.
    :raises AuditFailed: the host could not audit (an unknown node, a
        driver that failed ...).
    """
    down_time = settings.service_down_time
    service = compute_service(store, host)
    if service is None or not service.is_up(down_time):
        raise HostDown(host, service, down_time)
    (task,) = store.tasks.record([WorkRequest(host=host, kind=work.AUDIT,
                                              params=request.to_params())])
    LOG.info("Audit of host %s recorded for its compute service (task %d)", host, task.id)
    deadline = clock() + timeout
    next_check = clock() + SERVICE_CHECK_INTERVAL
    while True:
        seen = store.tasks.get(task.id) or task
        if not seen.is_open:
            break
        if clock() >= deadline:
            cancelled = store.tasks.cancel_waiting(
                [task.id], f"the asker stopped waiting after {timeout:g} s")
            raise AuditTimeout(store.tasks.get(task.id) or seen, timeout, bool(cancelled))
        if clock() >= next_check:
            next_check = clock() + SERVICE_CHECK_INTERVAL
            service = compute_service(store, host)
            if service is None or not service.is_up(down_time):
                store.tasks.cancel_waiting([task.id], "the host's compute service is down")
                raise HostDown(host, service, down_time, store.tasks.get(task.id) or seen)
        time.sleep(interval)
    if seen.state != work.DONE or seen.result is None:
        raise AuditFailed(seen)
    return in_order(seen.result)


def driver_name(driver: "ComputeDriver", settings: "Settings") -> str:
    """The entry point name ``driver`` was loaded by: ``compute_driver`` when
    it names the driver's class, else the first name that does (else the
    class's name)."""
    target = f"{type(driver).__module__}:{type(driver).__qualname__}"
    names = sorted(ep.name for ep in importlib.metadata.entry_points(group=loader.GROUP)
                   if ep.value == target)
    if settings.compute_driver in names:
        return settings.compute_driver
    return names[0] if names else type(driver).__name__


def audit(job: "Job") -> str:
    """Audit the host with the service's own tracker and driver (heal when
    asked) and record the report as the task's result."""
    tracker = job.tracker
    request = AuditRequest.from_params(job.task.params)
    report, status = build_report(tracker, job.store, tracker.settings, request,
                                  driver_name=driver_name(tracker.driver, tracker.settings),
                                  recorded_by=tracker.host, record_guests=True)
    return job.finish(work.DONE, "consistent" if status == 0 else
                      "differences or leaks found", result=report)


#: The handler of each task kind this module does.
HANDLERS: "dict[str, Handler]" = {work.AUDIT: audit}
