"""``nova-lite audit``: hypervisor view, tracked view and records, side by side."""

import logging

from nova_lite import audit
from nova_lite.cli.output import render_table
from nova_lite.cli.report_formats import ReportShowOne
from nova_lite.compute.resource_tracker import ResourceTracker

LOG = logging.getLogger(__name__)

#: Exit status when the views differ (as ``nova-manage placement audit``).
EXIT_DIFFERENCES = 3


def _differences_table(differences):
    return render_table(["Kind", "UUID", "Node", "Detail"],
                        [[d["kind"], d["uuid"] or "-", d["nodename"], d["detail"]]
                         for d in differences])


#: Difference kinds about a whole node: their ``uuid`` is the node's, not its name.
_NODE_KINDS = (audit.NODE_REPORT_FAILED, audit.NODE_NOT_RECORDED, audit.NODE_NOT_REPORTED)


def _node_uuids(data):
    """Put each node difference's node uuid (None if unrecorded) in its uuid field."""
    for node in data["nodes"]:
        for diff in node["differences"]:
            if diff["kind"] in _NODE_KINDS:
                diff["uuid"] = node["node_uuid"]


class RunAudit(ReportShowOne):
    """Compare, per node, the driver's report, the tracker and the records.

    Names every instance or guest that makes them differ: guests the
    hypervisor has but no record backs, records without a guest, and
    allocations without a live record (or records without one).  Reads
    only.  Exit status: 0 when consistent, 3 when something differs,
    1 on error.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--host", metavar="HOST",
                            help="Service host to audit (default: host, the machine's name).")
        parser.add_argument("--driver", metavar="NAME",
                            help="Virt driver entry point (default: compute_driver).")
        parser.add_argument("--node", metavar="NODE", help="Only this node.")
        return parser

    def report(self, parsed_args):
        ctx = self.app.context()
        host = parsed_args.host if parsed_args.host is not None else ctx.settings.host
        if not host.strip():
            self.parser.error("--host must not be empty")
        name = parsed_args.driver or ctx.settings.compute_driver
        driver = ctx.load_driver(name, host)
        store = ctx.open_store(must_exist=True, readonly=True)
        tracker = ResourceTracker(host, driver, store=store, settings=ctx.settings)
        result = audit.audit_host(tracker, nodename=parsed_args.node)
        data = result.to_dict()
        data["driver"] = name   # the entry point, as ``compute`` names it
        _node_uuids(data)
        data["database"] = ctx.database
        return data, 0 if result.consistent else EXIT_DIFFERENCES

    def render(self, data):
        state = "consistent" if data["consistent"] else (
            f"{sum(len(n['differences']) for n in data['nodes']) + len(data['differences'])}"
            " difference(s)")
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
        return "\n".join(lines)
