"""Reports with cliff's formatters: ``-f table|json|yaml|value|csv`` and ``-c``.

A report command (``compute --once``, ``audit``, ``node explain``) builds
one dict.  It is shown as a typed ShowOne (:mod:`nova_lite.cli.typed`): one
field per top-level key, so ``-f json`` and ``-f yaml`` print the dict,
``-f value -c consistent`` one field (nested values as compact JSON); the
default table (without ``-c``) is the report's own multi-part text.  Text
from outside (names, reasons) has its control characters escaped for people.
"""

import argparse
import json
from collections.abc import Sequence
from typing import Any

from cliff import columns

from nova_lite.cli.output import TextColumn, escaped
from nova_lite.cli.typed import ShowOne


class DataColumn(columns.FormattableColumn):
    """A nested value: compact JSON for people, the value itself for machines."""

    def human_readable(self) -> str:
        return json.dumps(self._value, sort_keys=True)

    def machine_readable(self) -> Any:
        return self._value


def _column(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return DataColumn(value)
    return TextColumn(value) if isinstance(value, str) else value


class ReportShowOne(ShowOne):
    """Subclasses implement ``report(parsed_args) -> (data, exit_code)`` and
    ``render(data) -> str``; ``run`` returns the report's exit code."""

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        self.parser = parser
        return parser

    def report(self, parsed_args: argparse.Namespace) -> tuple[dict[str, Any], int]:
        raise NotImplementedError

    def render(self, data: dict[str, Any]) -> str:
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        data, self._code = self.report(parsed_args)
        self._data = data
        return tuple(data), tuple(_column(v) for v in data.values())

    def produce_output(self, parsed_args: argparse.Namespace, column_names: Sequence[str],
                       data: Any) -> int:
        if parsed_args.formatter == "table" and not parsed_args.columns:
            self.app.stdout.write(self.render(escaped(self._data)) + "\n")
            return 0
        return super().produce_output(parsed_args, column_names, data)

    def run(self, parsed_args: argparse.Namespace) -> int:
        self._code = 0
        super().run(parsed_args)
        return self._code
