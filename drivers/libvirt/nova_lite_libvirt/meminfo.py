"""Host memory in use, from ``/proc/meminfo`` (Nova's formula).

Available = MemFree + Buffers + Cached (kB, i.e. KiB); used = total - available,
in MiB.  The path is injectable so tests can supply their own file.
"""

import logging

LOG = logging.getLogger(__name__)

DEFAULT_MEMINFO_PATH = "/proc/meminfo"
_FIELDS = ("MemFree", "Buffers", "Cached")


def parse_meminfo(text):
    """``{field: KiB}`` from meminfo text (values are in kB = KiB)."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if key and parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0])
    return values


def read_meminfo(path=DEFAULT_MEMINFO_PATH):
    """``{field: KiB}`` of the meminfo file at ``path``.

    :raises OSError: if the file cannot be read.
    """
    with open(path, encoding="ascii", errors="replace") as handle:
        return parse_meminfo(handle.read())


def available_of(values, path=DEFAULT_MEMINFO_PATH):
    """MemFree + Buffers + Cached of parsed ``values``, in MiB (KiB // 1024).

    :raises ValueError: naming the missing fields (and ``path``).
    """
    missing = [f for f in _FIELDS if f not in values]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}")
    return sum(values[f] for f in _FIELDS) // 1024


def available_mib(path=DEFAULT_MEMINFO_PATH):
    """MemFree + Buffers + Cached, in MiB (KiB // 1024).

    :raises OSError: if the file cannot be read.
    :raises ValueError: naming the missing fields.
    """
    return available_of(read_meminfo(path), path)


def used_mib(total_mib, path=DEFAULT_MEMINFO_PATH):
    """Memory used in MiB: ``total_mib`` minus what meminfo shows available.

    Never negative.  An unreadable or malformed file is logged and gives 0
    (the hypervisor view is informative; usage comes from the records).
    """
    try:
        available = available_mib(path)
    except (OSError, ValueError) as exc:
        LOG.warning("Cannot read host memory use from %s: %s; reporting 0 MiB used",
                    path, exc)
        return 0
    return max(0, total_mib - available)
