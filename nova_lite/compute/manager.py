"""``ComputeService``: the periodic life of one compute host.

One pass (:meth:`ComputeService.run_once`): heartbeat, audit every node,
handle orphan node records, then search the host's records for leaks
(:func:`nova_lite.leaks.find_leaks`, with the guests this host's own
driver lists) and record those findings, so the audit command, the API
and the metrics of any process read them.  :meth:`ComputeService.run` repeats it every
``update_resources_interval`` seconds until :meth:`ComputeService.stop` or SIGTERM, and
beats the heartbeat every ``report_interval`` seconds in between, so the
service stays "up" (within ``service_down_time``) however long a pass or
the wait for the next one takes; that in-between beat is skipped when a
pass beat less than ``report_interval`` seconds ago, so the service never
beats twice in a row.  With ``[metrics] port`` set, :meth:`run`
also serves the Prometheus metrics (:mod:`nova_lite.metrics`) meanwhile.
"""

import logging
import signal
import threading
import time
from collections.abc import Callable, Collection
from types import FrameType
from typing import Any

import attrs

from nova_lite import audit as audit_views
from nova_lite import conf, leaks, metrics, provider_config
from nova_lite.compute.down_hosts import down_hosts_share
from nova_lite.compute.resource_tracker import ResourceTracker, check_service_arguments
from nova_lite.compute.worker import Worker
from nova_lite.db import server_checks
from nova_lite.db.pass_records import PassRecords
from nova_lite.db.store import COMPUTE_BINARY, UNREAD, Store
from nova_lite.exception import InstanceNotFound, NovaLiteError
from nova_lite.findings import HEALABLE, UNKNOWN_GUEST, Finding, tasks_waiting
from nova_lite.objects import DELETED
from nova_lite.virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)


@attrs.frozen
class PassResult:
    """What one pass did: audit outcome and orphan node records."""

    audited: tuple[str, ...] = ()
    failed: dict[str, str] = attrs.field(factory=dict)   # {nodename: reason}
    orphans_deleted: tuple[str, ...] = ()
    orphans_kept: tuple[str, ...] = ()
    skipped: str | None = None
    #: The findings recorded by this pass (None: the leak search failed).
    findings: tuple[Finding, ...] | None = None


class ComputeService:
    """Runs the resource tracker of ``host`` on a schedule.

    ``driver`` must be loaded; ``init_host`` is called on construction.
    ``store`` defaults to ``Store(settings.database_url)``.  A wrong
    argument (``host`` not a recordable name, ``driver`` not a
    ComputeDriver, ...) raises :class:`~nova_lite.exception.InvalidInput`
    naming it before anything is opened or written; so does a bad
    provider.yaml file of ``[compute] provider_config_location``
    (:class:`~nova_lite.exception.ProviderConfigError`, naming the file, the
    place in it and the problem), read once here.
    """

    def __init__(self, host: str, driver: ComputeDriver, store: Store | None = None,
                 settings: conf.Settings | None = None) -> None:
        check_service_arguments("ComputeService", host, driver, store, settings)
        self.host = host
        self.driver = driver
        self.settings = settings or getattr(driver, "settings", None) or conf.Settings()
        # Read before anything is opened: a bad file stops the service here.
        configs = provider_config.load_provider_configs(self.settings.provider_config_location)
        self.store = store if store is not None else Store(
            self.settings.database_url, claim_retries=self.settings.claim_retries,
            busy_timeout=self.settings.database_busy_timeout,
            pooler=self.settings.database_pooler)
        if getattr(driver, "host", None) != host:
            driver.init_host(host)
        # The tracker hands its store to the driver (``attach_store``): a
        # driver sharing a fleet with other services reads them from it.
        self.tracker = ResourceTracker(host, driver, store=self.store, settings=self.settings,
                                       provider_configs=configs)
        #: Takes the work recorded for this host and does it on ``driver``.
        self.worker = Worker(self.tracker)
        self._recovered = False
        self._first_beat_done = False
        self._stop = threading.Event()
        self._work_done = threading.Event()
        #: The monotonic clock (s) the heartbeats are timed with.
        self.clock: Callable[[], float] = time.monotonic
        # When the last beat started (clock s), None before the first; the
        # lock makes "is a beat due, beat, note it" one step for the
        # passes and the heartbeat thread.
        self._last_beat: float | None = None
        self._beat_lock = threading.Lock()

    def live_services(self) -> list[str]:
        """Hosts of the compute services that are enabled and up (heartbeat within
        service_down_time), sorted."""
        now = time.time()
        return sorted(s.host for s in self.store.list_services(binary=COMPUTE_BINARY)
                      if not s.disabled and s.is_up(self.settings.service_down_time, now))

    def run_once(self, beat: bool = True) -> PassResult:
        """One pass: heartbeat, builds that will not finish, the work waiting for
        this host, audit, orphans, findings.  Returns a :class:`PassResult`.
        With ``beat`` False the pass does not beat (its caller did, or
        measures the pass alone).

        After the heartbeat the pass reads what it compares against in one
        read-only transaction (:meth:`~nova_lite.db.store.Store.pass_records`);
        a pass that finds nothing changed (same reports, nothing stale or
        missing, no build to give up, no work, no orphan to delete, the same
        findings) writes nothing and reads nothing more.  Each part that
        finds a difference writes it in its own transaction, and the parts
        after it read the records again."""
        if self._first_beat_done:
            self._first_beat_done = False   # run() beat for this first pass
        elif beat:
            self.beat(only_if_due=False)
        records = self._read_records()
        changed = self._check_builds(records)
        changed |= bool(self.do_work(records))
        if changed and records is not None:
            records = self._read_records()
        audit = self.tracker.update_available_resource(records=records)
        if audit.skipped is not None:
            # The driver could not list its nodes: every record would look orphaned.
            return PassResult(skipped=audit.skipped)
        current = None if audit.wrote else records
        deleted, kept = self._handle_orphans(set(audit.audited) | set(audit.failed), current)
        return PassResult(audited=audit.audited, failed=audit.failed,
                          orphans_deleted=tuple(deleted), orphans_kept=tuple(kept),
                          findings=self.record_findings(None if deleted else current))

    def _read_records(self) -> PassRecords | None:
        """This host's records for one pass (None if they could not be read:
        logged, each part of the pass then reads what it needs itself)."""
        try:
            return self.store.pass_records(
                self.host, service=True, service_down_time=self.settings.service_down_time)
        except NovaLiteError as exc:
            LOG.warning("Host %s: reading its records failed in this pass: %s", self.host, exc)
            return None

    def _check_builds(self, records: PassRecords | None = None) -> bool:
        """Give up the builds that will not finish; returns whether any was."""
        try:
            return bool(self.worker.check_builds(None if records is None else records.builds))
        except NovaLiteError as exc:
            LOG.warning("Host %s: checking its builds failed in this pass: %s", self.host, exc)
            return True   # it may have written some

    def do_work(self, records: PassRecords | None = None) -> int:
        """Take back work a dead worker of this host left running (first call
        only), then do every task waiting for this host; returns how many were
        done.  With ``records`` (this pass's) saying no task waits, none is
        looked for.  A failure to reach the records is logged, not raised."""
        try:
            if not self._recovered:
                self.worker.recover()
                self._recovered = True
            elif records is not None and records.has_work is False:
                return 0
            return len(self.worker.run_pending())
        except NovaLiteError as exc:
            LOG.warning("Host %s: doing its work failed in this pass: %s", self.host, exc)
            return 0

    def record_findings(self, records: PassRecords | None = None
                        ) -> tuple[Finding, ...] | None:
        """Search this host's records for leaks and record what was found; returns
        the findings (None if the search failed: logged, the last record stays).

        ``records``: this host's records as the pass read them, current (None:
        read them here, in one read-only transaction).  Unchanged findings
        are not written again."""
        guests, error = audit_views.list_guests(self.driver, self.settings.driver_timeout)
        if error is not None:
            LOG.debug("Host %s: guests not compared in this leak search: %s", self.host, error)
        try:
            if records is None:
                records = self.store.pass_records(
                    self.host, service=True, service_down_time=self.settings.service_down_time)
            report = leaks.findings_from(records.snapshot(), self.settings, guests=guests)
            for finding in report.findings:
                LOG.info("Leak audit: %s %s on %s/%s: %s", finding.kind, finding.subject,
                         finding.host, finding.nodename, finding.detail)
            assert records.services is not None and records.findings is not None
            # The host's own record was read with its service's row.
            last = records.findings.get(self.host) if self.host in records.services \
                else UNREAD
            self.store.record_findings(self.host, report.findings, last=last)
        except NovaLiteError as exc:
            LOG.warning("Leak search of host %s failed in this pass: %s", self.host, exc)
            return None
        for finding in report.findings:
            if finding.kind in HEALABLE:
                LOG.warning("Host %s: %s %s: %s", self.host, finding.kind, finding.subject,
                            finding.detail)
        self._running_deleted([f.subject for f in report.findings if f.kind == UNKNOWN_GUEST],
                              records)
        self._record_for_down_hosts(records)
        return report.findings

    def _running_deleted(self, unknown_guests: list[str],
                         records: PassRecords | None = None) -> list[str]:
        """Apply ``running_deleted_instance_action`` to the guests this host's
        driver runs whose instance is recorded deleted; returns their uuids.
        An instance the pass's ``records`` hold is not read again."""
        action = self.settings.running_deleted_instance_action
        found: list[str] = []
        for uuid in unknown_guests:
            inst = None if records is None else records.instances.get(uuid)
            try:
                inst = inst or self.store.get_instance(uuid)
            except (InstanceNotFound, NovaLiteError):
                continue
            if inst.vm_state != DELETED:
                continue
            found.append(uuid)
            if action == "noop":
                continue
            if action == "log":
                LOG.warning("Host %s: guest of instance %s still runs although the instance "
                            "is deleted (running_deleted_instance_action=log)", self.host, uuid)
                continue
            LOG.warning("Host %s: destroying the guest of deleted instance %s "
                        "(running_deleted_instance_action=reap)", self.host, uuid)
            try:
                self.driver.destroy(inst)
            except Exception as exc:   # noqa: BLE001 - tried again next pass
                LOG.warning("Host %s: the guest of deleted instance %s was not destroyed: %s",
                            self.host, uuid, exc)
        return found

    def _record_for_down_hosts(self, records: PassRecords | None = None) -> None:
        """Record the findings of hosts whose compute service is down, when no live
        service did within the last pass interval: their leaks (instances deleted
        while they were down) show in every process's metrics too.  Guests are not
        compared: only the host's own driver could list them.  The work recorded
        for such a host waits for it: a ``tasks_waiting`` finding counts it.  One
        read lists just those hosts; only when there are some, one more counts the
        open work of every host, and one reads the heartbeats of those with work
        waiting.  A peer's record is rewritten once an interval, so the others
        skip it meanwhile, and one pass takes on at most ``[compute]
        down_hosts_per_pass`` of them (:func:`down_hosts_share`).  With the
        pass's ``records`` (they hold every service
        that is down, with its heartbeat and its findings' record) neither the
        first read nor the heartbeats' is needed."""
        interval = self.settings.update_resources_interval
        try:
            if records is not None and records.services is not None:
                down = records.hosts_needing_findings(
                    self.settings.service_down_time, interval, COMPUTE_BINARY)
            else:
                down = self.store.hosts_needing_findings(
                    self.host, self.settings.service_down_time, interval)
            down = down_hosts_share(down, self.host, self.settings.down_hosts_per_pass)
            waiting = self.store.tasks.waiting_by_host() if down else {}
            stalled = set(down) & set(waiting)
            # The down hosts' heartbeats: in the pass's records, else read by name.
            known = records.services if records is not None and \
                records.services is not None else {}
            beats = {h: known[h].updated_at for h in stalled if h in known}
            if stalled - set(beats):
                beats.update((s.host, s.updated_at) for h in sorted(stalled - set(beats))
                             for s in self.store.list_services(h))
            for host in down:
                report = leaks.find_leaks(self.store, self.settings, host=host)
                found = list(report.findings)
                if host in stalled:
                    found.append(tasks_waiting(host, waiting[host][0], beats.get(host)))
                self.store.record_findings(host, found, recorded_by=self.host,
                                           refresh_after=interval)
                LOG.info("Recorded %d finding(s) of host %s, whose compute service is down",
                         len(found), host)
        except NovaLiteError as exc:
            LOG.warning("Leak search of the hosts that are down failed in this pass: %s", exc)

    def _handle_orphans(self, reported: Collection[str], records: PassRecords | None = None
                        ) -> tuple[list[str], list[str]]:
        """Delete the node records the driver neither reports nor still has (it
        says so), keep the others; returns (deleted, kept) names.  ``records``:
        the host's records, current (None: read them)."""
        deleted: list[str] = []
        kept: list[str] = []
        nodes = self.store.get_compute_nodes(self.host) if records is None \
            else records.host_nodes
        for node in nodes:
            if node.nodename in reported:
                continue
            try:
                gone = self.driver.is_node_deleted(node.nodename)
            except Exception as exc:   # noqa: BLE001 - keep the record when unsure
                LOG.warning("Orphan node %s/%s kept: is_node_deleted failed: %s",
                            self.host, node.nodename, exc)
                gone = False
            if gone:
                LOG.warning("Deleting orphan compute node %s/%s (uuid %s): the driver no "
                            "longer reports it and says it is deleted", self.host,
                            node.nodename, node.uuid)
                self.store.delete_compute_node(self.host, node.nodename)
                deleted.append(node.nodename)
            else:
                LOG.warning("Orphan compute node %s/%s (uuid %s) is not reported by the "
                            "driver but not deleted either; keeping its record",
                            self.host, node.nodename, node.uuid)
                kept.append(node.nodename)
        return deleted, kept

    def run(self, max_passes: int | None = None, handle_signals: bool = True) -> int:
        """Pass every ``update_resources_interval`` s until stopped.

        A failing pass is logged and the loop goes on.  SIGTERM/SIGINT stop
        it cleanly after the current pass (when ``handle_signals`` and on
        the main thread).  ``max_passes`` bounds the loop (tests).
        """
        if self.settings.report_interval >= self.settings.service_down_time:
            LOG.warning("report_interval (%g s) is not less than service_down_time (%g s): "
                        "host %s will look down between heartbeats",
                        self.settings.report_interval, self.settings.service_down_time,
                        self.host)
        server_checks.log_server_advice(self.store, f"host {self.host}", LOG)
        served = self.start_metrics()
        previous: dict[signal.Signals, Any] = {}   # the handlers signal.signal gave back
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        # Beat before the heartbeat thread starts, for the first pass: the
        # thread then never beats before it, and never twice in a row with it.
        try:
            self.beat(only_if_due=False)
            self._first_beat_done = True
        except NovaLiteError as exc:
            LOG.warning("Heartbeat of host %s failed (the first pass tries again): %s",
                        self.host, exc)
        beats_done = threading.Event()
        beats = threading.Thread(target=self._heartbeats, args=(beats_done,), daemon=True,
                                 name=f"nova-lite heartbeat {self.host}")
        beats.start()
        if not self._stop.is_set():
            self._work_done.clear()
        worker = threading.Thread(target=self._serve_work, daemon=True,
                                  name=f"nova-lite work {self.host}")
        worker.start()
        try:
            passes = self._loop(max_passes)
        finally:
            beats_done.set()
            self._work_done.set()
            self.worker.stop()
            beats.join()
            worker.join()
            # Give the process its handlers back (run() may be called by a
            # test runner or an embedding program).
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if served is not None:
                served.stop()
        LOG.info("Compute service of host %s stopped after %d pass(es)", self.host, passes)
        return passes

    def _serve_work(self) -> None:
        """The worker thread of :meth:`run`: does this host's work as it is
        recorded until the service stops."""
        self._recovered = True   # serve() takes back what a dead worker left
        self.worker.serve(self._work_done)

    def start_metrics(self) -> "metrics.MetricsServer | None":
        """Serve Prometheus metrics when ``[metrics] port`` is set (see
        :mod:`nova_lite.metrics`); returns the started server, or None."""
        if not self.settings.metrics_port:
            return None
        reg = metrics.Exporter(self.store, self.settings)
        return metrics.MetricsServer(reg, self.settings.metrics_port,
                                     self.settings.metrics_bind).start()

    def _loop(self, max_passes: int | None) -> int:
        passes = 0
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:   # noqa: BLE001 - the service must survive a bad pass
                LOG.exception("Compute service pass of host %s failed", self.host)
            passes += 1
            if max_passes is not None and passes >= max_passes:
                break
            delay = self.settings.update_resources_interval - (time.monotonic() - started)
            self._stop.wait(max(0.0, delay))
        return passes

    def beat(self, only_if_due: bool = True) -> bool:
        """Write this host's heartbeat; with ``only_if_due``, only when no beat
        started less than ``report_interval`` seconds ago.  Returns whether it
        beat; a failed beat raises and does not count as one."""
        with self._beat_lock:
            started = self.clock()
            if only_if_due and self._next_beat_in(started) > 0:
                return False
            self.store.heartbeat(self.host, COMPUTE_BINARY)
            self._last_beat = started
            return True

    def _next_beat_in(self, now: float) -> float:
        """Seconds from ``now`` (clock s) until a beat is due (<= 0: due)."""
        if self._last_beat is None:
            return 0.0
        return self._last_beat + self.settings.report_interval - now

    def _heartbeats(self, done: threading.Event) -> None:
        """Beat when ``report_interval`` s have passed since the last beat (of a
        pass or of this loop) until ``done`` or stop (a thread of run())."""
        interval = self.settings.report_interval
        wait = interval
        while not done.wait(wait) and not self._stop.is_set():
            try:
                self.beat()
                self.worker.renew_leases()
            except Exception as exc:   # noqa: BLE001 - the next beat tries again
                LOG.warning("Heartbeat of host %s failed (retrying in %g s): %s",
                            self.host, interval, exc)
                wait = interval
                continue
            with self._beat_lock:
                wait = min(interval, max(0.0, self._next_beat_in(self.clock())))
            if wait <= 0:
                wait = interval

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # The handler runs on the main thread, which may be inside
        # self._stop.wait() holding the Event's lock: setting the Event
        # right here could deadlock, so a helper thread sets it.
        LOG.info("Compute service of host %s got signal %d: stopping", self.host, signum)
        threading.Thread(target=self.stop, name="nova-lite stop", daemon=True).start()

    def stop(self) -> None:
        """Ask :meth:`run` to return after the current pass."""
        self._stop.set()
        self._work_done.set()
        self.worker.stop()
