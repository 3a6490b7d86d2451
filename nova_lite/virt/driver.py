"""The plugin contract every virt driver implements.

A driver describes the node(s) it manages; the core audits and accounts.
Subclass :class:`ComputeDriver`, implement the three required methods and
register the class under the ``nova_lite.virt.drivers`` entry point group.
The required methods are abstract: a driver class that lacks one cannot be
instantiated, and the loader refuses it with a
:class:`~nova_lite.exception.DriverLoadError` naming what is missing.
"""

import abc
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import attrs

from nova_lite import conf
from nova_lite import validators as v
from nova_lite.objects import (  # noqa: F401  (re-exported for driver authors)
    ZERO_OVERHEAD, CpuInfo, Flavor, Instance, NodeResources, NUMACell, NUMATopology,
    Overhead, PciDevice, SupportedInstance)
from nova_lite.providers import ChildProvider  # noqa: F401  (re-exported for driver authors)
from nova_lite.resources import Inventory  # noqa: F401  (re-exported for driver authors)

if TYPE_CHECKING:
    from nova_lite.db.store import Store

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

    The others are Nova's driver capabilities of the same names, each of
    which gives every node of the driver a ``COMPUTE_*`` trait
    (:data:`nova_lite.traits.CAPABILITY_TRAITS`: ``supports_multiattach``
    gives ``COMPUTE_VOLUME_MULTI_ATTACH``, ``supports_same_host_resize``
    ``COMPUTE_SAME_HOST_COLD_MIGRATE``).  Declare only what the hypervisor
    really does: a flavor may require the trait.
    """

    supports_lifecycle: bool = False
    supports_numa: bool = False
    supports_pci: bool = False
    supports_pcpus: bool = False
    supports_same_host_resize: bool = False
    supports_node_deletion_check: bool = False
    supports_attach_interface: bool = False
    supports_device_tagging: bool = False
    supports_tagged_attach_interface: bool = False
    supports_tagged_attach_volume: bool = False
    supports_extend_volume: bool = False
    supports_multiattach: bool = False
    supports_trusted_certs: bool = False
    supports_accelerators: bool = False
    supports_image_type_aki: bool = False
    supports_image_type_ami: bool = False
    supports_image_type_ari: bool = False
    supports_image_type_iso: bool = False
    supports_image_type_qcow2: bool = False
    supports_image_type_raw: bool = False
    supports_image_type_vdi: bool = False
    supports_image_type_vhd: bool = False
    supports_image_type_vhdx: bool = False
    supports_image_type_vmdk: bool = False
    supports_image_type_ploop: bool = False
    supports_bfv_rescue: bool = False
    supports_secure_boot: bool = False
    supports_socket_pci_numa_affinity: bool = False
    supports_remote_managed_ports: bool = False
    supports_ephemeral_encryption: bool = False
    supports_ephemeral_encryption_luks: bool = False
    supports_ephemeral_encryption_plain: bool = False
    supports_address_space_passthrough: bool = False
    supports_address_space_emulated: bool = False
    supports_stateless_firmware: bool = False
    supports_virtio_fs: bool = False
    supports_mem_backing_file: bool = False

    def declared(self) -> tuple[str, ...]:
        """Names of the capabilities set to True, in declaration order."""
        return tuple(f.name for f in attrs.fields(type(self)) if getattr(self, f.name))


def missing_methods(driver_class: type) -> tuple[str, ...]:
    """Names of the abstract methods ``driver_class`` leaves unimplemented, sorted."""
    return tuple(sorted(getattr(driver_class, "__abstractmethods__", ())))


class ComputeDriver(abc.ABC):
    """Base class of virt drivers.

    Class attributes:

    - ``api_versions``: tuple of contract versions ("1.0", ...) the driver
      speaks; None means :data:`CURRENT_API_VERSION`.
    - ``capabilities``: a :class:`Capabilities` record.
    - ``options``: the attrs class of the options the driver reads from its
      own INI section(s), or None; read them with
      :func:`nova_lite.conf.driver_options`.  Once the driver is installed,
      :func:`nova_lite.conf.load_settings` rejects an unknown option or a
      bad value in those sections.

    Every method is called from the compute service's threads, never inside
    a lock or a database transaction; the calls an audit makes
    (``get_available_nodes``, ``get_available_resource``,
    ``estimate_instance_overhead``) each get ``driver_timeout`` seconds.
    An exception a method raises reaches the core, which names it in the
    audit's result: a driver never needs to catch errors only to log them.

    :param settings: the service's settings; None means ``Settings()``, the
        defaults.  Read your declared options with
        :func:`nova_lite.conf.driver_options`, or your own INI section's raw
        strings with :meth:`nova_lite.conf.Settings.section`.
    :param kwargs: nothing in the base class: a subclass takes its own
        keyword arguments (given to
        :func:`nova_lite.virt.loader.load_driver`) and passes ``settings``
        on with ``super().__init__(settings=settings)``.
    :raises TypeError: for a keyword argument the class does not take.
    :raises nova_lite.exception.InvalidType: if ``settings`` is neither a
        :class:`~nova_lite.conf.Settings` nor None.
    """

    #: Contract versions the driver speaks ("MAJOR.MINOR"), or None.
    api_versions: tuple[str, ...] | None = None
    #: Optional features the driver supports.
    capabilities: Capabilities = Capabilities()
    #: The driver's options class (see :func:`nova_lite.conf.read_options`), or None.
    options: type | None = None

    def __init__(self, settings: conf.Settings | None = None, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(
                f"{type(self).__name__} got unexpected arguments: {sorted(kwargs)}")
        v.check_type(settings, conf.Settings, f"{type(self).__name__} settings", optional=True)
        self.settings: conf.Settings = settings if settings is not None else conf.Settings()
        #: The service's host name, once :meth:`init_host` has been called.
        self.host: str | None = None
        #: The contract version negotiated at load time (set by the loader).
        self.api_version: str = CURRENT_API_VERSION

    # -- required -------------------------------------------------------
    @abc.abstractmethod
    def init_host(self, host: str) -> None:
        """Prepare the driver for service ``host``; called once before the first audit.

        :param host: the compute service's host name (the ``host`` option).
        :returns: None.
        :raises Exception: any error stops the service from starting, with
            the error's text: raise one that names what is wrong (a
            hypervisor that cannot be reached, a bad option).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def get_available_nodes(self, refresh: bool = False) -> list[str]:
        """Names of the nodes this service manages.

        One name for a hypervisor, many for bare metal.  A name is recorded
        only if it is a non-blank string of at most 255 characters with no
        control character; the audit names any other as failed and records
        the rest.

        :param refresh: True asks the driver to bypass any cache it keeps.
        :returns: the node names, a list of str.
        :raises nova_lite.exception.DriverNotReady: when the nodes cannot be
            listed now: the audit then skips the pass instead of treating
            every node as gone.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def get_available_resource(self, nodename: str) -> NodeResources | dict[str, Any]:
        """What node ``nodename`` has: its totals, the hypervisor's usage, topology.

        :param nodename: one of the names :meth:`get_available_nodes`
            returned.
        :returns: a :class:`~nova_lite.objects.NodeResources` (memory in
            MiB, disk in GiB).  A Nova-style dict is accepted too; the core
            reads it through :meth:`~nova_lite.objects.NodeResources.from_dict`,
            which names every missing or malformed key.
        :raises nova_lite.exception.NodeNotFound: if this driver does not
            manage ``nodename``.  Any exception (or a call that outlives
            ``driver_timeout``) skips that node in the audit, with the
            reason; the other nodes are still audited.
        """
        raise NotImplementedError

    # -- optional -------------------------------------------------------
    def estimate_instance_overhead(self, instance_or_flavor: Instance | Flavor) -> Overhead:
        """Resources one instance needs beyond its flavor.

        The overhead is added to every claim and to the usage alike, so it
        must be non-negative and the same for the same flavor.

        :param instance_or_flavor: an :class:`~nova_lite.objects.Instance`
            or a :class:`~nova_lite.objects.Flavor` (:func:`instance_flavor`
            gives the flavor of either).
        :returns: an :class:`~nova_lite.objects.Overhead` (``memory_mb`` in
            MiB, ``disk_gb`` in GiB, ``vcpus``).  Default: zero in every
            dimension.
        """
        return ZERO_OVERHEAD

    def node_is_available(self, nodename: str) -> bool:
        """Whether ``nodename`` is managed here.

        :param nodename: a node name.
        :returns: True if :meth:`get_available_nodes` lists it, asked once
            more with ``refresh=True`` before answering False.
        :raises nova_lite.exception.DriverNotReady: as
            :meth:`get_available_nodes` does.
        """
        if nodename in self.get_available_nodes():
            return True
        return nodename in self.get_available_nodes(refresh=True)

    def attach_store(self, store: "Store") -> None:
        """Called by the ResourceTracker with its record store before the first audit.

        A driver whose nodes are shared with other compute services (bare
        metal) reads the live services and this host's instances from it.

        :param store: the service's :class:`~nova_lite.db.Store`.
        :returns: None.  Default: the store is ignored.
        """
        return None

    def is_node_deleted(self, nodename: str) -> bool:
        """Whether the hypervisor says ``nodename`` is gone for good.

        The core deletes an orphan node record only when this says so (and
        the driver declares ``supports_node_deletion_check``).

        :param nodename: the name of a node record no longer listed by
            :meth:`get_available_nodes`.
        :returns: True only when the node is known to be deleted; default
            False, which keeps the record.
        """
        return False

    def spawn(self, instance: Instance) -> None:
        """Create and start a guest for ``instance`` (lifecycle capability).

        :param instance: the :class:`~nova_lite.objects.Instance` whose
            claim was admitted; its flavor gives the guest's size.
        :returns: None, once the guest exists.
        :raises NotImplementedError: unless the driver declares
            ``supports_lifecycle``.
        """
        raise NotImplementedError

    def destroy(self, instance: Instance) -> None:
        """Stop and remove the guest of ``instance`` (lifecycle capability).

        :param instance: the :class:`~nova_lite.objects.Instance` to remove.
        :returns: None, once the guest is gone; a guest that does not exist
            is not an error.
        :raises NotImplementedError: unless the driver declares
            ``supports_lifecycle``.
        """
        raise NotImplementedError

    def list_instances(self) -> list[str]:
        """UUIDs of the guests the hypervisor has (lifecycle capability).

        :returns: the guests' instance uuids, a list of str; the audit
            compares them with the records.
        :raises NotImplementedError: unless the driver declares
            ``supports_lifecycle``.
        """
        raise NotImplementedError


def instance_flavor(instance_or_flavor: Instance | Flavor) -> Flavor:
    """The Flavor of an Instance, or the Flavor itself."""
    if isinstance(instance_or_flavor, Flavor):
        return instance_or_flavor
    return instance_or_flavor.flavor


def parse_version(text: object) -> tuple[int, int]:
    """``"1.2"`` -> ``(1, 2)``; raises ValueError naming the bad text."""
    try:
        major, minor = str(text).split(".")
        return int(major), int(minor)
    except ValueError:
        raise ValueError(f"bad driver API version {text!r}: expected 'MAJOR.MINOR'") from None


def negotiate_api_version(driver_versions: str | Iterable[str] | None) -> str | None:
    """The highest version both sides speak, or None.

    ``driver_versions`` None means the driver declared nothing and gets
    :data:`CURRENT_API_VERSION`.  Raises ValueError for a malformed version.
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


def describe_versions(versions: str | Iterable[str] | None) -> str:
    """Human text for a set of versions: ``"1.0-1.2"`` or ``"1.0"``."""
    if versions is None:
        return CURRENT_API_VERSION
    if isinstance(versions, str):
        versions = (versions,)
    ordered = sorted(versions, key=parse_version)
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"
