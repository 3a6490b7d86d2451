"""A cluster as an operator runs it: one ``nova-lite compute`` process per host, each on its
own driver, and the operator's commands run elsewhere (here, in the test's process).

Nothing spawns in the operator's process: every build and delete is done by
the owning host's service, on SQLite and on PostgreSQL, with a mixed fleet.
"""

import json
import os
import signal
import subprocess
import sys
import time

from nova_lite.db import Store
from nova_lite.testing import databases
from tests.test_cli import CliTestCase

#: host -> driver: a mixed fleet.
FLEET = {"cmp1": "fake.small", "cmp2": "fake.small", "cmp3": "fake.multinode"}


class ClusterCase(CliTestCase):

    database_url = None

    def setUp(self):
        super().setUp()
        os.makedirs(self.state, exist_ok=True)
        self.config = os.path.join(self.state, "nova-lite.conf")
        self.write_config()
        self.nl("db", "sync")
        self.procs = {}

    def write_config(self, service_down_time=3):
        """The services' and commands' configuration; ``service_down_time``
        (s) is also the lease a host's worker takes its tasks under."""
        url = self.database_url or f"sqlite:///{os.path.join(self.state, 'nova-lite.db')}"
        with open(self.config, "w") as conf_file:
            conf_file.write(
                f"[DEFAULT]\nreport_interval = 1\nservice_down_time = {service_down_time}\n"
                "update_resources_interval = 1\nreserved_host_memory_mb = 0\n"
                f"state_path = {self.state}\n[compute]\nwork_poll_interval = 1\n"
                f"[database]\nconnection = {url}\n")

    def nl(self, *argv):
        return self.ok("--config-file", self.config, *argv)

    def nl_json(self, *argv):
        return json.loads(self.nl(*argv, "-f", "json"))

    def start(self, host, driver):
        log = open(os.path.join(self.state, f"{host}.log"), "ab")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nova_lite.cli.main", "--config-file", self.config,
             "compute", "--host", host, "--driver", driver],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.procs[host] = proc
        self.addCleanup(self.stop, host)
        return proc

    def stop(self, host, sig=signal.SIGTERM):
        proc = self.procs.get(host)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=120)

    def log_of(self, host):
        with open(os.path.join(self.state, f"{host}.log"), encoding="utf-8",
                  errors="replace") as f:
            return f.read()

    def wait_until(self, condition, what, timeout=90):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.1)

    def up_hosts(self):
        return {s["Host"] for s in self.nl_json("service", "list") if s["State"] == "up"}

    def start_fleet(self):
        for host, driver in FLEET.items():
            self.start(host, driver)
        self.wait_until(lambda: self.up_hosts() == set(FLEET), "every service up")
        self.wait_until(lambda: len(self.nl_json("hypervisor", "list")) == 4,
                        "every node recorded")


class Scenarios:

    def test_a_mixed_fleet_builds_and_deletes_through_its_hosts(self):
        self.start_fleet()
        # cmp3's nodes are far bigger: keep it out of the first half of the builds.
        self.nl("service", "disable", "cmp3")
        built = self.nl_json("server", "create", "--flavor", "m1.tiny", "--count", "6",
                             "--wait", "--timeout", "120")
        self.nl("service", "enable", "cmp3")
        built += self.nl_json("server", "create", "--flavor", "m1.tiny", "--count", "6",
                              "--wait", "--timeout", "120")
        self.assertEqual(["active"] * 12, [s["Status"] for s in built])
        self.assertEqual(set(FLEET), {s["Host"] for s in built})
        self.assertEqual([None] * 12, [s["Task"] for s in built])
        stats = self.nl_json("hypervisor", "stats")
        self.assertEqual(12, stats["running_vms"])
        gone = built[0]["ID"]
        self.assertIn(f"Deleted server {gone}",
                      self.nl("server", "delete", gone, "--yes-i-really-mean-it", "--wait"))
        self.assertEqual(11, len(self.nl_json("server", "list")))
        for host in FLEET:   # each host's own pass, with its own driver's guests
            self.wait_until(lambda h=host: self._recorded_clean(h), f"{host} audits clean")
        for host in FLEET:
            self.assertNotIn("Traceback", self.log_of(host))

    def _recorded_clean(self, host):
        store = Store(self.database_url or f"sqlite:///{self.state}/nova-lite.db",
                      readonly=True)
        try:
            (rec,) = store.recorded_findings(host) or (None,)
            return rec is not None and rec.findings == ()
        finally:
            store.close()

    def test_work_for_a_host_that_is_down_waits_and_shows(self):
        self.start("cmp1", "fake.small")
        self.wait_until(lambda: self.up_hosts() == {"cmp1"}, "cmp1 up")
        self.wait_until(lambda: self.nl_json("hypervisor", "list"), "cmp1's node recorded")
        (server,) = self.nl_json("server", "create", "--flavor", "m1.tiny", "--wait")
        self.stop("cmp1")
        self.wait_until(lambda: self.up_hosts() == set(), "cmp1 down")
        said = self.nl("server", "delete", server["ID"], "--yes-i-really-mean-it")
        self.assertIn("is down, so the delete waits", said)
        (row,) = self.nl_json("server", "list")
        self.assertEqual("delete waiting", row["Task"])
        self.assertGreaterEqual(row["Task Age"], 0)
        self.assertEqual(512, self.nl_json("hypervisor", "stats")["memory_mb_used"])
        code, out, err = self.cli("--config-file", self.config, "server", "delete",
                                  server["ID"], "--yes-i-really-mean-it", "--wait",
                                  "--timeout", "1")
        self.assertEqual(1, code)
        self.assertIn("not finished after 1 s", err)
        self.assertNotIn("Traceback", out + err)
        said = self.nl("server", "delete", server["ID"], "--yes-i-really-mean-it", "--force")
        self.assertIn("is down: it destroys the guest when it comes back", said)
        self.assertEqual([], self.nl_json("server", "list"))
        self.assertEqual(0, self.nl_json("hypervisor", "stats")["memory_mb_used"])
        self.assertEqual([server["ID"]], self.host_guests("cmp1"), "still running there")
        self.start("cmp1", "fake.small")   # back: it reaps the guest of the deleted server
        self.wait_until(lambda: self.host_guests("cmp1") == [], "the guest to be reaped")
        self.assertIn(f"destroying the guest of deleted instance {server['ID']}",
                      self.log_of("cmp1"))


    def flavors_file(self):
        path = os.path.join(self.state, "flavors.yaml")
        with open(path, "w") as f:
            f.write('broken: {vcpus: 1, memory_mb: 256, "fake:spawn_error": "disk image '
                    'corrupt"}\n'
                    'slow: {vcpus: 1, memory_mb: 256, "fake:spawn_seconds": "5"}\n')
        return path

    def host_guests(self, host):
        """The guests the fake hypervisor of ``host`` runs (its own file)."""
        from nova_lite import conf
        from nova_lite.virt import loader
        url = self.database_url or f"sqlite:///{self.state}/nova-lite.db"
        store = Store(url, readonly=True)
        self.addCleanup(store.close)
        driver = loader.load_driver("fake", settings=conf.Settings(
            host=host, state_path=self.state, database_url=url))
        driver.init_host(host)
        driver.attach_store(store)
        return driver.list_instances()

    def test_a_failed_spawn_shows_its_reason_and_holds_nothing(self):
        self.start("cmp1", "fake.small")
        self.wait_until(lambda: self.up_hosts() == {"cmp1"}, "cmp1 up")
        self.wait_until(lambda: self.nl_json("hypervisor", "list"), "cmp1's node recorded")
        code, out, err = self.cli("--config-file", self.config, "server", "create",
                                  "--flavors-file", self.flavors_file(), "--flavor", "broken",
                                  "--count", "2", "--wait", "-f", "json")
        self.assertEqual(1, code, err)
        self.assertEqual(["error", "error"], [s["Status"] for s in json.loads(out)])
        self.assertIn("spawn failed: FakeSpawnError", err)
        self.assertIn("disk image corrupt", err)
        self.assertNotIn("Traceback", out + err)
        shown = self.nl_json("server", "show", json.loads(out)[0]["ID"])
        self.assertEqual((None, None, {}), (shown["host"], shown["task"],
                                            shown["allocations"]))
        self.assertIn("disk image corrupt", shown["fault"])
        self.assertEqual(0, self.nl_json("hypervisor", "stats")["memory_mb_used"])
        self.assertEqual([], self.host_guests("cmp1"))
        self.assertNotIn("Traceback", self.log_of("cmp1"))

    def test_a_host_killed_mid_spawn_finishes_the_build_once_when_it_returns(self):
        # A lease far longer than the restart takes: the task must be taken
        # again because its taker is seen gone, not because its lease lapsed.
        self.write_config(service_down_time=300)
        self.start("cmp1", "fake.small")
        self.wait_until(lambda: self.up_hosts() == {"cmp1"}, "cmp1 up")
        self.wait_until(lambda: self.nl_json("hypervisor", "list"), "cmp1's node recorded")
        (server,) = self.nl_json("server", "create", "--flavors-file", self.flavors_file(),
                                 "--flavor", "slow")
        self.wait_until(lambda: self.nl_json("server", "list")[0]["Task"] == "build running",
                        "the host to take the build")
        self.stop("cmp1", signal.SIGKILL)
        (row,) = self.nl_json("server", "list")
        self.assertEqual(("building", "build running"), (row["Status"], row["Task"]))
        self.start("cmp1", "fake.small")   # the same machine: the dead taker is seen at once
        self.wait_until(lambda: self.nl_json("server", "list")[0]["Status"] == "active",
                        "the build to finish", timeout=120)
        self.assertEqual([server["ID"]], self.host_guests("cmp1"))
        store = Store(self.database_url or f"sqlite:///{self.state}/nova-lite.db",
                      readonly=True)
        self.addCleanup(store.close)
        (task,) = store.tasks.find(instance_uuid=server["ID"])
        self.assertEqual(("done", 2), (task.state, task.attempts))
        self.assertIn("which is gone: taking it again", self.log_of("cmp1"))

    def test_two_services_for_one_host_do_each_build_once(self):
        self.start("cmp1", "fake")
        self.procs["cmp1-twin"] = self.procs["cmp1"]
        self.start("cmp1", "fake")   # the same host again, by mistake
        self.addCleanup(self.stop, "cmp1-twin")
        self.wait_until(lambda: self.up_hosts() == {"cmp1"}, "cmp1 up")
        self.wait_until(lambda: self.nl_json("hypervisor", "list"), "cmp1's node recorded")
        built = []
        for _ in range(4):
            built += self.nl_json("server", "create", "--flavor", "m1.tiny", "--count", "5",
                                  "--wait", "--timeout", "120")
        self.assertEqual(["active"] * 20, [s["Status"] for s in built])
        self.assertEqual(sorted(s["ID"] for s in built), self.host_guests("cmp1"))
        store = Store(self.database_url or f"sqlite:///{self.state}/nova-lite.db",
                      readonly=True)
        self.addCleanup(store.close)
        tasks = store.tasks.find()
        self.assertEqual({("done", 1)}, {(t.state, t.attempts) for t in tasks})
        self.assertEqual(20, len(tasks))


class TestClusterSQLite(Scenarios, ClusterCase):
    pass


class TestClusterPostgreSQL(Scenarios, ClusterCase):

    def setUp(self):
        databases.use_postgresql(self)
        self.database_url = self.useFixture(databases.PostgreSQLSchema()).url
        super().setUp()

