"""XML rendered from a :class:`~.spec.HostSpec`.

- :func:`capabilities_xml`: what the fake's ``getCapabilities()`` returns,
  in the shape QEMU hosts give;
- :func:`domain_capabilities_xml`: ``getDomainCapabilities()`` for one
  machine type, and :func:`baseline_cpu_xml`: ``baselineCPU()``'s answer;
- :func:`nodedev_xml`: one PCI node device, as ``virNodeDevice.XMLDesc()``;
  :func:`gpu_element` and :func:`mdev_element`: a GPU offering mediated
  device types and a mediated device created on it;
- :func:`guest_xml`: a guest's ``<domain>``;
- :func:`node_xml`: a node file for libvirt's ``test:///<file>`` driver,
  holding the same host, guests and devices.
"""

import xml.etree.ElementTree as ET

from nova_lite.hardware import format_cpu_spec

TEST_NS = "http://libvirt.org/schemas/domain/test/1.0"
#: ``<test:runstate>`` value of a shut-off domain (VIR_DOMAIN_SHUTOFF).
SHUTOFF = 5


def _text(parent, tag, value, **attrib):
    el = ET.SubElement(parent, tag, **attrib)
    el.text = str(value)
    return el


def _tostring(el):
    ET.indent(el)
    return ET.tostring(el, encoding="unicode")


def capabilities_xml(spec):
    """Capabilities XML of the host (cells left out without NUMA in caps)."""
    caps = ET.Element("capabilities")
    host = ET.SubElement(caps, "host")
    cpu = ET.SubElement(host, "cpu")
    _text(cpu, "arch", spec.arch)
    if spec.cpu_model:
        _text(cpu, "model", spec.cpu_model)
    if spec.cpu_vendor:
        _text(cpu, "vendor", spec.cpu_vendor)
    ET.SubElement(cpu, "topology", sockets=str(spec.sockets), dies="1",
                  cores=str(spec.cores), threads=str(spec.threads))
    for name in sorted(spec.cpu_features):
        ET.SubElement(cpu, "feature", name=name)
    for size in spec.page_sizes_kib:
        ET.SubElement(cpu, "pages", unit="KiB", size=str(size))
    if spec.numa_in_capabilities:
        cells = ET.SubElement(ET.SubElement(host, "topology"), "cells",
                              num=str(spec.numa_nodes))
        for node in range(spec.numa_nodes):
            _cell(cells, spec, node)
    for os_type in spec.guest_os_types:
        guest = ET.SubElement(caps, "guest")
        _text(guest, "os_type", os_type)
        arch = ET.SubElement(guest, "arch", name=spec.guest_arch_name)
        _text(arch, "wordsize", 64 if spec.guest_arch_name.endswith("64") else 32)
        _text(arch, "emulator", spec.emulator_path)
        for machine in spec.machines:
            _text(arch, "machine", machine.name, maxCpus="255")
            if machine.alias:
                _text(arch, "machine", machine.alias, canonical=machine.name, maxCpus="255")
        for domain_type in spec.domain_types:
            ET.SubElement(arch, "domain", type=domain_type)
    return _tostring(caps)


def domain_capabilities_xml(spec, machine, domain_type):
    """Domain capabilities of ``spec``'s guests on ``machine`` (a
    :class:`~.spec.MachineSpec`) for ``domain_type``, as QEMU hosts give
    them (only the parts nova-lite reads, and the elements around them)."""
    root = ET.Element("domainCapabilities")
    _text(root, "path", spec.emulator_path)
    _text(root, "domain", domain_type)
    _text(root, "machine", machine.name)
    _text(root, "arch", spec.guest_arch_name)
    ET.SubElement(root, "vcpu", max="255")
    devices = ET.SubElement(root, "devices")
    for device, enum, values in (("disk", "bus", machine.disk_buses),
                                 ("video", "modelType", machine.video_models)):
        element = ET.SubElement(devices, device, supported="yes" if values else "no")
        if values:
            listed = ET.SubElement(element, "enum", name=enum)
            for value in values:
                _text(listed, "value", value)
    return _tostring(root)


def baseline_cpu_xml(model, vendor, features):
    """``baselineCPU``'s answer: ``model`` required exactly, with ``features``."""
    cpu = ET.Element("cpu", mode="custom", match="exact")
    _text(cpu, "model", model, fallback="forbid")
    if vendor:
        _text(cpu, "vendor", vendor)
    for name in sorted(features):
        ET.SubElement(cpu, "feature", policy="require", name=name)
    return _tostring(cpu) + "\n"


def _cell(cells, spec, node):
    cell = ET.SubElement(cells, "cell", id=str(node))
    _text(cell, "memory", spec.cell_memory_kib, unit="KiB")
    for size, count in spec.cell_pages():
        _text(cell, "pages", count, unit="KiB", size=str(size))
    cpus = ET.SubElement(cell, "cpus", num=str(spec.cpus_per_node))
    for cpu_id in spec.node_cpus(node):
        if cpu_id not in spec.online:
            ET.SubElement(cpus, "cpu", id=str(cpu_id))  # libvirt: no topology when offline
            continue
        _node, socket_id, core_id, _thread = spec.cpu_location(cpu_id)
        ET.SubElement(cpus, "cpu", id=str(cpu_id), socket_id=str(socket_id), die_id="0",
                      core_id=str(core_id),
                      siblings=format_cpu_spec(spec.siblings(cpu_id) & spec.online))


def nodedev_name(address):
    """libvirt's node device name of a PCI address: ``pci_0000_81_00_0``."""
    return "pci_" + address.replace(":", "_").replace(".", "_")


def _address_parts(address):
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16)


def _address_element(parent, address):
    d, b, s, f = _address_parts(address)
    ET.SubElement(parent, "address", domain=f"0x{d:04x}", bus=f"0x{b:02x}",
                  slot=f"0x{s:02x}", function=f"0x{f:x}")


def nodedev_element(dev, parent=None):
    """``<device>`` of a PCI function (``parent`` is the PF of a VF)."""
    root = ET.Element("device")
    _text(root, "name", nodedev_name(dev.address))
    _text(root, "parent", nodedev_name(parent.address) if parent else "computer")
    cap = ET.SubElement(root, "capability", type="pci")
    for tag, value in zip(("domain", "bus", "slot", "function"), _address_parts(dev.address)):
        _text(cap, tag, value)
    vendor = parent.vendor_id if parent else dev.vendor_id
    _text(cap, "product", "", id=f"0x{dev.product_id}")
    _text(cap, "vendor", "", id=f"0x{vendor}")
    if parent is not None:
        _address_element(ET.SubElement(cap, "capability", type="phys_function"),
                         parent.address)
    elif dev.is_pf:
        vfs = ET.SubElement(cap, "capability", type="virt_functions",
                            maxCount=str(max(len(dev.vfs), 1)))
        for vf in dev.vfs:
            _address_element(vfs, vf.address)
    numa = parent.numa_node if parent else dev.numa_node
    if numa is not None:
        ET.SubElement(cap, "numa", node=str(numa))
    return root


def mdev_nodedev_name(mdev, gpu):
    """libvirt's (7.7 and later) name of a mediated device:
    ``mdev_<uuid>_<parent's address>``, ``-``, ``:`` and ``.`` as ``_``."""
    return "mdev_" + mdev.uuid.replace("-", "_") + "_" + \
        gpu.address.replace(":", "_").replace(".", "_")


def gpu_element(gpu):
    """``<device>`` of a GPU: a PCI device whose PCI capability holds an
    ``mdev_types`` capability, as libvirt describes one."""
    root = ET.Element("device")
    _text(root, "name", nodedev_name(gpu.address))
    _text(root, "parent", "computer")
    cap = ET.SubElement(root, "capability", type="pci")
    for tag, value in zip(("domain", "bus", "slot", "function"), _address_parts(gpu.address)):
        _text(cap, tag, value)
    _text(cap, "product", "", id=f"0x{gpu.product_id}")
    _text(cap, "vendor", "", id=f"0x{gpu.vendor_id}")
    if gpu.mdev_types:
        types = ET.SubElement(cap, "capability", type="mdev_types")
        for mdev_type in gpu.mdev_types:
            element = ET.SubElement(types, "type", id=mdev_type.type_id)
            if mdev_type.name:
                _text(element, "name", mdev_type.name)
            _text(element, "deviceAPI", mdev_type.device_api)
            _text(element, "availableInstances", mdev_type.available_instances)
    if gpu.numa_node is not None:
        ET.SubElement(cap, "numa", node=str(gpu.numa_node))
    return root


def mdev_element(mdev, gpu):
    """``<device>`` of a mediated device created on ``gpu``."""
    root = ET.Element("device")
    _text(root, "name", mdev_nodedev_name(mdev, gpu))
    _text(root, "parent", nodedev_name(gpu.address))
    cap = ET.SubElement(root, "capability", type="mdev")
    ET.SubElement(cap, "type", id=mdev.type_id)
    _text(cap, "uuid", mdev.uuid)
    ET.SubElement(cap, "iommuGroup", number=str(mdev.iommu_group))
    return root


def device_elements(spec):
    """``(element, parent name, caps)`` of every node device of ``spec``:
    PCI functions (PFs first), GPUs, then the mediated devices.  ``caps``
    are the capabilities a listing filter matches (``pci``,
    ``mdev_types``, ``mdev``)."""
    result = []
    for dev, parent in spec.pci_nodedev_specs():
        result.append((nodedev_element(dev, parent),
                       nodedev_name(parent.address) if parent else "computer", ("pci",)))
    for gpu in spec.gpus:
        caps = ("pci", "mdev_types") if gpu.mdev_types else ("pci",)
        result.append((gpu_element(gpu), "computer", caps))
    for gpu in spec.gpus:
        for mdev in gpu.mdevs:
            result.append((mdev_element(mdev, gpu), nodedev_name(gpu.address), ("mdev",)))
    return result


def device_xml(element):
    """XML text of a ``<device>`` element (as ``XMLDesc()`` gives it)."""
    return _tostring(element)


def nodedev_xml(dev, parent=None):
    """Node device XML text of a PCI function."""
    return _tostring(nodedev_element(dev, parent))


def guest_element(guest, domain_type="test", runstate=False):
    """``<domain>`` of a guest; ``runstate`` adds the test driver's state tag."""
    dom = ET.Element("domain", type=domain_type)
    _text(dom, "name", guest.name)
    _text(dom, "uuid", guest.uuid)
    _text(dom, "memory", guest.memory_mib * 1024, unit="KiB")
    _text(dom, "currentMemory", guest.memory_mib * 1024, unit="KiB")
    _text(dom, "vcpu", guest.vcpus)
    _text(ET.SubElement(dom, "os"), "type", "hvm")
    devices = ET.SubElement(dom, "devices")
    for disk in guest.disks:
        el = ET.SubElement(devices, "disk", type="file", device="disk")
        ET.SubElement(el, "driver", name="qemu", type=disk.format)
        ET.SubElement(el, "source", file=disk.path)
        ET.SubElement(el, "target", dev=disk.target, bus="virtio")
    if runstate and not guest.running:
        _text(dom, f"{{{TEST_NS}}}runstate", SHUTOFF)
    return dom


def guest_xml(guest, domain_type="kvm"):
    """Domain XML text of a guest."""
    return _tostring(guest_element(guest, domain_type))


def node_xml(spec):
    """A ``test:///<file>`` node file describing ``spec``.

    The test driver reads the CPU topology, memory, guests (with their
    run state) and node devices from it; see the tests' list of what it
    cannot express.
    """
    ET.register_namespace("test", TEST_NS)
    node = ET.Element("node")
    cpu = ET.SubElement(node, "cpu")
    for tag, value in (("nodes", spec.numa_nodes), ("sockets", spec.sockets),
                       ("cores", spec.cores), ("threads", spec.threads),
                       ("active", len(spec.online)), ("mhz", spec.cpu_mhz),
                       ("model", spec.arch)):
        _text(cpu, tag, value)
    _text(node, "memory", spec.memory_mib * 1024)
    for guest in spec.guests:
        node.append(guest_element(guest, "test", runstate=True))
    for element, _parent, _caps in device_elements(spec):
        node.append(element)
    return _tostring(node)
