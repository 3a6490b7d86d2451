"""Reading a ``test:///<file>`` node file back into a :class:`HostSpec`.

The reverse of :func:`~nova_lite_libvirt.testing.xml.node_xml`, for node
files written by hand: the fake can then be configured with the same host
the test driver reads.  It understands what the test driver does: the
``<cpu>`` topology, ``<memory>`` (KiB), ``<domain>`` elements (with the
test namespace's ``runstate``) and PCI ``<device>`` elements.  Elements it
does not know (networks, pools, interfaces) are ignored.
"""

import uuid as uuidlib
import xml.etree.ElementTree as ET

from nova_lite_libvirt.nodedev import parse_pci_device
from nova_lite_libvirt.testing.spec import (
    DiskSpec, GuestSpec, HostSpec, PciDeviceSpec, PciVFSpec)
from nova_lite_libvirt.testing.xml import SHUTOFF, TEST_NS

_KIB = {"b": 1 / 1024, "bytes": 1 / 1024, "k": 1, "kib": 1, "m": 1024, "mib": 1024,
        "g": 1024 ** 2, "gib": 1024 ** 2}


def _int(parent, tag, default):
    text = parent.findtext(tag) if parent is not None else None
    return int(text.strip()) if text and text.strip() else default


def _mib(element):
    unit = (element.get("unit") or "KiB").lower()
    return int(int(element.text.strip()) * _KIB[unit]) // 1024


def _guest(dom):
    memory = dom.find("currentMemory")
    if memory is None:
        memory = dom.find("memory")
    disks = []
    for disk in dom.findall("./devices/disk"):
        source, target = disk.find("source"), disk.find("target")
        if disk.get("type") == "file" and source is not None and source.get("file"):
            driver = disk.find("driver")
            disks.append(DiskSpec(path=source.get("file"),
                                  target=target.get("dev") if target is not None else "vda",
                                  format=(driver.get("type") if driver is not None else None)
                                  or "raw"))
    runstate = dom.findtext(f"{{{TEST_NS}}}runstate")
    return GuestSpec(name=dom.findtext("name").strip(),
                     uuid=(dom.findtext("uuid") or str(uuidlib.uuid4())).strip(),
                     memory_mib=_mib(memory), vcpus=_int(dom, "vcpu", 1),
                     running=not (runstate and int(runstate) == SHUTOFF), disks=disks)


def _pci_devices(root):
    parsed = [parse_pci_device(ET.tostring(d, encoding="unicode"))
              for d in root.findall("device")]
    parsed = [d for d in parsed if d is not None]
    vfs = {}
    for dev in parsed:
        if dev.dev_type == "type-VF":
            vfs.setdefault(dev.parent_addr, []).append(PciVFSpec(dev.address, dev.product_id))
    return [PciDeviceSpec(dev.address, dev.vendor_id, dev.product_id, dev.numa_node,
                          vfs=vfs.get(dev.address, ()), sriov=dev.dev_type == "type-PF")
            for dev in parsed if dev.dev_type != "type-VF"]


def spec_from_node_xml(text, **overrides):
    """A :class:`HostSpec` for a test-driver node file's text.

    ``overrides`` set the facts a node file cannot hold (hostname, versions,
    CPU model...); without them the spec's defaults apply.
    """
    root = ET.fromstring(text)
    if root.tag != "node":
        raise ValueError(f"expected a <node> file, got <{root.tag}>")
    cpu = root.find("cpu")
    # Missing elements take the test driver's defaults (its getInfo on "<node/>").
    fields = dict(
        numa_nodes=_int(cpu, "nodes", 2), sockets=_int(cpu, "sockets", 2),
        cores=_int(cpu, "cores", 2), threads=_int(cpu, "threads", 2),
        cpu_mhz=_int(cpu, "mhz", 1400),
        memory_mib=_int(root, "memory", 3 * 1024 * 1024) // 1024,
        guests=[_guest(d) for d in root.findall("domain")],
        pci_devices=_pci_devices(root))
    model = cpu.findtext("model") if cpu is not None else None
    fields["arch"] = model.strip() if model and model.strip() else "i686"
    fields.update(overrides)
    return HostSpec(**fields)
