"""The libvirt driver's settings, read once from :class:`nova_lite.conf.Settings`.

Core options used (Nova's names): ``[libvirt] connection_uri``
(``Settings.libvirt_connection_uri``), ``instances_path``, ``vcpu_pin_set``,
``[compute] cpu_shared_set``, ``[compute] cpu_dedicated_set``,
``reserved_host_cpus``.

Options of the ``[libvirt]`` section this driver owns (raw INI strings,
through ``Settings.section("libvirt")``):

``virt_type`` (default ``kvm``)
    The domain type of the guests ``spawn`` defines (``kvm``, ``qemu``, ...).
``file_backed_memory`` (MiB, default 0)
    When > 0, guest memory is backed by files: the node's memory total is
    this amount and memory used is the sum over running guests (Nova).
``instance_memory_overhead_mb`` (MiB, default 0)
    Memory every instance needs beyond its flavor (QEMU's own footprint),
    reported by ``estimate_instance_overhead``.
"""

import logging

import attrs

from nova_lite.exception import InvalidConfig
from nova_lite.hardware import format_cpu_spec, parse_cpu_spec

LOG = logging.getLogger(__name__)

DEFAULT_URI = "qemu:///system"
DEFAULT_INSTANCES_PATH = "/var/lib/nova-lite/instances"

#: [libvirt] options this driver reads (connection_uri is the core's).
KNOWN_LIBVIRT_OPTIONS = frozenset({
    "connection_uri", "virt_type", "file_backed_memory", "instance_memory_overhead_mb"})

#: Option names as an operator writes them in the INI file.
OPT_VCPU_PIN_SET = "vcpu_pin_set"
OPT_SHARED = "[compute] cpu_shared_set"
OPT_DEDICATED = "[compute] cpu_dedicated_set"


def _cpus(value):
    return None if value is None else frozenset(value)


@attrs.frozen
class LibvirtConfig:
    """Typed view of every setting the driver uses.

    CPU sets are frozensets of host CPU ids, or None when the option is
    unset; sizes are MiB.
    """

    connection_uri: str = DEFAULT_URI
    instances_path: str = DEFAULT_INSTANCES_PATH
    vcpu_pin_set: frozenset = attrs.field(default=None, converter=_cpus)
    cpu_shared_set: frozenset = attrs.field(default=None, converter=_cpus)
    cpu_dedicated_set: frozenset = attrs.field(default=None, converter=_cpus)
    reserved_host_cpus: int = 0
    virt_type: str = "kvm"
    file_backed_memory_mb: int = 0
    instance_memory_overhead_mb: int = 0

    def __attrs_post_init__(self):
        _check_cpu_options(self)

    @classmethod
    def from_settings(cls, settings):
        """Build from a ``Settings`` (or any object with the same attributes).

        :raises InvalidConfig: naming the option and value of a bad setting.
        """
        section = _section(settings, "libvirt")
        unknown = sorted(set(section) - KNOWN_LIBVIRT_OPTIONS)
        if unknown:
            LOG.warning("Ignoring unknown [libvirt] options: %s", ", ".join(unknown))
        uri = getattr(settings, "libvirt_connection_uri", None) or section.get(
            "connection_uri") or DEFAULT_URI
        return cls(
            connection_uri=uri,
            instances_path=getattr(settings, "instances_path", None) or DEFAULT_INSTANCES_PATH,
            vcpu_pin_set=_cpu_option(settings, "vcpu_pin_set", OPT_VCPU_PIN_SET),
            cpu_shared_set=_cpu_option(settings, "cpu_shared_set", OPT_SHARED),
            cpu_dedicated_set=_cpu_option(settings, "cpu_dedicated_set", OPT_DEDICATED),
            reserved_host_cpus=getattr(settings, "reserved_host_cpus", 0) or 0,
            virt_type=_virt_type(section.get("virt_type", "kvm")),
            file_backed_memory_mb=_mib(section, "file_backed_memory"),
            instance_memory_overhead_mb=_mib(section, "instance_memory_overhead_mb"),
        )


def _section(settings, name):
    getter = getattr(settings, "section", None)
    return dict(getter(name)) if callable(getter) else {}


def _cpu_option(settings, attribute, option):
    raw = getattr(settings, attribute, None)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if not isinstance(raw, str):
        return frozenset(raw)
    try:
        cpus = parse_cpu_spec(raw)
    except ValueError as exc:
        raise InvalidConfig(option, raw, str(exc)) from None
    if not cpus:
        raise InvalidConfig(option, raw, "leaves no CPUs")
    return frozenset(cpus)


def _mib(section, option):
    raw = section.get(option, "0")
    try:
        value = int(str(raw).strip() or "0")
    except ValueError:
        raise InvalidConfig(f"[libvirt] {option}", raw, "must be an integer (MiB)") from None
    if value < 0:
        raise InvalidConfig(f"[libvirt] {option}", raw, "must not be negative")
    return value


def _virt_type(raw):
    value = str(raw).strip().lower()
    if not value or not value.replace("_", "").isalnum():
        raise InvalidConfig("[libvirt] virt_type", raw, "must be a libvirt domain type "
                            "such as 'kvm' or 'qemu'")
    return value


def _check_cpu_options(cfg):
    """Reject the combinations Nova rejects, naming the options."""
    if cfg.vcpu_pin_set and cfg.cpu_dedicated_set:
        raise InvalidConfig(OPT_VCPU_PIN_SET, _fmt(cfg.vcpu_pin_set),
                            f"cannot be combined with {OPT_DEDICATED}; "
                            f"use {OPT_SHARED} for shared CPUs instead")
    if cfg.cpu_shared_set and cfg.cpu_dedicated_set:
        both = cfg.cpu_shared_set & cfg.cpu_dedicated_set
        if both:
            raise InvalidConfig(OPT_DEDICATED, _fmt(cfg.cpu_dedicated_set),
                                f"overlaps {OPT_SHARED} ({_fmt(cfg.cpu_shared_set)}) "
                                f"on CPUs {_fmt(both)}; the two sets must be disjoint")
    if not cfg.vcpu_pin_set and (cfg.cpu_shared_set or cfg.cpu_dedicated_set) \
            and cfg.reserved_host_cpus:
        raise InvalidConfig("reserved_host_cpus", cfg.reserved_host_cpus,
                            f"cannot be set with {OPT_SHARED} or {OPT_DEDICATED}: "
                            "leave host CPUs out of those sets instead")
    if cfg.vcpu_pin_set and cfg.cpu_shared_set:
        LOG.warning("Both %s and %s are set: %s decides the VCPU inventory (legacy "
                    "behaviour); move it to %s", OPT_VCPU_PIN_SET, OPT_SHARED,
                    OPT_VCPU_PIN_SET, OPT_SHARED)


def _fmt(cpus):
    return format_cpu_spec(cpus)
