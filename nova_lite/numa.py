"""Fitting an instance's NUMA topology onto a host's, and NUMA usage.

Everything here is pure: a fit returns a placed copy of the request and
never changes the host, the usage or the request.  The usage sum,
``numa_usage_for``, lives beside its record
(:func:`nova_lite.objects.numa_usage_for`, which a node's own
:meth:`~nova_lite.objects.ComputeNode.numa_usage` uses) and is importable
from here too.

Units: ``memory_mb`` is MiB, page sizes are KiB, CPUs are counted one per
host CPU id (or guest vCPU id).  ``MemPage.used`` on a host cell means pages
held outside nova-lite's claims (e.g. reserved by the operator); pages held
by instances are in ``NUMACellUsage.pages_used``.
"""

import math
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Protocol

import attrs

from nova_lite.exception import InvalidInput
from nova_lite.objects import (  # noqa: F401 - numa_usage_for: a public name here too
    InstanceNUMACell,
    InstanceNUMATopology,
    NUMACell,
    NUMACellUsage,
    NUMATopology,
    PciRequest,
    numa_usage_for,
)

#: Nova's words for a request that fits nowhere on the host.
NUMA_FIT_FAILED = "Requested instance NUMA topology cannot fit the given host NUMA topology"
#: Nova's words when the cells fit but not together with the PCI devices.
NUMA_PCI_FIT_FAILED = ("Requested instance NUMA topology together with requested PCI "
                       "devices cannot fit the given host NUMA topology")


#: An allocation ratio as the fit takes it: any exact or binary number > 0.
Ratio = int | float | Decimal | Fraction


class _PciSupport(Protocol):
    """What the fit asks of ``pci``: :meth:`nova_lite.pci.PciStats.supports`."""

    def supports(self, requests: Sequence[PciRequest],
                 numa_cells: Iterable[int] | None = None) -> bool:
        """True if the devices ``requests`` ask for can be had on ``numa_cells``."""


@attrs.frozen
class _Ratios:
    cpu: Fraction
    ram: Fraction


def _ratio(name: str, value: object) -> Fraction:
    """An allocation ratio as an exact Fraction (floats via their repr)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, Fraction)):
        raise InvalidInput(f"{name} must be a number, got {value!r}")
    exact = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if exact <= 0:
        raise InvalidInput(f"{name} must be > 0, got {value!r}")
    return exact


def _usage_by_cell(host: NUMATopology,
                   usage: Iterable[NUMACellUsage] | None) -> dict[int, NUMACellUsage]:
    """Map host cell id -> NUMACellUsage, zero usage for cells not given."""
    by_id = {cell.id: NUMACellUsage(id=cell.id) for cell in host.cells}
    for entry in usage or ():
        if not isinstance(entry, NUMACellUsage):
            raise InvalidInput(f"usage must hold NUMACellUsage records, got {entry!r}")
        if entry.id in by_id:
            by_id[entry.id] = entry
    return by_id


# --- one instance cell against one host cell --------------------------------

def _pages_problem(host_cell: NUMACell, used: NUMACellUsage,
                   inst_cell: InstanceNUMACell) -> str | None:
    size = inst_cell.pagesize_kb
    assert size is not None   # the caller's condition: a cell with a page size
    pages = next((p for p in host_cell.mempages if p.size_kb == size), None)
    if pages is None:
        return f"no {size} KiB pages"
    if (inst_cell.memory_mb * 1024) % size:
        return f"requested memory {inst_cell.memory_mb} MB is not a multiple of {size} KiB pages"
    wanted = inst_cell.memory_mb * 1024 // size
    free = pages.total - pages.used - used.pages_used.get(size, 0)
    if free < wanted:
        return f"free {size} KiB pages {free} < requested {wanted}"
    return None


def _memory_problem(host_cell: NUMACell, used: NUMACellUsage, inst_cell: InstanceNUMACell,
                    ratios: _Ratios) -> str | None:
    if inst_cell.pagesize_kb is not None:
        return _pages_problem(host_cell, used, inst_cell)
    free = math.floor(host_cell.memory_mb * ratios.ram) - used.memory_mb
    if free < inst_cell.memory_mb:
        return f"free memory {free} MB < requested {inst_cell.memory_mb} MB"
    return None


def _shared_cpu_problem(host_cell: NUMACell, used: NUMACellUsage, inst_cell: InstanceNUMACell,
                        ratios: _Ratios) -> str | None:
    wanted = len(inst_cell.cpuset)
    if not host_cell.cpuset:
        return "no shared CPUs"
    if wanted > len(host_cell.cpuset):
        return f"{wanted} vCPUs exceed the cell's {len(host_cell.cpuset)} shared CPUs"
    free = math.floor(len(host_cell.cpuset) * ratios.cpu) - used.shared_vcpus
    if free < wanted:
        return f"free vCPUs {free} < requested {wanted}"
    return None


def _dedicated_cpu_problem(host_cell: NUMACell, used: NUMACellUsage,
                           inst_cell: InstanceNUMACell) -> str | None:
    free = len(host_cell.pcpuset - used.pinned_cpus)
    wanted = len(inst_cell.cpuset)
    if free < wanted:
        return f"free dedicated CPUs {free} < requested {wanted}"
    return None


def _cell_problem(host_cell: NUMACell, used: NUMACellUsage, inst_cell: InstanceNUMACell,
                  ratios: _Ratios) -> str | None:
    """Why ``inst_cell`` cannot go on ``host_cell``, or None if it can."""
    if inst_cell.cpu_policy == "dedicated":
        cpu = _dedicated_cpu_problem(host_cell, used, inst_cell)
    else:
        cpu = _shared_cpu_problem(host_cell, used, inst_cell, ratios)
    return cpu or _memory_problem(host_cell, used, inst_cell, ratios)


# --- pinning ------------------------------------------------------------------

def _free_core_groups(host_cell: NUMACell, used: NUMACellUsage) -> list[list[int]]:
    """Free dedicated CPUs grouped by hyperthread siblings (sorted lists)."""
    free = set(host_cell.pcpuset - used.pinned_cpus)
    groups = []
    for siblings in host_cell.siblings:
        group = sorted(siblings & free)
        if group:
            groups.append(group)
            free -= siblings
    groups.extend([cpu] for cpu in sorted(free))
    return groups


def _pick_pinned_cpus(host_cell: NUMACell, used: NUMACellUsage, count: int) -> list[int]:
    """Choose ``count`` free dedicated CPUs, whole free cores first.

    Whole sibling groups are taken largest first while they fit the count;
    any remainder comes from the smallest groups left, so partly used cores
    are filled before fresh ones are split.
    """
    groups = sorted(_free_core_groups(host_cell, used), key=lambda g: (-len(g), g[0]))
    chosen: list[int] = []
    rest = []
    for group in groups:
        if len(group) <= count - len(chosen):
            chosen.extend(group)
        else:
            rest.append(group)
    for group in sorted(rest, key=lambda g: (len(g), g[0])):
        chosen.extend(group[:count - len(chosen)])
    return chosen


def _place_cell(host_cell: NUMACell, used: NUMACellUsage,
                inst_cell: InstanceNUMACell) -> InstanceNUMACell:
    """A copy of ``inst_cell`` placed on ``host_cell`` (pinned if dedicated)."""
    pinning: dict[int, int] = {}
    if inst_cell.cpu_policy == "dedicated":
        host_cpus = _pick_pinned_cpus(host_cell, used, len(inst_cell.cpuset))
        pinning = dict(zip(sorted(inst_cell.cpuset), host_cpus))
    return attrs.evolve(inst_cell, host_cell=host_cell.id, cpu_pinning=pinning)


# --- the whole topology -------------------------------------------------------

def _assignments(candidates: Sequence[Sequence[int]],
                 taken: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    """Yield tuples of distinct host cell ids, one per instance cell, in order.

    ``candidates[i]`` lists the host cell ids instance cell ``i`` fits on.
    """
    if len(taken) == len(candidates):
        yield tuple(taken)
        return
    for cell_id in candidates[len(taken)]:
        if cell_id not in taken:
            yield from _assignments(candidates, (*taken, cell_id))


def _pci_passes(pci: _PciSupport | None,
                pci_requests: Sequence[PciRequest]) -> list[list[PciRequest] | None]:
    """Request lists to try: strict affinity for 'preferred' first, then as asked."""
    if pci is None or not pci_requests:
        return [None]
    strict = [attrs.evolve(r, numa_policy="required") if r.numa_policy == "preferred" else r
              for r in pci_requests]
    return [strict, list(pci_requests)] if strict != list(pci_requests) else [strict]


def _choose(candidates: Sequence[Sequence[int]], pci: _PciSupport | None,
            pci_requests: Sequence[PciRequest]) -> tuple[int, ...] | None:
    """The first assignment whose host cells can also serve the PCI requests."""
    for requests in _pci_passes(pci, pci_requests):
        # The PCI answer depends only on the set of host cells.
        verdicts: dict[frozenset[int], bool] = {}
        for chosen in _assignments(candidates):
            if requests is None:
                return chosen
            cells = frozenset(chosen)
            assert pci is not None   # requests are tried only with a pci (_pci_passes)
            if cells not in verdicts:
                verdicts[cells] = pci.supports(requests, numa_cells=cells)
            if verdicts[cells]:
                return chosen
    return None


@attrs.frozen
class _Attempt:
    placed: InstanceNUMATopology | None = None
    problem: str | None = None


def _no_cell_detail(inst_cell: InstanceNUMACell,
                    problems: Iterable[tuple[int, str | None]]) -> str:
    parts = ", ".join(f"host cell {hid}: {why}" for hid, why in problems)
    return f"instance cell {inst_cell.id} fits no host cell ({parts})"


def _attempt(host: NUMATopology | None, request: InstanceNUMATopology,
             usage: Iterable[NUMACellUsage] | None, ratios: _Ratios, pci: _PciSupport | None,
             pci_requests: Sequence[PciRequest]) -> _Attempt:
    if not request.cells:
        return _Attempt(placed=request)
    if host is None or not host.cells:
        return _Attempt(problem=f"{NUMA_FIT_FAILED}: the host has no NUMA topology")
    if len(request.cells) > len(host.cells):
        return _Attempt(problem=(f"{NUMA_FIT_FAILED}: {len(request.cells)} instance cells "
                                 f"but only {len(host.cells)} host cells"))
    used = _usage_by_cell(host, usage)
    candidates: list[list[int]] = []
    details: list[str] = []
    for inst_cell in request.cells:
        problems = [(hc.id, _cell_problem(hc, used[hc.id], inst_cell, ratios))
                    for hc in host.cells]
        candidates.append([hid for hid, why in problems if why is None])
        if not candidates[-1]:
            details.append(_no_cell_detail(inst_cell, problems))
    if details:
        return _Attempt(problem=f"{NUMA_FIT_FAILED}: " + ", ".join(details))
    if next(_assignments(candidates), None) is None:
        return _Attempt(problem=f"{NUMA_FIT_FAILED}: no distinct host cell for every instance cell")
    chosen = _choose(candidates, pci, pci_requests)
    if chosen is None:
        return _Attempt(problem=NUMA_PCI_FIT_FAILED)
    cells = tuple(_place_cell(host.cell(hid), used[hid], inst_cell)
                  for hid, inst_cell in zip(chosen, request.cells))
    return _Attempt(placed=attrs.evolve(request, cells=cells))


def _check_args(host: object, request: object) -> None:
    if host is not None and not isinstance(host, NUMATopology):
        raise InvalidInput(f"host must be a NUMATopology, got {host!r}")
    if not isinstance(request, InstanceNUMATopology):
        raise InvalidInput(f"request must be an InstanceNUMATopology, got {request!r}")


def _run(host: NUMATopology | None, request: InstanceNUMATopology,
         usage: Sequence[NUMACellUsage] | None, cpu_allocation_ratio: Ratio,
         ram_allocation_ratio: Ratio, pci: _PciSupport | None,
         pci_requests: Iterable[PciRequest] | None) -> _Attempt:
    _check_args(host, request)
    ratios = _Ratios(cpu=_ratio("cpu_allocation_ratio", cpu_allocation_ratio),
                     ram=_ratio("ram_allocation_ratio", ram_allocation_ratio))
    return _attempt(host, request, usage, ratios, pci, tuple(pci_requests or ()))


def fit_instance_to_host(host: NUMATopology | None, request: InstanceNUMATopology,
                         usage: Sequence[NUMACellUsage] | None = None, *,
                         cpu_allocation_ratio: Ratio = 1, ram_allocation_ratio: Ratio = 1,
                         pci: _PciSupport | None = None,
                         pci_requests: Iterable[PciRequest] | None = ()
                         ) -> InstanceNUMATopology | None:
    """Place every cell of ``request`` on its own host cell, or return None.

    :param host: the host's cells (None: the host has no NUMA topology).
    :param request: the instance's cells; any ``host_cell`` or
        ``cpu_pinning`` already set is ignored and chosen afresh.
    :param usage: what claims already hold, one :class:`NUMACellUsage` per
        host cell matched by ``id`` (missing cells hold nothing); see
        :func:`~nova_lite.objects.numa_usage_for`.
    :param cpu_allocation_ratio: overcommit for shared vCPUs: a cell takes
        ``floor(len(cpuset) * ratio)`` of them, and no instance cell may have
        more vCPUs than the host cell has shared CPUs.  Dedicated vCPUs
        each take one free CPU of ``pcpuset``, never overcommitted.
    :param ram_allocation_ratio: overcommit for memory (MiB) of cells
        without ``pagesize_kb``; cells with a page size need that many free
        pages of that size (never overcommitted).
    :param pci: a :class:`nova_lite.pci.PciStats` (or anything with its
        ``supports(requests, numa_cells=...)``); with ``pci_requests`` a
        placement is accepted only if the devices fit its host cells.
        Placements that keep 'preferred' requests NUMA-local are tried first.
    :param pci_requests: the instance's :class:`PciRequest` records.
    :returns: a copy of ``request`` with each cell's ``host_cell`` set and
        dedicated cells' ``cpu_pinning`` (guest vCPU -> host CPU) filled, or
        None if it cannot fit (see :func:`numa_fit_problem` for why).
    """
    return _run(host, request, usage, cpu_allocation_ratio, ram_allocation_ratio,
                pci, pci_requests).placed


def numa_fit_problem(host: NUMATopology | None, request: InstanceNUMATopology,
                     usage: Sequence[NUMACellUsage] | None = None, *,
                     cpu_allocation_ratio: Ratio = 1, ram_allocation_ratio: Ratio = 1,
                     pci: _PciSupport | None = None,
                     pci_requests: Iterable[PciRequest] | None = ()) -> str | None:
    """Why :func:`fit_instance_to_host` fails with these arguments, or None.

    The reason starts with Nova's sentence (:data:`NUMA_FIT_FAILED`, or
    :data:`NUMA_PCI_FIT_FAILED` when only the PCI devices are in the way)
    followed by ``": "`` and per-cell detail, e.g. ``"instance cell 0 fits
    no host cell (host cell 0: free memory 512 MB < requested 1024 MB)"``.
    """
    return _run(host, request, usage, cpu_allocation_ratio, ram_allocation_ratio,
                pci, pci_requests).problem
