"""Traits: the qualitative features of a node, named as Placement names them.

A trait is a name with no amount: a CPU feature (``HW_CPU_X86_AVX2``), a
capability of the driver (``COMPUTE_NET_ATTACH_INTERFACE``) or anything an
operator defines (``CUSTOM_*``).  The standard names are the ``os-traits``
library's, the list Nova and Placement use; a custom name is ``CUSTOM_``
followed by upper-case letters, digits and underscores, at most 255
characters.  Any other name is refused with
:class:`~nova_lite.exception.InvalidInput` naming it.

A node's traits are what its driver reports (``NodeResources.traits``)
with the trait of each capability the driver declares
(:data:`CAPABILITY_TRAITS`, the one table of them), without those of the
capabilities it does not declare, and with ``COMPUTE_NODE``: the audit
records them with the node's report (:func:`node_traits`).

A flavor asks with Nova's extra specs ``trait:<NAME>=required`` (only
nodes with the trait) and ``trait:<NAME>=forbidden`` (only nodes without
it): :func:`flavor_traits`.
"""

import importlib.metadata
import re
from collections.abc import Iterable, Mapping

import attrs
import os_traits

from nova_lite.exception import InvalidInput

#: Every standard trait name of the installed os-traits.
STANDARD_TRAITS = frozenset(os_traits.get_traits())
#: The version of os-traits the standard names come from.
OS_TRAITS_VERSION = importlib.metadata.version("os-traits")
#: A trait name's longest length (Placement's column).
MAX_LENGTH = 255
_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")

#: The extra spec prefix of a trait request, and its two values.
EXTRA_SPEC_PREFIX = "trait:"
REQUIRED = "required"
FORBIDDEN = "forbidden"

#: Driver capability (a :class:`nova_lite.virt.driver.Capabilities` field,
#: named as Nova's driver capabilities are) -> the trait a node of a driver
#: that declares it has.
CAPABILITY_TRAITS: Mapping[str, str] = {
    "supports_attach_interface": os_traits.COMPUTE_NET_ATTACH_INTERFACE,
    "supports_device_tagging": os_traits.COMPUTE_DEVICE_TAGGING,
    "supports_tagged_attach_interface": os_traits.COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG,
    "supports_tagged_attach_volume": os_traits.COMPUTE_VOLUME_ATTACH_WITH_TAG,
    "supports_extend_volume": os_traits.COMPUTE_VOLUME_EXTEND,
    "supports_multiattach": os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
    "supports_trusted_certs": os_traits.COMPUTE_TRUSTED_CERTS,
    "supports_accelerators": os_traits.COMPUTE_ACCELERATORS,
    "supports_image_type_aki": os_traits.COMPUTE_IMAGE_TYPE_AKI,
    "supports_image_type_ami": os_traits.COMPUTE_IMAGE_TYPE_AMI,
    "supports_image_type_ari": os_traits.COMPUTE_IMAGE_TYPE_ARI,
    "supports_image_type_iso": os_traits.COMPUTE_IMAGE_TYPE_ISO,
    "supports_image_type_qcow2": os_traits.COMPUTE_IMAGE_TYPE_QCOW2,
    "supports_image_type_raw": os_traits.COMPUTE_IMAGE_TYPE_RAW,
    "supports_image_type_vdi": os_traits.COMPUTE_IMAGE_TYPE_VDI,
    "supports_image_type_vhd": os_traits.COMPUTE_IMAGE_TYPE_VHD,
    "supports_image_type_vhdx": os_traits.COMPUTE_IMAGE_TYPE_VHDX,
    "supports_image_type_vmdk": os_traits.COMPUTE_IMAGE_TYPE_VMDK,
    "supports_image_type_ploop": os_traits.COMPUTE_IMAGE_TYPE_PLOOP,
    # nova-lite's name for Nova's supports_migrate_to_same_host.
    "supports_same_host_resize": os_traits.COMPUTE_SAME_HOST_COLD_MIGRATE,
    "supports_bfv_rescue": os_traits.COMPUTE_RESCUE_BFV,
    "supports_secure_boot": os_traits.COMPUTE_SECURITY_UEFI_SECURE_BOOT,
    "supports_socket_pci_numa_affinity": os_traits.COMPUTE_SOCKET_PCI_NUMA_AFFINITY,
    "supports_remote_managed_ports": os_traits.COMPUTE_REMOTE_MANAGED_PORTS,
    "supports_ephemeral_encryption": os_traits.COMPUTE_EPHEMERAL_ENCRYPTION,
    "supports_ephemeral_encryption_luks": os_traits.COMPUTE_EPHEMERAL_ENCRYPTION_LUKS,
    "supports_ephemeral_encryption_plain": os_traits.COMPUTE_EPHEMERAL_ENCRYPTION_PLAIN,
    "supports_address_space_passthrough": os_traits.COMPUTE_ADDRESS_SPACE_PASSTHROUGH,
    "supports_address_space_emulated": os_traits.COMPUTE_ADDRESS_SPACE_EMULATED,
    "supports_stateless_firmware": os_traits.COMPUTE_SECURITY_STATELESS_FIRMWARE,
    "supports_virtio_fs": os_traits.COMPUTE_STORAGE_VIRTIO_FS,
    "supports_mem_backing_file": os_traits.COMPUTE_MEM_BACKING_FILE,
}


#: Custom names seen valid so far (up to _MAX_REMEMBERED), so that reading
#: thousands of node records checks each distinct name once.
_REMEMBERED: set[str] = set()
_MAX_REMEMBERED = 100_000


def trait_problem(name: object) -> str | None:
    """Why ``name`` is not a trait name, or None if it is one."""
    if name.__class__ is str and (name in STANDARD_TRAITS or name in _REMEMBERED):
        return None
    if not isinstance(name, str):
        return f"a trait name must be a string, got {type(name).__name__} {name!r:.60}"
    if len(name) > MAX_LENGTH:
        return f"trait name {name[:60]!r}... is longer than {MAX_LENGTH} characters"
    if _CUSTOM_RE.match(name):
        if len(_REMEMBERED) < _MAX_REMEMBERED:
            _REMEMBERED.add(name)
        return None
    if name.startswith("CUSTOM_"):
        return (f"custom trait {name!r} may hold only upper-case letters, digits and "
                f"underscores after CUSTOM_")
    return (f"unknown trait {name!r}: not a standard trait of os-traits "
            f"{OS_TRAITS_VERSION}, nor CUSTOM_<NAME>")


def all_known(names: frozenset[str]) -> bool:
    """True if every name of ``names`` is known to be a trait (a cheap set
    test; False only means some name has not been checked yet)."""
    return not names.difference(STANDARD_TRAITS, _REMEMBERED)


def validate_trait(name: object, where: str = "trait") -> str:
    """``name`` if it is a standard or custom trait name; else InvalidInput
    naming ``where`` and what is wrong."""
    problem = trait_problem(name)
    if problem is not None:
        raise InvalidInput(f"{where}: {problem}")
    return name   # type: ignore[return-value]  # trait_problem checked it is a str


def trait_set(value: Iterable[str] | None, where: str = "traits") -> frozenset[str]:
    """A frozenset of trait names from any iterable of them (None: empty);
    InvalidInput naming ``where`` for a bad name or a lone string."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidInput(f"{where} must be a collection of trait names, got "
                           f"{type(value).__name__} {value!r:.60}")
    if isinstance(value, frozenset) and all_known(value):
        return value   # the common case: a record read back, every name known
    return frozenset(validate_trait(name, where) for name in value)


def capability_traits(capabilities: object) -> frozenset[str]:
    """The traits of the capabilities ``capabilities`` (a driver's
    ``Capabilities`` record) sets to True, by :data:`CAPABILITY_TRAITS`."""
    return frozenset(trait for capability, trait in CAPABILITY_TRAITS.items()
                     if getattr(capabilities, capability, False) is True)


#: Every trait of :data:`CAPABILITY_TRAITS`.
CAPABILITY_TRAIT_NAMES = frozenset(CAPABILITY_TRAITS.values())


def node_traits(reported: frozenset[str], capabilities: object) -> frozenset[str]:
    """The traits recorded for a node whose driver reported ``reported`` and
    declares ``capabilities``, as Nova's resource tracker makes them: the
    trait of each declared capability added, that of each undeclared one
    taken away (a driver may not claim what it does not declare), and
    ``COMPUTE_NODE`` (every compute node has it)."""
    declared = capability_traits(capabilities)
    return (reported - CAPABILITY_TRAIT_NAMES) | declared | {os_traits.COMPUTE_NODE}


@attrs.frozen
class TraitRequest:
    """The traits a request requires and forbids (disjoint sets of names)."""

    required: frozenset[str] = frozenset()
    forbidden: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.required or self.forbidden)

    def reason(self, traits: frozenset[str]) -> str | None:
        """Why a node with ``traits`` does not suit this request, or None.

        Names every required trait it lacks and every forbidden one it has,
        sorted."""
        missing = self.required - traits
        present = self.forbidden & traits
        if not missing and not present:
            return None
        parts = []
        if missing:
            parts.append("lacks required trait(s) " + ", ".join(sorted(missing)))
        if present:
            parts.append("has forbidden trait(s) " + ", ".join(sorted(present)))
        return "; ".join(parts)


NO_TRAITS = TraitRequest()


def flavor_traits(extra_specs: Mapping[str, str], where: str = "flavor") -> TraitRequest:
    """The :class:`TraitRequest` of a flavor's ``trait:<NAME>`` extra specs.

    :param extra_specs: the flavor's extra specs.
    :param where: names the flavor in an error.
    :raises InvalidInput: for a value other than ``required`` or
        ``forbidden``, or a name that is not a trait, naming the spec.
    """
    required: set[str] = set()
    forbidden: set[str] = set()
    for key, value in extra_specs.items():
        if not key.startswith(EXTRA_SPEC_PREFIX):
            continue
        spec = f"{where} extra spec {key}"
        name = validate_trait(key[len(EXTRA_SPEC_PREFIX):], spec)
        if value == REQUIRED:
            required.add(name)
        elif value == FORBIDDEN:
            forbidden.add(name)
        else:
            raise InvalidInput(f"{spec}={value!r}: the value must be {REQUIRED!r} or "
                               f"{FORBIDDEN!r}")
    if not required and not forbidden:
        return NO_TRAITS
    return TraitRequest(required=frozenset(required), forbidden=frozenset(forbidden))


__all__ = ["STANDARD_TRAITS", "OS_TRAITS_VERSION", "CAPABILITY_TRAITS", "EXTRA_SPEC_PREFIX",
           "REQUIRED", "FORBIDDEN", "TraitRequest", "NO_TRAITS", "trait_problem",
           "validate_trait", "all_known", "trait_set", "capability_traits",
           "CAPABILITY_TRAIT_NAMES", "node_traits", "flavor_traits"]
