"""``nova-lite compute``: run the compute service, or one pass of it."""

import argparse
import logging
import signal
import threading
from collections.abc import Mapping
from types import FrameType
from typing import Any, Literal

from nova_lite import validators as v
from nova_lite.cli import demo, views
from nova_lite.cli.context import CliContext
from nova_lite.cli.output import cell, render_table
from nova_lite.cli.report_formats import ReportShowOne
from nova_lite.compute.manager import ComputeService

LOG = logging.getLogger(__name__)

_INVENTORY = [("Resource class", "resource_class"), ("Total", "total"),
              ("Reserved", "reserved"), ("Ratio", "allocation_ratio"),
              ("Capacity", "capacity"), ("Used", "used"), ("Free", "free"),
              ("Over", "over")]


def _configured_text(row: Mapping[str, Any]) -> str:
    if row["option"] is None:
        return "-"
    if row["configured"] is None:
        return row["option"]
    return f"{cell(row['configured'])} ({row['option']})"


def _amounts(mapping: Mapping[str, int]) -> str:
    return ", ".join(f"{rc}={n}" for rc, n in mapping.items()) or "nothing"


def _flavor_text(flavor: Mapping[str, Any]) -> str:
    return (f"{flavor['name']} ({flavor['vcpus']} vCPU, {flavor['memory_mb']} MB RAM, "
            f"{flavor['root_gb']} GB disk)")


def render_node(node: Mapping[str, Any]) -> str:
    """The two tables of one node: effective inventory, then the value sources."""
    lines = [f"Node {node['nodename']} (host {node['host']}, uuid {node['uuid']}, "
             f"generation {node['generation']})"]
    if node["last_error"]:
        lines.append(f"  Last audit error: {node['last_error']}")
    lines.append(render_table([h for h, _ in _INVENTORY],
                              [[row[k] for _, k in _INVENTORY] for row in node["inventory"]]))
    if node.get("sources"):
        lines.append("Detected (driver report), configured (settings) and effective values:")
        lines.append(render_table(
            ["Resource class", "Value", "Detected", "Configured", "Effective"],
            [[r["resource_class"], r["quantity"], r["detected"], _configured_text(r),
              r["effective"]] for r in node["sources"]]))
    return "\n".join(lines)


def render_demo(data: Mapping[str, Any]) -> str:
    """The demo claims in words."""
    lines = [f"Demo claims on node {data['node']}:"]
    admitted = data["admitted"]
    if admitted["admitted"]:
        lines.append(f"  ADMITTED  instance {admitted['instance']}, flavor "
                     f"{_flavor_text(admitted['flavor'])}")
        lines.append(f"            claimed {_amounts(admitted['claimed'])}")
        lines.append(f"            free after the claim: {_amounts(admitted['free_after'])}")
    else:
        lines.append(f"  NOT ADMITTED  instance {admitted['instance']}, flavor "
                     f"{_flavor_text(admitted['flavor'])}: {admitted['message']}")
    rejected = data["rejected"]
    lines.append(f"  {'REJECTED' if not rejected['admitted'] else 'NOT REJECTED'}  instance "
                 f"{rejected['instance']}, flavor {_flavor_text(rejected['flavor'])}")
    lines.append(f"            {rejected['message']}")
    if data["released"]:
        lines.append(f"  Released the admitted claim (instance {data['released']['instance']} "
                     f"marked deleted); free again: {_amounts(data['released']['free_after'])}")
    return "\n".join(lines)


class _StopSignals:
    """SIGTERM/SIGINT stop the service cleanly, even while it is starting.

    A signal that arrives before the service exists is remembered and stops
    it as soon as it is attached; the previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._service: ComputeService | None = None
        self._requested = False
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        LOG.info("Received signal %d: stopping after the current pass", signum)
        self._requested = True
        if self._service is not None:
            self._service.stop()

    def attach(self, service: ComputeService) -> None:
        """Stop ``service`` on a signal (at once if one already came)."""
        self._service = service
        if self._requested:
            service.stop()

    def __enter__(self) -> "_StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


#: The fields of the ``compute --once`` report (``demo`` only with --demo).
REPORT_FIELDS = ("host", "driver", "api_version", "state_path", "database", "audited",
                 "failed", "orphans_deleted", "orphans_kept", "nodes")


class RunCompute(ReportShowOne):
    """Run the compute service (with --once: one pass, then print the nodes).

    Without --once it audits every node each update_resources_interval
    until SIGTERM or SIGINT.  With --once it makes
    one pass (heartbeat, audit, orphan nodes) and prints, per node and
    resource class, total, reserved, ratio, capacity, used, free and over
    (what is held beyond capacity; free is never negative), with
    the detected, configured and effective values side by side; exit
    status 1 if a node failed its audit.  --demo (with --once) also makes
    one claim that is admitted and one that is rejected, prints both, and
    releases the admitted one.  -f and -c (with --once) pick the report's
    fields: host, driver, api_version, state_path, database, audited,
    failed, orphans_deleted, orphans_kept, nodes and, with --demo, demo.
    """

    def known_columns(self, parsed_args: argparse.Namespace) -> tuple[str, ...]:
        return REPORT_FIELDS + (("demo",) if parsed_args.demo else ())

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--driver", metavar="NAME",
                            help="Virt driver entry point (default: compute_driver, 'fake').")
        parser.add_argument("--host", metavar="HOST",
                            help="Service host name (default: host, the machine's name).")
        parser.add_argument("--once", action="store_true",
                            help="Make one pass, print the nodes and exit.")
        parser.add_argument("--demo", action="store_true",
                            help="With --once: one admitted and one rejected claim.")
        return parser

    def run(self, parsed_args: argparse.Namespace) -> int:
        if parsed_args.demo and not parsed_args.once:
            self.parser.error("--demo needs --once")
        if (parsed_args.formatter != "table" or parsed_args.columns) and not parsed_args.once:
            self.parser.error("--format and --column need --once")
        if parsed_args.once:
            return super().run(parsed_args)
        return self._serve(parsed_args)

    def _service(self, parsed_args: argparse.Namespace
                 ) -> tuple[CliContext, str, ComputeService]:
        ctx = self.app.context()
        settings = ctx.settings
        host = parsed_args.host if parsed_args.host is not None else settings.host
        problem = v.text_problem(host, "--host")
        if problem is not None:
            self.parser.error(problem)
        name = parsed_args.driver or settings.compute_driver
        driver = ctx.load_driver(name, host)
        store = ctx.open_store()
        return ctx, name, ComputeService(host, driver, store=store, settings=settings)

    def _serve(self, parsed_args: argparse.Namespace) -> int:
        self.app.service_logging()
        with _StopSignals() as stop:
            ctx, name, service = self._service(parsed_args)
            stop.attach(service)
            self.app.stdout.write(
                f"nova-lite compute: host {service.host}, driver {name}, database "
                f"{ctx.database}, every {ctx.settings.update_resources_interval:g} s; "
                "SIGTERM to stop\n")
            self.app.stdout.flush()
            service.run(handle_signals=False)
        return 0

    def report(self, parsed_args: argparse.Namespace) -> tuple[dict[str, Any], int]:
        ctx, name, service = self._service(parsed_args)
        result = service.run_once()
        nodes = service.store.get_compute_nodes(service.host)
        data: dict[str, Any] = {
            "host": service.host, "driver": name,
            "api_version": getattr(service.driver, "api_version", None),
            "state_path": ctx.state.path, "database": ctx.database,
            "audited": list(result.audited), "failed": dict(result.failed),
            "orphans_deleted": list(result.orphans_deleted),
            "orphans_kept": list(result.orphans_kept),
            "nodes": [views.node_dict(n, ctx.settings) for n in nodes],
        }
        code = 1 if result.failed else 0
        if parsed_args.demo:
            if not result.audited:
                data["demo"] = None
                code = 1
            else:
                data["demo"] = demo.run_demo(service.tracker, result.audited[0])
                code = code or (0 if data["demo"]["ok"] else 1)
        return data, code

    def render(self, data: dict[str, Any]) -> str:
        lines = [f"nova-lite compute: host {data['host']}, driver {data['driver']} (API "
                 f"{data['api_version']}), database {data['database']}",
                 f"One pass: {len(data['audited'])} node(s) audited, {len(data['failed'])} "
                 f"failed, orphan records deleted {len(data['orphans_deleted'])}, kept "
                 f"{len(data['orphans_kept'])}"]
        for nodename, reason in sorted(data["failed"].items()):
            lines.append(f"  FAILED node {nodename}: {reason}")
        for nodename in data["orphans_kept"]:
            lines.append(f"  Orphan node record {nodename} kept: the driver no longer "
                         "reports it but does not say it is deleted")
        for node in data["nodes"]:
            lines.extend(["", render_node(node)])
        if "demo" in data:
            lines.append("")
            lines.append(render_demo(data["demo"]) if data["demo"] is not None
                         else "Demo skipped: no node was audited.")
        return "\n".join(lines)
