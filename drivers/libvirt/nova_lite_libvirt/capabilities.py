"""Parsing libvirt's host capabilities XML (``virConnect.getCapabilities()``).

Only what the host model needs: the host CPU (arch, model, vendor,
topology, features), the NUMA cells (CPUs with socket/core/sibling ids,
memory in KiB, pages) and the guest types (arch, OS type, domain types).
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
class CapsGuest:
    """A guest type the hypervisor runs: arch, OS type, domain types."""

    arch: str
    os_type: str
    domain_types: tuple = ()


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


def parse_capabilities(xml_text):
    """Parse capabilities XML text into :class:`HostCapabilities`.

    :raises ValueError: if the text is not XML or not ``<capabilities>``.
    """
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"capabilities XML does not parse: {exc}") from None
    if root.tag != "capabilities":
        raise ValueError(f"expected <capabilities>, got <{root.tag}>")
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


def _guest(element):
    arch = element.find("arch")
    domains = tuple(d.get("type") for d in arch.findall("domain")) if arch is not None else ()
    return CapsGuest(arch=canonical_arch(arch.get("name") if arch is not None else ""),
                     os_type=_VM_MODE_ALIASES.get(
                         (element.findtext("os_type") or "").strip().lower(),
                         (element.findtext("os_type") or "").strip().lower()),
                     domain_types=tuple(_HV_TYPE_ALIASES.get(d.lower(), d.lower())
                                        for d in domains if d))
