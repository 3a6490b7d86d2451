"""``nova-lite claim test``: would a flavor fit on a node? (a dry run, nothing written)."""

import argparse
from typing import Any

from nova_lite.cli import flavors
from nova_lite.cli.lookup import find_node
from nova_lite.cli.output import ListColumn, TextColumn
from nova_lite.cli.typed import ShowOne
from nova_lite.compute import accounting, placement
from nova_lite.objects import ZERO_OVERHEAD

FIELDS = ("node", "host", "flavor", "requested", "fits", "reasons")


class TestClaim(ShowOne):
    """Check whether a flavor fits on a node as a claim would, and print every failing reason.

    Checks amounts, NUMA and PCI against the node's recorded usage, without
    the driver's overhead.  requested maps each resource class to the
    amount asked for; fits is true or false; reasons lists every failing
    dimension.  Nothing is written; the exit status is 0 whether it fits or
    not.
    """

    columns = FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--node", required=True, metavar="NODE",
                            help="Node name or uuid.")
        parser.add_argument("--host", metavar="HOST", help="Host of the node.")
        flavors.add_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        flavor = flavors.flavor_from_args(parsed_args)
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        numa = accounting.flavor_numa_request(flavor)   # checked by flavor_from_args
        requested = accounting.requested_resources(flavor, ZERO_OVERHEAD, numa)
        decision = placement.decide(node, requested, None, numa, ())
        fields: dict[str, Any] = {"node": TextColumn(node.nodename), "host": TextColumn(node.host),
                  "flavor": TextColumn(flavor.name),
                  "requested": dict(sorted(requested.items())),
                  "fits": not decision.reasons, "reasons": ListColumn(list(decision.reasons))}
        return FIELDS, tuple(fields[name] for name in FIELDS)
