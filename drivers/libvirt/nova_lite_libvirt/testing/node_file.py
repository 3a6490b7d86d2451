"""Reading a ``test:///<file>`` node file back into a :class:`HostSpec`.

The reverse of :func:`~nova_lite_libvirt.testing.xml.node_xml`, for node
files written by hand: the fake can then be configured with the same host
the test driver reads.  It understands what the test driver does: the
``<cpu>`` topology, ``<memory>`` (KiB), ``<domain>`` elements (with the
test namespace's ``runstate``), PCI ``<device>`` elements, and GPUs (PCI
devices offering mediated device types) with their mediated devices.  Elements it
does not know (networks, pools, interfaces) are ignored.
"""

import uuid as uuidlib
import xml.etree.ElementTree as ET

from nova_lite_libvirt.mdev import parse_mdev_parent, parse_mediated_device
from nova_lite_libvirt.nodedev import parse_pci_device
from nova_lite_libvirt.testing.spec import (
    DiskSpec, GpuSpec, GuestSpec, HostSpec, MdevSpec, MdevTypeSpec, PciDeviceSpec, PciVFSpec)
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


def _gpus(root):
    """``{address: GpuSpec}`` of the devices offering mediated device types."""
    texts = [ET.tostring(d, encoding="unicode") for d in root.findall("device")]
    mdevs = {}
    for text in texts:
        mdev = parse_mediated_device(text)
        if mdev is not None:
            mdevs.setdefault(mdev.parent, []).append(
                MdevSpec(uuid=mdev.uuid, type_id=mdev.type_id, iommu_group=mdev.iommu_group or 0))
    gpus = {}
    for text in texts:
        parent = parse_mdev_parent(text)
        if parent is None or parent.address is None:
            continue
        pci = parse_pci_device(text)
        gpus[parent.address] = GpuSpec(
            address=parent.address, numa_node=pci.numa_node, vendor_id=pci.vendor_id,
            product_id=pci.product_id, mdevs=mdevs.get(parent.name, ()),
            mdev_types=[MdevTypeSpec(t.type_id, t.available_instances, name=t.name,
                                     device_api=t.device_api) for t in parent.types])
    return gpus


def _pci_devices(root, gpus):
    parsed = [parse_pci_device(ET.tostring(d, encoding="unicode"))
              for d in root.findall("device")]
    parsed = [d for d in parsed if d is not None and d.address not in gpus]
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
        guests=[_guest(d) for d in root.findall("domain")])
    gpus = _gpus(root)
    fields.update(pci_devices=_pci_devices(root, gpus), gpus=list(gpus.values()))
    model = cpu.findtext("model") if cpu is not None else None
    fields["arch"] = model.strip() if model and model.strip() else "i686"
    fields.update(overrides)
    return HostSpec(**fields)
