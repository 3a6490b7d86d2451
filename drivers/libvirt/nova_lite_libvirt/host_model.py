"""The host model: one :class:`NodeResources` from a libvirt host.

Where each figure comes from (units in the names):

- ``vcpus``: online CPUs (``getCPUMap``) left for shared vCPUs by the CPU
  options; ``pcpus``: ``[compute] cpu_dedicated_set`` (see :mod:`.cpus`);
- ``memory_mb``: ``getInfo()`` memory (MiB), or ``[libvirt]
  file_backed_memory`` when set;
- ``memory_mb_used``: total - (MemFree + Buffers + Cached) of meminfo, or,
  with file-backed memory, the sum of the running guests' memory; never
  negative: when meminfo shows more available than ``getInfo`` counts in
  all, it is 0 and one WARNING names both sources and figures;
- ``local_gb``/``local_gb_used``: ``statvfs(instances_path)``, GiB rounded
  down (used = blocks - free blocks, as ``df`` counts it);
- ``disk_available_least``: the exact free bytes minus the over-commit of
  every guest disk (:mod:`.disks`), in GiB truncated toward zero, as Nova
  computes it; may be negative;
- ``vcpus_used``: vCPUs of the running guests;
- ``hypervisor_type``/``_version``/``_hostname``: ``getType``,
  ``getVersion`` (an int), ``getHostname`` (first value kept);
- ``cpu_info``, ``numa_topology``, ``supported_instances``: capabilities;
  the CPU topology falls back to ``getInfo`` when capabilities lack one;
- ``pci_devices``: PCI node devices;
- ``providers``: one child provider per device offering an enabled
  mediated device type (:mod:`.mdev`); libvirt is asked for mediated
  devices only when ``[devices] enabled_mdev_types`` names a type;
- ``traits``: see :mod:`.host_traits`; worked out again only when what
  they come from changes (the host CPU, its NUMA siblings, the versions,
  the connection), so a steady audit asks libvirt nothing more for them.
"""

import logging
import os

import attrs

from nova_lite.objects import CpuInfo, CpuTopology, NodeResources, SupportedInstance

from nova_lite_libvirt import disks, host_traits, mdev, meminfo
from nova_lite_libvirt.capabilities import canonical_arch
from nova_lite_libvirt.cpus import select_cpus
from nova_lite_libvirt.numa import build_numa_topology

LOG = logging.getLogger(__name__)

GiB = 1024 ** 3


@attrs.frozen
class DiskStats:
    """Filesystem figures of the instances path, in GiB (rounded down), and
    the exact free bytes."""

    total_gb: int
    used_gb: int
    free_gb: int
    free_bytes: int = 0


def disk_stats(path, statvfs=os.statvfs):
    """:class:`DiskStats` of the filesystem holding ``path``.

    total = f_frsize * f_blocks; free = f_frsize * f_bavail (what an
    unprivileged writer gets); used = f_frsize * (f_blocks - f_bfree).
    """
    st = statvfs(path)
    free_bytes = st.f_frsize * st.f_bavail
    return DiskStats(total_gb=st.f_frsize * st.f_blocks // GiB,
                     used_gb=st.f_frsize * (st.f_blocks - st.f_bfree) // GiB,
                     free_gb=free_bytes // GiB, free_bytes=free_bytes)


def available_least_gb(free_bytes, overcommit_bytes):
    """``free_bytes`` minus ``overcommit_bytes``, in whole GiB toward zero.

    Subtracted from the exact bytes before rounding, as Nova does: 74.6 GiB
    free less 0.5 GiB over-committed is 74.1, so 74 (rounding the free space
    down first would give 73).
    """
    remaining = free_bytes - overcommit_bytes
    return remaining // GiB if remaining >= 0 else -((-remaining) // GiB)


def cpu_info(caps, info):
    """:class:`CpuInfo` from capabilities, topology from ``getInfo`` if absent."""
    return CpuInfo(
        arch=caps.arch or canonical_arch(info.model),
        model=caps.model, vendor=caps.vendor,
        topology=CpuTopology(sockets=caps.sockets or info.sockets or 1,
                             cores=caps.cores or info.cores or 1,
                             threads=caps.threads or info.threads or 1,
                             # As Nova: the number of NUMA cells, 1 without any.
                             cells=len(caps.cells) or 1),
        features=caps.features)


def supported_instances(caps):
    """(arch, hypervisor type, VM mode) for every guest type, in XML order."""
    seen = []
    for guest in caps.guests:
        for domain_type in guest.domain_types:
            item = SupportedInstance(arch=guest.arch, hypervisor_type=domain_type,
                                     vm_mode=guest.os_type)
            if item not in seen:
                seen.append(item)
    return seen


class HostModel:
    """Builds :class:`NodeResources` for a :class:`~.host.Host`.

    :param host: the :class:`~nova_lite_libvirt.host.Host`.
    :param config: the :class:`~nova_lite_libvirt.config.LibvirtConfig`.
    :param meminfo_path: file read for memory used (``/proc/meminfo``).
    :param statvfs: function giving filesystem figures (``os.statvfs``).
    """

    def __init__(self, host, config, meminfo_path=meminfo.DEFAULT_MEMINFO_PATH,
                 statvfs=os.statvfs):
        self.host = host
        self.config = config
        self.meminfo_path = meminfo_path
        self.statvfs = statvfs
        self._memory_clamp_warned = False
        self._traits_memo = (None, frozenset())

    def cpu_selection(self):
        """The shared/dedicated CPUs; raises CPUSetNotOnline on a bad option."""
        return select_cpus(self.host.online_cpus(), self.config)

    def memory_mb(self, info):
        """Total memory in MiB."""
        return self.config.file_backed_memory_mb or info.memory_mib

    def memory_mb_used(self, total_mb, running):
        """Memory used in MiB (see the module docstring)."""
        if self.config.file_backed_memory_mb:
            return sum(g.memory_kib for g in running) // 1024
        try:
            values = meminfo.read_meminfo(self.meminfo_path)
            available = meminfo.available_of(values, self.meminfo_path)
        except (OSError, ValueError) as exc:
            LOG.warning("Cannot read host memory use from %s: %s; reporting 0 MiB used",
                        self.meminfo_path, exc)
            return 0
        used = total_mb - available
        if used >= 0:
            return used
        # Nova would report the negative figure; it only hides the cause.
        log = LOG.debug if self._memory_clamp_warned else LOG.warning
        self._memory_clamp_warned = True
        log("Host memory used is reported as 0 MiB, not %d: libvirt getInfo() counts "
            "%d MiB of memory in all (the sum of its NUMA cells) while %s shows %d MiB "
            "available (MemFree + Buffers + Cached; MemTotal %s MiB). The two sources "
            "disagree; nova-lite accounts from its records, not from this figure",
            used, total_mb, self.meminfo_path, available,
            values["MemTotal"] // 1024 if "MemTotal" in values else "unknown")
        return 0

    def traits(self, caps, hypervisor_type, hypervisor_version, lib_version):
        """The host's traits (:func:`.host_traits.host_traits`) for ``caps``.

        The expanded CPU features and domain capabilities come from the
        host's per-connection answers; the result is kept until an input
        changes.
        """
        key = (self.host.connection_number, caps.arch, caps.model, caps.vendor, caps.features,
               host_traits.has_hyperthreading(caps), hypervisor_type, hypervisor_version,
               lib_version)
        memo_key, memo = self._traits_memo
        if key == memo_key:
            return memo
        virt_type = self.config.virt_type
        expanded = self.host.expanded_cpu_features(caps) \
            if virt_type in host_traits.CPU_FEATURE_VIRT_TYPES else None
        traits = host_traits.host_traits(
            caps, virt_type, hypervisor_type, hypervisor_version, lib_version,
            expanded=expanded, domain_caps=self.host.domain_capabilities(caps, virt_type))
        LOG.debug("libvirt host traits: %s", ", ".join(sorted(traits)))
        self._traits_memo = (key, traits)
        return traits

    def mdev_providers(self, nodename):
        """Child providers of the devices offering an enabled mediated
        device type (none, without asking libvirt, when no type is enabled)."""
        mdev_config = self.config.mdev
        if not mdev_config.enabled_types:
            return ()
        return mdev.mdev_providers(nodename, self.host.mdev_parents(),
                                   self.host.mediated_devices(), mdev_config)

    def resources(self):
        """The :class:`NodeResources` of this host, read fresh from libvirt."""
        info = self.host.node_info()
        caps = self.host.capabilities()
        hypervisor_type = self.host.hypervisor_type()
        hypervisor_version = self.host.hypervisor_version()
        lib_version = self.host.lib_version()
        selection = self.cpu_selection()
        running = [g for g in self.host.guests() if g.running]
        memory_mb = self.memory_mb(info)
        stats = disk_stats(self.config.instances_path, self.statvfs)
        overcommit = disks.overcommit_total(self.host.guest_xmls())
        hostname = self.host.hostname()
        return NodeResources(
            vcpus=len(selection.shared),
            pcpus=len(selection.dedicated),
            memory_mb=memory_mb,
            local_gb=stats.total_gb,
            vcpus_used=sum(g.vcpus for g in running),
            memory_mb_used=self.memory_mb_used(memory_mb, running),
            local_gb_used=stats.used_gb,
            disk_available_least=available_least_gb(stats.free_bytes, overcommit),
            hypervisor_type=hypervisor_type,
            hypervisor_version=hypervisor_version,
            hypervisor_hostname=hostname,
            cpu_info=cpu_info(caps, info),
            numa_topology=build_numa_topology(caps, selection),
            pci_devices=self.host.pci_devices(),
            providers=self.mdev_providers(hostname),
            supported_instances=supported_instances(caps),
            stats={"libvirt_version": lib_version, "cpu_mhz": info.mhz},
            traits=self.traits(caps, hypervisor_type, hypervisor_version, lib_version),
        )
