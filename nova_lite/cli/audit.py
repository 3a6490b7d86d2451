"""``nova-lite audit [--heal] [--dry-run]``: hypervisor view, tracked view and records,
side by side; the leaks they reveal, and their repair."""

import argparse
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from nova_lite import audit, explain, leaks
from nova_lite.cli.output import render_table
from nova_lite.cli.report_formats import ReportShowOne
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.exception import HostNotFound

LOG = logging.getLogger(__name__)

#: Exit status when the views differ (as ``nova-manage placement audit``).
EXIT_DIFFERENCES = 3


def _differences_table(differences: Iterable[Mapping[str, Any]]) -> str:
    return render_table(["Kind", "UUID", "Node", "Detail"],
                        [[d["kind"], d["uuid"] or "-", d["nodename"], d["detail"]]
                         for d in differences])


#: Difference kinds about a whole node: their ``uuid`` is the node's, not its name.
_NODE_KINDS = (audit.NODE_REPORT_FAILED, audit.NODE_NOT_RECORDED, audit.NODE_NOT_REPORTED)


def _node_uuids(data: Mapping[str, Any]) -> None:
    """Put each node difference's node uuid (None if unrecorded) in its uuid field."""
    for node in data["nodes"]:
        for diff in node["differences"]:
            if diff["kind"] in _NODE_KINDS:
                diff["uuid"] = node["node_uuid"]


def _resources(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in sorted(resources.items())) or "-"


def _leaks_table(found: Iterable[Mapping[str, Any]]) -> str:
    return render_table(["Leak", "Subject", "Node", "Resources", "Detail"],
                        [[f["kind"], f["subject"], f"{f['host'] or '-'}/{f['nodename'] or '-'}",
                          _resources(f["resources"]), f["detail"]] for f in found])


def _heal_table(actions: Iterable[Mapping[str, Any]]) -> str:
    return render_table(["Outcome", "Change", "Subject", "Node", "Frees", "Detail"],
                        [[a["outcome"], a["kind"], a["subject"], f"{a['host']}/{a['nodename']}",
                          _resources(a["resources"]),
                          a["reason"] if a["outcome"] == leaks.SKIPPED else a["detail"]]
                         for a in actions])


class RunAudit(ReportShowOne):
    """Compare, per node, the driver's report, the tracker and the records; find leaks.

    Names every instance or guest that makes them differ: guests the
    hypervisor has but no record backs, records without a guest, and
    allocations without a live record (or records without one).  Then the
    leaks: allocations of deleted or unknown instances (or finished
    migrations), unknown guests, instances whose node is gone, migrations
    in progress unchanged for longer than [compute] migration_stuck_age
    seconds (stuck when a compute service at either end is down, else
    waiting and left to the services), and nodes over capacity, all read
    from one snapshot of the records.  Also shows the findings the host's
    compute service recorded at its last pass.  Reads only, unless --heal:
    it removes the stale allocations and finishes the stuck migrations
    (and those named with --migration), each in its own transaction that
    checks the consumer's own record again under its lock: a consumer that
    holds resources again, a move that went on or whose service came
    back, or a node that changed since the audit read it is skipped and
    reported so.  --dry-run shows what --heal would do and writes nothing.
    Exit status: 0 when consistent (after --heal: when nothing is left), 3
    when something differs, 1 on error (an unknown host, node or
    migration included).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST",
                            help="Service host to audit (default: the host of --node in "
                                 "the records, else host, the machine's name).")
        parser.add_argument("--driver", metavar="NAME",
                            help="Virt driver entry point (default: compute_driver).")
        parser.add_argument("--node", metavar="NODE", help="Only this node.")
        parser.add_argument("--heal", action="store_true",
                            help="Remove stale allocations and finish stuck migrations; "
                                 "prints every change made or skipped.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Show what --heal would change; write nothing.")
        parser.add_argument("--migration", metavar="UUID", action="append", default=[],
                            help="A move in progress that --heal finishes even though its "
                                 "compute services are up (repeatable).")
        return parser

    def known_columns(self, parsed_args: argparse.Namespace) -> tuple[str, ...]:
        """The report's fields, known before it runs: a bad -c changes nothing."""
        known = ["host", "driver", "nodes", "differences", "guests_listed", "note",
                 "consistent", "database", "migration_stuck_age", "leaks",
                 "recorded_findings"]
        if parsed_args.heal or parsed_args.dry_run:
            known += ["heal", "dry_run"]
        if parsed_args.heal and not parsed_args.dry_run:
            known += ["consistent_after_heal", "leaks_after_heal"]
        return tuple(known)

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
        ctx = self.app.context()
        if parsed_args.host is not None and not parsed_args.host.strip():
            self.parser.error("--host must not be empty")
        if parsed_args.node is not None and not parsed_args.node.strip():
            self.parser.error("--node must not be empty")
        if parsed_args.migration and not (parsed_args.heal or parsed_args.dry_run):
            self.parser.error("--migration names a move for --heal (or --dry-run) to finish")
        writes = parsed_args.heal and not parsed_args.dry_run
        store = ctx.open_store(must_exist=True, readonly=not writes)
        host = self._host(parsed_args, store, ctx.settings.host)
        name = parsed_args.driver or ctx.settings.compute_driver
        driver = ctx.load_driver(name, host)
        tracker = ResourceTracker(host, driver, store=store, settings=ctx.settings)
        result = audit.audit_host(tracker, nodename=parsed_args.node)
        guests, _ = audit.list_guests(driver, ctx.settings.driver_timeout)
        found = leaks.find_leaks(store, ctx.settings, host=host, nodename=parsed_args.node,
                                 guests=guests, migrations=parsed_args.migration)
        data = result.to_dict()
        data["driver"] = name   # the entry point, as ``compute`` names it
        _node_uuids(data)
        data["database"] = ctx.database
        data["consistent"] = result.consistent and found.clean
        data["migration_stuck_age"] = ctx.settings.migration_stuck_age
        data["leaks"] = found.to_dicts()
        recorded = store.recorded_findings(host)
        data["recorded_findings"] = None if not recorded else {
            "recorded_at": recorded[0].recorded_at,
            "findings": [f.to_dict() for f in recorded[0].findings]}
        consistent = data["consistent"]
        if parsed_args.heal or parsed_args.dry_run:
            actions = leaks.heal(store, found, dry_run=not writes)
            data["heal"] = [attrs.asdict(a) for a in actions]
            data["dry_run"] = not writes
        if writes:
            after_tracker = ResourceTracker(host, driver, store=store, settings=ctx.settings)
            after = audit.audit_host(after_tracker, nodename=parsed_args.node)
            left = leaks.find_leaks(store, ctx.settings, host=host,
                                    nodename=parsed_args.node, guests=guests)
            consistent = after.consistent and left.clean
            data["consistent_after_heal"] = consistent
            data["leaks_after_heal"] = left.to_dicts()
            # What every process's metrics show for the host, now: this
            # driver's guests are not the host's, so they are left out.
            store.record_findings(host, [f for f in left.findings
                                         if f.kind != leaks.UNKNOWN_GUEST],
                                  recorded_by=ctx.settings.host)
        return data, 0 if consistent else EXIT_DIFFERENCES

    def render(self, data: dict[str, Any]) -> str:
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
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(recorded["recorded_at"]))
            lines.append(f"Recorded by the compute service of host {data['host']} at {when}: "
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
