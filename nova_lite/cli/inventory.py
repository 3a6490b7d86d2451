"""``nova-lite inventory list NODE``: a node's inventory per resource class."""

import argparse

from nova_lite.cli.lookup import find_node, node_arguments
from nova_lite.cli.output import ratio_number
from nova_lite.cli.typed import Lister

#: Every column (-f json/yaml/csv/value, or --long).
HEADERS = ("Resource Class", "Total", "Reserved", "Min Unit", "Max Unit", "Step Size",
           "Ratio", "Capacity", "Used", "Free", "Over")
#: The columns of the table without --long.
DEFAULT_HEADERS = ("Resource Class", "Total", "Reserved", "Ratio", "Capacity", "Used", "Free",
                   "Over")

#: One resource class of the node, in HEADERS' order.
Row = tuple[str, int, int, int, int | None, int, float | None, int, int, int, int]


class ListInventory(Lister):
    """List a node's inventories: total, reserved, ratio, capacity, used, free and over.

    Capacity is floor((total - reserved) x ratio); free is capacity minus
    used, never negative; over is what is held beyond capacity.  --long (or
    -c) adds the unit rules: min unit, max unit (null: no limit), step
    size.
    """

    columns = HEADERS
    default_columns = DEFAULT_HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[Row]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        return HEADERS, [
            (rc, inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
             ratio_number(inv.allocation_ratio), inv.capacity, node.used(rc), node.free(rc),
             node.over(rc)) for rc, inv in sorted(node.inventories.items())]
