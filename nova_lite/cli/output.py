"""Output helpers: text tables, number formatting, escaping for terminals.

List and show commands use cliff's own formatters (``-f table|json|yaml|
value|csv|shell``) through :mod:`nova_lite.cli.typed`, which gives each
formatter typed values; the column classes here say how one value reads
for people (``human_readable``) and for machines (``machine_readable``).
"""

import logging
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import attrs
from cliff import columns

LOG = logging.getLogger(__name__)

def format_ratio(ratio: Fraction | float | str | None) -> str:
    """An allocation ratio as text: ``Fraction(7, 10)`` -> ``"0.7"``, 4 -> ``"4.0"``."""
    if ratio is None:
        return "-"
    value = float(Fraction(ratio))
    return repr(value)


def ratio_number(ratio: Fraction | float | str | None) -> float | None:
    """An allocation ratio as a JSON number (float), None stays None."""
    return None if ratio is None else float(Fraction(ratio))


# C0 and C1 controls, DEL, and the Unicode line/paragraph separators and
# bidirectional overrides: a name holding one could rewrite the terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f"
                      "\u202a-\u202e\u2066-\u2069]")


def safe_text(value: object) -> str:
    r"""``value`` as text with every control character escaped.

    Names come from drivers, configuration and the database; a node named
    ``"n\x1b[2J"`` (ESC, then "[2J") shows as ``n\\x1b[2J`` instead of clearing
    the screen.
    Newlines and tabs are escaped too (``\n``, ``\t``).
    """
    text = value if isinstance(value, str) else str(value)
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def cell(value: object) -> str:
    """Text of one table cell: None is ``-``, Fractions are decimals, control
    characters escaped (:func:`safe_text`)."""
    if value is None:
        return "-"
    if isinstance(value, Fraction):
        return format_ratio(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(safe_text(v) for v in value) or "-"
    return safe_text(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A bordered text table like cliff's; numbers are right-aligned."""
    texts = [[cell(v) for v in row] for row in rows]
    numeric = [bool(rows) and all(isinstance(row[i], (int, float)) and
                                  not isinstance(row[i], bool) for row in rows)
               for i in range(len(headers))]
    widths = [len(h) for h in headers]
    for row in texts:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], *(len(line) for line in text.splitlines() or [""]))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str], align: Sequence[bool]) -> str:
        parts: list[str] = []
        for i, text in enumerate(values):
            parts.append(" " + (text.rjust(widths[i]) if align[i] else text.ljust(widths[i]))
                         + " ")
        return "|" + "|".join(parts) + "|"

    out = [rule, line(headers, [False] * len(headers)), rule]
    for row in texts:
        split = [text.splitlines() or [""] for text in row]
        for n in range(max(len(s) for s in split)):
            out.append(line([s[n] if n < len(s) else "" for s in split], numeric))
    out.append(rule)
    return "\n".join(out)


class TextColumn(columns.FormattableColumn):
    """Text from outside (a name, a reason): control characters escaped for
    people (:func:`safe_text`), the text as it is for machines."""

    def human_readable(self) -> str:
        return safe_text(self._value)

    def machine_readable(self) -> Any:
        return self._value


class DictColumn(columns.FormattableColumn):
    """A mapping: one ``key: value`` line per item for people, the dict for machines."""

    def human_readable(self) -> str:
        return "\n".join(f"{safe_text(k)}: {cell(v)}"
                         for k, v in sorted(self._value.items())) or "-"

    def machine_readable(self) -> Any:
        return dict(self._value)


class ListColumn(columns.FormattableColumn):
    """A sequence: comma-separated for people, a list for machines."""

    def human_readable(self) -> str:
        return ", ".join(safe_text(v) for v in self._value) or "-"

    def machine_readable(self) -> Any:
        return list(self._value)


class CapabilitiesColumn(ListColumn):
    """Capability names: short (``numa, pci``) for people, full names for machines."""

    def human_readable(self) -> str:
        return ", ".join(v.removeprefix("supports_") for v in self._value) or "-"


class PciDevicesColumn(columns.FormattableColumn):
    """PCI devices (:class:`nova_lite.reports.PciDeviceLine`): a line each for
    people, a list of objects for machines."""

    def human_readable(self) -> str:
        return "\n".join(safe_text(line.text()) for line in self._value) or "-"

    def machine_readable(self) -> Any:
        return [attrs.asdict(line) for line in self._value]


class ProvidersColumn(columns.FormattableColumn):
    """Child providers (:class:`nova_lite.reports.ProviderLine`): a line each
    for people, a list of objects for machines."""

    def human_readable(self) -> str:
        return "\n".join(safe_text(line.text()) for line in self._value) or "-"

    def machine_readable(self) -> Any:
        return [attrs.asdict(line) for line in self._value]


class OptionalColumn(columns.FormattableColumn):
    """Text that may be absent: ``-`` for people, null for machines."""

    def human_readable(self) -> str:
        return "-" if self._value is None else safe_text(self._value)


class LinesColumn(columns.FormattableColumn):
    """A mapping of pre-formatted text lines for people, structured data for machines.

    ``value`` is ``(lines, data)``.
    """

    def human_readable(self) -> str:
        return "\n".join(safe_text(line) for line in self._value[0]) or "-"

    def machine_readable(self) -> Any:
        return self._value[1]


def escaped(data: Any) -> Any:
    """``data`` (JSON-like) with every string passed through :func:`safe_text`,
    keys included: what a report renders for people."""
    if isinstance(data, str):
        return safe_text(data)
    if isinstance(data, dict):
        return {escaped(k): escaped(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [escaped(v) for v in data]
    return data
