"""The HTTP server of the metrics and the web API: waitress, on loopback by default.

:func:`make_server` binds at once (port 0 picks a free port, read back
from ``server.effective_port``) so a caller can print or test the address
before serving.  :func:`serve` runs waitress' own event loop until a
``threading.Event`` is set, then closes the server in the same thread (so
no socket is closed under a running ``select``).
"""

import logging
import threading
from typing import TYPE_CHECKING, Any

import waitress.server
from waitress import wasyncore

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

LOG = logging.getLogger(__name__)

#: Address both servers bind to unless told otherwise: this host only.
DEFAULT_BIND = "127.0.0.1"
#: How often (s) the serving loop checks whether it was asked to stop.
STOP_POLL_S = 0.2


def make_server(app: "WSGIApplication", bind: str = DEFAULT_BIND, port: int = 0,
                threads: int = 4) -> Any:
    """A bound (not yet serving) waitress server of the WSGI ``app``.

    ``bind``: address to listen on; ``port``: TCP port (0: a free one);
    ``threads``: worker threads.  Raises OSError when the address is in use.
    """
    return waitress.server.create_server(app, host=bind, port=port, threads=threads,
                                         ident="nova-lite", clear_untrusted_proxy_headers=True)


def serve(server: Any, stop: threading.Event) -> None:
    """Serve with ``server`` until the Event ``stop`` is set, then close it.

    Requests are answered as soon as they arrive; ``stop`` is looked at
    every ``STOP_POLL_S`` seconds.
    """
    socket_map = server._map   # noqa: SLF001 - waitress' own loop, as server.run() runs it
    try:
        while not stop.is_set() and socket_map:
            wasyncore.loop(timeout=STOP_POLL_S, map=socket_map, count=1,
                           use_poll=server.adj.asyncore_use_poll)
    finally:
        server.task_dispatcher.shutdown(timeout=5)
        for channel in list(socket_map.values()):
            channel.close()


class BackgroundServer:
    """A waitress server of ``app`` on ``bind``:``port`` (0: a free port), in a thread.

    ``port`` is the port it listens on once constructed, ``url``
    its base URL; ``start()`` serves in a daemon thread and ``stop()``
    closes it.  For tests, benchmarks and the compute service's metrics.
    """

    def __init__(self, app: "WSGIApplication", bind: str = DEFAULT_BIND, port: int = 0,
                 what: str = "web") -> None:
        self.server = make_server(app, bind, port)
        self.bind = bind
        self.port = self.server.effective_port
        self.url = f"http://{bind}:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=serve, args=(self.server, self._stop),
                                        daemon=True, name=f"nova-lite {what} {bind}:{self.port}")

    def start(self) -> "BackgroundServer":
        """Serve in a daemon thread; returns self."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (within about ``STOP_POLL_S`` s)."""
        self._stop.set()
        self._thread.join(timeout=10)


__all__ = ["make_server", "serve", "BackgroundServer", "DEFAULT_BIND", "STOP_POLL_S"]
