"""The plugin contract every virt driver implements.

A driver describes the node(s) it manages; the core audits and accounts.
Subclass :class:`ComputeDriver`, implement the three required methods and
register the class under the ``nova_lite.virt.drivers`` entry point group.
The required methods are abstract: a driver class that lacks one cannot be
instantiated, and the loader refuses it with a
:class:`~nova_lite.exception.DriverLoadError` naming what is missing.
"""

import abc

import attrs

from nova_lite import conf
from nova_lite import validators as v
from nova_lite.objects import (  # noqa: F401  (re-exported for driver authors)
    ZERO_OVERHEAD, CpuInfo, Flavor, Instance, NodeResources, NUMACell, NUMATopology,
    Overhead, PciDevice, SupportedInstance)

#: API versions of the driver contract this core speaks, oldest first.
SUPPORTED_API_VERSIONS = ("1.0",)
#: The version a driver that declares none is taken to speak.
CURRENT_API_VERSION = SUPPORTED_API_VERSIONS[-1]


@attrs.frozen
class Capabilities:
    """Optional features a driver declares; ``Capabilities()`` declares none.

    - ``supports_lifecycle``: spawn/destroy/list_instances create and remove
      guests the driver then reports.
    - ``supports_numa``: reports a NUMA topology.
    - ``supports_pci``: reports PCI devices for passthrough.
    - ``supports_pcpus``: reports dedicated CPUs (PCPU inventory).
    - ``supports_same_host_resize``: a resize may stay on the same node.
    - ``supports_node_deletion_check``: ``is_node_deleted`` answers from the
      hypervisor, so orphan node records can be deleted.
    """

    supports_lifecycle: bool = False
    supports_numa: bool = False
    supports_pci: bool = False
    supports_pcpus: bool = False
    supports_same_host_resize: bool = False
    supports_node_deletion_check: bool = False

    def declared(self):
        """Names of the capabilities set to True."""
        return tuple(f.name for f in attrs.fields(type(self)) if getattr(self, f.name))


def missing_methods(driver_class):
    """Names of the abstract methods ``driver_class`` leaves unimplemented, sorted."""
    return tuple(sorted(getattr(driver_class, "__abstractmethods__", ())))


class ComputeDriver(abc.ABC):
    """Base class of virt drivers.

    Class attributes:

    - ``api_versions``: tuple of contract versions ("1.0", ...) the driver
      speaks; None means :data:`CURRENT_API_VERSION`.
    - ``capabilities``: a :class:`Capabilities` record.

    Constructor keywords: ``settings`` (a :class:`nova_lite.conf.Settings`;
    defaults to ``Settings()``); drivers may accept more.
    """

    api_versions = None
    capabilities = Capabilities()

    def __init__(self, settings=None, **kwargs):
        if kwargs:
            raise TypeError(
                f"{type(self).__name__} got unexpected arguments: {sorted(kwargs)}")
        v.check_type(settings, conf.Settings, f"{type(self).__name__} settings", optional=True)
        self.settings = settings if settings is not None else conf.Settings()
        self.host = None
        #: The contract version negotiated at load time (set by the loader).
        self.api_version = CURRENT_API_VERSION

    # -- required -------------------------------------------------------
    @abc.abstractmethod
    def init_host(self, host):
        """Prepare the driver for service ``host``; called once before the first audit."""
        raise NotImplementedError

    @abc.abstractmethod
    def get_available_nodes(self, refresh=False):
        """Names of the nodes this service manages (list of str).

        ``refresh=True`` asks the driver to bypass any cache.  Raise
        :class:`nova_lite.exception.DriverNotReady` when the nodes cannot be
        listed now: the audit then skips the pass instead of treating every
        node as gone.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def get_available_resource(self, nodename):
        """A :class:`NodeResources` for ``nodename``.

        A Nova-style dict is accepted too; the core reads it through
        :meth:`NodeResources.from_dict`.
        """
        raise NotImplementedError

    # -- optional -------------------------------------------------------
    def estimate_instance_overhead(self, instance_or_flavor):
        """Resources one instance needs beyond its flavor: an :class:`Overhead`.

        Accepts an Instance or a Flavor.  Default: zero in every dimension.
        """
        return ZERO_OVERHEAD

    def node_is_available(self, nodename):
        """True if ``nodename`` is managed here (checks once more with refresh)."""
        if nodename in self.get_available_nodes():
            return True
        return nodename in self.get_available_nodes(refresh=True)

    def attach_store(self, store):
        """Called by the ResourceTracker with its :class:`~nova_lite.db.Store`.

        A driver whose nodes are shared with other compute services (bare
        metal) reads the live services and this host's instances from it.
        Default: ignored.
        """
        return None

    def is_node_deleted(self, nodename):
        """True only if the hypervisor says ``nodename`` is gone for good.

        The core deletes an orphan node record only when this says so.
        """
        return False

    def spawn(self, instance):
        """Create and start a guest for ``instance`` (lifecycle capability)."""
        raise NotImplementedError

    def destroy(self, instance):
        """Stop and remove the guest of ``instance`` (lifecycle capability)."""
        raise NotImplementedError

    def list_instances(self):
        """UUIDs of the guests the hypervisor has (lifecycle capability)."""
        raise NotImplementedError


def instance_flavor(instance_or_flavor):
    """The Flavor of an Instance, or the Flavor itself."""
    if isinstance(instance_or_flavor, Flavor):
        return instance_or_flavor
    return instance_or_flavor.flavor


def parse_version(text):
    """``"1.2"`` -> ``(1, 2)``; raises ValueError naming the bad text."""
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except ValueError:
        raise ValueError(f"bad driver API version {text!r}: expected 'MAJOR.MINOR'") from None


def negotiate_api_version(driver_versions):
    """The highest version both sides speak, or None.

    ``driver_versions`` None means the driver declared nothing and gets
    :data:`CURRENT_API_VERSION`.
    """
    if driver_versions is None:
        return CURRENT_API_VERSION
    if isinstance(driver_versions, str):
        driver_versions = (driver_versions,)
    common = {parse_version(x) for x in driver_versions} & {
        parse_version(x) for x in SUPPORTED_API_VERSIONS}
    if not common:
        return None
    major, minor = max(common)
    return f"{major}.{minor}"


def describe_versions(versions):
    """Human text for a set of versions: ``"1.0-1.2"`` or ``"1.0"``."""
    if versions is None:
        return CURRENT_API_VERSION
    if isinstance(versions, str):
        versions = (versions,)
    ordered = sorted(versions, key=parse_version)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"
