"""Domain XML for an instance, and the files its disks live in.

A guest gets ``flavor.vcpus`` vCPUs and ``flavor.memory_mb`` MiB (written
in KiB), and one sparse raw file per non-zero disk of its flavor under
``<instances_path>/<uuid>/``: ``disk`` (root_gb GiB), ``disk.local``
(ephemeral_gb GiB) and ``disk.swap`` (swap MiB).  Sparse files cost no
space up front, so each counts fully in the disk over-commit.
"""

import os
import xml.etree.ElementTree as ET

import attrs

GiB = 1024 ** 3
MiB = 1024 ** 2
METADATA_NS = "https://nova-lite.invalid/xmlns/libvirt/instance/1.0"
ET.register_namespace("nova-lite", METADATA_NS)


def domain_name(instance):
    """The libvirt domain name of an instance: ``instance-<uuid>``."""
    return f"instance-{instance.uuid}"


def instance_dir(instances_path, instance):
    """Directory holding an instance's disk files."""
    return os.path.join(instances_path, instance.uuid)


@attrs.frozen
class DiskFile:
    """One disk to create: file ``name`` of ``size_bytes``, guest ``target``."""

    name: str
    target: str
    size_bytes: int


def disk_files(flavor):
    """The disk files a flavor asks for, in target order (vda, vdb, ...)."""
    wanted = [("disk", flavor.root_gb * GiB), ("disk.local", flavor.ephemeral_gb * GiB),
              ("disk.swap", flavor.swap * MiB)]
    present = [(name, size) for name, size in wanted if size > 0]
    return [DiskFile(name=name, target="vd" + chr(ord("a") + i), size_bytes=size)
            for i, (name, size) in enumerate(present)]


def create_disk_files(directory, files):
    """Create each disk as a sparse file (no blocks allocated)."""
    os.makedirs(directory, exist_ok=True)
    for disk in files:
        with open(os.path.join(directory, disk.name), "wb") as handle:
            handle.truncate(disk.size_bytes)


def domain_xml(instance, virt_type, directory):
    """The ``<domain>`` XML text for ``instance``.

    :param virt_type: libvirt domain type (``kvm``, ``qemu``, ...).
    :param directory: where the instance's disk files are.
    """
    flavor = instance.flavor
    dom = ET.Element("domain", type=virt_type)
    ET.SubElement(dom, "name").text = domain_name(instance)
    ET.SubElement(dom, "uuid").text = instance.uuid
    if instance.display_name:
        ET.SubElement(dom, "title").text = instance.display_name
    meta = ET.SubElement(ET.SubElement(dom, "metadata"), f"{{{METADATA_NS}}}instance")
    ET.SubElement(meta, f"{{{METADATA_NS}}}flavor", name=flavor.name)
    ET.SubElement(meta, f"{{{METADATA_NS}}}project", id=instance.project_id or "")
    ET.SubElement(dom, "memory", unit="KiB").text = str(flavor.memory_mb * 1024)
    ET.SubElement(dom, "vcpu").text = str(flavor.vcpus)
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type").text = "hvm"
    ET.SubElement(os_el, "boot", dev="hd")
    for tag, action in (("on_poweroff", "destroy"), ("on_reboot", "restart"),
                        ("on_crash", "destroy")):
        ET.SubElement(dom, tag).text = action
    devices = ET.SubElement(dom, "devices")
    for disk in disk_files(flavor):
        el = ET.SubElement(devices, "disk", type="file", device="disk")
        ET.SubElement(el, "driver", name="qemu", type="raw")
        ET.SubElement(el, "source", file=os.path.join(directory, disk.name))
        ET.SubElement(el, "target", dev=disk.target, bus="virtio")
    return ET.tostring(dom, encoding="unicode")
