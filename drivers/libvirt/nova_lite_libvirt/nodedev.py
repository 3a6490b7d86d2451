"""PCI devices from libvirt node-device XML (``virNodeDevice.XMLDesc()``).

A device with a ``virt_functions`` capability is an SR-IOV PF
(``type-PF``); one with a ``phys_function`` address is a VF (``type-VF``,
``parent_addr`` = its PF); anything else is ``type-PCI``.  Vendor and
product ids become 4-digit lower-case hex without ``0x``; the NUMA node is
None when libvirt does not know it.
"""

import xml.etree.ElementTree as ET

from nova_lite.objects import PciDevice


def pci_address(domain, bus, slot, function):
    """``"0000:81:10.2"`` from the four integer parts."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"


def _number(text):
    return int(text.strip(), 0)


def _hex_id(value):
    return f"{int(value, 16):04x}"


def parse_pci_device(xml_text):
    """A :class:`PciDevice` from one node device's XML, or None if not PCI.

    :raises ValueError: naming the device when its PCI capability is malformed.
    """
    root = ET.fromstring(xml_text)
    cap = next((c for c in root.findall("capability") if c.get("type") == "pci"), None)
    if cap is None:
        return None
    name = root.findtext("name") or "?"
    try:
        address = pci_address(*(_number(cap.findtext(part))
                                for part in ("domain", "bus", "slot", "function")))
        vendor = _hex_id(cap.find("vendor").get("id"))
        product = _hex_id(cap.find("product").get("id"))
    except (AttributeError, TypeError, ValueError) as exc:
        raise ValueError(f"node device {name}: malformed PCI capability ({exc})") from None
    dev_type, parent = "type-PCI", None
    for sub in cap.findall("capability"):
        if sub.get("type") == "virt_functions":
            dev_type = "type-PF"
        elif sub.get("type") == "phys_function":
            addr = sub.find("address")
            if addr is not None:
                dev_type = "type-VF"
                parent = pci_address(*(_number(addr.get(k))
                                       for k in ("domain", "bus", "slot", "function")))
    numa = cap.find("numa")
    node = _number(numa.get("node")) if numa is not None and numa.get("node") else None
    return PciDevice(address=address, vendor_id=vendor, product_id=product,
                     dev_type=dev_type, numa_node=node if node is not None and node >= 0 else None,
                     parent_addr=parent)
