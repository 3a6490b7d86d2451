"""PCI aliases: the operator's names for kinds of PCI device, and flavors that ask for them.

As in Nova, ``[pci] alias`` names a kind of device in JSON (Nova's keys)::

    [pci]
    alias = {"name": "a1", "vendor_id": "10de", "product_id": "1db4",
             "device_type": "type-PCI", "numa_policy": "legacy"}

and a flavor asks for devices of named kinds with the extra spec
``pci_passthrough:alias=<name>:<count>[,<name>:<count>...]``.  Nova repeats
the option once per alias; nova-lite's configuration files hold each option
once, so ``alias`` holds one JSON object or a JSON list of them (a value
may continue on indented lines).  ``name``, ``vendor_id`` and
``product_id`` are required (4 hex digits each for the ids); ``device_type``
(``type-PCI``, ``type-PF`` or ``type-VF``) and ``numa_policy`` (``legacy``,
``required`` or ``preferred``; default ``legacy``) are optional, and so
are, as in Nova, ``resource_class`` (only devices counted in that class
serve the alias: the device's ``resource_class``, else
``CUSTOM_PCI_<VENDOR>_<PRODUCT>``; a bare name is normalised as Nova does)
and ``traits`` (a comma-separated list of trait names every device serving
the alias has).  Nova ORs
several aliases of one name; nova-lite takes one device kind per name and
refuses a second with the same name.
"""

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from nova_lite import validators as v
from nova_lite.exception import InvalidInput
from nova_lite.host_topology import PciDevice
from nova_lite.objects import PCI_NUMA_POLICIES, PciRequest
from nova_lite.pci_providers import device_class
from nova_lite.resources import normalize_resource_class
from nova_lite.traits import trait_set

#: The extra spec a flavor asks for aliased devices with.
EXTRA_SPEC = "pci_passthrough:alias"
#: The device types an alias may name (Nova's: no vDPA through an alias).
ALIAS_DEVICE_TYPES = ("type-PCI", "type-PF", "type-VF")
_HEX4 = re.compile(r"^[0-9a-fA-F]{4}$")
_KEYS = frozenset({"name", "vendor_id", "product_id", "device_type", "numa_policy",
                   "resource_class", "traits"})


@attrs.frozen
class PciAlias:
    """One kind of PCI device an operator names: vendor and product ids (4
    hex digits, lower case), optionally a device type, and the NUMA policy
    of the devices a flavor asks for by this name; optionally the resource
    class and traits those devices have."""

    name: str = attrs.field(validator=v.name())
    vendor_id: str
    product_id: str
    device_type: str | None = None
    numa_policy: str = "legacy"
    resource_class: str | None = None
    traits: frozenset[str] = frozenset()

    def matches(self, device: PciDevice) -> bool:
        """True if ``device`` is of this kind."""
        return (device.vendor_id.lower() == self.vendor_id
                and device.product_id.lower() == self.product_id
                and (self.device_type is None or device.dev_type == self.device_type)
                and (self.resource_class is None
                     or device_class(device) == self.resource_class)
                and device.traits >= self.traits)

    def request(self, count: int) -> PciRequest:
        """A PciRequest for ``count`` devices of this kind."""
        return PciRequest(count=count, vendor_id=self.vendor_id, product_id=self.product_id,
                          alias_name=self.name, numa_policy=self.numa_policy,
                          dev_type=self.device_type, resource_class=self.resource_class,
                          traits=self.traits)


def _alias(spec: Any, where: str) -> PciAlias:
    if not isinstance(spec, dict):
        raise InvalidInput(f"{where}: an alias must be a JSON object, got {spec!r:.80}")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise InvalidInput(f"{where}: unknown key(s) {', '.join(unknown)}; an alias has "
                           f"{', '.join(sorted(_KEYS))}")
    for key in ("name", "vendor_id", "product_id"):
        if key not in spec:
            raise InvalidInput(f"{where}: {key!r} is required")
    for key, value in spec.items():
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: {key!r} must be a string, got {value!r:.60}")
    name = spec["name"]
    where = f"{where} (alias {name!r})"
    for key in ("vendor_id", "product_id"):
        if not _HEX4.match(spec[key]):
            raise InvalidInput(f"{where}: {key!r} must be 4 hex digits, got {spec[key]!r}")
    device_type = spec.get("device_type")
    if device_type is not None and device_type not in ALIAS_DEVICE_TYPES:
        raise InvalidInput(f"{where}: 'device_type' must be one of "
                           f"{', '.join(ALIAS_DEVICE_TYPES)}, got {device_type!r}")
    policy = spec.get("numa_policy", "legacy")
    if policy not in PCI_NUMA_POLICIES:
        raise InvalidInput(f"{where}: 'numa_policy' must be one of "
                           f"{', '.join(sorted(PCI_NUMA_POLICIES))}, got {policy!r}")
    try:
        rc = spec.get("resource_class")
        traits = [t.strip() for t in spec.get("traits", "").split(",") if t.strip()]
        return PciAlias(name=name, vendor_id=spec["vendor_id"].lower(),
                        product_id=spec["product_id"].lower(), device_type=device_type,
                        numa_policy=policy,
                        resource_class=None if rc is None else normalize_resource_class(rc),
                        traits=trait_set(traits, "'traits'"))
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def parse_aliases(text: str, where: str = "[pci] alias") -> Mapping[str, PciAlias]:
    """``{name: PciAlias}`` from the option's text (empty: none).

    :raises InvalidInput: naming ``where`` and what is wrong: not JSON, a
        missing or unknown key, a bad id, type or policy, a name given twice.
    """
    if not text or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{where}: not JSON: {exc}") from None
    specs = data if isinstance(data, list) else [data]
    found: dict[str, PciAlias] = {}
    for index, spec in enumerate(specs):
        alias = _alias(spec, f"{where}[{index}]" if isinstance(data, list) else where)
        if alias.name in found:
            raise InvalidInput(f"{where}: alias {alias.name!r} is given twice (nova-lite "
                               "takes one device kind per alias name)")
        found[alias.name] = alias
    return found


def flavor_pci_requests(extra_specs: Mapping[str, str], aliases: Mapping[str, PciAlias],
                        where: str = "flavor") -> tuple[PciRequest, ...]:
    """The PciRequest records of a flavor's ``pci_passthrough:alias`` spec.

    :param extra_specs: the flavor's extra specs.
    :param aliases: the configured aliases (:func:`parse_aliases`).
    :param where: names the flavor in an error.
    :returns: one request per ``name:count`` item, in order; () without the spec.
    :raises InvalidInput: for a malformed item, a count that is not a
        positive integer, or a name no alias has, naming the spec.
    """
    raw = extra_specs.get(EXTRA_SPEC)
    if raw is None:
        return ()
    spec = f"{where} extra spec {EXTRA_SPEC}={raw!r}"
    requests = []
    for item in str(raw).split(","):
        name, sep, count = (part.strip() for part in item.partition(":"))
        if not sep or not name:
            raise InvalidInput(f"{spec}: each item must be <alias name>:<count>, got "
                               f"{item.strip()!r}")
        if not count.isdigit() or int(count) < 1:
            raise InvalidInput(f"{spec}: the count of {name!r} must be a positive integer, "
                               f"got {count!r}")
        alias = aliases.get(name)
        if alias is None:
            known = ", ".join(sorted(aliases)) or "none"
            raise InvalidInput(f"{spec}: no PCI alias {name!r} in [pci] alias (known: "
                               f"{known})")
        requests.append(alias.request(int(count)))
    return tuple(requests)


__all__ = ["EXTRA_SPEC", "ALIAS_DEVICE_TYPES", "PciAlias", "parse_aliases",
           "flavor_pci_requests"]
