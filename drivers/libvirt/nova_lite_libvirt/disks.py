"""Guest disk over-commit: how much more the guests' disks may still grow.

For every file-backed disk of every guest (running or shut off), the
over-commit is ``virtual size - allocated size`` in bytes, never negative:

- virtual size: for ``qcow2`` the size recorded in the image header; for
  any other format (``raw``) the file's apparent size;
- allocated size: the blocks the file occupies (``st_blocks * 512``).

The format is the one the domain XML declares (``<driver type=...>``),
never sniffed from the file: a guest can write a qcow2 header into its raw
disk.  Block devices and network/volume disks are not over-committed.  A
disk that has vanished or cannot be read is logged and skipped.
"""

import errno
import logging
import os
import struct
import xml.etree.ElementTree as ET

import attrs

LOG = logging.getLogger(__name__)

QCOW2_MAGIC = b"QFI\xfb"
_QCOW2_HEADER = struct.Struct(">4sIQIIQ")  # magic, version, backing off/len, cluster bits, size
_SKIPPED_ERRNOS = {errno.ENOENT, errno.ESTALE, errno.EACCES, errno.EPERM}


@attrs.frozen
class GuestDisk:
    """A file-backed guest disk: target device, host path, image format."""

    target: str
    path: str
    format: str = "raw"


def file_disks(domain_xml):
    """The file-backed disks (``<disk type='file' device='disk'>``) of a domain."""
    root = ET.fromstring(domain_xml)
    disks = []
    for disk in root.findall("./devices/disk"):
        if disk.get("type") != "file" or disk.get("device", "disk") != "disk":
            continue
        source = disk.find("source")
        path = source.get("file") if source is not None else None
        if not path:
            continue
        driver = disk.find("driver")
        fmt = (driver.get("type") if driver is not None else None) or "raw"
        target = disk.find("target")
        disks.append(GuestDisk(target=target.get("dev") if target is not None else "",
                               path=path, format=fmt.lower()))
    return disks


def virtual_size(path, fmt):
    """Virtual size of a disk image in bytes.

    :raises OSError: if the file cannot be opened or stat'ed.
    :raises ValueError: if a ``qcow2`` file has no valid header.
    """
    if fmt != "qcow2":
        return os.stat(path).st_size
    with open(path, "rb") as handle:
        header = handle.read(_QCOW2_HEADER.size)
    if len(header) < _QCOW2_HEADER.size:
        raise ValueError(f"{path}: too short for a qcow2 header")
    magic, version, _off, _len, _bits, size = _QCOW2_HEADER.unpack(header)
    if magic != QCOW2_MAGIC or version not in (2, 3):
        raise ValueError(f"{path}: not a qcow2 image (magic {magic!r}, version {version})")
    return size


def allocated_size(path):
    """Bytes the file occupies on its filesystem (``st_blocks * 512``)."""
    return os.stat(path).st_blocks * 512


def disk_overcommit(disk):
    """Over-commit of one disk in bytes (``virtual - allocated``, at least 0)."""
    return max(0, virtual_size(disk.path, disk.format) - allocated_size(disk.path))


def overcommit_total(guests):
    """Sum of the over-commit of every file-backed disk, in bytes.

    :param guests: iterable of ``(guest name, domain XML)``.
    Vanished or unreadable disks, and images with a bad header, are logged
    at WARNING and skipped; other I/O errors propagate.
    """
    total = 0
    for name, xml in guests:
        for disk in file_disks(xml):
            try:
                total += disk_overcommit(disk)
            except OSError as exc:
                if exc.errno not in _SKIPPED_ERRNOS:
                    raise
                LOG.warning("Skipping disk %s (%s) of guest %s in disk_available_least: %s",
                            disk.target, disk.path, name,
                            "it has vanished" if exc.errno in (errno.ENOENT, errno.ESTALE)
                            else f"it cannot be read ({exc.strerror})")
            except ValueError as exc:
                LOG.warning("Skipping disk %s of guest %s in disk_available_least: %s",
                            disk.target, name, exc)
    return total
