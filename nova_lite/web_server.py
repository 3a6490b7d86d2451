"""The HTTP server of the metrics and the web API: waitress, on loopback by default.

:func:`make_server` binds at once (port 0 picks a free port, read back
from ``server.effective_port``) so a caller can print or test the address
before serving; ``server.run()`` serves until ``server.close()``.
"""

import logging

import waitress.server

LOG = logging.getLogger(__name__)

#: Address both servers bind to unless told otherwise: this host only.
DEFAULT_BIND = "127.0.0.1"


def make_server(app, bind=DEFAULT_BIND, port=0, threads=4):
    """A bound (not yet serving) waitress server of the WSGI ``app``.

    ``bind``: address to listen on; ``port``: TCP port (0: a free one);
    ``threads``: worker threads.  Raises OSError when the address is in use.
    """
    return waitress.server.create_server(app, host=bind, port=port, threads=threads,
                                         ident="nova-lite", clear_untrusted_proxy_headers=True)


__all__ = ["make_server", "DEFAULT_BIND"]
