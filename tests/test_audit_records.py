"""``nova-lite audit`` reads the records; a host's audit is done by its own compute service.

Real compute services (``ComputeService`` run in a thread, or one pass at a
time with ``run_once()``) on a real SQLite file and on PostgreSQL, and the
real ``nova-lite`` command in this process:

- ``audit --host H`` records an audit task; H's service answers from H's
  own driver (its guests, not another host's, not this process's), and heals
  there when asked;
- ``audit`` alone lists every host's recorded findings, who recorded them
  and whether the host is up;
- a host that is down is answered at once with what was recorded for it
  (a live peer adds ``tasks_waiting``), and nothing is left waiting; a
  deadline that passes cancels the audit; an unknown host records nothing.
"""

import json
import logging
import os
import re
import threading
import time
import uuid

import fixtures
import yaml

from nova_lite import conf, findings, work
from nova_lite.api import make_app
from nova_lite.audit_report import AuditRequest
from nova_lite.compute import audit_work
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store, models
from nova_lite.testing import databases
from nova_lite.virt import loader
from nova_lite.web_server import BackgroundServer
from nova_lite.work import WorkRequest
from tests import base
from tests.test_api import request
from tests.test_cli import CliTestCase
from tests.test_heal import api_delete, beat


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class AuditRecordsTests:
    """Mixed into a CliTestCase; ``database_args()`` and ``url()`` pick the store."""

    def setUp(self):
        super().setUp()
        self.logs = self.useFixture(fixtures.FakeLogger(level=logging.INFO))
        self.handlers = list(logging.getLogger().handlers)
        os.makedirs(self.state, exist_ok=True)
        self.db_args = self.database_args()
        self.store = Store(self.url())
        self.addCleanup(self.store.close)

    # -- helpers ---------------------------------------------------------------
    def run_cli(self, *argv):
        return self.cli(*self.db_args, *argv)

    def run_json(self, *argv, code=0):
        got, out, err = self.run_cli(*argv, "-f", "json")
        self.assertEqual(code, got, f"{argv}: {out}\n{err}")
        return json.loads(out)

    def service(self, host):
        """A compute service of ``host`` on the fake driver (not started)."""
        settings = conf.Settings(host=host, state_path=self.state, database_url=self.url(),
                                 reserved_host_memory_mb=0, work_poll_interval=0.05,
                                 update_resources_interval=3600)
        driver = loader.load_driver("fake", settings=settings)
        self.addCleanup(driver.destroy_all)
        store = Store(self.url())
        self.addCleanup(store.close)
        return ComputeService(host, driver, store=store, settings=settings)

    def start(self, svc):
        """Run ``svc`` in a thread until the test ends; returns once its first
        pass recorded its findings."""
        thread = threading.Thread(target=svc.run, kwargs={"handle_signals": False},
                                  daemon=True, name=f"test compute {svc.host}")
        thread.start()
        self.addCleanup(thread.join, 60)
        self.addCleanup(svc.stop)
        self.wait_for(lambda: self.store.recorded_findings(svc.host),
                      f"the first pass of host {svc.host}")

    def wait_for(self, condition, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.02)

    def guest(self, svc):
        """Spawn on ``svc``'s own driver a guest that no record backs; returns its uuid."""
        inst = base.instance(host=svc.host, node=svc.host)
        svc.driver.spawn(inst)
        return inst.uuid

    def audit_tasks(self, host=None):
        return self.store.tasks.find(host, kinds=(work.AUDIT,))

    def leak_metrics(self):
        """``{(host, kind): value}`` of nova_lite_leak_findings (``metrics textfile``)."""
        path = os.path.join(self.state, "metrics.prom")
        code, out, err = self.run_cli("metrics", "textfile", path)
        self.assertEqual(0, code, err)
        with open(path, encoding="utf-8") as f:
            found = re.findall(r'^nova_lite_leak_findings\{host="([^"]+)",kind="([^"]+)"\} '
                               r'(\S+)$', f.read(), re.MULTILINE)
        return {(host, kind): float(value) for host, kind, value in found}

    # -- a host audits itself --------------------------------------------------
    def test_each_host_answers_from_its_own_driver(self):
        h1, h2 = self.service("h1"), self.service("h2")
        self.start(h1)
        self.start(h2)
        g1, g2 = self.guest(h1), self.guest(h2)

        data = self.run_json("audit", "--host", "h1", code=3)
        self.assertEqual(list(AuditRequest().fields()), list(data))
        self.assertEqual(("h1", "fake", True), (data["host"], data["driver"],
                                               data["guests_listed"]))
        self.assertEqual([("unknown_guest", g1)],
                         [(f["kind"], f["subject"]) for f in data["leaks"]])
        self.assertEqual([("unknown_guest", g1)],
                         [(d["kind"], d["uuid"]) for d in data["differences"]])
        (task,) = self.audit_tasks("h1")
        self.assertEqual(work.DONE, task.state)
        self.assertTrue(task.taken_by.startswith("h1@"), task.taken_by)
        # A node named by uuid is asked for by name.
        (node,) = self.store.get_compute_nodes("h1")
        one = self.run_json("audit", "--host", "h1", "--node", node.uuid, code=3)
        self.assertEqual(["h1"], [n["nodename"] for n in one["nodes"]])
        self.assertEqual({"node": "h1", "heal": False, "dry_run": False, "migrations": []},
                         self.audit_tasks("h1")[-1].params)

        code, out, err = self.run_cli("audit", "--node", "h2")   # its host, from the records
        self.assertEqual(3, code, err)
        self.assertIn("Audit of host h2 (driver fake, database ", out)
        self.assertIn(g2, out)
        self.assertNotIn(g1, out)

        # --local audits in this process, with a driver of its own: the fake
        # hypervisor's guests of h1 are the same ones (kept beside the records).
        local = self.run_json("audit", "--local", "--host", "h1", code=3)
        self.assertEqual([("unknown_guest", g1)],
                         [(f["kind"], f["subject"]) for f in local["leaks"]])
        self.assertEqual(2, len(self.audit_tasks("h1")))   # nothing asked of the host

    def test_the_host_heals(self):
        h1 = self.service("h1")
        self.start(h1)
        claim = h1.tracker.instance_claim(base.instance(), "h1")
        api_delete(self.store, claim.instance.uuid)   # a deleted record still holding

        dry = self.run_json("audit", "--host", "h1", "--dry-run", code=3)
        self.assertEqual([("remove_allocation", claim.instance.uuid, "would apply")],
                         [(a["kind"], a["subject"], a["outcome"]) for a in dry["heal"]])
        self.assertEqual(1, len(self.store.list_allocations()))

        healed = self.run_json("audit", "--host", "h1", "--heal")
        self.assertEqual(list(AuditRequest(heal=True).fields()), list(healed))
        self.assertEqual([("remove_allocation", claim.instance.uuid, "applied")],
                         [(a["kind"], a["subject"], a["outcome"]) for a in healed["heal"]])
        self.assertTrue(healed["consistent_after_heal"])
        self.assertEqual([], self.store.list_allocations())
        (rec,) = self.store.recorded_findings("h1")
        self.assertEqual(("h1", ()), (rec.recorded_by, rec.findings))
        self.assertEqual({work.DONE}, {t.state for t in self.audit_tasks("h1")})

    def test_a_failed_audit_says_why(self):
        h1 = self.service("h1")
        self.start(h1)
        settings = conf.Settings(state_path=self.state)
        err = self.assertRaises(audit_work.AuditFailed, audit_work.ask, self.store, "h1",
                                AuditRequest(node="ghost"), timeout=60, settings=settings)
        self.assertIn("The audit of host h1", str(err))
        self.assertIn("failed: NodeNotFound: Compute node 'ghost' not found on host 'h1'",
                      str(err))
        # Parameters the handler does not understand fail the task, naming them.
        (task,) = self.store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT,
                                                       params={"node": 5, "bogus": 1})])
        self.wait_for(lambda: not self.store.tasks.get(task.id).is_open, "the bad task")
        done = self.store.tasks.get(task.id)
        self.assertEqual(work.FAILED, done.state)
        self.assertIn("unknown audit task parameter(s): bogus", done.detail)

    # -- every host's recorded findings -------------------------------------------
    def test_no_findings_exit_0(self):
        data = self.run_json("audit")
        self.assertEqual({"consistent": True, "hosts": []},
                         {k: data[k] for k in ("consistent", "hosts")})
        h1 = self.service("h1")
        h1.run_once()
        code, out, err = self.run_cli("audit")
        self.assertEqual(0, code, err)
        self.assertIn("Findings recorded for 1 host(s)", out)
        self.assertIn("Host h1: compute service up (last heartbeat at ", out)
        self.assertIn("recorded by h1 at ", out)
        self.assertEqual([], self.audit_tasks())

    def test_every_host_is_listed_then_a_peer_names_the_work_of_a_host_that_is_down(self):
        h1, h2 = self.service("h1"), self.service("h2")
        g1, g2 = self.guest(h1), self.guest(h2)
        h1.run_once()
        h2.run_once()

        data = self.run_json("audit", code=3)
        self.assertEqual(["consistent", "database", "hosts"], list(data))
        self.assertFalse(data["consistent"])
        self.assertEqual([("h1", "up", "h1", [("unknown_guest", g1)]),
                          ("h2", "up", "h2", [("unknown_guest", g2)])],
                         [(h["host"], h["service"], h["recorded_by"],
                           [(f["kind"], f["subject"]) for f in h["findings"]])
                          for h in data["hosts"]])
        self.assertEqual(data, yaml.safe_load(self.run_cli("audit", "-f", "yaml")[1]))
        self.assertEqual("false", self.run_cli("audit", "-f", "value", "-c",
                                               "consistent")[1].strip())
        code, out, _ = self.run_cli("audit")
        self.assertEqual(3, code)
        self.assertIn("2 host(s) with findings", out)
        for text in ("Host h1: compute service up", "Host h2: compute service up", g1, g2,
                     "| Finding "):
            self.assertIn(text, out)

        # h2 goes down with work waiting for it: the live peer records its
        # findings (guests not compared) and names the work.
        beat(self.store, "h2", ago=3600)
        (delete,) = self.store.tasks.record([WorkRequest(
            host="h2", kind=work.DELETE, instance_uuid=str(uuid.uuid4()))])
        h1.run_once()
        down_since = self.store.list_services("h2")[0].updated_at
        (rec,) = self.store.recorded_findings("h2")
        self.assertEqual("h1", rec.recorded_by)
        self.assertEqual([(findings.TASKS_WAITING, "h2", "h2",
                           f"1 task waiting on host h2, down since {_iso(down_since)}")],
                         [(f.kind, f.subject, f.host, f.detail) for f in rec.findings])

        data = self.run_json("audit", code=3)
        (entry,) = [h for h in data["hosts"] if h["host"] == "h2"]
        self.assertEqual(("down", "h1", down_since),
                         (entry["service"], entry["recorded_by"], entry["last_heartbeat"]))
        self.assertEqual(["tasks_waiting"], [f["kind"] for f in entry["findings"]])
        self.assertIn("Host h2: compute service down", self.run_cli("audit")[1])
        self.assertIn("recorded by h1 (a peer)", self.run_cli("audit")[1])

        # The metrics and the API count it, as every kind.
        counts = self.leak_metrics()
        self.assertEqual(1.0, counts[("h2", "tasks_waiting")])
        self.assertEqual(0.0, counts[("h1", "tasks_waiting")])
        self.assertEqual({("h2", k) for k in findings.FINDING_KINDS},
                         {key for key in counts if key[0] == "h2"})
        server = BackgroundServer(make_app(self.store, h1.settings)).start()
        self.addCleanup(server.stop)
        status, _, body = request(server.url + "/v1/findings?host=h2")
        self.assertEqual(200, status)
        answer = json.loads(body)
        (recorded,) = answer["recorded"]
        self.assertEqual(1, recorded["counts"]["tasks_waiting"])
        # ... and lists it with the findings the page shows.
        self.assertFalse(answer["clean"])
        self.assertEqual([("tasks_waiting", "h2")], [
            (f["kind"], f["subject"]) for f in answer["findings"]
            if f["kind"] == findings.TASKS_WAITING])

        # Asking h2 itself: answered at once with what was recorded for it,
        # nothing recorded for it to do.
        started = time.monotonic()
        code, out, err = self.run_cli("audit", "--host", "h2", "--timeout", "600")
        self.assertLess(time.monotonic() - started, 60)
        self.assertEqual((1, ""), (code, out), err)
        self.assertIn(f"The compute service of host h2 is down (last heartbeat at "
                      f"{_iso(down_since)}", err)
        self.assertIn("(by h1 (a peer)): 1 finding(s)", err)
        self.assertIn("1 task waiting on host h2", err)
        self.assertIn("nova-lite audit --local", err)
        self.assertEqual([], self.audit_tasks())
        self.assertEqual([delete.id], [t.id for t in self.store.tasks.find(
            "h2", states=work.OPEN_STATES)])

    # -- what is refused, and the deadline ----------------------------------------
    def test_an_unknown_host_or_node_records_nothing(self):
        self.service("h1").run_once()
        for argv, words in ((["--host", "nope"], "'nope' not found"),
                            (["--node", "ghost"], "'ghost' not found"),
                            (["--host", "h1", "--node", "ghost"], "'ghost' not found on host")):
            code, out, err = self.run_cli("audit", *argv)
            self.assertEqual((1, ""), (code, out), argv)
            self.assertIn(words, err, argv)
        self.assertEqual([], self.store.tasks.find())

    def test_a_deadline_that_passes_cancels_the_waiting_audit(self):
        h1 = self.service("h1")
        h1.run_once()   # up (a fresh heartbeat), but nobody serves its work
        code, out, err = self.run_cli("audit", "--host", "h1", "--timeout", "0.5")
        self.assertEqual((1, ""), (code, out), err)
        self.assertIn("No report from the compute service of host h1 within 0.5 s", err)
        self.assertIn("was still waiting and is cancelled", err)
        (task,) = self.audit_tasks()
        self.assertEqual((work.CANCELLED, "the asker stopped waiting after 0.5 s"),
                         (task.state, task.detail))
        h1.run_once()   # the host does not do it when it looks again
        self.assertEqual(work.CANCELLED, self.store.tasks.get(task.id).state)

    def test_a_host_that_goes_down_while_asked_cancels_the_audit(self):
        config = os.path.join(self.state, "down.conf")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("[DEFAULT]\nservice_down_time = 1\n")
        self.service("h1").run_once()
        with self.store.db.engine.begin() as conn:   # up for about 4 s more
            conn.execute(models.services.update().where(models.services.c.host == "h1")
                         .values(updated_at=time.time() + 3))
        code, out, err = self.run_cli("--config-file", config, "audit", "--host", "h1",
                                      "--timeout", "600")
        self.assertEqual((1, ""), (code, out), err)
        self.assertIn("The compute service of host h1 is down", err)
        (task,) = self.audit_tasks()
        self.assertIn(f"its audit (task {task.id}) is cancelled", err)
        self.assertEqual((work.CANCELLED, "the host's compute service is down"),
                         (task.state, task.detail))


class TestAuditRecordsSQLite(AuditRecordsTests, CliTestCase):

    def database_args(self):
        return []

    def url(self):
        return conf.Settings(state_path=self.state).database_url


class TestAuditRecordsPostgreSQL(AuditRecordsTests, CliTestCase):

    def database_args(self):
        databases.use_postgresql(self)
        self._pg = self.useFixture(databases.PostgreSQLSchema()).url
        return ["--database-url", self._pg]

    def url(self):
        return self._pg
