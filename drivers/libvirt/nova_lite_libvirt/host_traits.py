"""The traits of a libvirt host (``NodeResources.traits``), from what libvirt says.

Each trait comes from one libvirt answer, as Nova's libvirt driver derives
it:

- ``HW_CPU_X86_*``: the host CPU's features (capabilities XML), expanded
  with the features its model implies (``baselineCPU`` with
  ``VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES``, except on aarch64 and for
  a CPU without a model), mapped by :mod:`.cpu_traits`.  Only when
  ``[libvirt] virt_type`` is ``kvm`` or ``qemu``: Nova's default CPU mode
  there, ``host-model``, gives guests the host's features; for other domain
  types Nova derives no CPU feature trait.
- ``HW_CPU_HYPERTHREADING``: a CPU of a NUMA cell of the capabilities XML
  has more than one sibling (the ``<cpu><topology>`` element is not used:
  libvirt does not promise it is accurate).
- ``HW_ARCH_<ARCH>``: the host CPU's arch.
- ``COMPUTE_STORAGE_BUS_<BUS>``, ``COMPUTE_GRAPHICS_MODEL_<MODEL>``,
  ``COMPUTE_ARCH_<ARCH>``: domain capabilities, for each guest arch whose
  capabilities offer ``virt_type``, asked for the arch's default machine
  type and each canonical alias (``pc``, ``q35``); the union of the disk
  buses and video models listed, and every arch for which libvirt answered.
- ``COMPUTE_NET_VIRTIO_PACKED``: a QEMU hypervisor of at least
  :data:`PACKED_RING_MIN_QEMU` driven by libvirt of at least
  :data:`PACKED_RING_MIN_LIBVIRT`, the versions that added the packed
  virtqueue option.

A name that is not a standard os-traits trait (a disk bus such as ``nvme``,
a video model such as ``ramfb``) is left out and logged at DEBUG.
"""

import logging
from collections.abc import Iterable

import os_traits as ot

from nova_lite.traits import STANDARD_TRAITS

from nova_lite_libvirt.cpu_traits import cpu_feature_traits

LOG = logging.getLogger(__name__)

#: Domain types whose guests get the host CPU's features (Nova's default
#: CPU mode for them is ``host-model``; ``host-passthrough`` on aarch64).
CPU_FEATURE_VIRT_TYPES = frozenset({"kvm", "qemu"})
#: Versions (libvirt's encoding) that added the virtio packed ring option:
#: QEMU 4.2.0 and libvirt 6.3.0.
PACKED_RING_MIN_QEMU = 4_002_000
PACKED_RING_MIN_LIBVIRT = 6_003_000
#: Machine type asked for first, per arch, as Nova's default machine types.
DEFAULT_MACHINE_TYPES = {"x86_64": "pc", "i686": "pc", "aarch64": "virt", "armv7": "virt",
                         "ppc64le": "pseries", "s390": "s390-ccw-virtio",
                         "s390x": "s390-ccw-virtio"}


def _trait_name(prefix, value):
    return prefix + value.replace("-", "_").upper()


def standard_only(names: Iterable[str], source: str) -> frozenset[str]:
    """``names`` that are standard os-traits traits; the others are logged
    at DEBUG with ``source`` (what they were derived from)."""
    names = frozenset(names)
    unknown = names - STANDARD_TRAITS
    if unknown:
        LOG.debug("Not standard traits, so not reported (from %s): %s", source,
                  ", ".join(sorted(unknown)))
    return names & STANDARD_TRAITS


def cpu_traits(caps, virt_type: str, expanded: frozenset[str] | None = None) -> frozenset[str]:
    """``HW_CPU_*`` feature traits of the host CPU of ``caps``
    (:class:`~nova_lite_libvirt.capabilities.HostCapabilities`).

    :param expanded: the features ``baselineCPU`` expanded the host CPU to,
        or None to use the capabilities' own list.
    """
    if virt_type not in CPU_FEATURE_VIRT_TYPES:
        return frozenset()
    return cpu_feature_traits(caps.arch, caps.features if expanded is None else expanded)


def has_hyperthreading(caps) -> bool:
    """True if a CPU of a NUMA cell of ``caps`` has a sibling."""
    return any(len(cpu.siblings) > 1 for cell in caps.cells for cpu in cell.cpus)


def arch_traits(caps) -> frozenset[str]:
    """``HW_ARCH_<ARCH>`` of the host CPU (none for an arch os-traits lacks)."""
    if not caps.arch:
        return frozenset()
    return standard_only({_trait_name("HW_ARCH_", caps.arch)}, "the host CPU arch")


def domain_caps_traits(domain_caps: Iterable) -> frozenset[str]:
    """Storage bus, graphics model and emulated arch traits of the
    :class:`~nova_lite_libvirt.domain_caps.DomainCapabilities` answers."""
    names = set()
    for answer in domain_caps:
        names.update(_trait_name("COMPUTE_STORAGE_BUS_", bus) for bus in answer.disk_buses)
        names.update(_trait_name("COMPUTE_GRAPHICS_MODEL_", m) for m in answer.video_models)
        if answer.arch:
            names.add(_trait_name("COMPUTE_ARCH_", answer.arch))
    return standard_only(names, "domain capabilities")


def packed_ring_traits(hypervisor_type: str, hypervisor_version: int,
                       lib_version: int) -> frozenset[str]:
    """``COMPUTE_NET_VIRTIO_PACKED`` for a QEMU new enough under a libvirt
    new enough (versions in libvirt's encoding, major * 1,000,000 + minor *
    1,000 + release)."""
    if (str(hypervisor_type).upper() == "QEMU" and hypervisor_version >= PACKED_RING_MIN_QEMU
            and lib_version >= PACKED_RING_MIN_LIBVIRT):
        return frozenset({ot.COMPUTE_NET_VIRTIO_PACKED})
    return frozenset()


def machine_types(arch: str, aliases: Iterable[str]) -> tuple:
    """Machine types to ask domain capabilities for: the arch's default
    (None: libvirt's choice, for an arch without one), then each alias."""
    default = DEFAULT_MACHINE_TYPES.get(arch)
    return (default,) + tuple(sorted(set(aliases) - {default}))


def host_traits(caps, virt_type: str, hypervisor_type: str, hypervisor_version: int,
                lib_version: int, expanded: frozenset[str] | None = None,
                domain_caps: Iterable = ()) -> frozenset[str]:
    """Every trait of the host (see the module docstring)."""
    traits = set(cpu_traits(caps, virt_type, expanded))
    if has_hyperthreading(caps):
        traits.add(ot.HW_CPU_HYPERTHREADING)
    traits |= arch_traits(caps)
    traits |= domain_caps_traits(domain_caps)
    traits |= packed_ring_traits(hypervisor_type, hypervisor_version, lib_version)
    return frozenset(traits)
