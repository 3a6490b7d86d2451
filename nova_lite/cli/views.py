"""Plain-data views of compute nodes for the commands (JSON-serialisable dicts).

- :func:`inventory_rows`: per resource class, the effective total,
  reserved, ratio, capacity, used, free (never negative) and over (what
  is held beyond capacity).
- :func:`source_rows`: per resource class, the detected (driver report),
  configured (settings, with Nova's option names) and effective values of
  total, reserved, allocation ratio and used, side by side.
"""

import math
from typing import Any

import attrs

from nova_lite import reports
from nova_lite.cli.output import ratio_number
from nova_lite.conf import Settings
from nova_lite.hardware import parse_cpu_spec
from nova_lite.objects import ComputeNode

#: resource class -> (reserved option, ratio kind) in Settings.
_OPTIONS = {
    "VCPU": ("reserved_host_cpus", "cpu"),
    "MEMORY_MB": ("reserved_host_memory_mb", "ram"),
    "DISK_GB": ("reserved_host_disk_mb", "disk"),
}
_HYPERVISOR_USED = {"VCPU": "vcpus_used", "MEMORY_MB": "memory_mb_used",
                    "DISK_GB": "local_gb_used"}


def inventory_rows(node: ComputeNode) -> list[dict[str, Any]]:
    """``[{resource_class, total, reserved, allocation_ratio, capacity, used, free, over}]``.

    ``capacity``, ``free`` and ``over`` are the node's (:meth:`ComputeNode.capacity`
    counts the driver's reserved units that are in use once).
    """
    rows: list[dict[str, Any]] = []
    for rc, inv in sorted(node.inventories.items()):
        rows.append({
            "resource_class": rc, "total": inv.total, "reserved": inv.reserved,
            "allocation_ratio": ratio_number(inv.allocation_ratio),
            "capacity": node.capacity(rc), "used": node.used(rc), "free": node.free(rc),
            "over": node.over(rc), "min_unit": inv.min_unit, "max_unit": inv.max_unit,
            "step_size": inv.step_size,
        })
    for rc in sorted(set(node.usage) - set(node.inventories)):
        rows.append({"resource_class": rc, "total": 0, "reserved": 0, "allocation_ratio": None,
                     "capacity": 0, "used": node.used(rc), "free": node.free(rc),
                     "over": node.over(rc), "min_unit": None, "max_unit": None, "step_size": None})
    return rows


def _row(rc: str, quantity: str, detected: Any, configured: Any, option: str | None,
         effective: Any) -> dict[str, Any]:
    return {"resource_class": rc, "quantity": quantity, "detected": detected,
            "configured": configured, "option": option, "effective": effective}


def _configured_total(rc: str, settings: Settings) -> tuple[int | None, str | None]:
    if rc == "VCPU":
        for option in ("cpu_shared_set", "vcpu_pin_set"):
            spec = getattr(settings, option)
            if spec:
                return len(parse_cpu_spec(spec)), f"{option} = {spec}"
    if rc == "PCPU" and settings.cpu_dedicated_set:
        spec = settings.cpu_dedicated_set
        return len(parse_cpu_spec(spec)), f"cpu_dedicated_set = {spec}"
    return None, None


def _configured_reserved(rc: str, settings: Settings) -> tuple[int | None, str | None]:
    option = _OPTIONS.get(rc, (None, None))[0]
    if option is None:
        return None, None
    value = getattr(settings, option)
    if rc == "DISK_GB":
        return math.ceil(value / 1024), f"{option} = {value} MB, rounded up to GB"
    return value, option


def _configured_ratio(rc: str, settings: Settings) -> tuple[float | None, str | None]:
    kind = _OPTIONS.get(rc, (None, None))[1]
    if kind is None:
        return None, None
    explicit = getattr(settings, f"{kind}_allocation_ratio")
    if explicit is not None:
        return ratio_number(settings.allocation_ratio(kind)), f"{kind}_allocation_ratio"
    return (ratio_number(settings.allocation_ratio(kind)),
            f"initial_{kind}_allocation_ratio; {kind}_allocation_ratio unset")


def source_rows(node: ComputeNode, settings: Settings) -> list[dict[str, Any]]:
    """Detected, configured and effective values of each class, side by side.

    ``detected`` comes from the driver's last report (``node.resources``),
    ``configured`` from ``settings`` (``option`` names the setting) and
    ``effective`` from the node's inventory and tracked usage.
    """
    report = node.resources
    totals = report.totals() if report is not None else {}
    driver_reserved = dict(report.reserved) if report is not None else {}
    rows: list[dict[str, Any]] = []
    for rc in sorted(set(node.inventories) | set(totals)):
        inv = node.inventory(rc)
        total, total_opt = _configured_total(rc, settings)
        rows.append(_row(rc, "total", totals.get(rc), total, total_opt, inv.total))
        reserved, reserved_opt = _configured_reserved(rc, settings)
        rows.append(_row(rc, "reserved", driver_reserved.get(rc, 0) if report else None,
                         reserved, reserved_opt, inv.reserved))
        ratio, ratio_opt = _configured_ratio(rc, settings)
        rows.append(_row(rc, "allocation_ratio", None, ratio, ratio_opt,
                         ratio_number(inv.allocation_ratio) if rc in node.inventories
                         else None))
        used_attr = _HYPERVISOR_USED.get(rc)
        hyper = getattr(report, used_attr) if report is not None and used_attr else None
        rows.append(_row(rc, "used", hyper, None, None, node.used(rc)))
    return rows


def node_dict(node: ComputeNode, settings: Settings | None = None) -> dict[str, Any]:
    """One node as plain data; with ``settings``, the side-by-side sources too."""
    report = node.resources
    data: dict[str, Any] = {
        "host": node.host, "nodename": node.nodename, "uuid": node.uuid,
        "generation": node.generation, "last_error": node.last_error,
        "hypervisor_type": report.hypervisor_type if report is not None else None,
        "hypervisor_hostname": report.hypervisor_hostname if report is not None else None,
        "inventory": inventory_rows(node),
        "traits": sorted(node.traits),
        "pci_devices": [attrs.asdict(line) for line in reports.pci_device_lines(node)],
    }
    if settings is not None:
        data["sources"] = source_rows(node, settings)
    return data
