"""Mediated devices (vGPUs): what a libvirt host can create, as child providers.

libvirt describes two kinds of node device (``virNodeDevice.XMLDesc()``):

- a *parent* (a physical GPU) lists the mediated device types it can
  create in a ``mdev_types`` capability, inside its PCI capability (or at
  the top level for a parent that is not a PCI device), each type with its
  ``availableInstances``: how many more it can create now;
- a *mediated device* already created has an ``mdev`` capability naming
  its ``type``, and its ``<parent>`` names the parent device.

As Nova's libvirt driver does, each parent with an enabled type (see
:class:`~nova_lite_libvirt.config.MdevConfig`) is one child provider named
``<nodename>_<parent's node device name>`` (``cmp1_pci_0000_84_00_0``),
offering that type's resource class (``VGPU`` unless ``[mdev_<type>]
mdev_class`` says otherwise) with a total of the mediated devices of that
type already created on it plus its ``availableInstances`` (a created one
no longer counts as available).  A parent whose total is 0 is not reported.
"""

import logging
import xml.etree.ElementTree as ET

import attrs

from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory

from nova_lite_libvirt.nodedev import pci_address

LOG = logging.getLogger(__name__)


@attrs.frozen
class MdevType:
    """One mediated device type a parent offers: ``type_id`` (``nvidia-35``),
    libvirt's ``name`` (``GRID M60-0B``, None if absent), ``device_api``
    (``vfio-pci``) and ``available_instances``, how many more it can create."""

    type_id: str
    available_instances: int
    name: str = None
    device_api: str = None


@attrs.frozen
class MdevParent:
    """A node device that can create mediated devices.

    ``name`` is libvirt's node device name (``pci_0000_84_00_0``);
    ``address`` its PCI address (``0000:84:00.0``), or None for a parent
    that is not a PCI device; ``types`` the :class:`MdevType` it offers.
    """

    name: str
    address: str
    types: tuple = attrs.field(default=(), converter=tuple)

    def type(self, type_id):
        """The :class:`MdevType` ``type_id`` of this parent, or None."""
        return next((t for t in self.types if t.type_id == type_id), None)


@attrs.frozen
class MediatedDevice:
    """A mediated device already created: node device ``name``, its
    ``type_id``, the ``parent`` node device name, its ``uuid`` (None when
    libvirt does not give it) and ``iommu_group`` (None if absent)."""

    name: str
    type_id: str
    parent: str
    uuid: str = None
    iommu_group: int = None


def _device_root(xml_text, what):
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"{what}: node device XML does not parse ({exc})") from None
    if root.tag != "device":
        raise ValueError(f"{what}: expected a <device> node device, got <{root.tag}>")
    return root, (root.findtext("name") or "").strip() or what


def _count(text, what):
    value = int((text or "").strip())
    if value < 0:
        raise ValueError(f"{what} is negative ({value})")
    return value


def parse_mdev_parent(xml_text, what="node device"):
    """The :class:`MdevParent` of one node device's XML, or None if it
    offers no mediated device type.

    ``what`` names the device in errors until its XML gives its name.

    :raises ValueError: naming the device when the XML does not parse or
        its ``mdev_types`` capability is malformed (a type without an id, an
        ``availableInstances`` that is not a count).
    """
    root, name = _device_root(xml_text, what)
    pci = next((c for c in root.findall("capability") if c.get("type") == "pci"), None)
    holders = [pci, root] if pci is not None else [root]
    caps = [c for holder in holders for c in holder.findall("capability")
            if c.get("type") == "mdev_types"]
    if not caps:
        return None
    types = []
    try:
        address = pci_address(*(int(pci.findtext(part).strip(), 0)
                                for part in ("domain", "bus", "slot", "function"))) \
            if pci is not None else None
        for cap in caps:
            for element in cap.findall("type"):
                type_id = (element.get("id") or "").strip()
                if not type_id:
                    raise ValueError("a <type> has no id")
                types.append(MdevType(
                    type_id=type_id,
                    available_instances=_count(element.findtext("availableInstances"),
                                               f"availableInstances of type {type_id}"),
                    name=(element.findtext("name") or "").strip() or None,
                    device_api=(element.findtext("deviceAPI") or "").strip() or None))
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"node device {name}: malformed mdev_types capability "
                         f"({exc})") from None
    return MdevParent(name=name, address=address, types=types)


def parse_mediated_device(xml_text, what="node device"):
    """The :class:`MediatedDevice` of one node device's XML, or None if it
    is not a mediated device.

    :raises ValueError: naming the device when the XML does not parse, or
        its ``mdev`` capability has no type or the device no parent.
    """
    root, name = _device_root(xml_text, what)
    cap = next((c for c in root.findall("capability") if c.get("type") == "mdev"), None)
    if cap is None:
        return None
    element = cap.find("type")
    type_id = (element.get("id") or "").strip() if element is not None else ""
    parent = (root.findtext("parent") or "").strip()
    if not type_id or not parent:
        missing = "type id" if not type_id else "parent"
        raise ValueError(f"node device {name}: malformed mdev capability (no {missing})")
    group = cap.find("iommuGroup")
    try:
        iommu_group = int(group.get("number")) if group is not None else None
    except (TypeError, ValueError):
        raise ValueError(f"node device {name}: malformed mdev capability (iommuGroup "
                         f"number {group.get('number')!r})") from None
    return MediatedDevice(name=name, type_id=type_id, parent=parent,
                          uuid=(cap.findtext("uuid") or "").strip() or None,
                          iommu_group=iommu_group)


def address_of_name(name):
    """The PCI address libvirt's node device name ``pci_0000_84_00_0`` stands
    for (``0000:84:00.0``), or None for another name."""
    parts = name.split("_")
    if len(parts) != 5 or parts[0] != "pci":
        return None
    try:
        return pci_address(*(int(p, 16) for p in parts[1:]))
    except ValueError:
        return None


def _parent_address(name, by_parent):
    parent = by_parent.get(name)
    return parent.address if parent is not None else address_of_name(name)


def provider_name(nodename, parent_name):
    """Nova's name of a parent's provider: ``<nodename>_<node device name>``."""
    return f"{nodename}_{parent_name}"


def mdev_providers(nodename, parents, mediated, mdev_config):
    """The child providers of a host's mediated devices.

    :param nodename: the node's name (the hypervisor's hostname).
    :param parents: :class:`MdevParent` of every device offering a type.
    :param mediated: :class:`MediatedDevice` of every mediated device created.
    :param mdev_config: the :class:`~nova_lite_libvirt.config.MdevConfig`.
    :returns: a tuple of :class:`ChildProvider`, by name, one per parent
        whose type (:meth:`MdevConfig.type_for`) has a total above 0.
    """
    if not mdev_config.enabled_types:
        return ()
    by_parent = {}
    for parent in parents:
        by_parent.setdefault(parent.name, parent)
    created = {}
    for mdev in mediated:
        if mdev.type_id == mdev_config.type_for(_parent_address(mdev.parent, by_parent)):
            created[mdev.parent] = created.get(mdev.parent, 0) + 1
    children = []
    for name in sorted(set(by_parent) | set(created)):
        address = _parent_address(name, by_parent)
        type_id = mdev_config.type_for(address)
        if type_id is None:
            continue
        offered = by_parent[name].type(type_id) if name in by_parent else None
        available = offered.available_instances if offered is not None else 0
        total = created.get(name, 0) + available
        if not total:
            LOG.debug("Mediated device parent %s has no room for type %s", name, type_id)
            continue
        inventory = Inventory(total=total, reserved=0, min_unit=1, max_unit=total,
                              step_size=1, allocation_ratio=1)
        children.append(ChildProvider(
            name=provider_name(nodename, name),
            inventories={mdev_config.class_for(address): inventory}))
    return tuple(sorted(children, key=lambda c: c.name))
