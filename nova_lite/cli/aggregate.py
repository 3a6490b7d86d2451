"""``nova-lite aggregate ...``: host aggregates and availability zones, as Nova keeps them.

An aggregate is a named group of compute hosts with properties (Nova's
aggregate metadata); ``--zone`` sets the property ``availability_zone``,
which makes the aggregate an availability zone.  A host in no zoned
aggregate is in the default zone (``default_availability_zone``).
"""

import argparse
import logging
import time
from typing import TYPE_CHECKING, Any

from nova_lite.cli.context import BadArguments
from nova_lite.cli.output import ListColumn, OptionalColumn, TextColumn
from nova_lite.cli.typed import Lister, ShowOne
from nova_lite.db.aggregates import AVAILABILITY_ZONE, Aggregate

if TYPE_CHECKING:
    from nova_lite.cli.main import NovaLiteApp

LOG = logging.getLogger(__name__)

#: The fields of one aggregate (show, and every write command).
SHOW_FIELDS = ("name", "uuid", "availability_zone", "hosts", "properties", "created_at",
               "updated_at")
#: The columns of ``aggregate list``.
LIST_HEADERS = ("Name", "UUID", "Availability Zone", "Hosts", "Properties")
#: The columns of its table without --long.
DEFAULT_LIST_HEADERS = ("Name", "Availability Zone", "Hosts")


def _properties(aggregate: Aggregate) -> dict[str, str]:
    """The metadata other than the zone (shown on its own)."""
    return {k: v for k, v in aggregate.metadata.items() if k != AVAILABILITY_ZONE}


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _fields(aggregate: Aggregate) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    return SHOW_FIELDS, (
        TextColumn(aggregate.name), aggregate.uuid,
        OptionalColumn(aggregate.availability_zone), ListColumn(sorted(aggregate.hosts)),
        _properties(aggregate), _stamp(aggregate.created_at), _stamp(aggregate.updated_at))


def parse_properties(values: list[str] | None, option: str = "--property"
                     ) -> dict[str, str]:
    """``KEY=VALUE`` arguments as a mapping; raises BadArguments for one
    without ``=`` or with an empty key."""
    found: dict[str, str] = {}
    for value in values or ():
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise BadArguments(f"{option} {value!r} must be KEY=VALUE; nothing was changed")
        found[key] = val
    return found


def _property_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--property", metavar="KEY=VALUE", action="append",
                        help=help_text)


def _zone_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--zone", metavar="ZONE",
                        help="Availability zone (the property availability_zone).")


def _checked_zone(zone: str | None) -> str | None:
    if zone is not None and not zone.strip():
        raise BadArguments("--zone must not be empty; nothing was changed")
    return zone


class CreateAggregate(ShowOne):
    """Create a host aggregate, without hosts (--zone makes it an availability zone).

    Prints the aggregate as 'aggregate show' shows it.  A name already
    taken is refused.
    """

    app: "NovaLiteApp"
    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="Name of the new aggregate.")
        _zone_option(parser)
        _property_option(parser, "A property to set (repeat for more).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        zone = _checked_zone(parsed_args.zone)
        props = parse_properties(parsed_args.property)
        store = self.app.context().open_store()
        made = store.aggregates.create(parsed_args.name, zone, props)
        LOG.info("Aggregate %s created", made.name)
        return _fields(made)


class ListAggregates(Lister):
    """List the host aggregates: name, availability zone, hosts and properties.

    --long (or -c) adds the UUID and the properties.
    """

    app: "NovaLiteApp"
    columns = LIST_HEADERS
    default_columns = DEFAULT_LIST_HEADERS

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        return LIST_HEADERS, [
            (TextColumn(a.name), a.uuid, OptionalColumn(a.availability_zone),
             ListColumn(sorted(a.hosts)), _properties(a))
            for a in store.aggregates.list()]


class _OneAggregate(ShowOne):
    app: "NovaLiteApp"
    columns = SHOW_FIELDS

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="AGGREGATE", help="Name or uuid of the aggregate.")
        return parser


class ShowAggregate(_OneAggregate):
    """Show one host aggregate: its availability zone, hosts and properties."""

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True, readonly=True)
        return _fields(store.aggregates.get(parsed_args.name))


class SetAggregate(_OneAggregate):
    """Set properties or the availability zone of a host aggregate.

    Refused, as Nova refuses it, when one of its hosts is in another zone
    or has instances that would change zone.  Prints the aggregate.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        _zone_option(parser)
        _property_option(parser, "A property to set (repeat for more).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        zone = _checked_zone(parsed_args.zone)
        props: dict[str, str | None] = dict(parse_properties(parsed_args.property))
        if zone is not None:
            props[AVAILABILITY_ZONE] = zone
        if not props:
            raise BadArguments("give --zone or --property; nothing was changed")
        store = self.app.context().open_store()
        return _fields(store.aggregates.set_metadata(parsed_args.name, props))


class UnsetAggregate(_OneAggregate):
    """Unset properties of a host aggregate (availability_zone takes its zone away).

    Prints the aggregate.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--property", metavar="KEY", action="append", required=True,
                            help="A property to unset (repeat for more).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store()
        return _fields(store.aggregates.set_metadata(
            parsed_args.name, dict.fromkeys(parsed_args.property)))


class DeleteAggregate(_OneAggregate):
    """Delete a host aggregate; refused while it has hosts, as Nova refuses it.

    Prints the aggregate as it was.
    """

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True)
        found = store.aggregates.get(parsed_args.name)
        store.aggregates.delete(parsed_args.name)
        LOG.info("Aggregate %s deleted", parsed_args.name)
        return _fields(found)


class _AggregateHost(_OneAggregate):

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="A compute host.")
        return parser


class AddAggregateHost(_AggregateHost):
    """Add a compute host to a host aggregate (the host joins its availability zone).

    Refused, as Nova refuses it, for a host in another zone or one with
    instances that would change zone.  Prints the aggregate.
    """

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True)
        return _fields(store.aggregates.add_host(parsed_args.name, parsed_args.host))


class RemoveAggregateHost(_AggregateHost):
    """Remove a compute host from a host aggregate.

    Refused, as Nova refuses it, for a host with instances that would
    change zone.  Prints the aggregate.
    """

    def take_action(self, parsed_args: argparse.Namespace
                    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        store = self.app.context().open_store(must_exist=True)
        return _fields(store.aggregates.remove_host(parsed_args.name, parsed_args.host))


#: The entry points of the ``nova_lite.cli`` group these commands are under.
ENTRY_POINTS = {
    "aggregate_create": "nova_lite.cli.aggregate:CreateAggregate",
    "aggregate_list": "nova_lite.cli.aggregate:ListAggregates",
    "aggregate_show": "nova_lite.cli.aggregate:ShowAggregate",
    "aggregate_set": "nova_lite.cli.aggregate:SetAggregate",
    "aggregate_unset": "nova_lite.cli.aggregate:UnsetAggregate",
    "aggregate_delete": "nova_lite.cli.aggregate:DeleteAggregate",
    "aggregate_add_host": "nova_lite.cli.aggregate:AddAggregateHost",
    "aggregate_remove_host": "nova_lite.cli.aggregate:RemoveAggregateHost",
}
