"""Errors of the bare-metal driver; each names what went wrong and where."""

from nova_lite import exception as core


class IronicDriverError(core.NovaLiteError):
    """Base class of the errors this driver raises on purpose."""


class DriverNotReady(core.DriverNotReady, IronicDriverError):
    """The node source could not be listed; the core's audit skips this pass."""


class SourceError(IronicDriverError):
    """A call to the node source failed (network, server or protocol error)."""


class InventoryError(IronicDriverError, ValueError):
    """An inventory file is malformed; the message names the file and entry."""


class NodeConfigurationError(IronicDriverError, ValueError):
    """One node cannot be reported (e.g. it has no resource class)."""

    def __init__(self, node_uuid, reason):
        self.node_uuid = node_uuid
        self.reason = reason
        super().__init__(f"Bare-metal node {node_uuid}: {reason}")


class ConfigError(core.InvalidConfig):
    """An ``[ironic]`` option has a bad value (names the option and value)."""
