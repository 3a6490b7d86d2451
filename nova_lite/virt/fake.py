"""The fake hypervisor: drivers that need no hardware.

- :class:`FakeDriver`: one node named after the host, Nova's default sizes
  (1000 vCPU, 800000 MB, 600000 GB).
- :class:`SmallFakeDriver`, :class:`MediumFakeDriver`: smaller sizes.
- :class:`FakeMultiNodeDriver`: many nodes; :meth:`~FakeDriver.set_nodes`
  changes them while it runs.

Guests made by ``spawn`` count in the hypervisor view (``*_used``) and in
``list_instances``.  Where they live depends on the store the driver is
attached to (:meth:`~FakeDriver.attach_store`, called by the
ResourceTracker), so that they outlive the process once the records do:

- a SQLite file ``sqlite:///PATH``: ``PATH.fake-guests/<host>.json``;
- PostgreSQL (any other URL): ``<state_path>/fake-guests/<digest>/<host>.json``,
  ``<digest>`` a short SHA-256 of the URL without its password;
- ``sqlite://`` (in memory) or no store: this process's memory only.

In a file, the guests of a host are shared by every driver object and
process serving that host on that database: a restarted service sees the
guests it spawned, and two processes for one host see one set of guests
(see :mod:`nova_lite.virt.fake_guests` for the locking).  Tests can change a
node's sizes (:meth:`~FakeDriver.set_node_size`) and inject faults
(:meth:`~FakeDriver.inject_fault`); those stay in the driver object.  A
flavor's extra specs ``fake:spawn_seconds`` and ``fake:spawn_error`` make
its spawns slow or failing in whichever process spawns them
(:func:`spawn_faults`).
"""

import logging
import re
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import attrs

from nova_lite import conf
from nova_lite.exception import InvalidConfig
from nova_lite.objects import (
    CpuInfo, Flavor, Instance, NodeResources, NUMATopology, Overhead, PciDevice,
    SupportedInstance, ZERO_OVERHEAD)
from nova_lite.providers import ChildProvider, check_tree
from nova_lite.resources import Inventory
from nova_lite.traits import trait_problem, trait_set
from nova_lite.virt import driver
from nova_lite.virt.fake_guests import (
    FakeGuestsError, FileGuests, Guest, Guests, guests_directory)

if TYPE_CHECKING:
    from nova_lite.db.store import Store

LOG = logging.getLogger(__name__)


_NODE_UUID_NAMESPACE = uuidlib.UUID("6a2b8f0e-3c1d-5e4f-9a7b-0c1d2e3f4a5b")

# What every fake node reports of its CPU and guests: frozen records, shared.
_CPU_INFO = CpuInfo(arch="x86_64", model="fake", vendor="nova-lite")
_SUPPORTED_INSTANCES = (SupportedInstance("x86_64", "fake", "hvm"),)


@attrs.frozen
class NodeSize:
    """Sizes of one fake node: CPUs, MiB of memory, GiB of disk."""

    vcpus: int
    memory_mb: int
    local_gb: int
    pcpus: int = 0


@attrs.frozen
class Fault:
    """What a fake node does instead of reporting.

    ``exception``: raised by get_available_resource; ``hang_seconds``: slept
    before answering; ``report``: returned as is (e.g. a malformed dict).
    """

    exception: BaseException | None = None
    hang_seconds: float = 0
    report: object = None


#: Flavor extra spec: seconds the fake hypervisor takes to spawn a guest.
SPAWN_SECONDS_SPEC = "fake:spawn_seconds"
#: Flavor extra spec: the fake hypervisor fails the spawn with this text.
SPAWN_ERROR_SPEC = "fake:spawn_error"


class FakeSpawnError(RuntimeError):
    """The fake hypervisor failed a spawn, as its flavor asked."""


def spawn_faults(flavor: Flavor) -> tuple[float, str | None]:
    """``(seconds, error)`` a spawn of ``flavor`` takes and fails with on the
    fake hypervisor, from its extra specs :data:`SPAWN_SECONDS_SPEC` (a number
    of seconds, 0 to 3600) and :data:`SPAWN_ERROR_SPEC` (the failure's text):
    a flavor file is enough to make builds slow or fail, from any process.

    :raises ValueError: naming the extra spec, for a bad number of seconds.
    """
    raw = flavor.extra_specs.get(SPAWN_SECONDS_SPEC)
    seconds = 0.0
    if raw is not None:
        try:
            seconds = float(raw)
        except (TypeError, ValueError):
            seconds = -1.0
        if not 0 <= seconds <= 3600:
            raise ValueError(f"flavor {flavor.name!r} extra spec {SPAWN_SECONDS_SPEC}="
                             f"{raw!r} is not a number of seconds from 0 to 3600")
    error = flavor.extra_specs.get(SPAWN_ERROR_SPEC)
    return seconds, None if error is None else str(error)


def _trait_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    return tuple(sorted(set(value)))


def _traits_option(instance: object, attribute: "attrs.Attribute[Any]", value: Any) -> None:
    for name in value:
        problem = trait_problem(name)
        if problem is not None:
            raise InvalidConfig(attribute.name, ",".join(value), problem)


#: A ``[fake] vgpus`` item: ``<mdev type>:<number of vGPUs>``.
_VGPU_ITEM = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):([0-9]+)$")


def _vgpu_list(value: Any) -> tuple[tuple[str, int], ...]:
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
        out = []
        for item in items:
            match = _VGPU_ITEM.match(item)
            if match is None or not 0 < int(match.group(2)) <= 1024:
                raise InvalidConfig("vgpus", value, f"{item!r} is not <mdev type>:<count> "
                                    "with a count from 1 to 1024 (nvidia-35:16)")
            out.append((match.group(1), int(match.group(2))))
        return tuple(out)
    return tuple(value)


def fake_gpus(nodename: str, vgpus: Iterable[tuple[str, int]]) -> tuple[ChildProvider, ...]:
    """The child providers of ``[fake] vgpus`` on node ``nodename``: one
    physical GPU per item, named as Nova names a GPU's provider
    (``<node>_pci_0000_<bus>_00_0``, buses from 0x81), with ``VGPU``
    inventory of its count and a ``CUSTOM_<MDEV TYPE>`` trait."""
    return tuple(
        ChildProvider(name=f"{nodename}_pci_0000_{0x81 + i:02x}_00_0",
                      inventories={"VGPU": Inventory(total=count, max_unit=count)},
                      traits={"CUSTOM_" + re.sub(r"[^A-Z0-9]+", "_", mdev_type.upper())})
        for i, (mdev_type, count) in enumerate(vgpus))


@attrs.frozen
class FakeOptions:
    """The options of the ``[fake]`` section, read by every fake driver."""

    traits: tuple[str, ...] = attrs.field(
        default=(), converter=_trait_list, validator=_traits_option,
        metadata=conf.option("fake", "traits", """
            Traits every node of a fake driver reports, comma-separated:
            standard names of the os-traits library (HW_CPU_X86_AVX2) or
            CUSTOM_<NAME>.  The traits of the fake drivers' capabilities
            are added to them (COMPUTE_SAME_HOST_COLD_MIGRATE).""",
            default_text="none", nova="nova-lite only"))
    vgpus: tuple[tuple[str, int], ...] = attrs.field(
        default=(), converter=_vgpu_list,
        metadata=conf.option("fake", "vgpus", """
            Physical GPUs every node of a fake driver reports, each a child
            resource provider with VGPU inventory, comma-separated
            <mdev type>:<number of vGPUs> items: nvidia-35:16,nvidia-36:8
            gives each node two GPUs, of 16 and 8 vGPUs.  Each GPU's
            provider is named <node>_pci_0000_<bus>_00_0 and carries the
            trait CUSTOM_<MDEV TYPE> (CUSTOM_NVIDIA_35).""",
            default_text="none", nova="nova-lite only"))


class FakeDriver(driver.ComputeDriver):
    """One fake node named after the host.

    Keyword arguments: ``vcpus``, ``memory_mb``, ``local_gb``, ``pcpus``
    (sizes, default the class's), ``nodes`` (node names; default the host),
    ``numa_topology`` (a NUMATopology), ``pci_devices`` (PciDevice records),
    ``overhead`` (an Overhead added per instance), ``traits`` (trait names
    every node reports; default ``[fake] traits``; one node's own with
    :meth:`set_node_traits`), ``providers`` (the child providers every
    node reports, :class:`~nova_lite.providers.ChildProvider` records
    named without the node; default the GPUs of ``[fake] vgpus``; one
    node's own with :meth:`set_node_providers`).

    Guests live in this object's memory until :meth:`attach_store` gives
    it a persistent database and :meth:`init_host` its host; from then on
    they live in that host's guests file beside the records (see the
    module's documentation), shared with every other driver of the host.
    """

    size = NodeSize(vcpus=1000, memory_mb=800000, local_gb=600000)
    capabilities = driver.Capabilities(
        supports_lifecycle=True, supports_numa=True, supports_pci=True, supports_pcpus=True,
        supports_same_host_resize=True, supports_node_deletion_check=True)
    options = FakeOptions

    def __init__(self, settings: conf.Settings | None = None, vcpus: int | None = None,
                 memory_mb: int | None = None, local_gb: int | None = None,
                 pcpus: int | None = None, nodes: Iterable[str] | None = None,
                 numa_topology: NUMATopology | None = None, pci_devices: Iterable[PciDevice] = (),
                 overhead: Overhead | None = None,
                 traits: Iterable[str] | None = None,
                 providers: Iterable[ChildProvider] | None = None) -> None:
        super().__init__(settings=settings)
        self._vgpus = conf.driver_options(self.settings, FakeDriver).vgpus
        self._providers = None if providers is None else tuple(providers)
        self._node_providers: dict[str, tuple[ChildProvider, ...]] = {}
        self._traits = trait_set(
            conf.driver_options(self.settings, FakeDriver).traits if traits is None
            else traits, f"{type(self).__name__} traits")
        self._node_traits: dict[str, frozenset[str]] = {}
        self._default_size = NodeSize(
            vcpus=self.size.vcpus if vcpus is None else vcpus,
            memory_mb=self.size.memory_mb if memory_mb is None else memory_mb,
            local_gb=self.size.local_gb if local_gb is None else local_gb,
            pcpus=self.size.pcpus if pcpus is None else pcpus)
        self._lock = threading.Lock()
        self._node_names: list[str] | None = None
        # The same names: O(1) lookups for big fleets.
        self._node_set: frozenset[str] = frozenset()
        if nodes is not None:
            self._set_node_names(nodes)
        self._sizes: dict[str, NodeSize] = {}
        self._faults: dict[str, Fault] = {}
        # The guests: in memory, or the host's file once a store says where.
        self._guests: Guests = Guests()
        # The directory of the attached store's guests files, None: memory.
        self._guests_dir: str | None = None
        # (host, nodename) -> node uuid, derived once
        self._uuids: dict[tuple[str | None, str], str] = {}
        self._numa = numa_topology if numa_topology is None else NUMATopology(
            cells=numa_topology.cells)
        self._pci = tuple(pci_devices)
        self._overhead = overhead if overhead is not None else ZERO_OVERHEAD

    # -- contract ---------------------------------------------------------
    def init_host(self, host: str) -> None:
        """Remember ``host``; with no explicit nodes, the node is named after it.

        With a persistent store attached, the guests are those of ``host``'s
        guests file from now on.

        :raises nova_lite.exception.InvalidInput: with a persistent store
            attached, for a host name that cannot name a file (``/``, ``..``).
        """
        self._bind_guests(host, self._guests_dir)
        self.host = host
        if self._node_names is None:
            self._set_node_names([host])

    def attach_store(self, store: "Store") -> None:
        """Keep the guests where ``store``'s hosts keep theirs.

        ``sqlite:///PATH``: in ``PATH.fake-guests/<host>.json``; another
        persistent database: in ``<state_path>/fake-guests/<digest of the
        URL without password>/<host>.json``; ``sqlite://``: in memory.
        Guests spawned in memory before go into the file; guests of a file
        are copied into memory when a ``sqlite://`` store replaces it.

        :param store: the tracker's :class:`~nova_lite.db.Store` (its ``url``
            is read).
        :raises nova_lite.exception.InvalidInput: for a host name that cannot
            name a file (``/``, ``..``); nothing changes then.
        """
        self._bind_guests(self.host, guests_directory(store, self.settings))

    def _bind_guests(self, host: str | None, directory: str | None) -> None:
        """Use the guests of ``host`` in ``directory`` (memory if either is None)."""
        current = self._guests
        if directory is None or host is None:
            if directory is None and isinstance(current, FileGuests):
                self._guests = Guests(current.items())
            self._guests_dir = directory
            return
        if isinstance(current, FileGuests) and (current.directory, current.host) == (
                directory, host):
            self._guests_dir = directory
            return
        guests = FileGuests(directory, host)   # refuses a bad host name first
        if not isinstance(current, FileGuests):
            guests.merge(current.items())
        LOG.debug("Fake host %s keeps its guests in %s", host, guests.path)
        self._guests, self._guests_dir = guests, directory

    @property
    def guests_path(self) -> str | None:
        """The JSON file this driver's guests live in, or None (memory)."""
        return self._guests.path

    def _set_node_names(self, names: Iterable[str]) -> None:
        self._node_names = list(names)
        self._node_set = frozenset(self._node_names)

    def get_available_nodes(self, refresh: bool = False) -> list[str]:
        """The current node names."""
        with self._lock:
            return list(self._node_names or [])

    def get_available_resource(self, nodename: str) -> NodeResources | dict[str, Any]:
        """A NodeResources for ``nodename``, counting the guests spawned on it.

        :raises LookupError: for a node this driver does not have.
        :raises nova_lite.virt.fake_guests.FakeGuestsError: naming the
            guests file, if it cannot be read or is corrupt.
        """
        with self._lock:
            if nodename not in self._node_set:
                raise LookupError(f"fake node {nodename!r} does not exist")
            fault = self._faults.get(nodename)
            size = self._sizes.get(nodename, self._default_size)
        if fault is not None:
            if fault.hang_seconds:
                time.sleep(fault.hang_seconds)
            if fault.exception is not None:
                raise fault.exception
            if fault.report is not None:
                # Whatever the test asked for, malformed on purpose or not.
                return cast(Any, fault.report)
        used = self._guests.usage(nodename)
        return NodeResources(
            vcpus=size.vcpus, memory_mb=size.memory_mb, local_gb=size.local_gb,
            pcpus=size.pcpus,
            vcpus_used=used.vcpus, memory_mb_used=used.memory_mb, local_gb_used=used.disk_gb,
            disk_available_least=size.local_gb - used.disk_gb,
            hypervisor_type="fake", hypervisor_version=1000,
            hypervisor_hostname=nodename, uuid=self.node_uuid(nodename),
            cpu_info=_CPU_INFO,
            numa_topology=self._numa,
            pci_devices=self._pci,
            supported_instances=_SUPPORTED_INSTANCES,
            traits=self._node_traits.get(nodename, self._traits),
            providers=self._children(nodename))

    def _children(self, nodename: str) -> tuple[ChildProvider, ...]:
        own = self._node_providers.get(nodename)
        if own is not None:
            return own
        if self._providers is not None:
            return self._providers
        return fake_gpus(nodename, self._vgpus) if self._vgpus else ()

    def set_node_providers(self, nodename: str,
                           providers: Iterable[ChildProvider] | None) -> None:
        """Give node ``nodename`` its own child providers (None: the driver's again).

        :raises nova_lite.exception.InvalidInput: for two children of one
            name or a parent that is not one of them.
        """
        with self._lock:
            if providers is None:
                self._node_providers.pop(nodename, None)
            else:
                children = tuple(providers)
                check_tree(children, f"providers of {nodename!r}")
                self._node_providers[nodename] = children

    def set_node_traits(self, nodename: str, traits: Iterable[str] | None) -> None:
        """Give node ``nodename`` its own traits (None: the driver's again).

        :raises nova_lite.exception.InvalidInput: naming a bad trait name.
        """
        with self._lock:
            if traits is None:
                self._node_traits.pop(nodename, None)
            else:
                self._node_traits[nodename] = trait_set(traits, f"traits of {nodename!r}")

    def node_uuid(self, nodename: str) -> str:
        """The stable uuid of a fake node, derived from host and node name.

        Like an Ironic node's uuid (or Nova's persisted compute id) it
        survives the node's record being deleted: a node that comes back
        keeps its uuid.
        """
        key = (self.host, nodename)
        node_uuid = self._uuids.get(key)
        if node_uuid is None:
            node_uuid = self._uuids[key] = str(
                uuidlib.uuid5(_NODE_UUID_NAMESPACE, f"{self.host or ''}/{nodename}"))
        return node_uuid

    def estimate_instance_overhead(self, instance_or_flavor: Instance | Flavor) -> Overhead:
        """The ``overhead`` given at construction (zero by default)."""
        driver.instance_flavor(instance_or_flavor)  # type check: Instance or Flavor
        return self._overhead

    def is_node_deleted(self, nodename: str) -> bool:
        """A fake node is deleted once it is no longer in the node list."""
        return nodename not in self.get_available_nodes()

    def spawn(self, instance: Instance) -> None:
        """Create a guest on ``instance.node`` (or the first node).

        The flavor's extra specs may ask for a slow or failing spawn (see
        :func:`spawn_faults`).  A guest of the same uuid moves there.  In a guests file, the guest
        is written before this returns.

        :raises LookupError: for a node this driver does not have.
        :raises FakeSpawnError: when the flavor asks for a failing spawn.
        :raises nova_lite.virt.fake_guests.FakeGuestsError: naming the
            guests file, if it cannot be read, is corrupt (then it is left
            as it is) or cannot be written.
        """
        with self._lock:
            node = instance.node or next(iter(self._node_names or ()), None)
            if node is None or node not in self._node_set:
                raise LookupError(f"fake node {node!r} does not exist")
        seconds, error = spawn_faults(instance.flavor)
        if seconds:
            time.sleep(seconds)   # a hypervisor that takes this long to boot a guest
        if error is not None:
            raise FakeSpawnError(f"fake spawn of instance {instance.uuid} on node {node} "
                                 f"failed: {error}")
        self._guests.spawn(instance.uuid, Guest.of(node, instance.flavor))

    def destroy(self, instance: Instance) -> None:
        """Remove the guest of ``instance``; a missing guest is not an error.

        :raises nova_lite.virt.fake_guests.FakeGuestsError: as :meth:`spawn`.
        """
        self._guests.destroy(instance.uuid)

    def list_instances(self) -> list[str]:
        """UUIDs of the spawned guests of this host, sorted.

        :raises nova_lite.virt.fake_guests.FakeGuestsError: naming the
            guests file, if it cannot be read or is corrupt.
        """
        return self._guests.uuids()

    # -- test controls ----------------------------------------------------
    def set_nodes(self, names: Iterable[str]) -> None:
        """Replace the node list: nodes appear and disappear at once."""
        with self._lock:
            self._set_node_names(names)

    def set_node_size(self, nodename: str, vcpus: int | None = None, memory_mb: int | None = None,
                      local_gb: int | None = None, pcpus: int | None = None) -> None:
        """Change the sizes ``nodename`` reports from now on."""
        with self._lock:
            current = self._sizes.get(nodename, self._default_size)
            changes = {k: val for k, val in dict(vcpus=vcpus, memory_mb=memory_mb,
                                                 local_gb=local_gb, pcpus=pcpus).items()
                       if val is not None}
            self._sizes[nodename] = attrs.evolve(current, **changes)

    def inject_fault(self, nodename: str, exception: BaseException | None = None,
                     hang_seconds: float = 0, report: object = None) -> None:
        """Make ``nodename`` raise, hang or return ``report`` instead of its resources."""
        with self._lock:
            self._faults[nodename] = Fault(exception=exception, hang_seconds=hang_seconds,
                                           report=report)

    def destroy_all(self) -> None:
        """Remove every guest of this host (test clean-up), in its file too."""
        self._guests.clear()

    def clear_faults(self) -> None:
        """Undo every :meth:`inject_fault`."""
        with self._lock:
            self._faults.clear()


class SmallFakeDriver(FakeDriver):
    """A fake node of 1 vCPU, 8192 MB and 1024 GB (Nova's small fake)."""

    size = NodeSize(vcpus=1, memory_mb=8192, local_gb=1024)


class MediumFakeDriver(FakeDriver):
    """A fake node of 10 vCPU, 8192 MB and 1028 GB (Nova's medium fake)."""

    size = NodeSize(vcpus=10, memory_mb=8192, local_gb=1028)


class FakeMultiNodeDriver(FakeDriver):
    """Many fake nodes; ``nodes`` names them (default: ``<host>-node0..1``)."""

    def init_host(self, host: str) -> None:
        """Name two default nodes after ``host`` unless ``nodes`` was given.

        :raises nova_lite.exception.InvalidInput: as :meth:`FakeDriver.init_host`.
        """
        self._bind_guests(host, self._guests_dir)
        self.host = host
        if self._node_names is None:
            self._set_node_names([f"{host}-node0", f"{host}-node1"])


__all__ = ["FakeDriver", "FakeOptions", "SmallFakeDriver", "MediumFakeDriver",
           "FakeMultiNodeDriver", "NodeSize", "Fault", "Overhead", "PciDevice",
           "FakeGuestsError", "FakeSpawnError", "spawn_faults", "SPAWN_SECONDS_SPEC",
           "SPAWN_ERROR_SPEC"]
