"""``--limit`` and ``--marker`` of the list commands that can be fleet-sized.

They mean what the API's ``limit`` and ``marker`` mean: at most LIMIT rows
(1 to ``[api] max_limit``), starting after the row whose uuid is MARKER
(the last one of the previous page), in the list's own stable order.
Without them a command lists every row.  The store reads only the page
(a keyset ``WHERE`` on the sort key and ``LIMIT``), never the whole list.

A LIMIT that is not a whole number >= 1 is refused by the parser, one
above ``[api] max_limit`` by the command (exit status 2 either way);
an unknown MARKER is an error naming it (exit status 1).
"""

import argparse

from nova_lite.cli.context import BadArguments
from nova_lite.conf import Settings


def limit_number(value: str) -> int:
    """argparse type of ``--limit``: a whole number of at least 1."""
    if not value.isdigit() or not value.isascii() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {value!r}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser, order: str, marker: str) -> None:
    """``--limit`` and ``--marker`` on a list command's ``parser``.

    ``order``: the list's sort order, in words; ``marker``: what a marker is.
    """
    parser.add_argument("--limit", type=limit_number, metavar="LIMIT",
                        help="List at most LIMIT rows (1 to [api] max_limit, itself 1000 "
                             f"unless set), sorted by {order}; without it, every row.")
    parser.add_argument("--marker", metavar="MARKER",
                        help=f"Start after {marker}: the last row of the previous page.")


def page(parsed_args: argparse.Namespace, settings: Settings) -> tuple[int | None, str | None]:
    """``(limit, marker)`` of the parsed ``--limit`` and ``--marker`` (None where
    not given); BadArguments for a LIMIT above ``[api] max_limit``."""
    limit, marker = parsed_args.limit, parsed_args.marker
    if limit is not None and limit > settings.api_max_limit:
        raise BadArguments(f"--limit must be at most {settings.api_max_limit} ([api] "
                           f"max_limit), got {limit}")
    if marker is not None and not marker.strip():
        raise BadArguments("--marker must not be empty")
    return limit, marker
