"""``nova-lite node list|show|delete|explain``: the compute node records in the store."""

import argparse
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nova_lite import audit, explain, reports
from nova_lite.cli import paging, typed, views
from nova_lite.cli.context import BadArguments
from nova_lite.cli.lookup import child_generations, find_node, node_arguments
from nova_lite.cli.output import (
    LinesColumn, ListColumn, OptionalColumn, PciDevicesColumn, ProvidersColumn, TextColumn, cell,
    render_table)
from nova_lite.cli.report_formats import ReportShowOne
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.objects import ComputeNode

LOG = logging.getLogger(__name__)

#: The flag that confirms a deletion.
CONFIRM_FLAG = "--yes-i-really-mean-it"
#: Every column of ``node list`` (-f json/yaml/csv/value, or --long).
LIST_HEADERS = ("Host", "Node", "UUID", "Generation", "Usage", "Last error")
#: The columns of its table without --long.
DEFAULT_HEADERS = ("Host", "Node", "Usage", "Last error")
#: The fields of ``node show``.
SHOW_FIELDS = ("uuid", "host", "nodename", "generation", "hypervisor_type",
               "hypervisor_hostname", "inventories", "usage", "free", "over", "instances",
               "last_error", "traits", "pci_devices", "providers")

#: One node of ``node list``, in LIST_HEADERS' order.
ListRow = tuple[TextColumn, TextColumn, str, int, LinesColumn, OptionalColumn]


def _usage_column(node: ComputeNode) -> LinesColumn:
    rows = views.inventory_rows(node)
    lines = [f"{r['resource_class']}: {r['used']}/{r['capacity']}, free {r['free']}, "
             f"over {r['over']}" for r in rows]
    data = {r["resource_class"]: {"used": r["used"], "capacity": r["capacity"],
                                  "free": r["free"], "over": r["over"]} for r in rows}
    return LinesColumn((lines, data))


def _inventory_column(node: ComputeNode) -> LinesColumn:
    rows = views.inventory_rows(node)
    lines = [f"{r['resource_class']}: total {r['total']}, reserved {r['reserved']}, ratio "
             f"{cell(r['allocation_ratio'])}, capacity {r['capacity']}, min_unit "
             f"{cell(r['min_unit'])}, max_unit {cell(r['max_unit'])}, step_size "
             f"{cell(r['step_size'])}" for r in rows]
    data = {r.pop("resource_class"): {k: r[k] for k in (
        "total", "reserved", "allocation_ratio", "capacity", "min_unit", "max_unit",
        "step_size")} for r in rows}
    return LinesColumn((lines, data))


class ListNodes(Lister):
    """List the compute node records: usage per resource class and the last audit error.

    Usage gives, per resource class, used/capacity, free (never negative)
    and over (held beyond capacity); -f json gives them by name.  --long
    (or -c) adds the uuid and generation.  --limit and --marker list one
    page (sorted by host, then node name; the marker is a node's uuid).
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only the nodes of this host.")
        paging.add_arguments(parser, "host then node name", "the node with this uuid")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[ListRow]]:
        ctx = self.app.context()
        limit, marker = paging.page(parsed_args, ctx.settings)
        store = ctx.open_store(must_exist=True, readonly=True)
        rows = [(TextColumn(n.host), TextColumn(n.nodename), n.uuid, n.generation,
                 _usage_column(n),
                 OptionalColumn(n.last_error))
                for n in store.get_compute_nodes(parsed_args.host, limit=limit,
                                                 marker=marker)]
        return LIST_HEADERS, rows


class ShowNode(ShowOne):
    """Show one compute node record: inventories, usage, free, over, traits and more.

    Also its generation, instances, last error, PCI devices for
    passthrough (each in use, free or unavailable) and child providers
    (devices accounted apart, such as GPUs with VGPU inventory: each with
    its inventory, used, free, traits and generation).

    Free is never negative; over is what the node holds beyond its
    capacity.  A max_unit of null means no limit.
    """

    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        report = node.resources
        instances = [i.uuid for i in store.list_instances(host=node.host, node=node.nodename)]
        fields: dict[str, Any] = {
            "uuid": node.uuid, "host": TextColumn(node.host),
            "nodename": TextColumn(node.nodename), "generation": node.generation,
            "hypervisor_type": OptionalColumn(report.hypervisor_type if report else None),
            "hypervisor_hostname": OptionalColumn(
                report.hypervisor_hostname if report else None),
            "inventories": _inventory_column(node),
            "usage": {rc: node.used(rc) for rc in
                      sorted(set(node.usage) | set(node.inventories))},
            "free": {rc: node.free(rc) for rc in sorted(node.inventories)},
            "over": {rc: node.over(rc) for rc in sorted(node.inventories)},
            "instances": ListColumn(instances),
            "last_error": OptionalColumn(node.last_error),
            "traits": ListColumn(sorted(node.traits)),
            "pci_devices": PciDevicesColumn(reports.pci_device_lines(node)),
            "providers": ProvidersColumn(reports.provider_lines(
                node, child_generations(store, node))),
        }
        return SHOW_FIELDS, tuple(fields[name] for name in SHOW_FIELDS)


class DeleteNode(typed.Command):
    """Delete a compute node record with its inventories and allocations.

    Refuses unless --yes-i-really-mean-it is given (exit status 2, nothing
    changed).  Instance records are kept; if the driver still reports the
    node, the next audit records it again and rebuilds its allocations
    from the instances.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        store = self.app.context().open_store(must_exist=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        held = store.list_allocations(node_uuid=node.uuid)
        what = (f"compute node record {node.host}/{node.nodename} (uuid {node.uuid}, "
                f"{len(held)} allocation(s))")
        if not parsed_args.confirmed:
            raise BadArguments(f"Refusing to delete {what} without {CONFIRM_FLAG}; "
                               "nothing was changed")
        store.delete_compute_node(node.host, node.nodename)
        LOG.warning("Deleted %s", what)
        self.app.stdout.write(f"Deleted {what}\n")
        return 0


def _consumers_table(consumers: Iterable[Mapping[str, Any]]) -> str:
    return render_table(
        ["Consumer", "Type", "Role", "Flavor", "Flavor amount", "Overhead", "Amount", "State",
         "Detail"],
        [[c["consumer_uuid"], c["consumer_type"], c["role"], c["flavor"], c["flavor_amount"],
          c["overhead"], c["amount"], c["state"] or "-", c["detail"]] for c in consumers])


def render_explanation(data: Mapping[str, Any]) -> str:
    """The text of a node explanation (a :meth:`NodeExplanation.to_dict`) for people."""
    lines = [f"Node {data['nodename']} (host {data['host']}, uuid {data['node_uuid']}, "
             f"generation {data['generation']}"
             f"{'' if data['reported'] else ', no longer reported by its driver'})"]
    if data["note"]:
        lines.append(f"Note: {data['note']}")
    for r in data["resources"]:
        lines.append("")
        where = f" on child provider {r['provider']}" if r.get("provider") else ""
        lines.append(f"{r['resource_class']}{where}: total {r['total']} (driver reported "
                     f"{'-' if r['detected'] is None else r['detected']})")
        lines.append(f"  - reserved {r['reserved']}: {'; '.join(r['reserved_sources'])}")
        lines.append(f"  x ratio {'-' if r['ratio'] is None else r['ratio']}: "
                     f"{r['ratio_source']}")
        lines.append(f"  = capacity {r['capacity']}: {r['capacity_formula']}")
        if r["consumers"]:
            lines.append(_consumers_table(r["consumers"]))
        else:
            lines.append("  no consumer holds any")
        lines.append(f"  used {r['used']}, free {r['free']}, over {r['over']}")
        lines.extend(f"  note: {note}" for note in r["notes"])
    lines.append("")
    if data["culprits"]:
        lines.append(render_table(
            ["Culprit", "Subject", "Resources", "Detail"],
            [[c["kind"], c["subject"], ", ".join(f"{k}={v}" for k, v in
                                                 sorted(c["resources"].items())) or "-",
              c["detail"]] for c in data["culprits"]]))
    lines.append(f"Verdict: {data['verdict']}")
    return "\n".join(lines)


class ExplainNode(ReportShowOne):
    """Explain a node's free amounts line by line and name the culprits.

    Per resource class: total, minus reserved (and the option or driver
    report that set it), times the allocation ratio (and where it came
    from) gives the capacity; then every consumer and what it holds
    (instances with flavor and overhead, in-progress migrations, and
    allocations of deleted or unknown consumers); then used, free (never
    negative) and over.  Ends with the culprits (stale allocation, unknown
    guest, shrunken host, over-commit by ratio, missing allocation) or
    "consistent".  Reads the records only; with --driver, the guests that
    driver lists on the node's host are compared too.  Exit status 0 (a
    culprit is an answer, not an error; ``audit`` exits 3), 1 on error.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        parser.add_argument("--driver", metavar="NAME",
                            help="Also compare the guests this virt driver (entry point "
                                 "name) lists on the node's host; without it the records "
                                 "alone are read.")
        return parser

    def report(self, parsed_args: argparse.Namespace) -> tuple[dict[str, Any], int]:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        guests, note = None, None
        if parsed_args.driver:
            driver = ctx.load_driver(parsed_args.driver, node.host)
            guests, note = audit.list_guests(driver, ctx.settings.driver_timeout)
        result = explain.explain_node(store, node.uuid, ctx.settings, guests=guests)
        data = result.to_dict()
        if note:
            data["note"] = note
        return data, 0

    def render(self, data: dict[str, Any]) -> str:
        return render_explanation(data)
