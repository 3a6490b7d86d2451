"""The database server's settings that work against a fleet, as advice.

The advice is judged from the settings alone; a real PostgreSQL server is
read for them, and a compute service, ``nova-lite api serve`` and
``nova-lite metrics serve`` log the advice when they start: a session of
the test server with ``track_counts`` off (a setting a superuser may
change for a session) gives advice whatever the server's own
configuration.
"""

import logging
import signal
import subprocess
import sys
import urllib.parse

import fixtures

from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store, server_checks
from tests import base


class AdviceTests(base.TestCase):

    def test_autovacuum_or_track_counts_off_is_advice(self):
        self.assertEqual([], server_checks.advice_for({"autovacuum": "on", "track_counts": "on"}))
        self.assertEqual([], server_checks.advice_for({}))   # not shown: not judged
        off = server_checks.advice_for({"autovacuum": "off", "track_counts": "on"})
        self.assertEqual([("autovacuum", "off")], [(a.setting, a.value) for a in off])
        self.assertIn("VACUUM (ANALYZE)", off[0].advice)
        self.assertTrue(str(off[0]).startswith("autovacuum = off: turn it on"))
        both = server_checks.advice_for({"autovacuum": "off", "track_counts": "off"})
        self.assertEqual(["autovacuum", "track_counts"], [a.setting for a in both])
        self.assertIn("autovacuum needs it", both[1].advice)


class TestServerAdviceOnSQLite(base.OnSQLiteFile, base.TestCase):

    def test_an_embedded_file_has_no_server_advice(self):
        self.assertEqual([], self.make_store().server_advice())


class TestServerAdviceOnPostgreSQL(base.OnPostgreSQL, base.TestCase):

    def shown(self, url):
        """The settings as a session of ``url`` shows them (SHOW)."""
        store = Store(url)
        self.addCleanup(store.close)
        with store.db.engine.connect() as conn:
            return {name: conn.exec_driver_sql(f"SHOW {name}").scalar_one()
                    for name in server_checks.SETTINGS}

    def session_without_track_counts(self):
        parts = urllib.parse.urlsplit(self.url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        query["options"] = " ".join(filter(None, [query.get("options"), "-c track_counts=off"]))
        return parts._replace(query=urllib.parse.urlencode(query)).geturl()

    def test_the_advice_is_the_server_s_settings_judged(self):
        store = self.make_store()
        self.assertEqual(server_checks.advice_for(self.shown(self.url)), store.server_advice())
        url = self.session_without_track_counts()
        self.assertEqual("off", self.shown(url)["track_counts"])
        off = Store(url)
        self.addCleanup(off.close)
        self.assertIn("track_counts", [a.setting for a in off.server_advice()])

    def test_a_compute_service_logs_the_advice_when_it_starts(self):
        url = self.session_without_track_counts()
        store = Store(url)
        self.addCleanup(store.close)
        driver, _ = self.make_tracker(store=store)
        service = ComputeService(self.host, driver, store=store,
                                 settings=self.settings(reserved_host_memory_mb=0))
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        self.assertEqual(1, service.run(max_passes=1, handle_signals=False))
        expected = [str(a) for a in server_checks.advice_for(self.shown(url))]
        self.assertIn("track_counts = off: turn it on", "\n".join(expected))
        for line in expected:
            self.assertIn(f"Database server of host {self.host}: {line}", log.output)

    def test_the_api_and_metrics_servers_log_the_advice_when_they_start(self):
        self.make_store()   # the records the servers open read-only
        url = self.session_without_track_counts()
        expected = [str(a) for a in server_checks.advice_for(self.shown(url))]
        self.assertIn("track_counts = off: turn it on", "\n".join(expected))
        state = self.useFixture(fixtures.TempDir()).path
        for command, what in ((["api", "serve"], "API and overview page"),
                              (["metrics", "serve"], "metrics")):
            proc = subprocess.Popen(
                [sys.executable, "-m", "nova_lite.cli.main", "--database-url", url,
                 "--state-path", state, *command, "--port", "0"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
            self.addCleanup(lambda proc=proc: proc.poll() is None and proc.kill())
            started = proc.stdout.readline()   # the advice is logged before this line
            self.assertIn("http://", started, "" if started else proc.stderr.read())
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(0, proc.wait(timeout=120))
            logged = proc.stderr.read()
            for line in expected:
                self.assertIn(f"Database server of nova-lite {what}: {line}", logged)
