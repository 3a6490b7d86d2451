"""``nova-lite api serve``: the read-only JSON API and the overview page."""

from typing import TYPE_CHECKING

from nova_lite.api import make_app
from nova_lite.cli.serving import ServeCommand

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

    from nova_lite.conf import Settings
    from nova_lite.db import Store

#: Default port of ``api serve`` (Nova's compute API listens on 8774).
DEFAULT_PORT = 8774


class ServeApi(ServeCommand):
    """Serve the read-only JSON API (/v1/...) and the overview page (/) until SIGTERM.

    The API covers hypervisors (a page of at most [api] max_limit at a
    time, with limit and marker), hosts, services, cluster totals, node
    explain and the audit's findings, described at /v1/openapi.json; the
    page polls it and shows cluster total/used/free/over per resource
    class, a usage bar per host and the findings.  Every route is GET:
    other methods get 405, and the database is opened read-only.  The
    node records are read once at start, in the background.
    """

    default_port = DEFAULT_PORT
    what = "API and overview page"

    def make_app(self, store: "Store", settings: "Settings") -> "WSGIApplication":
        app = make_app(store, settings)
        app.warm_up()   # a large fleet's first read, before the first request
        return app
