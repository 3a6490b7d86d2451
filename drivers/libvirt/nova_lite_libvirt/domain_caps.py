"""Parsing libvirt's domain capabilities XML (``virConnect.getDomainCapabilities()``).

Domain capabilities say what a guest of one (emulator, arch, machine type,
domain type) can be given.  Only what the traits need is read: the disk
buses and the video models offered, with the arch and machine type they
are for.
"""


import attrs

from nova_lite_libvirt.capabilities import canonical_arch, xml_root


@attrs.frozen
class DomainCapabilities:
    """One answer of ``getDomainCapabilities``.

    ``machine`` is the machine type libvirt resolved (``pc-i440fx-8.2``
    when asked for ``pc``); ``disk_buses`` and ``video_models`` are the
    values libvirt lists (empty when the device is not supported).
    """

    arch: str
    machine: str = ""
    domain: str = ""
    path: str = ""
    disk_buses: frozenset = frozenset()
    video_models: frozenset = frozenset()


def _enum(root, device, name):
    element = root.find(f"./devices/{device}")
    if element is None or element.get("supported") == "no":
        return frozenset()
    return frozenset(v.text.strip() for v in element.findall(f"./enum[@name='{name}']/value")
                     if v.text and v.text.strip())


def parse_domain_capabilities(xml_text):
    """Parse domain capabilities XML text into :class:`DomainCapabilities`.

    :raises ValueError: if the text is not XML or not ``<domainCapabilities>``.
    """
    root = xml_root(xml_text, "domainCapabilities", "domain capabilities XML")
    return DomainCapabilities(
        arch=canonical_arch(root.findtext("arch")),
        machine=(root.findtext("machine") or "").strip(),
        domain=(root.findtext("domain") or "").strip().lower(),
        path=(root.findtext("path") or "").strip(),
        disk_buses=_enum(root, "disk", "bus"),
        video_models=_enum(root, "video", "modelType"))
