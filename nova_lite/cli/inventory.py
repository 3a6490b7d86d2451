"""``nova-lite inventory list NODE [--tree]``: a node's inventory per resource
class, and with ``--tree`` its child providers' too."""

import argparse
from typing import Any

from nova_lite import reports
from nova_lite.cli.lookup import find_node, node_arguments
from nova_lite.cli.output import TextColumn, ratio_number
from nova_lite.cli.typed import Lister

#: Every column (-f json/yaml/csv/value, or --long).
HEADERS = ("Resource Class", "Total", "Reserved", "Min Unit", "Max Unit", "Step Size",
           "Ratio", "Capacity", "Used", "Free", "Over")
#: The columns of the table without --long.
DEFAULT_HEADERS = ("Resource Class", "Total", "Reserved", "Ratio", "Capacity", "Used", "Free",
                   "Over")

#: The first column with --tree: the provider (the node, or one of its children).
PROVIDER = "Provider"

#: One resource class of the node, in HEADERS' order.
Row = tuple[str, int, int, int, int | None, int, float | None, int, int, int, int]


class ListInventory(Lister):
    """List a node's inventories: total, reserved, ratio, capacity, used, free and over.

    Capacity is floor((total - reserved) x ratio); free is capacity minus
    used, never negative; over is what is held beyond capacity.  --long (or
    -c) adds the unit rules: min unit, max unit (null: no limit), step
    size.  --tree adds a Provider column and a row per class of each of
    the node's child providers (devices accounted apart, such as a GPU's
    VGPU inventory), after the node's own.
    """

    columns = HEADERS
    default_columns: tuple[str, ...] | None = DEFAULT_HEADERS

    def known_columns(self, parsed_args: argparse.Namespace) -> tuple[str, ...] | None:
        return (PROVIDER, *HEADERS) if parsed_args.tree else HEADERS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        parser.add_argument("--tree", action="store_true",
                            help="Also list the inventories of the node's child providers, "
                                 "with a Provider column naming each row's provider.")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        own: list[tuple[Any, ...]] = [
            (rc, inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
             ratio_number(inv.allocation_ratio), inv.capacity, node.used(rc), node.free(rc),
             node.over(rc)) for rc, inv in sorted(node.inventories.items())]
        if not parsed_args.tree:
            return HEADERS, own
        found: list[tuple[Any, ...]] = [(TextColumn(node.nodename), *row) for row in own]
        children = {c.name: c for c in node.resources.providers} if node.resources else {}
        for line in reports.provider_lines(node):
            child = children[line.name]
            for inv in line.inventories:
                unit = child.inventories[inv.resource_class]
                found.append((TextColumn(line.name), inv.resource_class, inv.total,
                              inv.reserved, unit.min_unit, unit.max_unit, unit.step_size,
                              inv.ratio, inv.capacity, inv.used, inv.free, inv.over))
        self.default_columns = (PROVIDER, *DEFAULT_HEADERS)   # the table shows whose row
        return (PROVIDER, *HEADERS), found
