"""Fake domains: the state a hypervisor keeps, and the ``virDomain`` handle.

Shapes and units follow libvirt-python: ``info()`` is ``[state, max memory
KiB, memory KiB, vCPUs, CPU time ns]``; ``ID()`` is -1 when shut off;
operations on a domain that is gone raise ``VIR_ERR_NO_DOMAIN``.
"""

import uuid as uuidlib
import xml.etree.ElementTree as ET

from nova_lite_libvirt.testing.fakelibvirt import constants as c
from nova_lite_libvirt.testing.fakelibvirt.errors import make_error

_KIB_PER_UNIT = {"b": 1 / 1024, "bytes": 1 / 1024, "k": 1, "kib": 1, "kb": 1000 / 1024,
                 "m": 1024, "mib": 1024, "mb": 1000 ** 2 / 1024, "g": 1024 ** 2,
                 "gib": 1024 ** 2, "gb": 1000 ** 3 / 1024}


def _memory_kib(element):
    unit = (element.get("unit") or "KiB").lower()
    if unit not in _KIB_PER_UNIT:
        raise make_error(c.VIR_ERR_XML_ERROR, f"XML error: unknown memory unit '{unit}'",
                         c.VIR_FROM_DOMAIN)
    return int(int(element.text.strip()) * _KIB_PER_UNIT[unit])


class DomainRecord:
    """What the fake hypervisor knows about one domain."""

    def __init__(self, xml_text):
        try:
            root = ET.fromstring(xml_text)
        except ET.ParseError as exc:
            raise make_error(c.VIR_ERR_XML_ERROR, f"(domain_definition): {exc}",
                             c.VIR_FROM_DOMAIN) from None
        name = (root.findtext("name") or "").strip()
        if not name:
            raise make_error(c.VIR_ERR_NO_NAME, "missing name information", c.VIR_FROM_DOMAIN)
        memory = root.find("memory")
        if memory is None:
            raise make_error(c.VIR_ERR_XML_ERROR, "XML error: Memory size must be specified "
                             "via <memory> or in the <numa> configuration", c.VIR_FROM_DOMAIN)
        raw_uuid = (root.findtext("uuid") or "").strip()
        try:
            self.uuid = str(uuidlib.UUID(raw_uuid)) if raw_uuid else str(uuidlib.uuid4())
        except ValueError:
            raise make_error(c.VIR_ERR_INTERNAL_ERROR, "internal error: malformed uuid element",
                             c.VIR_FROM_DOMAIN) from None
        self.name = name
        self.max_memory_kib = _memory_kib(memory)
        current = root.find("currentMemory")
        self.memory_kib = _memory_kib(current) if current is not None else self.max_memory_kib
        self.vcpus = int((root.findtext("vcpu") or "1").strip())
        self.root = root
        self.state = c.VIR_DOMAIN_SHUTOFF
        self.reason = c.VIR_DOMAIN_SHUTOFF_UNKNOWN
        self.id = -1
        self.persistent = True
        self.cpu_time_ns = 0

    @property
    def active(self):
        return self.state != c.VIR_DOMAIN_SHUTOFF

    def xml(self):
        """The domain XML with uuid, currentMemory and (if running) id filled in."""
        root = ET.fromstring(ET.tostring(self.root, encoding="unicode"))
        if root.find("uuid") is None:
            el = ET.Element("uuid")
            el.text = self.uuid
            root.insert(1, el)
        if root.find("currentMemory") is None:
            el = ET.Element("currentMemory", unit="KiB")
            el.text = str(self.memory_kib)
            root.insert(list(root).index(root.find("memory")) + 1, el)
        if self.active:
            root.set("id", str(self.id))
        else:
            root.attrib.pop("id", None)
        ET.indent(root)
        return ET.tostring(root, encoding="unicode")


class virDomain:  # noqa: N801  (libvirt-python's name)
    """A handle on a domain of a fake connection."""

    def __init__(self, conn, uuid):
        self._conn = conn
        self._uuid = uuid

    def _record(self):
        return self._conn._hypervisor.domain(self._uuid)

    def name(self):
        return self._record().name

    def UUIDString(self):  # noqa: N802
        return self._record().uuid

    def ID(self):  # noqa: N802
        return self._record().id

    def info(self):
        rec = self._record()
        return [rec.state, rec.max_memory_kib, rec.memory_kib, rec.vcpus, rec.cpu_time_ns]

    def state(self, flags=0):
        rec = self._record()
        return [rec.state, rec.reason]

    def isActive(self):  # noqa: N802
        return int(self._record().active)

    def isPersistent(self):  # noqa: N802
        return int(self._record().persistent)

    def maxMemory(self):  # noqa: N802
        return self._record().max_memory_kib

    def XMLDesc(self, flags=0):  # noqa: N802
        return self._record().xml()

    def create(self):
        return self.createWithFlags(0)

    def createWithFlags(self, flags=0):  # noqa: N802
        self._conn._hypervisor.start(self._uuid)
        return 0

    def destroy(self):
        return self.destroyFlags(0)

    def destroyFlags(self, flags=0):  # noqa: N802
        self._conn._hypervisor.stop(self._uuid)
        return 0

    def undefine(self):
        return self.undefineFlags(0)

    def undefineFlags(self, flags=0):  # noqa: N802
        self._conn._hypervisor.undefine(self._uuid)
        return 0

    def __repr__(self):
        return f"<fakelibvirt.virDomain {self._uuid}>"
