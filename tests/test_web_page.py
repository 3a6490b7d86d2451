"""The overview page in a real headless Chromium, served by the real API server.

The page's numbers equal the store's and what ``hypervisor list -f json``
and ``hypervisor stats -f json`` print; when a host is added and a build
lands, the page follows (waiting on a condition, never a fixed sleep).
A screenshot is kept as a test artifact: in ``$NOVA_LITE_TEST_ARTIFACTS``
if set, else in the test's temporary directory; its path is attached to
the result as the detail ``screenshot``.

Chromium missing: skipped, or failed under ``NOVA_LITE_REQUIRE_ALL=1``.
"""

import os

from testtools import content

from nova_lite import cluster
from nova_lite.api import make_app
from nova_lite.db import Store
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.testing import browser
from nova_lite.web_server import BackgroundServer
from tests import base
from tests.test_cli import CliTestCase

#: The page polls this often in the tests (seconds).
POLL_S = 0.3
#: Longest wait for the page to show a change (seconds).
WAIT_S = 30


def artifact_path(test, name):
    """Where to keep an artifact: ``$NOVA_LITE_TEST_ARTIFACTS`` or a temp dir."""
    directory = os.environ.get("NOVA_LITE_TEST_ARTIFACTS") or test.state_path
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, name)


class PageReader:
    """Reads what the page shows (after the poll that satisfied a condition)."""

    def __init__(self, test, driver):
        self.test, self.driver = test, driver

    #: Reads the DOM in one script run: the page cannot redraw half-way through.
    READ = """
    const rows = {};
    for (const row of document.querySelectorAll("#cluster tbody tr")) {
      const cells = {};
      for (const c of row.querySelectorAll("td")) cells[c.className.split(" ")[0]] = c.textContent;
      rows[row.dataset.rc] = cells;
    }
    const hosts = {};
    for (const card of document.querySelectorAll("#hosts .host")) {
      const bars = {};
      for (const bar of card.querySelectorAll(".bar-row")) {
        bars[bar.dataset.rc] = {used: bar.dataset.used, capacity: bar.dataset.capacity,
                                free: bar.dataset.free, over: bar.dataset.over,
                                width: bar.querySelector(".used").style.width};
      }
      hosts[card.dataset.host] = bars;
    }
    const findings = [...document.querySelectorAll("#findings tr.finding")].map(
      r => [r.dataset.kind, r.dataset.subject]);
    return {polls: document.getElementById("status").dataset.polls, cluster: rows,
            hosts: hosts, findings: findings};
    """

    def read(self):
        return self.driver.execute_script(self.READ)

    def polls(self):
        return int(self.read()["polls"])

    def cluster(self):
        return {rc: {k: int(v) for k, v in cells.items() if k != "rc"}
                for rc, cells in self.read()["cluster"].items()}

    def hosts(self):
        return {host: {rc: {k: int(v) for k, v in bar.items() if k != "width"}
                       for rc, bar in bars.items()}
                for host, bars in self.read()["hosts"].items()}

    def findings(self):
        return [tuple(f) for f in self.read()["findings"]]

    def wait_for(self, condition, what):
        """Wait (polling the page, at most WAIT_S s) until ``condition(self)`` holds."""
        from selenium.webdriver.support.ui import WebDriverWait

        def check(_):
            return self.polls() > 0 and condition(self)
        from selenium.common.exceptions import TimeoutException
        try:
            WebDriverWait(self.driver, WAIT_S, poll_frequency=0.1).until(check)
        except TimeoutException:
            status = self.driver.find_element("id", "status").text
            path = self.screenshot("timeout.png")
            self.test.fail(f"the page never showed {what} within {WAIT_S} s (status: "
                           f"{status!r}; screenshot {path})")

    def screenshot(self, name):
        path = artifact_path(self.test, name)
        self.test.assertTrue(self.driver.save_screenshot(path))
        self.test.addDetail(name, content.text_content(path))
        return path


def open_page(test, store, settings):
    """(PageReader, server) of the page served over ``store``, in a headless Chromium."""
    browser.use_chromium(test)
    server = BackgroundServer(make_app(store, settings)).start()
    test.addCleanup(server.stop)
    driver = test.useFixture(browser.Chromium()).driver
    driver.get(f"{server.url}/?interval={POLL_S}")
    return PageReader(test, driver), server


class TestOverviewPage(CliTestCase, base.TestCase):

    def setUp(self):
        super().setUp()
        self.settings_ = self.settings(reserved_host_memory_mb=0)
        self.writer = self.sqlite_store()
        self.url = self.writer.url
        _, self.rt1 = self.make_tracker(settings=self.settings_, store=self.writer, host="h1",
                                        vcpus=8, memory_mb=8192, local_gb=100)
        _, self.rt2 = self.make_tracker(settings=self.settings_, store=self.writer, host="h2",
                                        vcpus=4, memory_mb=4096, local_gb=50)
        for host in ("h1", "h2"):
            self.writer.heartbeat(host, COMPUTE_BINARY)
        self.rt1.instance_claim(base.instance(base.flavor(vcpus=2, memory_mb=2048)), "h1")
        self.reader = Store(self.url, readonly=True)
        self.addCleanup(self.reader.close)

    def cli_json(self, *argv):
        import json
        return json.loads(self.ok("--database-url", self.url, *argv, "-f", "json",
                                  state=False))

    def check_against_store_and_commands(self, page):
        shown = page.cluster()
        totals = cluster.cluster_totals(self.writer.get_compute_nodes())
        for line in totals.resources:
            self.assertEqual({k: getattr(line, k) for k in ("total", "reserved", "capacity",
                                                             "used", "free", "over")},
                             shown[line.resource_class], line.resource_class)
        stats = self.cli_json("hypervisor", "stats")
        self.assertEqual((stats["vcpus"], stats["vcpus_used"], stats["vcpus_over"]),
                         tuple(shown["VCPU"][k] for k in ("capacity", "used", "over")))
        self.assertEqual((stats["memory_mb"], stats["memory_mb_used"], stats["free_ram_mb"]),
                         tuple(shown["MEMORY_MB"][k] for k in ("capacity", "used", "free")))
        self.assertEqual((stats["local_gb"], stats["local_gb_used"], stats["free_disk_gb"]),
                         tuple(shown["DISK_GB"][k] for k in ("capacity", "used", "free")))
        bars = page.hosts()
        listed = self.cli_json("hypervisor", "list")
        self.assertEqual(sorted({r["Host"] for r in listed}), sorted(bars))
        for host, per_rc in bars.items():
            rows = [r for r in listed if r["Host"] == host]
            self.assertEqual((sum(r["Memory MB (capacity)"] for r in rows),
                              sum(r["Memory MB Used"] for r in rows),
                              sum(r["Free RAM MB"] for r in rows)),
                             tuple(per_rc["MEMORY_MB"][k] for k in ("capacity", "used", "free")),
                             host)
            self.assertEqual((sum(r["vCPUs (capacity)"] for r in rows),
                              sum(r["vCPUs Used"] for r in rows)),
                             (per_rc["VCPU"]["capacity"], per_rc["VCPU"]["used"]), host)
        return shown

    def test_page_shows_the_store_and_follows_changes(self):
        page, _ = open_page(self, self.reader, self.settings_)
        page.wait_for(lambda p: set(p.hosts()) == {"h1", "h2"}, "the two hosts")
        before = self.check_against_store_and_commands(page)
        self.assertEqual(2048, before["MEMORY_MB"]["used"])
        self.assertEqual([], page.findings())
        # A host is added and a build lands: the page follows.
        _, rt3 = self.make_tracker(settings=self.settings_, store=self.writer, host="h3",
                                   vcpus=16, memory_mb=16384, local_gb=200)
        self.writer.heartbeat("h3", COMPUTE_BINARY)
        rt3.instance_claim(base.instance(base.flavor(vcpus=4, memory_mb=4096)), "h3")
        page.wait_for(lambda p: set(p.hosts()) == {"h1", "h2", "h3"} and
                      p.cluster()["MEMORY_MB"]["used"] == 2048 + 4096,
                      "the new host and its build")
        after = self.check_against_store_and_commands(page)
        self.assertEqual(8192 + 4096 + 16384, after["MEMORY_MB"]["capacity"])
        self.assertEqual(4096, page.hosts()["h3"]["MEMORY_MB"]["used"])
        path = page.screenshot("overview-page.png")
        with open(path, "rb") as handle:
            self.assertEqual(b"\x89PNG", handle.read(4))
