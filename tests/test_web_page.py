"""The overview page in a real headless Chromium, served by the real API server.

The page's numbers equal the store's and what ``hypervisor list -f json``
and ``hypervisor stats -f json`` print; when a host is added and a build
lands, the page follows (waiting on a condition, never a fixed sleep).
It works under the API's Content-Security-Policy: the browser's console
shows no violation and no error.  Whatever ``interval`` a URL gives it,
the page never polls faster than the minimum.  A screenshot is kept as a
test artifact: in ``$NOVA_LITE_TEST_ARTIFACTS`` if set, else in the test's
temporary directory; its path is attached to the result as the detail
``screenshot``.

Chromium missing: skipped, or failed under ``NOVA_LITE_REQUIRE_ALL=1``.
"""

import os
import threading
import time

from testtools import content
from werkzeug.wrappers import Request

from nova_lite import cluster
from nova_lite.api import make_app, query
from nova_lite.db import Store
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.objects import PciDevice, PciRequest
from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory
from nova_lite.testing import browser
from nova_lite.web_server import BackgroundServer
from tests import base
from tests.test_cli import CliTestCase

#: The page polls this often in the tests (seconds): the shortest period it takes.
POLL_S = query.MIN_INTERVAL_S
#: Longest wait for the page to show a change (seconds).
WAIT_S = 30


def artifact_path(test, name):
    """Where to keep an artifact: ``$NOVA_LITE_TEST_ARTIFACTS`` or a temp dir."""
    directory = os.environ.get("NOVA_LITE_TEST_ARTIFACTS") or test.state_path
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, name)


class PageReader:
    """Reads what the page shows (after the poll that satisfied a condition)."""

    def __init__(self, test, driver, chromium=None):
        self.test, self.driver, self.chromium = test, driver, chromium
        self.console = []

    #: Reads the DOM in one script run: the page cannot redraw half-way through.
    READ = """
    const rows = {};
    for (const row of document.querySelectorAll("#cluster tbody tr")) {
      const cells = {};
      for (const c of row.querySelectorAll("td")) cells[c.className.split(" ")[0]] = c.textContent;
      rows[row.dataset.rc] = cells;
    }
    const hosts = {};
    const devices = {};
    const children = {};
    for (const card of document.querySelectorAll("#hosts .host")) {
      const bars = {};
      for (const bar of card.querySelectorAll(".bar-row")) {
        bars[bar.dataset.rc] = {used: bar.dataset.used, capacity: bar.dataset.capacity,
                                free: bar.dataset.free, over: bar.dataset.over,
                                width: bar.querySelector(".used").style.width};
      }
      hosts[card.dataset.host] = bars;
      const pci = card.querySelector(".pci");
      if (pci) devices[card.dataset.host] = {total: pci.dataset.total, free: pci.dataset.free,
                                             in_use: pci.dataset.inUse, text: pci.textContent};
      for (const child of card.querySelectorAll(".child")) {
        children[card.dataset.host + "/" + child.dataset.rc] = {
          capacity: child.dataset.capacity, used: child.dataset.used, free: child.dataset.free,
          text: child.textContent};
      }
    }
    const findings = [...document.querySelectorAll("#findings tr.finding")].map(
      r => [r.dataset.kind, r.dataset.subject]);
    return {polls: document.getElementById("status").dataset.polls, cluster: rows,
            hosts: hosts, devices: devices, children: children, findings: findings};
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

    def devices(self):
        """``{host: {"total", "free", "in_use": int, "text": str}}`` of the hosts
        whose card shows PCI devices."""
        return {host: {k: v if k == "text" else int(v) for k, v in shown.items()}
                for host, shown in self.read()["devices"].items()}

    def children(self):
        """``{"host/class": {"capacity", "used", "free": int, "text": str}}`` of the
        hosts whose card shows child providers."""
        return {key: {k: v if k == "text" else int(v) for k, v in shown.items()}
                for key, shown in self.read()["children"].items()}

    def interval(self):
        """The poll period (s) the page uses, as it shows it."""
        return float(self.driver.find_element("id", "status").get_attribute("data-interval"))

    def read_console(self):
        """Every console entry so far (kept in ``self.console``)."""
        self.console += self.chromium.console()
        return self.console

    def assert_clean_console(self):
        """No Content-Security-Policy violation, and no error at all, in the console."""
        entries = self.read_console()
        violations = [e["message"] for e in entries if e.get("source") == "security"
                      or "Content Security Policy" in e["message"]]
        self.test.assertEqual([], violations, "CSP violations in the browser console")
        self.test.assertEqual([], [e["message"] for e in entries if e["level"] == "SEVERE"],
                              "errors in the browser console")

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


def open_page(test, store, settings, app=None, query_string=f"interval={POLL_S}"):
    """(PageReader, server) of the page served over ``store``, in a headless Chromium.

    ``app``: the WSGI application to serve (default the API over ``store``).
    """
    browser.use_chromium(test)
    server = BackgroundServer(app or make_app(store, settings)).start()
    test.addCleanup(server.stop)
    chromium = test.useFixture(browser.Chromium())
    chromium.driver.get(f"{server.url}/?{query_string}")
    return PageReader(test, chromium.driver, chromium), server


class PageAnyQuery:
    """The API, except that the page is served whatever its query says.

    Stands for a page opened by a hand-edited URL the server never
    checked (a saved copy, a proxy that rewrites the query): what the page's
    own script does with it is under test.  ``polls`` records when each
    ``/v1/cluster`` request arrived (monotonic s).  ``inject``: bytes added
    to the page before ``</body>``.
    """

    def __init__(self, app, inject=b""):
        self.app, self.inject = app, inject
        self.polls = []
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") == "/v1/cluster":
            with self._lock:
                self.polls.append(time.monotonic())
        if environ.get("PATH_INFO") == "/":
            environ = dict(environ, QUERY_STRING="")
            response = self.app.dispatch(Request(environ))
            response.set_data(response.get_data().replace(b"</body>", self.inject + b"</body>"))
            return response(environ, start_response)
        return self.app(environ, start_response)


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
        self.assertEqual(POLL_S, page.interval())
        page.assert_clean_console()

    def test_a_hosts_pci_devices_show_and_follow_its_claims(self):
        gpus = [PciDevice(address=f"0000:81:00.{i}", vendor_id="10de", product_id="1db4")
                for i in range(2)]
        _, rt3 = self.make_tracker(settings=self.settings_, store=self.writer, host="h3",
                                   vcpus=8, memory_mb=8192, local_gb=100, pci_devices=gpus)
        self.writer.heartbeat("h3", COMPUTE_BINARY)
        page, _ = open_page(self, self.reader, self.settings_)
        page.wait_for(lambda p: "h3" in p.devices(), "h3's devices")
        self.assertEqual({"h3": {"total": 2, "free": 2, "in_use": 0,
                                 "text": "PCI devices: 2 free of 2 (0 in use)"}}, page.devices())
        rt3.instance_claim(base.instance(base.flavor(), pci_requests=[
            PciRequest(count=1, vendor_id="10de", product_id="1db4")]), "h3")
        page.wait_for(lambda p: p.devices()["h3"]["free"] == 1, "the claimed device")
        self.assertEqual((2, 1), (page.devices()["h3"]["total"], page.devices()["h3"]["in_use"]))
        page.assert_clean_console()

    def test_a_hosts_gpus_show_and_follow_its_claims(self):
        gpus = [ChildProvider(name=f"h3_gpu{i}", inventories={"VGPU": Inventory(total=2)})
                for i in range(2)]
        _, rt3 = self.make_tracker(settings=self.settings_, store=self.writer, host="h3",
                                   vcpus=8, memory_mb=8192, local_gb=100, providers=gpus)
        self.writer.heartbeat("h3", COMPUTE_BINARY)
        page, _ = open_page(self, self.reader, self.settings_)
        page.wait_for(lambda p: "h3/VGPU" in p.children(), "h3's GPUs")
        self.assertEqual({"h3/VGPU": {"capacity": 4, "used": 0, "free": 4,
                                      "text": "VGPU on 2 device(s): 4 free of 4 (0 in use)"}},
                         page.children())
        rt3.instance_claim(base.instance(base.flavor(extra_specs={"resources:VGPU": "1"})),
                           "h3")
        page.wait_for(lambda p: p.children()["h3/VGPU"]["free"] == 3, "the claimed vGPU")
        page.assert_clean_console()

    def test_the_console_check_sees_a_violation(self):
        # The check above is not vacuous: inline script and style are refused and seen.
        app = PageAnyQuery(make_app(self.reader, self.settings_),
                           inject=b"<script>document.title = 'x';</script>"
                                  b"<p style='color: red'>inline</p>")
        page, _ = open_page(self, self.reader, self.settings_, app=app)
        page.wait_for(lambda p: set(p.hosts()) == {"h1", "h2"}, "the two hosts")
        self.assertEqual("nova-lite overview", page.driver.title)   # the script never ran
        violations = [e for e in page.read_console() if e.get("source") == "security"]
        self.assertEqual(2, len(violations), violations)
        self.assertRaises(AssertionError, page.assert_clean_console)

    def test_the_page_never_polls_faster_than_the_minimum(self):
        app = PageAnyQuery(make_app(self.reader, self.settings_))
        page, server = open_page(self, self.reader, self.settings_, app=app,
                                 query_string="interval=0")
        # The page clamps 0 to the minimum: let it poll three times and time the rounds.
        page.wait_for(lambda p: p.polls() >= 3, "three polls")
        self.assertEqual(query.MIN_INTERVAL_S, page.interval())
        with app._lock:   # noqa: SLF001 - the test's own recorder
            arrivals = list(app.polls)
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
        self.assertGreaterEqual(len(gaps), 2, arrivals)
        # Each round waits the period after the previous one ended: never sooner.
        self.assertGreaterEqual(min(gaps), query.MIN_INTERVAL_S * 0.95, gaps)
        page.assert_clean_console()
        # Any other value the server would refuse: the page clamps it or takes its default.
        expected = {"0.001": 1, "-5": 5, "abc": 5, "Infinity": 5, "NaN": 5, "": 5, "1e-9": 5,
                    "99999": query.MAX_INTERVAL_S, "2.5": 2.5, "0x10": 5, "%20": 5}
        shown = {}
        for value in expected:
            page.driver.get(f"{server.url}/?interval={value}")
            page.wait_for(lambda p: p.polls() >= 1, f"the page with interval={value!r}")
            shown[value] = page.interval()
        self.assertEqual(expected, shown)
