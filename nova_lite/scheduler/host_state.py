"""``HostState``: what the scheduler knows of one compute node, from the records."""

import attrs

from nova_lite.compute import accounting


@attrs.frozen
class HostState:
    """One node as the scheduler sees it.

    ``free``/``capacity`` map resource class -> amount; ``service_up`` is
    from the service heartbeat; ``last_error`` from the last audit.
    """

    host: str
    nodename: str
    uuid: str
    capacity: object
    free: object
    service_up: bool
    last_error: str = None
    node: object = attrs.field(default=None, repr=False, eq=False)

    @classmethod
    def from_node(cls, node, service_up):
        """Build from a ComputeNode record."""
        return cls(host=node.host, nodename=node.nodename, uuid=node.uuid,
                   capacity={rc: node.capacity(rc) for rc in node.inventories},
                   free={rc: node.free(rc) for rc in node.inventories},
                   service_up=service_up, last_error=node.last_error, node=node)

    def limits(self):
        """Nova-style scheduler limits for a claim: ``total x ratio`` per key."""
        out = {}
        for key, rc in accounting.LIMIT_KEYS.items():
            inv = self.node.inventories.get(rc) if self.node is not None else None
            if inv is not None:
                out[key] = float(inv.total * inv.allocation_ratio)
        return out
