"""``HostSpec``: one record describing a libvirt host for tests.

The same spec drives the pure-Python fake libvirt (``FakeLibvirtFixture``)
and the node XML of libvirt's own ``test:///<file>`` driver
(:func:`~nova_lite_libvirt.testing.xml.node_xml`), so both backends describe
the same host.

CPU numbering: NUMA node ``n`` holds a contiguous block of CPU ids; inside
it, sockets, then cores, then threads, so hyperthread siblings have
consecutive ids (node 0, 1 socket x 2 cores x 2 threads: siblings {0,1}
and {2,3}).
"""

import attrs


def _positive(instance, attribute, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"HostSpec.{attribute.name} must be a positive int, got {value!r}")


def _pages(value):
    return tuple(sorted(dict(value).items()))


def _cpu_set(value):
    return None if value is None else frozenset(value)


@attrs.frozen
class PciVFSpec:
    """An SR-IOV virtual function: PCI address and product id (hex)."""

    address: str
    product_id: str


@attrs.frozen
class PciDeviceSpec:
    """A PCI device: a plain device, or an SR-IOV PF with its VFs.

    ``address`` is "DDDD:BB:SS.F"; ids are 4 hex digits without ``0x``;
    ``numa_node`` None means unknown; ``sriov=True`` makes a PF even with no
    VF enabled.
    """

    address: str
    vendor_id: str
    product_id: str
    numa_node: int = None
    vfs: tuple = attrs.field(default=(), converter=tuple)
    sriov: bool = False

    @property
    def is_pf(self):
        """True for an SR-IOV physical function."""
        return self.sriov or bool(self.vfs)


@attrs.frozen
class MdevTypeSpec:
    """A mediated device type a GPU offers: ``type_id`` (``nvidia-35``),
    ``available_instances`` (how many more it can create), libvirt's
    ``name`` and ``device_api``."""

    type_id: str
    available_instances: int
    name: str = None
    device_api: str = "vfio-pci"


@attrs.frozen
class MdevSpec:
    """A mediated device already created on a GPU: its ``uuid``, ``type_id``
    and IOMMU group number."""

    uuid: str
    type_id: str
    iommu_group: int = 0


@attrs.frozen
class GpuSpec:
    """A physical GPU offering mediated device types (a PCI device with an
    ``mdev_types`` capability).

    ``address`` is "DDDD:BB:SS.F"; ``mdev_types`` the :class:`MdevTypeSpec`
    it offers; ``mdevs`` the :class:`MdevSpec` already created on it (the
    ``available_instances`` are what is left besides them); ``numa_node``
    None means unknown; ids are 4 hex digits (an NVIDIA Tesla M60 by default).
    """

    address: str
    mdev_types: tuple = attrs.field(default=(), converter=tuple)
    mdevs: tuple = attrs.field(default=(), converter=tuple)
    numa_node: int = None
    vendor_id: str = "10de"
    product_id: str = "13f2"


#: The disk buses and video models QEMU 10's domain capabilities list on x86_64.
QEMU_DISK_BUSES = ("ide", "fdc", "scsi", "virtio", "usb", "sata", "nvme")
QEMU_VIDEO_MODELS = ("vga", "cirrus", "vmvga", "qxl", "virtio", "none", "bochs", "ramfb")


@attrs.frozen
class MachineSpec:
    """A machine type of the host's emulator: ``name`` as libvirt resolves
    it (``pc-i440fx-8.2``), its ``alias`` (``pc``; None for none), and what
    domain capabilities list for it: ``disk_buses`` and ``video_models``."""

    name: str
    alias: str = None
    disk_buses: tuple = attrs.field(default=QEMU_DISK_BUSES, converter=tuple)
    video_models: tuple = attrs.field(default=QEMU_VIDEO_MODELS, converter=tuple)

    def answers_to(self, name):
        """True if ``name`` is this machine type or its alias."""
        return name in (self.name, self.alias)


#: QEMU 8.2's two canonical x86 machine types; the first is the default.
DEFAULT_MACHINES = (MachineSpec("pc-i440fx-8.2", "pc"), MachineSpec("pc-q35-8.2", "q35"))


@attrs.frozen
class DiskSpec:
    """A file-backed guest disk: host ``path``, guest ``target``, ``format``."""

    path: str
    target: str = "vda"
    format: str = "raw"


@attrs.frozen
class GuestSpec:
    """A guest present from the start: ``memory_mib`` MiB, ``vcpus``, state."""

    name: str
    uuid: str
    memory_mib: int = 512
    vcpus: int = 1
    running: bool = True
    disks: tuple = attrs.field(default=(), converter=tuple)


@attrs.frozen
class HostSpec:
    """A libvirt host.

    Sizes: ``memory_mib`` MiB in total, split evenly over the NUMA nodes;
    ``page_sizes_kib`` the page sizes (KiB) each cell offers and
    ``huge_pages`` ``{size_kib: count}`` per cell, stored as sorted pairs
    (4 KiB pages fill the rest).  ``sockets`` counts per NUMA node, ``cores`` per socket,
    ``threads`` per core (libvirt's ``getInfo`` convention).
    ``online_cpus`` None means every CPU (ids past the topology are allowed:
    libvirt's test driver reports 8 CPUs whatever its node file says).
    ``numa_in_capabilities=False``
    leaves the NUMA cells out of the capabilities XML (as libvirt's test
    driver does for a node file).  Versions use libvirt's encoding
    (major * 1,000,000 + minor * 1,000 + release).

    The host CPU: capabilities list ``cpu_features`` beside the model, as
    QEMU hosts list the features their model lacks; ``baselineCPU`` with
    ``VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES`` adds
    ``cpu_model_features``, those the model implies (the fake knows only
    the host's own model).  Guests: ``emulator`` (None:
    ``/usr/bin/qemu-system-<guest arch>``) and ``machines``
    (:class:`MachineSpec`, the first the default) appear in the
    capabilities; ``domain_capabilities=False`` makes
    ``getDomainCapabilities`` unsupported, as in libvirt's test driver.

    Devices: ``pci_devices`` (:class:`PciDeviceSpec`) and ``gpus``
    (:class:`GpuSpec`, PCI devices offering mediated device types, with
    the mediated devices created on them).
    """

    hostname: str = "compute1.example.org"
    hypervisor_type: str = "QEMU"
    hypervisor_version: int = 8002000
    lib_version: int = 9000000
    arch: str = "x86_64"
    cpu_model: str = "Skylake-Client-IBRS"
    cpu_vendor: str = "Intel"
    cpu_features: frozenset = attrs.field(
        default=frozenset({"vmx", "ssse3", "sse4.2", "avx2"}), converter=frozenset)
    cpu_model_features: frozenset = attrs.field(default=frozenset(), converter=frozenset)
    cpu_mhz: int = attrs.field(default=2400, validator=_positive)
    numa_nodes: int = attrs.field(default=1, validator=_positive)
    sockets: int = attrs.field(default=1, validator=_positive)
    cores: int = attrs.field(default=2, validator=_positive)
    threads: int = attrs.field(default=2, validator=_positive)
    memory_mib: int = attrs.field(default=16384, validator=_positive)
    page_sizes_kib: tuple = attrs.field(default=(4, 2048, 1048576), converter=tuple)
    huge_pages: tuple = attrs.field(factory=tuple, converter=_pages)
    online_cpus: frozenset = attrs.field(default=None, converter=_cpu_set)
    numa_in_capabilities: bool = True
    guest_arch: str = None
    guest_os_types: tuple = attrs.field(default=("hvm",), converter=tuple)
    domain_types: tuple = attrs.field(default=("qemu", "kvm"), converter=tuple)
    emulator: str = None
    machines: tuple = attrs.field(default=DEFAULT_MACHINES, converter=tuple)
    domain_capabilities: bool = True
    pci_devices: tuple = attrs.field(default=(), converter=tuple)
    gpus: tuple = attrs.field(default=(), converter=tuple)
    guests: tuple = attrs.field(default=(), converter=tuple)

    def __attrs_post_init__(self):
        if self.cell_small_pages < 0:
            raise ValueError("HostSpec.huge_pages do not fit in a NUMA cell's memory")

    # -- guests ----------------------------------------------------------------
    @property
    def guest_arch_name(self):
        """The arch of the guests the host offers."""
        return self.guest_arch or self.arch

    @property
    def emulator_path(self):
        """The emulator binary of the guests."""
        return self.emulator or f"/usr/bin/qemu-system-{self.guest_arch_name}"

    def machine(self, name=None):
        """The :class:`MachineSpec` answering to ``name`` (None: the
        default), or None."""
        if name is None:
            return self.machines[0] if self.machines else None
        return next((m for m in self.machines if m.answers_to(name)), None)

    # -- CPUs -------------------------------------------------------------
    @property
    def cpus_per_node(self):
        """CPUs in each NUMA node."""
        return self.sockets * self.cores * self.threads

    @property
    def cpu_ids(self):
        """Every CPU id of the host, ascending."""
        return tuple(range(self.numa_nodes * self.cpus_per_node))

    @property
    def online(self):
        """Online CPU ids (every CPU unless ``online_cpus`` says otherwise)."""
        return frozenset(self.cpu_ids) if self.online_cpus is None else self.online_cpus

    def cpu_location(self, cpu):
        """``(node, socket_id, core_id, thread)`` of a CPU id.

        ``socket_id`` counts across the host; ``core_id`` within its socket.
        """
        node, rest = divmod(cpu, self.cpus_per_node)
        socket, rest = divmod(rest, self.cores * self.threads)
        core, thread = divmod(rest, self.threads)
        return node, node * self.sockets + socket, core, thread

    def siblings(self, cpu):
        """The hyperthread siblings of a CPU (itself included)."""
        first = cpu - cpu % self.threads
        return frozenset(range(first, first + self.threads))

    def node_cpus(self, node):
        """CPU ids of NUMA node ``node``."""
        return tuple(range(node * self.cpus_per_node, (node + 1) * self.cpus_per_node))

    # -- memory -------------------------------------------------------------
    @property
    def cell_memory_kib(self):
        """Memory of each NUMA cell in KiB."""
        return self.memory_mib * 1024 // self.numa_nodes

    @property
    def cell_small_pages(self):
        """4 KiB pages of each cell: the memory huge pages leave."""
        huge = sum(size * count for size, count in self.huge_pages if size != 4)
        return (self.cell_memory_kib - huge) // 4

    def cell_pages(self):
        """``((size_kib, count), ...)`` for each page size of a cell."""
        huge = dict(self.huge_pages)
        return tuple((size, self.cell_small_pages if size == 4 else huge.get(size, 0))
                     for size in self.page_sizes_kib)

    # -- devices and guests ----------------------------------------------------
    def pci_nodedev_specs(self):
        """``(spec, parent PF or None)`` for every PCI function, PFs first."""
        result = []
        for dev in self.pci_devices:
            result.append((dev, None))
            result.extend((vf, dev) for vf in dev.vfs)
        return result
