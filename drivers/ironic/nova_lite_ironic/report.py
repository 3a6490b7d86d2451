"""From a :class:`~nova_lite_ironic.node.BareMetalNode` to a ``NodeResources``.

A bare-metal node is consumed whole: its inventory is exactly one unit of
``CUSTOM_<RESOURCE_CLASS>`` and its CPU, RAM and disk numbers are 0.  The
unit is reserved while the node cannot take an instance (maintenance, a
bad power state, a provision state other than ``available``) or already
has one.  Its traits are the names of Ironic's ``traits`` field, as Nova's
ironic driver reports them (:func:`node_traits`).
"""

import logging

import attrs
import os_resource_classes

from nova_lite.objects import NodeResources, SupportedInstance
from nova_lite.traits import CAPABILITY_TRAITS, trait_problem

from nova_lite_ironic import node as nodes
from nova_lite_ironic.exception import NodeConfigurationError

LOG = logging.getLogger(__name__)

#: ``hypervisor_type`` of every bare-metal node (Nova's value).
HYPERVISOR_TYPE = "ironic"
#: ``hypervisor_version`` reported (Nova's value).
HYPERVISOR_VERSION = 1
#: Hypervisor type and VM mode in ``supported_instances``.
BAREMETAL_HV_TYPE = "baremetal"
HVM_MODE = "hvm"

#: Architectures a node may declare (Nova's list), canonical names.
KNOWN_ARCHES = frozenset({
    "alpha", "armv6", "armv7l", "armv7b", "aarch64", "cris", "i686", "ia64", "lm32",
    "m68k", "microblaze", "microblazeel", "mips", "mipsel", "mips64", "mips64el",
    "openrisc", "parisc", "parisc64", "ppc", "ppcle", "ppc64", "ppc64le", "ppcemb",
    "s390", "s390x", "sh4", "sh4eb", "sparc", "sparc64", "unicore32", "x86_64",
    "xtensa", "xtensaeb"})
_ARCH_ALIASES = {"i386": "i686", "i486": "i686", "i586": "i686", "amd64": "x86_64",
                 "x64": "x86_64"}


def canonical_arch(raw):
    """Canonical architecture for ``raw`` (``"i386"`` -> ``"i686"``), or None if unknown."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    name = raw.strip().lower()
    name = _ARCH_ALIASES.get(name, name)
    return name if name in KNOWN_ARCHES else None


def supported_instances(raw_arch):
    """``[SupportedInstance(arch, "baremetal", "hvm")]``, or ``[]`` for an unknown arch."""
    arch = canonical_arch(raw_arch)
    if arch is None:
        return []
    return [SupportedInstance(arch=arch, hypervisor_type=BAREMETAL_HV_TYPE, vm_mode=HVM_MODE)]


def parse_capabilities(text, node_uuid=None):
    """``"k1:v1,k2:v2"`` -> ``{"k1": "v1", "k2": "v2"}``.

    A malformed item (no colon, more than one, an empty key or value) is
    skipped with a WARNING naming the node and the item.
    """
    result = {}
    if text is None or text == "":
        return result
    if isinstance(text, dict):  # some inventories give a mapping directly
        return {str(k).strip(): str(v).strip() for k, v in text.items()}
    for item in str(text).split(","):
        parts = item.split(":")
        if len(parts) == 2 and parts[0].strip() and parts[1].strip():
            result[parts[0].strip()] = parts[1].strip()
        else:
            LOG.warning("Ignoring malformed capability %r of node %s: the format is "
                        "'key:value'", item, node_uuid)
    return result


def custom_resource_class(node):
    """``CUSTOM_<NORMALISED>`` for the node's resource class, exactly as Nova's
    ironic driver names it (os-resource-classes' rule: every run of characters
    other than A-Z, a-z, 0-9 becomes one ``_``, then upper case, then the
    ``CUSTOM_`` prefix, always: ``"gpu_a100 (8x)"`` -> ``CUSTOM_GPU_A100_8X_``).

    Raises :class:`NodeConfigurationError` if the node has none.
    """
    if not node.resource_class or not node.resource_class.strip():
        raise NodeConfigurationError(
            node.uuid, "it has no resource_class, so it offers nothing to schedule to; "
            "set one in the node source (e.g. 'baremetal')")
    return os_resource_classes.normalize_name(node.resource_class)


_CAPABILITY_TRAIT_NAMES = frozenset(CAPABILITY_TRAITS.values())


@attrs.frozen
class NodeTraits:
    """A node's traits as reported, and those of its names left out.

    ``traits``: the names reported.  ``left_out``: ``(name, why)`` pairs,
    sorted, of names of the node that are not reported.
    """

    traits: frozenset = frozenset()
    left_out: tuple = ()


def node_traits(node, declared=frozenset()):
    """The :class:`NodeTraits` of ``node``'s own ``traits`` field.

    Every standard (os-traits) and ``CUSTOM_*`` name is reported, as Nova's
    ironic driver reports them.  Left out, each with its reason:

    - a name that is not a trait (neither a standard name of the installed
      os-traits nor ``CUSTOM_[A-Z0-9_]+``): no flavor can name it either, and
      a new standard name of a newer os-traits on the Ironic side must not
      stop the node's state from being recorded;
    - a trait of a driver capability (``COMPUTE_VOLUME_MULTI_ATTACH``, ...)
      that is not in ``declared`` (the traits of the capabilities the driver
      declares): Nova removes those from a node, as only the driver's
      capabilities decide them.  A declared one is left out silently here
      because the core adds it to every node of the driver anyway.
    """
    kept, left_out = set(), []
    for name in node.traits:
        problem = trait_problem(name)
        if problem is not None:
            left_out.append((name, problem))
        elif name in _CAPABILITY_TRAIT_NAMES:
            if name not in declared:
                left_out.append((name, "a trait of a driver capability the ironic driver "
                                       "does not declare"))
        else:
            kept.add(name)
    return NodeTraits(traits=frozenset(kept), left_out=tuple(sorted(left_out)))


def unavailability(node):
    """Why ``node`` cannot take a new instance, or None if it can.

    Reasons: maintenance; a power state of ``error`` or none; a provision
    state other than ``available``; an instance already on it.
    """
    if node.maintenance:
        return "in maintenance"
    if node.power_state in nodes.BAD_POWER_STATES:
        return f"power state {node.power_state or 'none'}"
    if node.provision_state != nodes.AVAILABLE:
        return f"provision state {node.provision_state or 'none'}"
    if node.instance_uuid:
        return f"has instance {node.instance_uuid}"
    return None


def _log_left_out(node, left_out, warned):
    names = frozenset(name for name, _ in left_out)
    if warned is not None:
        if not names:
            warned.pop(node.uuid, None)
            return
        if warned.get(node.uuid) == names:
            level = logging.DEBUG   # said already; say it again only when it changes
        else:
            level = logging.WARNING
            warned[node.uuid] = names
    elif not names:
        return
    else:
        level = logging.WARNING
    for name, why in left_out:
        LOG.log(level, "Leaving trait %r of bare-metal node %s out of its report: %s",
                name, node.uuid, why)


def node_resources(node, declared=frozenset(), warned=None):
    """The ``NodeResources`` record of ``node``.

    nodename, ``hypervisor_hostname`` and ``uuid`` are all the node uuid;
    vcpus, memory_mb and local_gb are 0; the one unit of its custom class
    is reserved when :func:`unavailability` gives a reason; ``traits`` are
    :func:`node_traits` of the node (``declared``: the traits of the
    driver's capabilities).  Each trait left out is logged with a WARNING
    naming it, the node and why; with ``warned`` (a dict kept by the
    caller, node uuid -> names) only when a node's set of them changes,
    at DEBUG otherwise.  Raises :class:`NodeConfigurationError` for a node
    without a resource class.
    """
    rc = custom_resource_class(node)
    traits = node_traits(node, declared)
    _log_left_out(node, traits.left_out, warned)
    raw_arch = node.properties.get("cpu_arch")
    stats = {}
    if raw_arch:
        stats["cpu_arch"] = str(raw_arch)  # raw, as flavors' extra specs match it
    stats.update(parse_capabilities(node.properties.get("capabilities"), node.uuid))
    if raw_arch and canonical_arch(raw_arch) is None:
        LOG.warning("Node %s has unknown cpu_arch %r: it supports no instance type",
                    node.uuid, raw_arch)
    reason = unavailability(node)
    return NodeResources(
        vcpus=0, memory_mb=0, local_gb=0, vcpus_used=0, memory_mb_used=0, local_gb_used=0,
        disk_available_least=0, hypervisor_type=HYPERVISOR_TYPE,
        hypervisor_version=HYPERVISOR_VERSION, hypervisor_hostname=node.uuid,
        cpu_info=None, numa_topology=None, stats=stats,
        supported_instances=supported_instances(raw_arch), resource_class=rc,
        uuid=node.uuid, reserved={rc: 1} if reason else {}, traits=traits.traits)
