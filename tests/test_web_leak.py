"""The classic leak, end to end through the metrics, the API and the page.

Instances are deleted while their compute service is down (the API marks
the records deleted; no tracker frees the claims): stale allocations.
The metrics, the JSON API and the overview page show the lost capacity
and the findings; after ``nova-lite audit --heal`` they show the freed
capacity and no finding.  The page part runs where Chromium is (and is
required under ``NOVA_LITE_REQUIRE_ALL=1``).
"""

import json
import os
import urllib.request

from nova_lite import conf, metrics
from nova_lite.api import make_app
from nova_lite.db import Store
from nova_lite.testing import browser, components
from nova_lite.web_server import BackgroundServer
from tests import base
from tests.test_cli import CliTestCase
from tests.test_heal import api_delete
from tests.test_metrics import parse, scrape, value
from tests.test_web_page import POLL_S, PageReader

HOST, DRIVER = "leakhost", "fake.small"
#: fake.small offers 8192 MB; the default reserved_host_memory_mb is 512.
CAPACITY_MB, FLAVOR_MB = 7680, 2048


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as answer:
        return json.loads(answer.read())


class TestLeakThroughTheWeb(CliTestCase, base.TestCase):

    def run_json(self, *argv, code=0):
        got, out, err = self.cli(*argv, "-f", "json")
        self.assertEqual(code, got, f"{argv}: {out}\n{err}")
        return json.loads(out)

    def figures(self, metrics_port, api_url):
        """(metrics used/free MiB, API cluster used/free MiB, API findings)."""
        samples = parse(scrape(metrics_port))
        labels = dict(host=HOST, node=HOST, resource_class="MEMORY_MB")
        cluster = {r["resource_class"]: r for r in get_json(api_url + "/v1/cluster")[
            "resources"]}["MEMORY_MB"]
        findings = get_json(api_url + "/v1/findings")["findings"]
        return ((value(samples, "nova_lite_resource_used", **labels),
                 value(samples, "nova_lite_resource_free", **labels)),
                (cluster["used"], cluster["free"]),
                sorted((f["kind"], f["subject"]) for f in findings))

    def test_lost_capacity_shows_then_heals(self):
        os.makedirs(self.state, exist_ok=True)
        self.ok("compute", "--once", "--host", HOST, "--driver", DRIVER)
        built = self.run_json("server", "create", "--flavor", "m1.small", "--count", "3")
        kept, *deleted = [b["ID"] for b in built]
        url = conf.Settings(state_path=self.state).database_url
        writer = Store(url)
        self.addCleanup(writer.close)
        for uuid in deleted:   # the compute service is down: nobody frees the claims
            api_delete(writer, uuid)
        settings = conf.Settings(state_path=self.state)
        reader = Store(url, readonly=True)
        self.addCleanup(reader.close)
        served = metrics.MetricsServer(metrics.Exporter(reader, settings)).start()
        self.addCleanup(served.stop)
        api = BackgroundServer(make_app(reader, settings)).start()
        self.addCleanup(api.stop)
        page = None
        if browser.chromium_problem() is None or components.is_required("chromium"):
            browser.use_chromium(self)
            chromium = self.useFixture(browser.Chromium())
            chromium.driver.get(f"{api.url}/?interval={POLL_S}")
            page = PageReader(self, chromium.driver, chromium)

        stale = sorted(("stale_allocation", u) for u in deleted)
        lost = (3 * FLAVOR_MB, CAPACITY_MB - 3 * FLAVOR_MB)
        self.assertEqual((lost, lost, stale), self.figures(served.port, api.url))
        if page is not None:
            page.wait_for(lambda p: sorted(p.findings()) == stale, "the stale allocations")
            self.assertEqual(lost, tuple(page.hosts()[HOST]["MEMORY_MB"][k]
                                         for k in ("used", "free")))
            page.screenshot("leak-before-heal.png")

        healed = self.run_json("audit", "--heal", "--local", "--host", HOST, "--driver", DRIVER,
                               code=3)
        self.assertEqual(sorted(deleted), sorted(a["subject"] for a in healed["heal"]))

        freed = (FLAVOR_MB, CAPACITY_MB - FLAVOR_MB)
        self.assertEqual((freed, freed, []), self.figures(served.port, api.url))
        self.assertEqual([kept], [a.consumer_uuid for a in writer.list_allocations()])
        if page is not None:
            page.wait_for(lambda p: p.findings() == [] and tuple(
                p.hosts()[HOST]["MEMORY_MB"][k] for k in ("used", "free")) == freed,
                "the freed capacity")
            self.assertEqual(freed, tuple(page.cluster()["MEMORY_MB"][k]
                                          for k in ("used", "free")))
            page.screenshot("leak-after-heal.png")
