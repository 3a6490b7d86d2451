"""The libvirt driver's settings, read once from :class:`nova_lite.conf.Settings`.

Core options used (Nova's names): ``instances_path``, ``vcpu_pin_set``,
``[compute] cpu_shared_set``, ``[compute] cpu_dedicated_set``,
``reserved_host_cpus``.

The ``[libvirt]`` section is this driver's: :class:`LibvirtOptions` declares
its options (``LibvirtDriver.options``), so once the driver is installed
:func:`nova_lite.conf.load_settings` rejects an unknown option or a bad
value in it, naming ``[libvirt] <option>`` and the value.

Mediated devices (vGPUs), with Nova's names: ``[devices]
enabled_mdev_types`` (:class:`LibvirtOptions`; ``enabled_vgpu_types`` is
its deprecated name) and, for each enabled type, a section
``[mdev_<type>]`` (Nova's older ``[vgpu_<type>]`` is read too) with
``device_addresses`` and ``mdev_class``: see :class:`MdevConfig`.  Those
sections are named after the types, so the driver checks them itself when
it is built: an unknown option or a bad value stops it, naming ``[mdev_<type>]
<option>`` and the value.

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

# A mediated device type id as sysfs names it: nvidia-35, i915-GVTg_V5_4, vfio_ap-passthrough.
_MDEV_TYPE = re.compile(r"^[A-Za-z0-9_.:\-]+$")
# Nova's [mdev_<type>] mdev_class.
_MDEV_CLASS = re.compile(r"^(VGPU|CUSTOM_[A-Z0-9_]+)$")
# A PCI address as Nova's device_addresses take it: 0000:84:00.0.
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

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


def _type_list(value):
    """``"nvidia-35, nvidia-36"`` (or a sequence) -> a tuple of type ids; None stays."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    return tuple(item.strip() if isinstance(item, str) else item for item in value
                 if not isinstance(item, str) or item.strip())


def _type_list_option(instance, attribute, value):
    if value is None:
        return
    for item in value:
        if not isinstance(item, str) or not _MDEV_TYPE.match(item):
            raise InvalidConfig(attribute.name, ", ".join(map(str, value)),
                                f"{item!r} is not a mediated device type id such as "
                                "nvidia-35 (letters, digits, '-', '_', '.', ':')")
    if len(set(value)) != len(value):
        raise InvalidConfig(attribute.name, ", ".join(value), "names a type twice")


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
    enabled_mdev_types: tuple[str, ...] | None = attrs.field(
        default=None, converter=_type_list, validator=_type_list_option,
        metadata=conf.option("devices", "enabled_mdev_types", """
            Mediated device types (vGPU types such as nvidia-35) this host
            offers, comma-separated.  Each physical device that offers its
            type is reported as a child provider whose inventory of the
            type's resource class is the mediated devices of that type
            already created on it plus those it can still create.  A
            section [mdev_<type>] per type may set device_addresses (the
            PCI addresses of the devices that use the type) and mdev_class
            (its resource class: VGPU, the default, or CUSTOM_*).  A device
            no device_addresses list uses the first type that has none;
            later types without device_addresses are not used.""",
            kind="list", default_text="none",
            nova="same name and meaning; [vgpu_<type>] sections are read too"))
    enabled_vgpu_types: tuple[str, ...] | None = attrs.field(
        default=None, converter=_type_list, validator=_type_list_option,
        metadata=conf.option("devices", "enabled_vgpu_types", """
            Deprecated name of enabled_mdev_types, read when that option
            is not set (a WARNING says so).""",
            kind="list", default_text="none", nova="same deprecated name"))


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
    mdev: "MdevConfig" = attrs.Factory(lambda: MdevConfig())

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
            mdev=MdevConfig.from_settings(settings, options),
        )


#: Option names of the ``[mdev_<type>]`` sections.
MDEV_SECTION_OPTIONS = ("device_addresses", "mdev_class", "max_instances")
DEFAULT_MDEV_CLASS = "VGPU"


@attrs.frozen
class MdevTypeGroup:
    """One enabled type's ``[mdev_<type>]`` section: the PCI addresses
    (lower case, ``0000:84:00.0``) of the devices that use it, and its
    resource class."""

    type_id: str
    device_addresses: tuple = attrs.field(default=(), converter=tuple)
    mdev_class: str = DEFAULT_MDEV_CLASS


@attrs.frozen
class MdevConfig:
    """Which mediated device type each physical device offers, as Nova decides it.

    ``enabled_types`` are ``[devices] enabled_mdev_types`` in order, less
    those left unused; ``groups`` each enabled type's
    :class:`MdevTypeGroup`.  A device whose PCI address a group lists uses
    that group's type; any other device uses ``default_type``: the first
    enabled type whose group lists no address (None: those devices offer
    none).  A later type without addresses is not used (WARNING), as in
    Nova.
    """

    enabled_types: tuple = attrs.field(default=(), converter=tuple)
    groups: tuple = attrs.field(default=(), converter=tuple)
    default_type: str = None

    @classmethod
    def from_settings(cls, settings, options):
        """Read the enabled types and their ``[mdev_<type>]`` sections.

        :raises InvalidConfig: naming ``[mdev_<type>] <option>`` and the
            value for an unknown option or a bad value, or an address two
            types name.
        """
        types = options.enabled_mdev_types
        if types is None and options.enabled_vgpu_types is not None:
            LOG.warning("[devices] enabled_vgpu_types is deprecated: name it "
                        "[devices] enabled_mdev_types")
            types = options.enabled_vgpu_types
        enabled, groups, default, owner = [], [], None, {}
        for type_id in types or ():
            group = _mdev_group(settings, type_id)
            if not group.device_addresses:
                if default is not None:
                    LOG.warning("Mediated device type %s has no [mdev_%s] device_addresses "
                                "but %s is already the type of every device not listed: "
                                "%s is not used", type_id, type_id, default, type_id)
                    continue
                default = type_id
            for address in group.device_addresses:
                if address in owner:
                    raise InvalidConfig(
                        f"[mdev_{type_id}] device_addresses", address,
                        f"is already a device of type {owner[address]} "
                        f"([mdev_{owner[address]}]); a device offers one type")
                owner[address] = type_id
            enabled.append(type_id)
            groups.append(group)
        return cls(enabled_types=enabled, groups=groups, default_type=default)

    def group(self, type_id):
        """The :class:`MdevTypeGroup` of an enabled type, or None."""
        return next((g for g in self.groups if g.type_id == type_id), None)

    def type_for(self, address):
        """The type the device at PCI ``address`` offers (None: none)."""
        if address is not None:
            address = address.lower()
            for group in self.groups:
                if address in group.device_addresses:
                    return group.type_id
        return self.default_type

    def class_for(self, address):
        """The resource class of the device at ``address``'s type."""
        group = self.group(self.type_for(address))
        return group.mdev_class if group is not None else DEFAULT_MDEV_CLASS


def _mdev_group(settings, type_id):
    """The :class:`MdevTypeGroup` of ``type_id``: ``[mdev_<type>]``, whose
    options win over those of Nova's older ``[vgpu_<type>]``."""
    values, where = {}, {}
    for section in (f"vgpu_{type_id}", f"mdev_{type_id}"):
        for name, raw in settings.section(section).items():
            if name not in MDEV_SECTION_OPTIONS:
                raise InvalidConfig(f"[{section}] {name}", raw,
                                    "unknown option (known: device_addresses, mdev_class)")
            values[name], where[name] = str(raw).strip(), f"[{section}] {name}"
    if "max_instances" in values:
        raise InvalidConfig(where["max_instances"], values["max_instances"],
                            "not supported by nova-lite: every instance a device offers "
                            "is reported")
    addresses = []
    for item in values.get("device_addresses", "").split(","):
        item = item.strip()
        if not item:
            continue
        if not _PCI_ADDRESS.match(item):
            raise InvalidConfig(where["device_addresses"], values["device_addresses"],
                                f"{item!r} is not a PCI address such as 0000:84:00.0")
        if item.lower() not in addresses:
            addresses.append(item.lower())
    mdev_class = values.get("mdev_class") or DEFAULT_MDEV_CLASS
    if not _MDEV_CLASS.match(mdev_class) or len(mdev_class) > 255:
        raise InvalidConfig(where["mdev_class"], values["mdev_class"],
                            "must be VGPU or a custom resource class CUSTOM_[A-Z0-9_]+")
    return MdevTypeGroup(type_id=type_id, device_addresses=addresses, mdev_class=mdev_class)


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
