"""CPU-set specifications and NUMA fitting.

A CPU-set spec is the text operators write in options such as
``cpu_dedicated_set``: comma-separated items, each a host CPU id (``"3"``),
an inclusive range (``"0-7"``) or an exclusion of either (``"^3"``,
``"^2-3"``).  Exclusions apply after every inclusion, wherever they appear,
so ``"^1,0-3"`` is ``{0, 2, 3}``.  Blank items (``"1,,2"``, a trailing comma)
are ignored, and spaces may surround items and the ``-`` of a range.

NUMA fitting lives in :mod:`nova_lite.numa`.
"""

import re
from collections.abc import Iterable

from nova_lite.exception import InvalidCPUSpec, InvalidInput

#: Highest CPU id a spec may name.  Linux supports at most 8192 CPUs; the
#: bound keeps a typo such as ``"0-99999999"`` from building a huge set.
MAX_CPU_ID = 65535

_ITEM = re.compile(r"(\^)?\s*([0-9]+)(?:\s*-\s*([0-9]+))?")


def _spec_error(spec: str, item: str, why: str = "") -> InvalidCPUSpec:
    detail = f": {why}" if why else ""
    return InvalidCPUSpec(f'Invalid CPU spec "{spec}": bad item "{item}"{detail}')


def _parse_item(spec: str, item: str) -> tuple[bool, range]:
    """Parse one non-blank item into ``(excluded, cpu_ids)``."""
    match = _ITEM.fullmatch(item)
    if match is None:
        raise _spec_error(spec, item)
    excluded, first, last = match.groups()
    start = int(first)
    end = int(last) if last is not None else start
    if start > end:
        raise _spec_error(spec, item, f"range start {start} is greater than end {end}")
    if end > MAX_CPU_ID:
        raise _spec_error(spec, item, f"CPU id {end} is above the maximum {MAX_CPU_ID}")
    return excluded is not None, range(start, end + 1)


def parse_cpu_spec(spec: str) -> set[int]:
    """Parse a CPU-set spec such as ``"0-3,^2, 8"`` into a set of CPU ids.

    :param spec: the spec text (see the module docstring for the syntax).
    :returns: the host CPU ids included and not excluded; an empty set when
        the spec is blank or everything is excluded (``"1,^1"``).
    :raises InvalidCPUSpec: if ``spec`` is not a string or an item is
        malformed (``"a"``, ``"3-1"``, ``"1-"``, ``"^"``, ``"-1"``,
        ``"1-2-3"``); the message quotes the bad item and the whole spec.
    """
    if not isinstance(spec, str):
        raise InvalidCPUSpec(
            f"Invalid CPU spec {spec!r}: expected a string, got {type(spec).__name__}")
    included: set[int] = set()
    excluded: set[int] = set()
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        is_exclusion, cpus = _parse_item(spec, item)
        (excluded if is_exclusion else included).update(cpus)
    return included - excluded


def _check_cpu_ids(cpus: Iterable[int]) -> list[int]:
    ids = sorted(cpus)
    for cpu in ids:
        if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu < 0:
            raise InvalidInput(f"CPU ids must be non-negative integers, got {cpu!r}")
    return ids


def _runs(ids: Iterable[int]) -> list[list[int]]:
    """Split sorted distinct ids into runs of consecutive ids."""
    runs: list[list[int]] = []
    for cpu in ids:
        if runs and runs[-1][-1] == cpu - 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return runs


def format_cpu_spec(cpus: Iterable[int], allow_ranges: bool = True) -> str:
    """Format CPU ids as a spec that :func:`parse_cpu_spec` reads back.

    :param cpus: host CPU ids (any iterable of non-negative ints).
    :param allow_ranges: write each run of two or more consecutive ids as a
        range (``{0, 1, 2, 3, 5}`` -> ``"0-3,5"``; ``{1, 2}`` -> ``"1-2"``);
        when False list every id (``"0,1,2,3,5"``).
    :returns: the spec, in ascending order; ``""`` for no CPUs.
    :raises InvalidInput: if an id is not a non-negative int.
    """
    ids = sorted(set(_check_cpu_ids(cpus)))
    if not allow_ranges:
        return ",".join(str(cpu) for cpu in ids)
    return ",".join(
        str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in _runs(ids))
