"""Parsing libvirt's host capabilities XML (``virConnect.getCapabilities()``).

Only what the host model needs: the host CPU (arch, model, vendor,
topology, features), the NUMA cells (CPUs with socket/core/sibling ids,
memory in KiB, pages) and the guest types (arch, OS type, domain types,
with each domain type's emulator and machine type aliases).  Also the
host CPU as a ``<cpu>`` definition for ``baselineCPU``
(:func:`cpu_definition_xml`), and the features of the CPU definition that
call returns (:func:`parse_cpu_features`).
"""

import xml.etree.ElementTree as ET

import attrs

from nova_lite.hardware import parse_cpu_spec

# Names Nova canonicalises; anything else is lower-cased and kept.
_ARCH_ALIASES = {"i386": "i686", "i486": "i686", "i586": "i686", "x86_32": "i686",
                 "amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
_VM_MODE_ALIASES = {"hv": "hvm", "pv": "xen", "xenpv": "xen", "baremetal": "hvm"}
_HV_TYPE_ALIASES = {"xapi": "xen"}


def canonical_arch(name):
    """Canonical architecture name (``"amd64"`` -> ``"x86_64"``)."""
    name = (name or "").strip().lower()
    return _ARCH_ALIASES.get(name, name)


@attrs.frozen
class CapsCpu:
    """One CPU of a NUMA cell; ``socket_id``/``core_id`` are None when offline."""

    id: int
    socket_id: int = None
    core_id: int = None
    siblings: frozenset = frozenset()


@attrs.frozen
class CapsCell:
    """One NUMA cell: ``memory_kib`` KiB, ``pages`` ((size KiB, count), ...)."""

    id: int
    memory_kib: int
    cpus: tuple = ()
    pages: tuple = ()


@attrs.frozen
class CapsDomain:
    """A domain type of a guest arch: its emulator binary ("" when the XML
    names none) and its machine type aliases (``pc``, ``q35``: the
    ``<machine canonical=...>`` names), in XML order."""

    type: str
    emulator: str = ""
    machine_aliases: tuple = ()


@attrs.frozen
class CapsGuest:
    """A guest type the hypervisor runs: arch, OS type, domain types.

    ``domains`` holds a :class:`CapsDomain` per domain type, with the
    arch's emulator and machines unless the ``<domain>`` has its own.
    """

    arch: str
    os_type: str
    domain_types: tuple = ()
    domains: tuple = ()

    def domain(self, domain_type):
        """The :class:`CapsDomain` of ``domain_type``, or None."""
        return next((d for d in self.domains if d.type == domain_type), None)


@attrs.frozen
class HostCapabilities:
    """The parts of the capabilities XML the driver uses.

    ``sockets``/``cores``/``threads`` are None when the XML has no
    ``<topology>`` for the host CPU (libvirt's test driver, for one).
    """

    arch: str = ""
    model: str = ""
    vendor: str = ""
    sockets: int = None
    cores: int = None
    threads: int = None
    features: frozenset = frozenset()
    cells: tuple = ()
    guests: tuple = ()


def xml_root(xml_text, tag, what):
    """The root element of ``xml_text``, which must be ``<tag>``.

    :raises ValueError: naming ``what`` if the text is not XML, or its root
        is another element.
    """
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"{what} does not parse: {exc}") from None
    if root.tag != tag:
        raise ValueError(f"expected <{tag}>, got <{root.tag}>")
    return root


def parse_capabilities(xml_text):
    """Parse capabilities XML text into :class:`HostCapabilities`.

    :raises ValueError: if the text is not XML or not ``<capabilities>``.
    """
    root = xml_root(xml_text, "capabilities", "capabilities XML")
    cpu = root.find("./host/cpu")
    fields = {}
    if cpu is not None:
        fields.update(arch=canonical_arch(cpu.findtext("arch")),
                      model=(cpu.findtext("model") or "").strip(),
                      vendor=(cpu.findtext("vendor") or "").strip(),
                      features=_features(cpu))
        topo = cpu.find("topology")
        if topo is not None:
            fields.update(sockets=int(topo.get("sockets", 1)), cores=int(topo.get("cores", 1)),
                          threads=int(topo.get("threads", 1)))
    cells = tuple(_cell(c) for c in root.findall("./host/topology/cells/cell"))
    guests = tuple(_guest(g) for g in root.findall("./guest"))
    return HostCapabilities(cells=cells, guests=guests, **fields)


def _features(cpu):
    # QEMU hosts list <feature name='vmx'/>; some drivers (the test driver)
    # list <features><pae/></features> instead.  Both count.
    names = {f.get("name") for f in cpu.findall("feature") if f.get("name")}
    for group in cpu.findall("features"):
        names.update(child.tag for child in group)
    return frozenset(names)


def _kib(element):
    value = int(element.text.strip())
    unit = (element.get("unit") or "KiB").lower()
    factors = {"b": 1 / 1024, "bytes": 1 / 1024, "kib": 1, "k": 1, "mib": 1024, "m": 1024,
               "gib": 1024 ** 2, "g": 1024 ** 2}
    if unit not in factors:
        raise ValueError(f"unknown memory unit {element.get('unit')!r}")
    return int(value * factors[unit])


def _cell(element):
    memory = element.find("memory")
    cpus = []
    for c in element.findall("./cpus/cpu"):
        siblings = c.get("siblings")
        cpus.append(CapsCpu(
            id=int(c.get("id")),
            socket_id=_int_or_none(c.get("socket_id")),
            core_id=_int_or_none(c.get("core_id")),
            siblings=frozenset(parse_cpu_spec(siblings)) if siblings else frozenset()))
    pages = tuple((int(p.get("size")), int((p.text or "0").strip() or 0))
                  for p in element.findall("pages"))
    return CapsCell(id=int(element.get("id")),
                    memory_kib=_kib(memory) if memory is not None else 0,
                    cpus=tuple(cpus), pages=pages)


def _int_or_none(text):
    return None if text is None else int(text)


def _machine_aliases(element):
    return tuple(m.text.strip() for m in element.findall("machine")
                 if m.get("canonical") and m.text and m.text.strip())


def _guest(element):
    arch = element.find("arch")
    if arch is None:
        arch = ET.Element("arch")
    emulator = (arch.findtext("emulator") or "").strip()
    aliases = _machine_aliases(arch)
    domain_types, domains = [], []
    for d in arch.findall("domain"):
        if not d.get("type"):
            continue
        domain_type = _HV_TYPE_ALIASES.get(d.get("type").lower(), d.get("type").lower())
        domain_types.append(domain_type)
        # A <domain> naming its own emulator or machines overrides the arch's.
        domains.append(CapsDomain(
            type=domain_type, emulator=(d.findtext("emulator") or "").strip() or emulator,
            machine_aliases=_machine_aliases(d) if d.find("machine") is not None
            else aliases))
    os_type = (element.findtext("os_type") or "").strip().lower()
    return CapsGuest(arch=canonical_arch(arch.get("name")),
                     os_type=_VM_MODE_ALIASES.get(os_type, os_type),
                     domain_types=tuple(domain_types), domains=tuple(domains))


def cpu_definition_xml(caps):
    """The host CPU of ``caps`` (:class:`HostCapabilities`) as a ``<cpu>``
    definition, the input ``virConnect.baselineCPU`` takes."""
    cpu = ET.Element("cpu")
    for tag, value in (("arch", caps.arch), ("model", caps.model), ("vendor", caps.vendor)):
        if value:
            ET.SubElement(cpu, tag).text = value
    for name in sorted(caps.features):
        ET.SubElement(cpu, "feature", name=name)
    return ET.tostring(cpu, encoding="unicode")


def parse_cpu_features(xml_text):
    """Feature names of a ``<cpu>`` definition (``baselineCPU``'s answer),
    leaving out those with policy ``disable`` or ``forbid``.

    :raises ValueError: if the text is not XML or not ``<cpu>``.
    """
    root = xml_root(xml_text, "cpu", "CPU definition")
    return frozenset(f.get("name") for f in root.findall("feature")
                     if f.get("name") and f.get("policy") not in ("disable", "forbid"))
