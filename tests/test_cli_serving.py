"""``serve_until_signal``: whoever reads the start line may stop the server at once.

A supervisor (or a test) starts ``nova-lite api serve`` or ``metrics
serve``, reads the line that says where it listens, and may send SIGTERM
the next moment: the server's own handler must be in place by then, so
that it stops cleanly (exit status 0) instead of being killed.
"""

import io
import signal
import threading

from nova_lite.cli import serving
from nova_lite.web_server import make_server
from tests import base


def _app(environ, start_response):
    start_response("204 No Content", [])
    return [b""]


class _ReaderWhoStopsIt(io.StringIO):
    """A stdout that, as the start line is written, sends SIGTERM as a reader
    of it would: to the handler in place at that moment (the default one
    would end the test process, so its absence is raised instead)."""

    def __init__(self):
        super().__init__()
        self.handler = None

    def write(self, text):
        self.handler = signal.getsignal(signal.SIGTERM)
        if not callable(self.handler):
            raise RuntimeError(f"the start line {text!r} was printed before the server "
                               f"handled SIGTERM ({self.handler!r})")
        self.handler(signal.SIGTERM, None)
        return super().write(text)


class TestServeUntilSignal(base.TestCase):

    def test_a_sigterm_as_soon_as_the_line_is_printed_stops_it_cleanly(self):
        self.assertIs(threading.main_thread(), threading.current_thread(),
                      "signal handlers are installed from the main thread only")
        before = signal.getsignal(signal.SIGTERM)
        server = make_server(_app, "127.0.0.1", 0)
        self.addCleanup(lambda: [channel.close() for channel in list(server._map.values())])
        out = _ReaderWhoStopsIt()
        self.assertEqual(0, serving.serve_until_signal(server, out, "test"))
        self.assertIn(f"nova-lite test on http://127.0.0.1:{server.effective_port}/",
                      out.getvalue())
        self.assertIs(before, signal.getsignal(signal.SIGTERM), "the handler is put back")
        self.assertEqual({}, server._map, "the server was closed")
