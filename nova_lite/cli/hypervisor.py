"""``nova-lite hypervisor list|show|stats``: compute nodes as an operator sees them.

``hypervisor list`` and ``hypervisor stats`` show capacity (what can be
allocated: ``floor((total - reserved) x ratio)``), never the driver's raw
totals; ``hypervisor show`` has both per resource class.
"""

import argparse
import time
from typing import Any

import attrs

from nova_lite import reports
from nova_lite.cli import paging
from nova_lite.cli.lookup import child_generations, find_node, node_arguments
from nova_lite.cli.output import (
    ListColumn, OptionalColumn, PciDevicesColumn, ProvidersColumn, TextColumn)
from nova_lite.cli.typed import Lister, ShowOne

#: Every column of ``hypervisor list`` (-f json/yaml/csv/value, or --long).
LIST_HEADERS = ("ID", "Hypervisor Hostname", "Host", "Hypervisor Type", "State", "Status",
                "vCPUs Used", "vCPUs (capacity)", "Memory MB Used", "Memory MB (capacity)",
                "Free RAM MB", "Disk GB Used", "Disk GB (capacity)", "Free Disk GB",
                "Running VMs")
#: The columns of its table without --long.
DEFAULT_HEADERS = ("Hypervisor Hostname", "Host", "Hypervisor Type", "State", "Status")

#: One node of ``hypervisor list``, in LIST_HEADERS' order.
ListRow = tuple[str, TextColumn, TextColumn, OptionalColumn, str, str,
                int, int, int, int, int, int, int, int, int]


class ListHypervisors(Lister):
    """List compute nodes with their state, status, capacity, usage and guests.

    State is up or down (the heartbeat of the node's compute service),
    status enabled or disabled.  The capacity columns are what can be
    allocated (floor((total - reserved) x ratio)); "Free" is capacity minus
    used, never negative.  The table shows the hostname, host, type, state
    and status; --long (or -c) adds the amounts.  --limit and --marker
    list one page (sorted by host, then node name; the marker is a node's
    ID), as the API's /v1/hypervisors pages.
    """

    columns = LIST_HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        paging.add_arguments(parser, "host then node name",
                             "the node with this uuid (its ID)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[ListRow]]:
        ctx = self.app.context()
        limit, marker = paging.page(parsed_args, ctx.settings)
        store = ctx.open_store(must_exist=True, readonly=True)
        nodes = store.get_compute_nodes(limit=limit, marker=marker)
        running = store.count_live_instances({n.host for n in nodes})
        rows = reports.hypervisor_rows(nodes, store.list_services(), (),
                                       ctx.settings.service_down_time, running=running)
        return LIST_HEADERS, [
            (r.uuid, TextColumn(r.nodename), TextColumn(r.host),
             OptionalColumn(r.hypervisor_type), r.state, r.status,
             r.vcpus_used, r.vcpus, r.memory_mb_used, r.memory_mb, r.free_ram_mb,
             r.local_gb_used, r.local_gb, r.free_disk_gb, r.running_vms) for r in rows]


class ShowHypervisor(ShowOne):
    """Show one compute node: per resource class detected, configured and effective values.

    Also its host's availability zone (that of its aggregates, else
    default_availability_zone).

    Per resource class: detected (the driver's total), configured reserved
    and ratio (settings), and the effective total, reserved, ratio,
    capacity, used, free (never negative) and over; then its running
    guests, its traits (the driver's and those of its capabilities) and
    its PCI devices for passthrough (each in use, free or unavailable) and
    its child providers (devices accounted apart, such as GPUs with their
    VGPU inventory: each with its inventory, used, free and traits).
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        services = store.list_services(node.host)
        state, status = reports.service_state(services[0] if services else None,
                                              ctx.settings.service_down_time, time.time())
        report = node.resources
        fields: dict[str, Any] = {"id": node.uuid, "hypervisor_hostname": TextColumn(node.nodename),
                  "host": TextColumn(node.host),
                  "hypervisor_type": OptionalColumn(report.hypervisor_type if report else None),
                  "availability_zone": TextColumn(store.aggregates.host_zones(
                      ctx.settings.default_availability_zone).get(
                      node.host, ctx.settings.default_availability_zone)),
                  "state": state, "status": status, "generation": node.generation}
        for line in reports.resource_lines(node, ctx.settings):
            data = attrs.asdict(line)
            del data["resource_class"]
            fields[line.resource_class] = dict(sorted(data.items()))
        guests = store.list_instances(host=node.host, node=node.nodename)
        fields["running_vms"] = len(guests)
        fields["running_guests"] = ListColumn([i.uuid for i in guests])
        fields["last_error"] = OptionalColumn(node.last_error)
        fields["traits"] = ListColumn(sorted(node.traits))
        fields["pci_devices"] = PciDevicesColumn(reports.pci_device_lines(node))
        fields["providers"] = ProvidersColumn(reports.provider_lines(
            node, child_generations(store, node)))
        return tuple(fields), tuple(fields.values())


class HypervisorStats(ShowOne):
    """Show totals across every compute node: capacity, used, free and over; running VMs.

    vCPUs, memory (MB) and disk (GB) are summed as capacity (what can be
    allocated), used, free (never negative) and over (held beyond
    capacity).
    """

    columns = tuple(f.name for f in attrs.fields(reports.HypervisorStats))

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        stats = attrs.asdict(reports.hypervisor_stats(store.get_compute_nodes(),
                                                      store.list_instances()))
        return tuple(stats), tuple(stats.values())
