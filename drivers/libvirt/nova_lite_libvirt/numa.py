"""The host NUMA topology record built from capabilities and the CPU selection.

Per cell: ``cpuset`` = the cell's CPUs that serve shared vCPUs, ``pcpuset``
= those dedicated to pinned vCPUs (so the two never overlap: unlike Nova's
legacy mode, CPUs are not offered as dedicated unless
``[compute] cpu_dedicated_set`` names them); ``siblings`` = the hyperthread
sibling groups, restricted to usable CPUs; ``memory_mb`` = the cell's memory
in MiB (KiB // 1024); ``mempages`` = page size (KiB) and page count.
"""

from nova_lite.objects import MemPage, NUMACell, NUMATopology


def build_numa_topology(caps, selection):
    """A :class:`NUMATopology` from parsed capabilities, or None without cells.

    :param caps: :class:`~nova_lite_libvirt.capabilities.HostCapabilities`.
    :param selection: :class:`~nova_lite_libvirt.cpus.CPUSelection`.
    """
    if not caps.cells:
        return None
    usable = selection.shared | selection.dedicated
    cells = []
    for cell in caps.cells:
        cpus = frozenset(c.id for c in cell.cpus)
        groups = {frozenset(c.siblings or {c.id}) & cpus & usable for c in cell.cpus}
        siblings = sorted((g for g in groups if g), key=sorted)
        cells.append(NUMACell(
            id=cell.id,
            cpuset=cpus & selection.shared,
            pcpuset=cpus & selection.dedicated,
            memory_mb=cell.memory_kib // 1024,
            siblings=siblings,
            mempages=[MemPage(size_kb=size, total=count) for size, count in cell.pages]))
    return NUMATopology(cells=cells)
