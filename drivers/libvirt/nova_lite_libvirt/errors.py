"""Errors of the libvirt driver; each names what failed and where."""

from nova_lite.exception import NovaLiteError


class LibvirtDriverError(NovaLiteError):
    """Base class of the libvirt driver's own errors."""


class LibvirtConnectionError(LibvirtDriverError):
    """The libvirt connection could not be opened; names the URI and cause."""


class GuestExists(LibvirtDriverError):
    """``spawn`` was asked for an instance that already has a domain."""


class SpawnFailed(LibvirtDriverError):
    """libvirt refused to define or start a guest; carries libvirt's error."""
