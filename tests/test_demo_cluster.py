"""``make run``'s walk-through, tools/demo-cluster.sh, run for real.

Two compute services as background processes on an SQLite file, three
servers built through them and one deleted, then the services stopped.
The outcome is checked twice: in what the script prints (its commands, in
order, and its last line) and in the records themselves, read here with a
Store of their own.
"""

import os
import re
import subprocess
import sys

import fixtures
import testtools

from nova_lite import work
from nova_lite.db import Store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "demo-cluster.sh")
HOSTS = ("demo-1", "demo-2")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
#: The walk-through's commands, in the order they must be printed.
STEPS = (
    r"\+ nova-lite db sync",
    r"\+ nova-lite compute --host demo-1 --driver fake ",
    r"\+ nova-lite compute --host demo-2 --driver fake ",
    r"\+ nova-lite service list",
    r"\+ nova-lite server create --flavor m1.small --count 3 --wait",
    r"\+ nova-lite server list --long",
    r"\+ nova-lite hypervisor list",
    rf"\+ nova-lite server delete ({UUID}) --yes-i-really-mean-it --wait",
    r"\+ nova-lite server list\n",
    r"kill -TERM \d+ +# nova-lite compute --host demo-1",
    r"kill -TERM \d+ +# nova-lite compute --host demo-2",
)
LAST_LINE = re.compile(rf"^demo-cluster: OK: 3 servers built active on demo-1 demo-2, "
                       rf"server ({UUID}) deleted, 2 left active \(state: .*\)$")


class TestDemoCluster(testtools.TestCase):

    def setUp(self):
        super().setUp()
        self.state = os.path.join(self.useFixture(fixtures.TempDir()).path, "cluster")

    def walk_through(self, timeout=600, **env):
        """Run the script on ``self.state``; (exit status, stdout, stderr)."""
        environ = dict(os.environ,
                       NOVA_LITE_CMD=f"{sys.executable} -m nova_lite.cli.main",
                       PYTHON=sys.executable, NOVA_LITE_DEMO_TIMEOUT="120",
                       PYTHONPATH=os.pathsep.join(
                           p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        environ.pop("NOVA_LITE_STATE_PATH", None)
        environ.update(env)
        proc = subprocess.run(["bash", SCRIPT, self.state], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, env=environ, timeout=timeout,
                              cwd=ROOT)
        return proc.returncode, proc.stdout, proc.stderr

    def records(self):
        store = Store(f"sqlite:///{os.path.join(self.state, 'nova-lite.db')}")
        self.addCleanup(store.close)
        return store

    def test_three_built_one_deleted(self):
        code, out, err = self.walk_through()
        self.assertEqual(0, code, f"{out}\n{err}")
        # Its commands, in order.
        at = 0
        for step in STEPS:
            found = re.compile(step).search(out, at)
            self.assertIsNotNone(found, f"{step!r} not printed after offset {at}:\n{out}")
            at = found.end()
        deleted = re.search(STEPS[7], out).group(1)
        last = LAST_LINE.match(out.rstrip("\n").splitlines()[-1])
        self.assertIsNotNone(last, out)
        self.assertEqual(deleted, last.group(1))
        self.assertIn(f"Deleted server {deleted}", out)

        # The records: three servers built on the two hosts, one deleted.
        store = self.records()
        servers = {i.uuid: i for i in store.list_instances(live_only=False)}
        self.assertEqual(3, len(servers))
        self.assertEqual("deleted", servers[deleted].vm_state)
        left = {u for u, i in servers.items() if i.vm_state == "active"}
        self.assertEqual(set(servers) - {deleted}, left)
        self.assertEqual(set(HOSTS), {i.host for i in servers.values()})
        self.assertEqual(left, {a.instance_uuid for a in store.list_allocations()})
        tasks = store.tasks.find()
        self.assertEqual(sorted([work.AUDIT] * 2 + [work.BUILD] * 3 + [work.DELETE]),
                         sorted(t.kind for t in tasks))
        self.assertEqual({work.DONE}, {t.state for t in tasks})
        # Each host audited itself clean, after the delete.
        audits = [t for t in tasks if t.kind == work.AUDIT]
        self.assertEqual([True, True], [t.result["consistent"] for t in audits])
        self.assertEqual(sorted(HOSTS), sorted(t.host for t in audits))
        self.assertEqual({"demo-1", "demo-2"}, {t.host for t in tasks})

        # Both services were stopped by SIGTERM and are gone.
        for host in HOSTS:
            with open(os.path.join(self.state, f"{host}.log")) as log:
                self.assertIn(f"Compute service of host {host} stopped after", log.read())
        for pid in re.findall(r"kill -TERM (\d+)", out):
            self.assertRaises(ProcessLookupError, os.kill, int(pid), 0)

    def test_a_service_that_fails_fails_the_walk_through(self):
        # A directory of an earlier walk-through is started anew.
        os.makedirs(self.state)
        open(os.path.join(self.state, ".demo-cluster"), "w").close()
        with open(os.path.join(self.state, "nova-lite.db"), "w") as old:
            old.write("an earlier walk-through's database")
        code, out, err = self.walk_through(NOVA_LITE_DEMO_DRIVER="no-such-driver")
        self.assertEqual(1, code, f"{out}\n{err}")
        self.assertIn("+ nova-lite db sync", out)
        self.assertRegex(err, r"demo-cluster: FAILED: the compute service of demo-[12] "
                              r"exited with status 1 before it was up")
        self.assertIn("no-such-driver", err)   # the end of its log
        self.assertNotIn("demo-cluster: OK", out)
        self.assertNotIn("server create", out)

    def test_refuses_a_database_of_its_own(self):
        os.makedirs(self.state)
        path = os.path.join(self.state, "nova-lite.db")
        with open(path, "w") as other:
            other.write("someone's database")
        code, out, err = self.walk_through()
        self.assertEqual(1, code, f"{out}\n{err}")
        self.assertIn("holds a database that is not a walk-through's", err)
        with open(path) as other:
            self.assertEqual("someone's database", other.read())
        self.assertEqual(["nova-lite.db"], os.listdir(self.state))
