"""The libvirt driver's settings, read once from :class:`nova_lite.conf.Settings`.

Core options used (Nova's names): ``instances_path``, ``vcpu_pin_set``,
``[compute] cpu_shared_set``, ``[compute] cpu_dedicated_set``,
``reserved_host_cpus``.

The ``[libvirt]`` section is this driver's: :class:`LibvirtOptions` declares
its options (``LibvirtDriver.options``), so once the driver is installed
:func:`nova_lite.conf.load_settings` rejects an unknown option or a bad
value in it, naming ``[libvirt] <option>`` and the value.

The connection is ``[libvirt] connection_uri`` when the section sets it
(:func:`nova_lite.conf.load_settings` also copies it to
``Settings.libvirt_connection_uri``), else ``Settings.libvirt_connection_uri``
(default ``qemu:///system``; code may set it).
"""

import logging
import re

import attrs

from nova_lite import conf
from nova_lite.exception import InvalidConfig
from nova_lite.hardware import format_cpu_spec, parse_cpu_spec

LOG = logging.getLogger(__name__)

DEFAULT_URI = "qemu:///system"
DEFAULT_INSTANCES_PATH = "/var/lib/nova-lite/instances"

#: Option names as an operator writes them in the INI file.
OPT_VCPU_PIN_SET = "vcpu_pin_set"
OPT_SHARED = "[compute] cpu_shared_set"
OPT_DEDICATED = "[compute] cpu_dedicated_set"

# scheme[+transport]: then anything (qemu:///system, qemu+ssh://host/system, test:///default).
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:\S*$")


def _uri_option(instance, attribute, value):
    if value is None:
        return
    conf.string_option(instance, attribute, value)
    if not _URI.match(value):
        raise InvalidConfig(attribute.name, value, "must be a libvirt connection URI "
                            "such as qemu:///system or qemu+ssh://host/system")


def _virt_type_option(instance, attribute, value):
    if not isinstance(value, str) or not value or not value.replace("_", "").isalnum():
        raise InvalidConfig(attribute.name, value, "must be a libvirt domain type "
                            "such as 'kvm' or 'qemu'")


def _lower(value):
    return value.strip().lower() if isinstance(value, str) else value


@attrs.frozen
class LibvirtOptions:
    """The options of the ``[libvirt]`` section (Nova's names), sizes in MiB."""

    connection_uri: str | None = attrs.field(
        default=None, validator=_uri_option,
        metadata={**conf.option("libvirt", "connection_uri", """
            libvirt connection of the driver: qemu:///system for this host's
            QEMU/KVM, qemu+ssh://host/system for another's, test:///default
            for libvirt's test driver.  It is also
            Settings.libvirt_connection_uri (code may set that instead).""",
            default_text="qemu:///system", nova="same name and default"),
            conf.SETTINGS_FIELD: "libvirt_connection_uri"})
    virt_type: str = attrs.field(
        default="kvm", converter=_lower, validator=_virt_type_option,
        metadata=conf.option("libvirt", "virt_type", """
            Domain type of the guests spawn defines (kvm, qemu, ...).""",
            nova="same name and default"))
    file_backed_memory: int = attrs.field(
        default=0, validator=conf.int_option(),
        metadata=conf.option("libvirt", "file_backed_memory", """
            When above 0, guest memory is backed by files: the node's memory
            total is this amount and memory used is the sum over running
            guests.""",
            minimum=0, maximum=2 ** 53, unit="MiB", nova="same name and meaning"))
    instance_memory_overhead_mb: int = attrs.field(
        default=0, validator=conf.int_option(),
        metadata=conf.option("libvirt", "instance_memory_overhead_mb", """
            Memory every instance needs beyond its flavor (QEMU's own
            footprint), reported as its overhead and so claimed with it.""",
            minimum=0, maximum=2 ** 53, unit="MiB", nova="nova-lite only"))


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
        """Build from a :class:`nova_lite.conf.Settings`.

        :raises InvalidConfig: naming the option and value of a bad setting,
            or an option of ``[libvirt]`` that :class:`LibvirtOptions` does
            not declare.
        """
        options = conf.read_options(settings, LibvirtOptions)
        uri = options.connection_uri or settings.libvirt_connection_uri or DEFAULT_URI
        return cls(
            connection_uri=uri,
            instances_path=settings.instances_path or DEFAULT_INSTANCES_PATH,
            vcpu_pin_set=_cpu_option(settings, "vcpu_pin_set", OPT_VCPU_PIN_SET),
            cpu_shared_set=_cpu_option(settings, "cpu_shared_set", OPT_SHARED),
            cpu_dedicated_set=_cpu_option(settings, "cpu_dedicated_set", OPT_DEDICATED),
            reserved_host_cpus=settings.reserved_host_cpus or 0,
            virt_type=options.virt_type,
            file_backed_memory_mb=options.file_backed_memory,
            instance_memory_overhead_mb=options.instance_memory_overhead_mb,
        )


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
