"""A libvirt host in a mixed cluster: its own ``nova-lite compute`` process on real libvirt.

The compute service of host ``lv1`` runs the libvirt driver on libvirt's
in-process ``test:///default`` driver, beside a fake host; the operator's
commands, in other processes, build, delete and audit through the records.
The guests exist only inside lv1's process, so a build that did not go
through lv1 would show in its audit.
"""

import json
import os
import signal
import subprocess
import sys
import time

import fixtures

from nova_lite_libvirt.tests import base

#: The domain test:///default defines on its own: no nova-lite record backs it.
PREDEFINED = "6695eb01-f6a4-8304-79aa-97f2502e193f"


class TestLibvirtHostInACluster(base.RealBackendCase):

    def setUp(self):
        super().setUp()
        self.state = self.useFixture(fixtures.TempDir()).path
        self.config = os.path.join(self.state, "nova-lite.conf")
        with open(self.config, "w", encoding="utf-8") as conf:
            conf.write(
                f"[DEFAULT]\nstate_path = {self.state}\n"
                f"instances_path = {self.state}/instances\nreport_interval = 1\n"
                "service_down_time = 5\nupdate_resources_interval = 2\n"
                "[compute]\nwork_poll_interval = 0.2\n"
                "[libvirt]\nconnection_uri = test:///default\n")
        self.nl("db", "sync")
        self.start("lv1", "libvirt")
        self.start("fk1", "fake.small")
        self.wait_until(lambda: {h["Host"] for h in self.nl_json("hypervisor", "list")}
                        == {"lv1", "fk1"}, "both hosts' nodes recorded")

    def nl(self, *argv, code=0):
        done = subprocess.run([sys.executable, "-m", "nova_lite.cli.main", "--config-file",
                               self.config, *argv], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=300)
        self.assertEqual(code, done.returncode, f"{argv}: {done.stdout}\n{done.stderr}")
        self.assertNotIn("Traceback", done.stdout + done.stderr)
        return done.stdout

    def nl_json(self, *argv, code=0):
        return json.loads(self.nl(*argv, "-f", "json", code=code))

    def start(self, host, driver):
        log = open(os.path.join(self.state, f"{host}.log"), "ab")
        self.addCleanup(log.close)
        proc = subprocess.Popen([sys.executable, "-m", "nova_lite.cli.main", "--config-file",
                                 self.config, "compute", "--host", host, "--driver", driver],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=120)
        self.addCleanup(stop)

    def wait_until(self, condition, what, timeout=120):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.2)

    def test_builds_deletes_and_audits_through_the_libvirt_host(self):
        self.nl("service", "disable", "fk1")
        built = self.nl_json("server", "create", "--flavor", "m1.tiny", "--count", "2",
                             "--wait", "--timeout", "120")
        self.assertEqual([("active", "lv1")] * 2, [(s["Status"], s["Host"]) for s in built])
        audit = self.nl_json("audit", "--host", "lv1", code=3)
        # lv1's own libvirt has both guests; only test:///default's own domain is unknown.
        self.assertEqual([("unknown_guest", PREDEFINED)],
                         [(f["kind"], f["subject"]) for f in audit["leaks"]])
        self.assertIn("Deleted server", self.nl("server", "delete", built[0]["ID"],
                                         "--yes-i-really-mean-it", "--wait"))
        self.nl("service", "enable", "fk1")
        self.nl("service", "disable", "lv1")
        (fake,) = self.nl_json("server", "create", "--flavor", "m1.tiny", "--wait")
        self.assertEqual(("active", "fk1"), (fake["Status"], fake["Host"]))
        audit = self.nl_json("audit", "--host", "lv1", code=3)
        self.assertEqual([("unknown_guest", PREDEFINED)],
                         [(f["kind"], f["subject"]) for f in audit["leaks"]])
        self.assertEqual([], [d for n in audit["nodes"] for d in n["differences"]
                              if d["uuid"] != PREDEFINED])
        self.nl_json("audit", "--host", "fk1")   # exit 0: clean
