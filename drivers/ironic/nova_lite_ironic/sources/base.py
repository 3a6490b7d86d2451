"""The :class:`NodeSource` interface."""

import abc


class NodeSource(abc.ABC):
    """A fleet of bare-metal nodes.

    Errors of the backend are raised as
    :class:`~nova_lite_ironic.exception.SourceError`.
    """

    #: Short name for logs (``api``, ``inventory``, ...).
    name = "source"

    @abc.abstractmethod
    def list_nodes(self):
        """Every node of the fleet, as a list of ``BareMetalNode``.

        Backends that page make one call per page, never one per node.
        """

    @abc.abstractmethod
    def get_node(self, node_uuid):
        """One node (a single call), or None if the source has no such node."""

    def deploy(self, node_uuid, instance_uuid):
        """Put ``instance_uuid`` on the node and bring it to ``active``."""
        raise NotImplementedError(f"the {self.name} source cannot deploy")

    def undeploy(self, node_uuid):
        """Tear down the node's instance and bring it back to ``available``."""
        raise NotImplementedError(f"the {self.name} source cannot undeploy")

    def describe(self):
        """Where the nodes come from, for log messages."""
        return self.name

    def close(self):  # noqa: B027  (optional hook, nothing to release by default)
        """Release connections (optional)."""
