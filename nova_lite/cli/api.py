"""``nova-lite api serve``: the read-only JSON API and the overview page."""

import logging

from cliff import command

from nova_lite.api import make_app
from nova_lite.cli.context import BadArguments
from nova_lite.cli.serving import add_server_arguments, check_port, serve_until_signal
from nova_lite.web_server import make_server

LOG = logging.getLogger(__name__)

#: Default port of ``api serve`` (Nova's compute API listens on 8774).
DEFAULT_PORT = 8774


class ServeApi(command.Command):
    """Serve the read-only JSON API (/v1/...) and the overview page (/) until SIGTERM.

    The API covers hypervisors, hosts, services, cluster totals, node
    explain and the audit's findings, described at /v1/openapi.json; the
    page polls it and shows cluster total/used/free/over per resource
    class, a usage bar per host and the findings.  Every route is GET:
    other methods get 405, and the database is opened read-only.
    """

    def get_parser(self, prog_name):
        parser = super().get_parser(prog_name)
        add_server_arguments(parser, DEFAULT_PORT)
        return parser

    def take_action(self, parsed_args):
        check_port(parsed_args.port)
        self.app.service_logging()
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        try:
            server = make_server(make_app(store, ctx.settings), parsed_args.bind,
                                 parsed_args.port)
        except OSError as exc:
            raise BadArguments(f"Cannot listen on {parsed_args.bind}:{parsed_args.port}: "
                               f"{exc.strerror or exc}") from exc
        return serve_until_signal(server, self.app.stdout, "API and overview page")
