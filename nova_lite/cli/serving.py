"""Shared by ``nova-lite metrics serve`` and ``nova-lite api serve``: serve until a signal."""

import argparse
import logging
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from nova_lite.cli import typed
from nova_lite.db import server_checks
from nova_lite.exception import BadArguments, CommandError
from nova_lite.web_server import DEFAULT_BIND, make_server, serve

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

    from nova_lite.conf import Settings
    from nova_lite.db import Store

LOG = logging.getLogger(__name__)


def add_server_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    """``--port`` and ``--bind``."""
    parser.add_argument("--port", metavar="PORT", type=int, default=default_port,
                        help=f"TCP port to listen on (0: any free port, printed at "
                             f"start). Default: {default_port}.")
    parser.add_argument("--bind", metavar="ADDRESS", default=DEFAULT_BIND,
                        help=f"Address to listen on. Default: {DEFAULT_BIND} (this host "
                             "only).")


def check_port(port: int) -> None:
    """Raise BadArguments (exit status 2) unless ``port`` is 0..65535."""
    if not 0 <= port <= 65535:
        raise BadArguments(f"--port must be between 0 and 65535, got {port}; nothing was "
                           "started")


def serve_until_signal(server: Any, stdout: TextIO, what: str) -> int:
    """Print where ``server`` listens, serve until SIGTERM or SIGINT, close it.

    The signals are handled before the line is printed: whoever reads it
    may stop the server at once, and it stops cleanly (exit status 0).
    """
    previous: dict[signal.Signals, Any] = {}
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        LOG.info("Received signal %d: stopping the %s server", signum, what)
        stopping.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, stop)
    host, port = server.effective_host, server.effective_port
    try:
        stdout.write(f"nova-lite {what} on http://{host}:{port}/ (SIGTERM or Ctrl-C to stop)\n")
        stdout.flush()
        serve(server, stopping)
    except KeyboardInterrupt:
        LOG.info("Interrupted: the %s server stopped", what)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


class ServeCommand(typed.Command):
    """A command that serves a WSGI application of the records, read-only.

    Subclasses set ``default_port`` and ``what`` (named in the start line and
    the logs) and build the application in :meth:`make_app`.
    """

    default_port = 0
    what = "server"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        add_server_arguments(parser, self.default_port)
        return parser

    def make_app(self, store: "Store", settings: "Settings") -> "WSGIApplication":
        """The WSGI application serving ``store`` (opened read-only)."""
        raise NotImplementedError

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        check_port(parsed_args.port)
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        try:
            server = make_server(self.make_app(store, ctx.settings), parsed_args.bind,
                                 parsed_args.port)
        except (OSError, ValueError) as exc:   # in use, not an address of this host
            reason = getattr(exc, "strerror", None) or str(exc)
            raise CommandError(f"Cannot listen on {parsed_args.bind}:{parsed_args.port}: "
                               f"{reason}") from exc
        self.app.service_logging()
        server_checks.log_server_advice(store, f"nova-lite {self.what}", LOG)
        return serve_until_signal(server, self.app.stdout, self.what)
