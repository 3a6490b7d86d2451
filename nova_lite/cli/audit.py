"""``nova-lite audit``: the findings each host recorded, or one host's audit by its own service.

Three ways, one command:

- without ``--host`` or ``--node``: every host's recorded findings, read
  from the records only (no driver is loaded here);
- with ``--host``/``--node``: an ``audit`` task for the host; its compute
  service audits with its own driver (and heals, when asked) and records
  the report, shown here (:mod:`nova_lite.compute.audit_work`);
- ``--local``: the report made in this process with ``--driver`` (on the
  host itself, while its service is stopped).
"""

import argparse
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from nova_lite import explain, leaks, reports
from nova_lite.audit_report import (
    EXIT_DIFFERENCES, AuditRequest, build_report, exit_status)
from nova_lite.cli.output import escaped, render_table
from nova_lite.cli.report_formats import ReportShowOne
from nova_lite.cli.server import timeout_seconds
from nova_lite.compute import audit_work
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import CommandError, HostNotFound, InvalidInput

LOG = logging.getLogger(__name__)

#: Seconds ``audit --host`` waits for the host's report by default.
DEFAULT_TIMEOUT = 60.0
#: The fields of the recorded findings of every host (``audit`` alone).
RECORDS_FIELDS = ("consistent", "database", "hosts")


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _differences_table(differences: Iterable[Mapping[str, Any]]) -> str:
    return render_table(["Kind", "UUID", "Node", "Detail"],
                        [[d["kind"], d["uuid"] or "-", d["nodename"], d["detail"]]
                         for d in differences])


def _resources(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items())) or "-"


def _leaks_table(found: Iterable[Mapping[str, Any]], title: str = "Leak") -> str:
    return render_table([title, "Subject", "Node", "Resources", "Detail"],
                        [[f["kind"], f["subject"], f"{f['host'] or '-'}/{f['nodename'] or '-'}",
                          _resources(f["resources"]), f["detail"]] for f in found])


def _heal_table(actions: Iterable[Mapping[str, Any]]) -> str:
    return render_table(["Outcome", "Change", "Subject", "Node", "Frees", "Detail"],
                        [[a["outcome"], a["kind"], a["subject"], f"{a['host']}/{a['nodename']}",
                          _resources(a["resources"]),
                          a["reason"] if a["outcome"] == leaks.SKIPPED else a["detail"]]
                         for a in actions])


def _recorded_line(entry: Mapping[str, Any]) -> str:
    """``Host H: compute service up (...); recorded by P at T: N finding(s)``."""
    if entry["service"] is None:
        service = "no compute service record"
    else:
        service = (f"compute service {entry['service']} (last heartbeat at "
                   f"{_when(entry['last_heartbeat'])})")
    if entry["findings"] is None:
        return f"Host {entry['host']}: {service}; nothing recorded yet"
    by = entry["recorded_by"] or "-"
    peer = " (a peer)" if entry["recorded_by"] not in (None, entry["host"]) else ""
    count = len(entry["findings"])
    return (f"Host {entry['host']}: {service}; recorded by {by}{peer} at "
            f"{_when(entry['recorded_at'])}: {count or 'no'} finding(s)")


class RunAudit(ReportShowOne):
    """Show the findings every host recorded, or have one host's compute service audit it.

    Without --host or --node: every host's findings as recorded in the
    records (by its own compute service at its last pass, or, while it is
    down, by a live peer, which adds the work waiting for it as
    tasks_waiting), one section per host saying who recorded them and when
    and whether its compute service is up.  No driver is loaded.  Exit
    status 0 when no host has findings, 3 when one has.

    With --host HOST (or --node NODE, whose host is found in the records):
    records an audit for HOST and waits up to --timeout seconds for it.
    HOST's compute service compares, per node, its driver's report, its
    tracker and the records, and names every instance or guest that makes
    them differ; then the leaks: allocations of deleted or unknown
    instances (or finished migrations), unknown guests, instances whose
    node is gone, migrations in progress unchanged for longer than
    [compute] migration_stuck_age seconds (stuck when a compute service at
    either end is down, else waiting and left to the services), and nodes
    over capacity, read from one snapshot of the records; and the findings
    recorded for the host.  Reads only, unless --heal: the host removes the
    stale allocations and finishes the stuck migrations (and those named
    with --migration), each in its own transaction that checks the
    consumer's own record again under its lock: a consumer that holds
    resources again, a move that went on or whose service came back, or a
    node that changed since the audit read it is skipped and reported so.
    --dry-run shows what --heal would do and writes nothing.  A host whose
    compute service is down cannot answer: its recorded findings are shown
    at once on standard error and the status is 1; so it is when no report
    comes within --timeout (the audit is cancelled if it still waits).

    With --local: the audit runs in this process with --driver (default
    compute_driver), for the host this machine is (default: host of the
    configuration) while its compute service is stopped.

    Exit status: 0 when consistent (after --heal: when nothing is left), 3
    when something differs, 1 on error (an unknown host, node or migration,
    a host whose service is down or does not answer in time).
    """

    #: Whether this run lists every host's recorded findings (set by report()).
    _records_view = False

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST",
                            help="Have this host's compute service audit it (default: the "
                                 "host of --node in the records; neither: list every "
                                 "host's recorded findings).")
        parser.add_argument("--node", metavar="NODE", help="Only this node.")
        parser.add_argument("--timeout", type=timeout_seconds, metavar="SECONDS",
                            help=f"How long to wait for the host's report (default "
                                 f"{DEFAULT_TIMEOUT:g}).")
        parser.add_argument("--local", action="store_true",
                            help="Audit here, with --driver, instead of asking the host's "
                                 "compute service: for the host this machine is, while its "
                                 "service is stopped (default host: host).")
        parser.add_argument("--driver", metavar="NAME",
                            help="Virt driver entry point of --local (default: "
                                 "compute_driver).")
        parser.add_argument("--heal", action="store_true",
                            help="Remove stale allocations and finish stuck migrations; "
                                 "prints every change made or skipped.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Show what --heal would change; write nothing.")
        parser.add_argument("--migration", metavar="UUID", action="append", default=[],
                            help="A move in progress that --heal finishes even though its "
                                 "compute services are up (repeatable).")
        return parser

    @staticmethod
    def _lists_records(parsed_args: argparse.Namespace) -> bool:
        return not parsed_args.local and parsed_args.host is None and parsed_args.node is None

    def known_columns(self, parsed_args: argparse.Namespace) -> tuple[str, ...]:
        """The report's fields, known before it runs: a bad -c changes nothing."""
        if self._lists_records(parsed_args):
            return RECORDS_FIELDS
        return AuditRequest(heal=parsed_args.heal, dry_run=parsed_args.dry_run).fields()

    def _check(self, parsed_args: argparse.Namespace) -> AuditRequest:
        """The request the arguments make; a usage error (status 2) otherwise."""
        for option in ("host", "node"):
            value = getattr(parsed_args, option)
            if value is not None and not value.strip():
                self.parser.error(f"--{option} must not be empty")
        if parsed_args.migration and not (parsed_args.heal or parsed_args.dry_run):
            self.parser.error("--migration names a move for --heal (or --dry-run) to finish")
        if parsed_args.driver is not None and not parsed_args.local:
            self.parser.error("--driver is the driver of --local: without it the host's own "
                              "compute service audits with its own driver")
        if parsed_args.timeout is not None and (parsed_args.local
                                                or self._lists_records(parsed_args)):
            self.parser.error("--timeout is how long to wait for a host's report: it goes "
                              "with --host or --node, without --local")
        if self._lists_records(parsed_args) and (parsed_args.heal or parsed_args.dry_run):
            self.parser.error("--heal and --dry-run act on one host: name it with --host or "
                              "--node (or use --local on the host itself)")
        try:
            return AuditRequest(node=parsed_args.node, heal=parsed_args.heal,
                                dry_run=parsed_args.dry_run, migrations=parsed_args.migration)
        except InvalidInput:
            self.parser.error("--migration must not be empty")
            raise   # not reached: error() exits

    def _host(self, parsed_args: argparse.Namespace, store: Store, default: str) -> str:
        """The host to audit: --host (which must be known), else --node's in the
        records, else ``default``."""
        if parsed_args.host is not None:
            known = {s.host for s in store.list_services()} | {
                n.host for n in store.get_compute_nodes()}
            if parsed_args.host not in known:
                raise HostNotFound(parsed_args.host, known)
            return parsed_args.host
        if parsed_args.node is not None:
            return explain.find_node(store, parsed_args.node).host
        return default

    def report(self, parsed_args: argparse.Namespace) -> tuple[dict[str, Any], int]:
        request = self._check(parsed_args)
        self._records_view = self._lists_records(parsed_args)
        if self._records_view:
            return self._recorded(parsed_args)
        if parsed_args.local:
            return self._local(parsed_args, request)
        return self._ask(parsed_args, request)

    def _local(self, parsed_args: argparse.Namespace,
               request: AuditRequest) -> tuple[dict[str, Any], int]:
        """The report made here, with --driver."""
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=not request.writes)
        host = self._host(parsed_args, store, ctx.settings.host)
        name = parsed_args.driver or ctx.settings.compute_driver
        driver = ctx.load_driver(name, host)
        tracker = ResourceTracker(host, driver, store=store, settings=ctx.settings)
        return build_report(tracker, store, ctx.settings, request, driver_name=name,
                            recorded_by=ctx.settings.host, record_guests=False)

    def _ask(self, parsed_args: argparse.Namespace,
             request: AuditRequest) -> tuple[dict[str, Any], int]:
        """The report the host's compute service made and recorded."""
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True)
        host = self._host(parsed_args, store, ctx.settings.host)
        request = audit_work.check_request(store, host, request)
        timeout = DEFAULT_TIMEOUT if parsed_args.timeout is None else parsed_args.timeout
        try:
            report = audit_work.ask(store, host, request, timeout=timeout,
                                    settings=ctx.settings)
        except audit_work.HostDown as exc:
            raise CommandError(self._down(store, exc)) from None
        except (audit_work.AuditTimeout, audit_work.AuditFailed) as exc:
            raise CommandError(str(exc)) from None
        return report, exit_status(report)

    def _down(self, store: Store, exc: audit_work.HostDown) -> str:
        """What to say when the host cannot answer: why, and its recorded findings."""
        text = str(exc)
        lines = [text[:1].upper() + text[1:]]
        if exc.task is not None:
            lines[0] += (f"; its audit (task {exc.task.id}) is cancelled"
                         if exc.task.state == "cancelled" else
                         f"; its audit (task {exc.task.id}) is left {exc.task.state}")
        recorded = store.recorded_findings(exc.host)
        if not recorded:
            lines[0] += "; nothing was recorded for it yet"
        else:
            rec = recorded[0]
            peer = " (a peer)" if rec.recorded_by not in (None, exc.host) else ""
            lines[0] += (f"; showing the findings it (or a peer) recorded at "
                         f"{_when(rec.recorded_at)} (by {rec.recorded_by or '-'}{peer}): "
                         f"{len(rec.findings) or 'no'} finding(s)")
            if rec.findings:
                lines.append(_leaks_table(escaped([f.to_dict() for f in rec.findings]),
                                          "Finding"))
        lines.append(f"To audit it with its service stopped, run 'nova-lite audit --local' "
                     f"on host {exc.host}.")
        return "\n".join(lines)

    def _recorded(self, parsed_args: argparse.Namespace) -> tuple[dict[str, Any], int]:
        """Every host's recorded findings, from the records alone."""
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        now = time.time()
        services = {s.host: s for s in store.list_services()}
        recorded = {r.host: r for r in store.recorded_findings()}
        hosts = []
        for host in sorted(set(services) | set(recorded)):
            service, rec = services.get(host), recorded.get(host)
            hosts.append({
                "host": host,
                "service": None if service is None else reports.service_state(
                    service, ctx.settings.service_down_time, now)[0],
                "last_heartbeat": None if service is None else service.updated_at,
                "recorded_by": None if rec is None else rec.recorded_by,
                "recorded_at": None if rec is None else rec.recorded_at,
                "findings": None if rec is None else [f.to_dict() for f in rec.findings]})
        consistent = not any(h["findings"] for h in hosts)
        data = {"consistent": consistent, "database": ctx.database, "hosts": hosts}
        return data, 0 if consistent else EXIT_DIFFERENCES

    def render(self, data: dict[str, Any]) -> str:
        if self._records_view:
            return self._render_records(data)
        return self._render_host(data)

    @staticmethod
    def _render_records(data: dict[str, Any]) -> str:
        with_findings = sum(1 for h in data["hosts"] if h["findings"])
        lines = [f"Findings recorded for {len(data['hosts'])} host(s) (database "
                 f"{data['database']}): " + (f"{with_findings} host(s) with findings"
                                             if with_findings else "none")]
        for entry in data["hosts"]:
            lines.append("")
            lines.append(_recorded_line(entry))
            if entry["findings"]:
                lines.append(_leaks_table(entry["findings"], "Finding"))
        return "\n".join(lines)

    @staticmethod
    def _render_host(data: dict[str, Any]) -> str:
        state = "consistent" if data["consistent"] else (
            f"{sum(len(n['differences']) for n in data['nodes']) + len(data['differences'])}"
            f" difference(s), {len(data['leaks'])} leak(s)")
        lines = [f"Audit of host {data['host']} (driver {data['driver']}, database "
                 f"{data['database']}): {state}"]
        if data["note"]:
            lines.append(f"Note: {data['note']}")
        for node in data["nodes"]:
            lines.append("")
            lines.append(f"Node {node['nodename']} (uuid {node['node_uuid'] or '-'}): "
                         f"{'consistent' if node['consistent'] else 'differs'}")
            lines.append(render_table(
                ["Resource class", "Hypervisor", "Tracked", "Records", "Capacity", "Free",
                 "Over", "Status"],
                [[r["resource_class"], r["hypervisor"], r["tracked"], r["records"],
                  r["capacity"], r["free"], r["over"], r["status"]]
                 for r in node["resources"]]))
            if node["differences"]:
                lines.append(_differences_table(node["differences"]))
        if data["differences"]:
            lines.append("")
            lines.append("Host-level differences:")
            lines.append(_differences_table(data["differences"]))
        lines.append("")
        if data["leaks"]:
            lines.append(f"Leaks (migration_stuck_age {data['migration_stuck_age']:g} s):")
            lines.append(_leaks_table(data["leaks"]))
        else:
            lines.append("Leaks: none")
        recorded = data["recorded_findings"]
        if recorded is None:
            lines.append(f"Recorded by the compute service of host {data['host']}: nothing "
                         "yet (no pass has recorded findings)")
        else:
            lines.append(f"Recorded by the compute service of host {data['host']} at "
                         f"{_when(recorded['recorded_at'])}: "
                         f"{len(recorded['findings'])} finding(s)")
        if "heal" in data:
            lines.append("")
            title = "Heal, dry run (nothing written)" if data["dry_run"] else "Heal"
            if data["heal"]:
                lines.append(f"{title}:")
                lines.append(_heal_table(data["heal"]))
            else:
                lines.append(f"{title}: nothing to change")
        if "consistent_after_heal" in data:
            lines.append("After heal: " + ("consistent" if data["consistent_after_heal"]
                                           else "differences remain"))
            if data["leaks_after_heal"]:
                lines.append(_leaks_table(data["leaks_after_heal"]))
        return "\n".join(lines)
