"""PCI devices as child providers of their node (Nova's "PCI in Placement").

With ``[pci] report_in_placement`` on, the resource tracker derives one
child provider per PCI device from the node's report (the driver reports
``pci_devices`` only, as before) and records it beside the children the
driver reports itself (:mod:`nova_lite.providers`):

- a device that is not a virtual function (``type-PCI``, or a
  ``type-PF`` none of whose VFs is reported) is a provider of its own
  holding one unit of its class;
- a physical function's VFs are one provider, named after the PF, holding
  as many units of the VFs' class as there are VFs; the PF itself, when
  reported, adds one unit of its own class to that provider if that class
  is not the VFs' (the SR-IOV rule of :class:`~nova_lite.pci.PciStats`
  keeps the PF and its VFs from being held together, which the
  provider's inventory alone does not say);
- ``vdpa`` devices serve vDPA ports only, never a flavor's alias, and are
  not providers.

A provider is named ``<node name>_<PCI address>`` (Nova:
``<hostname>_<address>``); its class is the device's ``resource_class`` or
``CUSTOM_PCI_<VENDOR>_<PRODUCT>`` (upper-case hex), and its traits the
devices' own plus ``COMPUTE_MANAGED_PCI_DEVICE``, as Nova's.  One unit is
one device.

A claim picks devices with :class:`~nova_lite.pci.PciStats` exactly as
without providers (NUMA policy, SR-IOV rule), and records one unit on the
provider holding each device picked (:func:`pci_amounts`), in the claim's
transaction: the provider is the device's, never the "most room" choice of
:func:`nova_lite.model.nested.place`.  A flavor may therefore not ask for a
PCI provider's class with ``resources:<CLASS>``: it asks with
``pci_passthrough:alias`` (:func:`direct_pci_problems`).
"""

import functools
from collections.abc import Iterable, Mapping, Sequence

import attrs

from nova_lite.exception import InvalidInput
from nova_lite.host_topology import PciDevice
from nova_lite.node_resources import NodeResources
from nova_lite.objects import Allocation
from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory

#: The trait every PCI device provider carries (Nova's).
PCI_TRAIT = "COMPUTE_MANAGED_PCI_DEVICE"


def device_class(device: PciDevice) -> str:
    """The resource class ``device`` is counted in: its own ``resource_class``,
    else ``CUSTOM_PCI_<VENDOR>_<PRODUCT>`` in upper-case hex (Nova's)."""
    if device.resource_class is not None:
        return device.resource_class
    return f"CUSTOM_PCI_{device.vendor_id.upper()}_{device.product_id.upper()}"


def provider_name(nodename: str, address: str) -> str:
    """The name of the provider of the device at ``address`` of node ``nodename``."""
    return f"{nodename}_{address}"


@attrs.frozen
class PciTree:
    """The PCI providers of one node's report: ``children`` (by name) and
    ``holder``, ``{device address: (provider name, resource class)}``."""

    children: tuple[ChildProvider, ...] = ()
    holder: Mapping[str, tuple[str, str]] = attrs.field(factory=dict)

    @property
    def names(self) -> frozenset[str]:
        """The names of the PCI providers."""
        return frozenset(child.name for child in self.children)

    @property
    def classes(self) -> frozenset[str]:
        """Every class a PCI provider offers."""
        return frozenset(rc for child in self.children for rc in child.inventories)


@functools.lru_cache(maxsize=4096)
def pci_tree(nodename: str, devices: tuple[PciDevice, ...]) -> PciTree:
    """The PCI providers of node ``nodename`` reporting ``devices`` (see the
    module's doc); a pure function, cached (reports repeat every pass)."""
    groups: dict[str, list[PciDevice]] = {}
    for dev in devices:
        if dev.dev_type == "vdpa":
            continue
        if dev.dev_type == "type-VF" and dev.parent_addr:
            key = dev.parent_addr
        else:
            key = dev.address
        groups.setdefault(key, []).append(dev)
    children = []
    holder: dict[str, tuple[str, str]] = {}
    for key in sorted(groups):
        name = provider_name(nodename, key)
        counts: dict[str, int] = {}
        traits: set[str] = {PCI_TRAIT}
        # VFs first: a PF whose class is its VFs' adds no unit (it is held
        # only while none of them is).
        for dev in sorted(groups[key], key=lambda d: d.dev_type != "type-VF"):
            rc = device_class(dev)
            if dev.dev_type != "type-PF" or rc not in counts:
                counts[rc] = counts.get(rc, 0) + 1
            traits |= dev.traits
            holder[dev.address] = (name, rc)
        children.append(ChildProvider(
            name=name, traits=traits,
            inventories={rc: Inventory(total=n, max_unit=n) for rc, n in sorted(counts.items())}))
    return PciTree(children=tuple(children), holder=holder)


def tree_of(nodename: str, report: NodeResources | None) -> PciTree | None:
    """The PCI tree of ``report`` (a NodeResources) if its PCI devices are
    recorded as providers (``[pci] report_in_placement`` was on when it was
    recorded), else None."""
    if report is None or not report.pci_devices or not report.providers:
        return None
    tree = pci_tree(nodename, report.pci_devices)
    if not tree.children:
        return None
    names = {child.name for child in report.providers}
    return tree if tree.children[0].name in names else None


def with_pci_children(nodename: str, report: NodeResources) -> NodeResources:
    """``report`` with its PCI devices' providers added to ``providers``.

    Raises :class:`~nova_lite.exception.InvalidInput` naming the node and
    the provider if the driver reports a child of the same name.
    """
    tree = pci_tree(nodename, report.pci_devices)
    if not tree.children:
        return report
    clash = sorted(tree.names & {child.name for child in report.providers})
    if clash:
        raise InvalidInput(
            f"node {nodename}: the driver reports child provider {clash[0]!r}, the name of "
            "the provider of one of its PCI devices ([pci] report_in_placement); rename "
            "the driver's child or turn report_in_placement off")
    return attrs.evolve(report, providers=report.providers + tree.children)


def pci_amounts(tree: PciTree, addresses: Iterable[str]) -> dict[str, dict[str, int]]:
    """``{provider name: {rc: units}}``: one unit on the provider holding each
    device of ``addresses`` (a device with no provider counts nowhere)."""
    out: dict[str, dict[str, int]] = {}
    for address in addresses:
        found = tree.holder.get(address)
        if found is None:
            continue
        name, rc = found
        per = out.setdefault(name, {})
        per[rc] = per.get(rc, 0) + 1
    return out


def direct_pci_problems(tree: PciTree | None, classes: Iterable[str]) -> list[str]:
    """Why a request may not ask for ``classes`` with ``resources:<CLASS>``:
    each one only PCI providers offer is asked for with
    ``pci_passthrough:alias``."""
    if tree is None:
        return []
    pci = tree.classes
    return [f"{rc}: offered by PCI devices only; ask for them with "
            "pci_passthrough:alias, not resources:" + rc
            for rc in sorted(set(classes) & pci)]


def other_children(children: Sequence[ChildProvider], tree: PciTree | None
                   ) -> Sequence[ChildProvider]:
    """``children`` without the PCI providers of ``tree``."""
    if tree is None:
        return children
    names = tree.names
    return tuple(child for child in children if child.name not in names)


def without_units_on(alloc: Allocation, names: Iterable[str]) -> dict[str, int]:
    """``alloc``'s resources less what it holds on the providers ``names``
    (the PCI providers: their units follow the devices, not the flavor)."""
    out = dict(alloc.resources)
    for name in names:
        for rc, n in alloc.providers.get(name, {}).items():
            out[rc] = out.get(rc, 0) - n
            if not out[rc]:
                del out[rc]
    return out
