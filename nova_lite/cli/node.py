"""``nova-lite node list|show|delete``: the compute node records in the store."""

import logging

from cliff import command, lister, show

from nova_lite.cli import views
from nova_lite.cli.context import BadArguments, CommandError
from nova_lite.cli.output import (
    DictColumn, LinesColumn, ListColumn, OptionalColumn, TextColumn, cell)

LOG = logging.getLogger(__name__)

#: The flag that confirms a deletion.
CONFIRM_FLAG = "--yes-i-really-mean-it"


def _usage_column(node):
    rows = views.inventory_rows(node)
    lines = [f"{r['resource_class']}: used {r['used']} of {r['capacity']}, free {r['free']}, "
             f"over {r['over']}" for r in rows]
    data = {r["resource_class"]: {"used": r["used"], "capacity": r["capacity"],
                                  "free": r["free"], "over": r["over"]} for r in rows}
    return LinesColumn((lines, data))


def _inventory_column(node):
    rows = views.inventory_rows(node)
    lines = [f"{r['resource_class']}: total {r['total']}, reserved {r['reserved']}, ratio "
             f"{cell(r['allocation_ratio'])}, capacity {r['capacity']}, min_unit "
             f"{cell(r['min_unit'])}, max_unit {cell(r['max_unit'])}, step_size "
             f"{cell(r['step_size'])}" for r in rows]
    data = {r.pop("resource_class"): {k: r[k] for k in (
        "total", "reserved", "allocation_ratio", "capacity", "min_unit", "max_unit",
        "step_size")} for r in rows}
    return LinesColumn((lines, data))


def find_node(store, ident, host=None):
    """The node record named ``ident`` (node name or uuid), on ``host`` if given.

    Raises :class:`CommandError` naming the node when none or several match.
    """
    nodes = store.get_compute_nodes(host)
    found = [n for n in nodes if ident in (n.nodename, n.uuid)]
    where = f" on host {host!r}" if host else ""
    if not found:
        known = ", ".join(f"{n.host}/{n.nodename}" for n in nodes) or "none"
        raise CommandError(f"Compute node {ident!r} not found{where}. Known nodes: {known}")
    if len(found) > 1:
        hosts = ", ".join(sorted(n.host for n in found))
        raise CommandError(f"Compute node {ident!r} exists on several hosts ({hosts}); "
                           "pass --host")
    return found[0]


def _node_args(parser):
    parser.add_argument("node", metavar="NODE", help="Node name or uuid.")
    parser.add_argument("--host", metavar="HOST",
                        help="Service host of the node (needed if the name is on several).")


class ListNodes(lister.Lister):
    """List the compute node records: generation, usage (used, capacity, free, over) per
    resource class, last error."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST", help="Only the nodes of this host.")
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        headers = ("Host", "Node", "UUID", "Generation", "Usage", "Last error")
        rows = [(TextColumn(n.host), TextColumn(n.nodename), n.uuid, n.generation,
                 _usage_column(n),
                 OptionalColumn(n.last_error))
                for n in store.get_compute_nodes(parsed_args.host)]
        return headers, rows


class ShowNode(show.ShowOne):
    """Show one compute node record: inventories, usage, free, over, generation, last error.

    Free is never negative; over is what the node holds beyond its capacity.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _node_args(parser)
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        report = node.resources
        instances = [i.uuid for i in store.list_instances(host=node.host, node=node.nodename)]
        fields = {
            "uuid": node.uuid, "host": TextColumn(node.host),
            "nodename": TextColumn(node.nodename), "generation": node.generation,
            "hypervisor_type": OptionalColumn(report.hypervisor_type if report else None),
            "hypervisor_hostname": OptionalColumn(
                report.hypervisor_hostname if report else None),
            "inventories": _inventory_column(node),
            "usage": DictColumn({rc: node.used(rc) for rc in
                                 sorted(set(node.usage) | set(node.inventories))}),
            "free": DictColumn({rc: node.free(rc) for rc in sorted(node.inventories)}),
            "over": DictColumn({rc: node.over(rc) for rc in sorted(node.inventories)}),
            "instances": ListColumn(instances),
            "last_error": OptionalColumn(node.last_error),
        }
        return tuple(fields), tuple(fields.values())


class DeleteNode(command.Command):
    """Delete a compute node record with its inventories and allocations.

    Refuses unless --yes-i-really-mean-it is given.  Instance records are
    kept; if the driver still reports the node, the next audit records it
    again and rebuilds its allocations from the instances.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        _node_args(parser)
        parser.add_argument(CONFIRM_FLAG, dest="confirmed", action="store_true",
                            help="Confirm the deletion (required).")
        return parser

    def take_action(self, parsed_args):
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
