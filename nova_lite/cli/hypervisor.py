"""``nova-lite hypervisor list|show|stats``: compute nodes as an operator sees them."""

import time

import attrs
from cliff import lister, show

from nova_lite import reports
from nova_lite.cli.context import BadArguments
from nova_lite.cli.output import DictColumn, ListColumn, OptionalColumn, TextColumn
from nova_lite.cli.service import list_services

LIST_HEADERS = ("ID", "Hypervisor Hostname", "Host", "Hypervisor Type", "State", "Status",
                "vCPUs Used", "vCPUs", "Memory MB Used", "Memory MB", "Free RAM MB",
                "Disk GB Used", "Disk GB", "Free Disk GB", "Running VMs")


def find_node(store, ident, host=None):
    """The node named ``ident`` (name or uuid), on ``host`` if given; BadArguments if
    none or several match."""
    nodes = store.get_compute_nodes(host)
    found = [n for n in nodes if ident in (n.nodename, n.uuid)]
    if not found:
        known = ", ".join(f"{n.host}/{n.nodename}" for n in nodes) or "none"
        where = f" on host {host!r}" if host else ""
        raise BadArguments(f"Compute node {ident!r} not found{where}. Known nodes: {known}")
    if len(found) > 1:
        raise BadArguments(f"Compute node {ident!r} exists on several hosts "
                           f"({', '.join(sorted(n.host for n in found))}); pass --host")
    return found[0]


def node_arguments(parser):
    parser.add_argument("node", metavar="NODE", help="Node name or uuid.")
    parser.add_argument("--host", metavar="HOST", help="Host of the node, if the name is "
                                                       "on several hosts.")


class ListHypervisors(lister.Lister):
    """List compute nodes: state (up/down from the heartbeat), status
    (enabled/disabled), vCPUs, memory and disk capacity, used and free, running VMs."""

    def take_action(self, parsed_args):
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        rows = reports.hypervisor_rows(store.get_compute_nodes(), list_services(store),
                                       store.list_instances(), ctx.settings.service_down_time)
        return LIST_HEADERS, [
            (r.uuid, TextColumn(r.nodename), TextColumn(r.host),
             OptionalColumn(r.hypervisor_type), r.state, r.status,
             r.vcpus_used, r.vcpus, r.memory_mb_used, r.memory_mb, r.free_ram_mb,
             r.local_gb_used, r.local_gb, r.free_disk_gb, r.running_vms) for r in rows]


class ShowHypervisor(show.ShowOne):
    """Show one compute node: per resource class the detected (driver), configured
    (settings) and effective values: total, reserved, ratio, capacity, used, free,
    over; and its running guests."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        return parser

    def take_action(self, parsed_args):
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        services = list_services(store, node.host)
        state, status = reports.service_state(services[0] if services else None,
                                              ctx.settings.service_down_time, time.time())
        report = node.resources
        fields = {"id": node.uuid, "hypervisor_hostname": TextColumn(node.nodename),
                  "host": TextColumn(node.host),
                  "hypervisor_type": OptionalColumn(report.hypervisor_type if report else None),
                  "state": state, "status": status, "generation": node.generation}
        for line in reports.resource_lines(node, ctx.settings):
            data = attrs.asdict(line)
            del data["resource_class"]
            fields[line.resource_class] = DictColumn(data)
        guests = store.list_instances(host=node.host, node=node.nodename)
        fields["running_vms"] = len(guests)
        fields["running_guests"] = ListColumn([i.uuid for i in guests])
        fields["last_error"] = OptionalColumn(node.last_error)
        return tuple(fields), tuple(fields.values())


class HypervisorStats(show.ShowOne):
    """Totals across every compute node: capacity, used, free and over (held beyond
    capacity) of vCPUs, memory (MB) and disk (GB); running VMs."""

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        stats = attrs.asdict(reports.hypervisor_stats(store.get_compute_nodes(),
                                                      store.list_instances()))
        return tuple(stats), tuple(stats.values())
