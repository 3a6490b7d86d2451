"""``nova-lite inventory list NODE``: a node's inventory per resource class."""

from cliff import lister

from nova_lite.cli.hypervisor import find_node, node_arguments
from nova_lite.cli.output import ratio_number

HEADERS = ("Resource Class", "Total", "Reserved", "Min Unit", "Max Unit", "Step Size",
           "Allocation Ratio", "Capacity", "Used", "Free", "Over")


class ListInventory(lister.Lister):
    """List a node's inventories: total, reserved, units, ratio, capacity
    (floor((total - reserved) x ratio)), used, free (never negative) and over."""

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        node_arguments(parser)
        return parser

    def take_action(self, parsed_args):
        store = self.app.context().open_store(must_exist=True, readonly=True)
        node = find_node(store, parsed_args.node, parsed_args.host)
        return HEADERS, [
            (rc, inv.total, inv.reserved, inv.min_unit, inv.max_unit, inv.step_size,
             ratio_number(inv.allocation_ratio), inv.capacity, node.used(rc), node.free(rc),
             node.over(rc)) for rc, inv in sorted(node.inventories.items())]
