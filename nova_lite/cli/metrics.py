"""``nova-lite metrics serve|textfile``: Prometheus metrics of the records."""

import argparse
import logging
import os
from typing import TYPE_CHECKING

from nova_lite import metrics
from nova_lite.cli import typed
from nova_lite.cli.context import BadArguments
from nova_lite.cli.serving import ServeCommand

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIApplication

    from nova_lite.conf import Settings
    from nova_lite.db import Store

LOG = logging.getLogger(__name__)

#: Default port of ``metrics serve`` (Nova's exporters have none; this one is free).
DEFAULT_PORT = 9178


class ServeMetrics(ServeCommand):
    """Serve Prometheus metrics over HTTP at /metrics until SIGTERM or Ctrl-C.

    Per node and resource class: total, reserved, allocation ratio,
    capacity (floor((total - reserved) x ratio)), used, free (never
    negative) and over; PCI devices per kind: total, in use and free; per
    compute service: up (heartbeat within
    service_down_time) and enabled; and the claims and audits of this
    process.  Past [metrics] per_node_series_max_nodes nodes the capacity
    and PCI gauges are summed per host ([metrics] per_node_series).  The
    nodes are read once at start, so the first scrape of a large fleet
    finds them read.  Read-only: the database is opened read-only.
    """

    default_port = DEFAULT_PORT
    what = "metrics"

    def make_app(self, store: "Store", settings: "Settings") -> "WSGIApplication":
        exporter = metrics.Exporter(store, settings)
        exporter.warm_up()   # a large fleet's first read, before the first scrape
        return metrics.wsgi_app(exporter)


class WriteMetricsTextfile(typed.Command):
    """Write the metrics once to PATH for node_exporter's textfile collector.

    The file is written atomically (a temporary file in the same directory,
    then renamed), so node_exporter never reads half of it; give it a
    ``.prom`` name in the collector's directory and run this from cron or a
    systemd timer.
    """

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("path", metavar="PATH",
                            help="File to write (e.g. /var/lib/node_exporter/nova_lite.prom).")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        directory = os.path.dirname(os.path.abspath(parsed_args.path))
        if not os.path.isdir(directory):
            raise BadArguments(f"Cannot write {parsed_args.path}: no directory {directory}; "
                               "nothing was written")
        ctx = self.app.context()
        store = ctx.open_store(must_exist=True, readonly=True)
        metrics.write_textfile(parsed_args.path, metrics.Exporter(store, ctx.settings))
        LOG.info("Wrote metrics to %s", parsed_args.path)
        return 0
