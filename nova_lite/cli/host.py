"""``nova-lite host describe HOST``: Nova's host-describe rows."""

import argparse

from nova_lite import reports
from nova_lite.cli.lookup import check_host
from nova_lite.cli.output import TextColumn
from nova_lite.cli.typed import Lister

HEADERS = ("HOST", "PROJECT", "cpu", "memory_mb", "disk_gb")

#: One row of ``host describe``, in HEADERS' order.
Row = tuple[TextColumn, TextColumn, int, int, int]


class DescribeHost(Lister):
    """Show one host's usage as Nova does: totals, used now, used max, per project.

    Rows: (total) the inventories' totals (before reserved and the
    allocation ratio, unlike the capacity of 'hypervisor list'),
    (used_now) reserved plus what the allocations hold, (used_max) the
    flavors of its live instances, then one row per project.  cpu counts
    vCPUs, memory_mb is MB, disk_gb GB.
    """

    columns = HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="Compute host.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        nodes = store.get_compute_nodes()
        check_host(nodes, parsed_args.host)
        rows = reports.host_describe(parsed_args.host, nodes,
                                     store.list_instances(host=parsed_args.host))
        return (HEADERS, [(TextColumn(r.host), TextColumn(r.project), r.cpu, r.memory_mb,
                           r.disk_gb) for r in rows])
