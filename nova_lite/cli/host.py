"""``nova-lite host describe HOST``: Nova's host-describe rows."""

from cliff import lister

from nova_lite import reports
from nova_lite.cli.context import BadArguments
from nova_lite.cli.output import TextColumn


class DescribeHost(lister.Lister):
    """Usage of one host: (total), (used_now) (reserved + allocations), (used_max)
    (the flavors of its live instances) and one row per project."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="Compute host.")
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        nodes = store.get_compute_nodes()
        if not any(n.host == parsed_args.host for n in nodes):
            known = ", ".join(sorted({n.host for n in nodes})) or "none"
            raise BadArguments(f"No compute nodes on host {parsed_args.host!r}; "
                               f"known hosts: {known}")
        rows = reports.host_describe(parsed_args.host, nodes,
                                     store.list_instances(host=parsed_args.host))
        return (("HOST", "PROJECT", "cpu", "memory_mb", "disk_gb"),
                [(TextColumn(r.host), TextColumn(r.project), r.cpu, r.memory_mb, r.disk_gb)
                 for r in rows])
