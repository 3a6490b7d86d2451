"""Typed output for every formatter: the base classes of the list and show commands.

Commands return real values (numbers, booleans, None, lists, mappings,
:class:`cliff.columns.FormattableColumn` cells) and each formatter gets
them in its own form:

- ``json``/``yaml``: the values themselves: numbers, booleans, null,
  lists and mappings (:func:`plain`);
- ``value``/``csv``/``shell``: one text per cell (:func:`text`): numbers
  as digits, booleans ``true``/``false``, null as an empty string, lists
  and mappings as compact JSON;
- ``table``: for people (:func:`human`): null is ``-``, booleans ``yes``/
  ``no``, lists comma-separated, mappings one ``key: value`` line each,
  control characters escaped.

Never a Python repr.  ``-c COLUMN`` and ``--sort-column`` must name real
columns (matched without case, spaces or punctuation: ``-c vcpus_capacity``
picks "vCPUs (capacity)"); an unknown one is a bad argument (exit status 2),
checked before a command that writes changes anything.  A list command with
``default_columns`` shows only those in the table unless ``--long`` or
``-c`` is given; the other formats always carry every column.
"""

import argparse
import copy
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TextIO

import attrs
from cliff import columns, command, lister, show

from nova_lite.cli.output import cell
from nova_lite.exception import BadArguments

if TYPE_CHECKING:
    from cliff import display

    from nova_lite.cli.main import NovaLiteApp
    # What the mixin is used beside: gives the type checker cliff's display methods.
    _DisplayCommand = display.DisplayCommandBase
else:
    _DisplayCommand = object

LOG = logging.getLogger(__name__)

#: Formatters that receive plain data (the values themselves).
DATA_FORMATS = ("json", "yaml")
#: Formatter for people.
TABLE_FORMAT = "table"


def plain(value: Any) -> Any:
    """``value`` as JSON-like data: None, bool, int, float, str, list, dict.

    A :class:`~cliff.columns.FormattableColumn` gives its machine-readable
    value; Fractions and Decimals become floats, tuples and sets lists
    (sets sorted), attrs records dicts, mapping keys strings.
    """
    if isinstance(value, columns.FormattableColumn):
        value = value.machine_readable()
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (float, Fraction, Decimal)):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k) if isinstance(k, str) else str(text(k)): plain(v)
                for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return [plain(v) for v in sorted(value)]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if attrs.has(type(value)):
        return plain(attrs.asdict(value, recurse=False))
    LOG.debug("No typed form for %s; shown as text", type(value).__name__)
    return str(value)


def text(value: Any) -> Any:
    """``value`` as one text cell (``value``, ``csv``, ``shell``); numbers stay numbers.

    None is ``""``, booleans ``"true"``/``"false"``, lists and mappings
    compact JSON.
    """
    data = plain(value)
    if data is None:
        return ""
    if isinstance(data, bool):
        return "true" if data else "false"
    if isinstance(data, (int, float, str)):
        return data
    return json.dumps(data, ensure_ascii=False)


def human(value: Any) -> Any:
    """``value`` for the table: numbers stay numbers, the rest is escaped text."""
    if isinstance(value, columns.FormattableColumn):
        return value.human_readable()
    if isinstance(value, Mapping):
        return "\n".join(f"{cell(k)}: {_human_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else value
        return ", ".join(_human_text(v) for v in items) or "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return cell(value)


def _human_text(value: Any) -> str:
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(plain(value))   # non-ASCII escaped: nothing reaches the terminal raw
    return cell(plain(value))


def converter(formatter: str) -> Callable[[Any], Any]:
    """The cell conversion for formatter ``formatter`` (a ``-f`` name)."""
    if formatter in DATA_FORMATS:
        return plain
    if formatter == TABLE_FORMAT:
        return human
    return text


class _TypedFormatter:
    """A cliff formatter whose cells are converted first (see :func:`converter`)."""

    def __init__(self, formatter: Any, convert: Callable[[Any], Any]) -> None:
        self._formatter = formatter
        self._convert = convert

    def emit_list(self, column_names: Sequence[str], data: Iterable[Sequence[Any]], stdout: TextIO,
                  parsed_args: argparse.Namespace) -> None:
        rows = ([self._convert(value) for value in row] for row in data)
        self._formatter.emit_list(column_names, rows, stdout, parsed_args)

    def emit_one(self, column_names: Sequence[str], data: Sequence[Any], stdout: TextIO,
                 parsed_args: argparse.Namespace) -> None:
        self._formatter.emit_one(column_names, [self._convert(value) for value in data],
                                 stdout, parsed_args)


def normalize_column(name: str) -> str:
    """A column name as ``-c`` matches it: lower case, punctuation runs as ``_``."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def check_columns(requested: Iterable[str], known: Iterable[str], option: str = "-c") -> None:
    """Raise BadArguments naming every requested column that is not in ``known``."""
    names = {normalize_column(c) for c in known}
    unknown = [c for c in requested if normalize_column(c) not in names]
    if unknown:
        listed = ", ".join(repr(c) for c in unknown)
        raise BadArguments(f"{option}: no column {listed}; the columns are: "
                           f"{', '.join(known)}. Nothing was changed")


class Command(command.Command):
    """A ``nova-lite`` command that prints no table (cliff's Command, typed for nova-lite)."""

    # The application running the command (its settings and store: ``context()``).
    app: "NovaLiteApp"


class TypedOutput(_DisplayCommand):
    """Mixin of the typed list and show commands (see the module docstring).

    ``columns``: the column names the command always returns (None when
    they depend on the data); a command that writes declares them, so a
    bad ``-c`` is refused before anything changes.
    """

    columns: tuple[str, ...] | None = None
    # The application running the command (its settings and store: ``context()``).
    app: "NovaLiteApp"

    @staticmethod
    def _normalize_column_name(column_name: str) -> str:
        return normalize_column(column_name)

    def known_columns(self, parsed_args: argparse.Namespace) -> tuple[str, ...] | None:
        """The columns this run will return, if known before it runs (else None)."""
        return self.columns

    def _generate_columns_and_selector(self, parsed_args: argparse.Namespace,
                                       column_names: Sequence[str]) -> Any:
        if parsed_args.columns:
            check_columns(parsed_args.columns, column_names)
        return super()._generate_columns_and_selector(parsed_args, column_names)

    def run(self, parsed_args: argparse.Namespace) -> int:
        known = self.known_columns(parsed_args)
        if known is not None:
            if parsed_args.columns:
                check_columns(parsed_args.columns, known)
            if getattr(parsed_args, "sort_columns", None):
                check_columns(parsed_args.sort_columns, known, "--sort-column")
        return super().run(parsed_args)

    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Any) -> int:
        self.formatter = _TypedFormatter(self.formatter, converter(parsed_args.formatter))
        # The list or show command beside the mixin produces it.
        return super().produce_output(  # type: ignore[safe-super]
            parsed_args, column_names, data)


class Lister(TypedOutput, lister.Lister):
    """A list command with typed output.

    ``default_columns``: the columns of the table without ``--long`` or
    ``-c`` (None: every column).  An empty list still prints its header.
    """

    default_columns: tuple[str, ...] | None = None

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        if self.default_columns is not None:
            parser.add_argument(
                "--long", action="store_true",
                help="Show every column in the table (default: "
                     f"{', '.join(self.default_columns)}); -f json, yaml, csv and value "
                     "always carry every column.")
        return parser

    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Any) -> int:
        if getattr(parsed_args, "sort_columns", None):
            check_columns(parsed_args.sort_columns, column_names, "--sort-column")
        if parsed_args.formatter == TABLE_FORMAT:
            parsed_args = copy.copy(parsed_args)
            parsed_args.print_empty = True
            if (self.default_columns is not None and not parsed_args.columns
                    and not getattr(parsed_args, "long", False)):
                parsed_args.columns = list(self.default_columns)
        return super().produce_output(parsed_args, column_names, data)


class ShowOne(TypedOutput, show.ShowOne):
    """A show command with typed output."""

