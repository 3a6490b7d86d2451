"""``nova-lite claim test``: would a flavor fit on a node? (a dry run, nothing written)."""

from cliff import show

from nova_lite.cli import flavors
from nova_lite.cli.hypervisor import find_node
from nova_lite.cli.output import ListColumn, TextColumn
from nova_lite.compute import accounting, placement
from nova_lite.exception import InvalidInput
from nova_lite.objects import ZERO_OVERHEAD
from nova_lite.cli.context import BadArguments


class TestClaim(show.ShowOne):
    """Check a flavor against a node's recorded usage, as a claim would (amounts, NUMA,
    PCI; without the driver's overhead), and print every failing reason.  Nothing
    is written; the exit status is 0 whether it fits or not."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        parser.add_argument("--node", required=True, metavar="NODE",
                            help="Node name or uuid.")
        parser.add_argument("--host", metavar="HOST", help="Host of the node.")
        flavors.add_arguments(parser)
        return parser

    def take_action(self, parsed_args):
        flavor = flavors.flavor_from_args(parsed_args)
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        try:
            numa = accounting.flavor_numa_request(flavor)
            requested = accounting.requested_resources(flavor, ZERO_OVERHEAD, numa)
        except InvalidInput as exc:
            raise BadArguments(str(exc)) from None
        decision = placement.decide(node, requested, None, numa, ())
        fields = {"node": TextColumn(node.nodename), "host": TextColumn(node.host),
                  "flavor": TextColumn(flavor.name),
                  "requested": ", ".join(f"{rc}={n}" for rc, n in sorted(requested.items())),
                  "fits": not decision.reasons, "reasons": ListColumn(list(decision.reasons))}
        return tuple(fields), tuple(fields.values())
