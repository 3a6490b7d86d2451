"""The operator commands on real stores, with compute services as separate processes."""

import json
import os
import subprocess
import sys

import yaml

from nova_lite.db import Store
from tests.test_cli import CliTestCase

HOSTS = ("hosta", "hostb", "hostc")


class OperatorCase(CliTestCase):

    def start_computes(self, hosts=HOSTS, *extra):
        """Run ``compute --once`` for each host as separate processes: the first
        alone (it creates the database file), the others at once."""
        def run(group):
            procs = [subprocess.Popen(
                [sys.executable, "-m", "nova_lite.cli.main", "--state-path", self.state,
                 "compute", "--once", "--host", host, "--driver", "fake.small", *extra],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for host in group]
            for proc in procs:
                _, err = proc.communicate(timeout=120)
                self.assertEqual(0, proc.returncode, err.decode())
        run(hosts[:1])
        run(hosts[1:])

    def fail(self, expected_code, *argv):
        code, out, err = self.cli(*argv)
        self.assertEqual(expected_code, code, f"{argv}: {out}\n{err}")
        return err

    def snapshot(self):
        """Everything the commands could change, for 'nothing changed' checks."""
        servers = [{k: v for k, v in s.items() if k != "Task Age"}   # the clock moves on
                   for s in self.json("server", "list", "--all")]
        return (servers, self.json("service", "list"), self.json("hypervisor", "list"))

    def create(self, *argv):
        return self.json("server", "create", *argv)


class TestScheduledBuilds(OperatorCase):
    """fake.small: 1 vCPU (x4 ratio), 8192 MB (512 reserved), 1024 GB per host."""

    def setUp(self):
        super().setUp()
        self.start_computes()

    def test_builds_spread_across_compute_services(self):
        built = self.create("--flavor", "m1.tiny", "--count", "3", "--project", "p1")
        self.assertEqual(sorted(HOSTS), sorted(s["Host"] for s in built))
        more = self.create("--vcpus", "1", "--ram", "256", "--project", "p2")
        stats = self.json("hypervisor", "stats")
        self.assertEqual((3, 4, 3 * 512 + 256), (stats["count"], stats["running_vms"],
                                                   stats["memory_mb_used"]))
        rows = self.json("host", "describe", more[0]["Host"])
        by_project = {r["PROJECT"]: r for r in rows}
        self.assertEqual(["(total)", "(used_now)", "(used_max)", "p1", "p2"],
                         [r["PROJECT"] for r in rows])
        self.assertEqual(512 + 256, by_project["(used_max)"]["memory_mb"])
        self.assertEqual(512 + 512 + 256, by_project["(used_now)"]["memory_mb"])
        self.assertEqual(8192, by_project["(total)"]["memory_mb"])

    def test_full_host_is_filtered_and_no_valid_host_names_the_filters(self):
        self.create("--vcpus", "1", "--ram", "6656", "--count", "2")
        err = self.fail(1, "server", "create", "--vcpus", "1", "--ram", "4096", "--count",
                        "2")
        self.assertIn("RamFilter removed 3 of 3 hosts: free memory 1024 MB < 4096 MB", err)
        self.assertIn("instance 2", err)
        self.assertEqual(2, len(self.json("server", "list")))   # nothing kept
        err = self.fail(1, "server", "create", "--vcpus", "9", "--ram", "1")
        self.assertIn("CoreFilter removed 3 of 3 hosts: free vcpus", err)

    def test_disabled_service_is_never_picked(self):
        out = self.json("service", "disable", "hostb", "--reason", "disk swap")
        self.assertEqual(("disabled", "disk swap"), (out["Status"], out["Disabled Reason"]))
        built = self.create("--flavor", "m1.tiny", "--count", "2")
        self.assertEqual({"hosta", "hostc"}, {s["Host"] for s in built})
        listed = {s["Host"]: s for s in self.json("service", "list")}
        self.assertEqual("disabled", listed["hostb"]["Status"])
        self.assertEqual("up", listed["hostb"]["State"])
        self.assertEqual("disabled", [h for h in self.json("hypervisor", "list")
                                      if h["Host"] == "hostb"][0]["Status"])
        self.json("service", "enable", "hostb")
        self.assertEqual("hostb", self.create("--flavor", "m1.tiny")[0]["Host"])

    def test_hypervisor_show_inventory_and_claim_test(self):
        self.create("--vcpus", "1", "--ram", "1024", "--project", "p1")
        server = self.json("server", "list")[0]
        node = self.json("hypervisor", "show", server["Node"])
        mem = node["MEMORY_MB"]
        self.assertEqual((8192, 512, 1.0, 7680, 1024, 6656, 0, 8192),
                         (mem["total"], mem["reserved"], mem["ratio"], mem["capacity"],
                          mem["used"], mem["free"], mem["over"], mem["detected"]))
        self.assertEqual([server["ID"]], node["running_guests"])
        self.assertEqual(["up"], self.ok("hypervisor", "show", server["Node"], "-c", "state",
                                         "-f", "value").split())
        inv = {r["Resource Class"]: r for r in self.json("inventory", "list", server["Node"])}
        self.assertEqual((7680, 1024, 6656), (inv["MEMORY_MB"]["Capacity"],
                                             inv["MEMORY_MB"]["Used"], inv["MEMORY_MB"]["Free"]))
        before = self.snapshot()
        result = self.json("claim", "test", "--node", server["Node"], "--vcpus", "8",
                           "--ram", "9000", "--disk", "2000")
        self.assertFalse(result["fits"])
        self.assertEqual(3, len(result["reasons"]))   # memory, disk and vCPUs
        self.assertIn("Free memory 6656.00 MB < requested 9000 MB", result["reasons"][0])
        self.assertTrue(self.json("claim", "test", "--node", server["Node"], "--flavor",
                                  "m1.tiny")["fits"])
        self.assertEqual(before, self.snapshot())

    def test_server_show_and_delete(self):
        built = self.create("--flavor", "m1.tiny")
        shown = self.json("server", "show", built[0]["ID"])
        self.assertEqual((built[0]["ID"], "building", "build waiting", 512),
                         (shown["id"], shown["status"], shown["task"], shown["memory_mb"]))
        self.start_computes()   # each host's pass does the work waiting for it
        shown = self.json("server", "show", built[0]["ID"])
        self.assertEqual(("active", None, None), (shown["status"], shown["task"],
                                                  shown["fault"]))
        self.assertEqual(2, self.cli("server", "delete", built[0]["ID"])[0])
        self.assertEqual(1, len(self.json("server", "list")))
        self.assertIn(f"Delete of server {built[0]['ID']} recorded for host",
                      self.ok("server", "delete", built[0]["ID"], "--yes-i-really-mean-it"))
        (row,) = self.json("server", "list")
        self.assertEqual("delete waiting", row["Task"])
        self.assertGreater(self.json("hypervisor", "stats")["memory_mb_used"], 0,
                           "held until its host deletes it")
        self.start_computes()
        self.assertEqual([], self.json("server", "list"))
        self.assertEqual(0, self.json("hypervisor", "stats")["memory_mb_used"])
        code, _, err = self.cli("server", "delete", built[0]["ID"], "--yes-i-really-mean-it")
        self.assertEqual(1, code)   # already deleted: not found, as in Nova
        self.assertIn("already deleted", err)

    def test_flavors_files(self):
        ini = os.path.join(self.state, "flavors.ini")
        with open(ini, "w") as f:
            f.write("[tiny.ini]\nvcpus = 1\nram = 128\ndisk = 1\n")
        yml = os.path.join(self.state, "flavors.yaml")
        with open(yml, "w") as f:
            yaml.safe_dump({"tiny.yaml": {"vcpus": 1, "memory_mb": 256}}, f)
        self.assertEqual("tiny.ini", self.create("--flavors-file", ini, "--flavor",
                                                 "tiny.ini")[0]["Flavor"])
        self.assertEqual("tiny.yaml", self.create("--flavors-file", yml, "--flavor",
                                                  "tiny.yaml")[0]["Flavor"])
        with open(ini, "a") as f:
            f.write("[bad]\nvcpus = many\nram = 1\n")
        err = self.fail(2, "server", "create", "--flavors-file", ini, "--flavor", "bad")
        self.assertIn("vcpus = 'many' is not an integer", err)

    def test_bad_arguments_change_nothing(self):
        node = self.json("hypervisor", "list")[0]["Hypervisor Hostname"]
        before = self.snapshot()
        for argv, text in (
                (["server", "create", "--vcpus", "1"], "--vcpus and --ram"),
                (["server", "create", "--flavor", "m1.tiny", "--count", "0"], "--count"),
                (["server", "create", "--flavor", "m1.tiny", "--vcpus", "1", "--ram", "1"],
                 "not both"),
                (["server", "create", "--flavors-file", "/nope.yaml", "--flavor", "x"],
                 "/nope.yaml"),
                (["server", "create", "--count", "x"], "--count"),
                (["server", "create", "--flavor", "m1.tiny", "--project", ""], "--project"),
                (["service", "disable", "hosta", "--reason", " "], "--reason"),
                (["service", "disable"], "HOST"),
                (["hypervisor", "list", "-f", "xml"], "xml"),
                (["hypervisor", "list", "-c", "vCPUs"], "'vCPUs'"),
                (["claim", "test", "--node", node], "a flavor is required"),
                (["claim", "test", "--flavor", "m1.tiny"], "--node")):
            err = self.fail(2, *argv)
            self.assertIn(text, err, argv)
        self.assertEqual(before, self.snapshot())

    def test_unknown_names_are_errors_and_change_nothing(self):
        before = self.snapshot()
        for argv, text in (
                (["server", "create", "--flavor", "m9.huge"], "unknown flavor 'm9.huge'"),
                (["server", "show", "ghost"], "ghost"),
                (["server", "delete", "ghost", "--yes-i-really-mean-it"], "ghost"),
                (["service", "disable", "ghost"], "ghost"),
                (["service", "enable", "ghost"], "ghost"),
                (["hypervisor", "show", "ghost"], "ghost"),
                (["host", "describe", "ghost"], "ghost"),
                (["inventory", "list", "ghost"], "ghost"),
                (["claim", "test", "--node", "ghost", "--flavor", "m1.tiny"], "ghost")):
            err = self.fail(1, *argv)
            self.assertIn(text, err, argv)
        self.assertEqual(before, self.snapshot())


class TestConventions(CliTestCase):

    def test_command_help_is_the_commands_own(self):
        code, out, _ = self.cli("node", "show", "--help")
        self.assertEqual(0, code)
        self.assertIn("NODE", out)
        self.assertNotIn("driver list", out)

    def test_missing_config_file_fails_clearly(self):
        code, out, err = self.cli("--config-file", "/nope.conf", "driver", "list")
        self.assertEqual(1, code)
        self.assertIn("--config-file /nope.conf cannot be read: no such file", err)

    def test_unknown_global_option_is_an_unknown_option(self):
        code, out, err = self.cli("--bogus", "node", "list")
        self.assertEqual(2, code)
        self.assertIn("unknown option '--bogus'", err)
        self.assertNotIn("is not a nova-lite command", out + err)

    def test_read_commands_need_a_database(self):
        for argv in (["service", "list"], ["hypervisor", "stats"], ["server", "list"],
                     ["server", "create", "--flavor", "m1.tiny"]):
            code, _, err = self.cli(*argv)
            self.assertEqual(1, code)
            self.assertIn("No nova-lite database", err)
        self.assertFalse(os.path.exists(self.state))


class TestPostgreSQLBuilds(OperatorCase):

    def setUp(self):
        super().setUp()
        from nova_lite.testing import databases
        databases.use_postgresql(self)
        self.url = self.useFixture(databases.PostgreSQLDatabase()).url
        procs = [subprocess.Popen(
            [sys.executable, "-m", "nova_lite.cli.main", "--database-url", self.url,
             "compute", "--once", "--host", host, "--driver", "fake.small"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for host in HOSTS]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            self.assertEqual(0, proc.returncode, err.decode())

    def test_builds_spread_and_reports_agree_with_the_store(self):
        out = self.json("--database-url", self.url, "server", "create", "--flavor", "m1.tiny",
                        "--count", "3", "--project", "p1")
        self.assertEqual(sorted(HOSTS), sorted(s["Host"] for s in out))
        store = Store(self.url)
        self.addCleanup(store.close)
        stats = self.json("--database-url", self.url, "hypervisor", "stats")
        nodes = store.get_compute_nodes()
        self.assertEqual(sum(n.used("MEMORY_MB") for n in nodes), stats["memory_mb_used"])
        self.assertEqual(3, stats["running_vms"])


class TestReportFormats(CliTestCase):

    def test_compute_and_audit_take_cliffs_formatters(self):
        self.compute_once()
        self.assertEqual("true", self.ok("audit", "--local", "--host", self.host, "-f",
                                         "value", "-c", "consistent").strip())
        self.assertEqual("fake", self.ok("compute", "--once", "--host", self.host, "-f",
                                         "value", "-c", "driver").strip())
        shell = self.ok("audit", "--local", "--host", self.host, "-f", "shell", "-c", "host",
                        "-c", "driver")
        self.assertEqual([f'host="{self.host}"', 'driver="fake"'], shell.split())
        self.assertEqual(2, self.cli("compute", "-c", "driver")[0])   # needs --once

    def test_audit_names_the_driver_by_entry_point_and_node_rows_by_uuid(self):
        self.compute_once()
        node_uuid = self.json("node", "show", self.host)["uuid"]
        code, out, err = self.cli("audit", "--local", "--host", self.host, "--driver",
                                  "fake.multinode", "-f", "json")
        self.assertEqual(3, code, err)
        data = json.loads(out)
        self.assertEqual("fake.multinode", data["driver"])
        diffs = {d["nodename"]: d for n in data["nodes"] for d in n["differences"]}
        self.assertEqual(("node_not_reported", node_uuid),
                         (diffs[self.host]["kind"], diffs[self.host]["uuid"]))
        self.assertIsNone(diffs[f"{self.host}-node0"]["uuid"])
        table = self.cli("audit", "--local", "--host", self.host, "--driver",
                         "fake.multinode")[1]
        self.assertIn(node_uuid, table)
        self.assertNotIn(f"| {self.host}-node0 | {self.host}-node0", table)


class TestConcurrentBuilds(OperatorCase):
    """Builds from several processes at once: none oversubscribes, the reports agree."""

    def setUp(self):
        super().setUp()
        self.start_computes()

    def server_create_processes(self, count, *argv):
        procs = [subprocess.Popen(
            [sys.executable, "-m", "nova_lite.cli.main", "--state-path", self.state,
             "server", "create", "-f", "json", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(count)]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            results.append((proc.returncode, out.decode(), err.decode()))
        return results

    def test_parallel_builds_fill_every_host_exactly(self):
        # 7680 MB usable per host: two 3072 MB servers fit on each, never three.
        results = self.server_create_processes(6, "--vcpus", "1", "--ram", "3072",
                                               "--project", "p1")
        self.assertEqual([0] * 6, [code for code, _, _ in results], results)
        hosts = sorted(json.loads(out)[0]["Host"] for _, out, _ in results)
        self.assertEqual(sorted(HOSTS * 2), hosts)
        for row in self.json("hypervisor", "list"):
            self.assertEqual(6144, row["Memory MB Used"])
        code, _, err = self.cli("server", "create", "--vcpus", "1", "--ram", "3072")
        self.assertEqual(1, code)
        self.assertIn("RamFilter removed 3 of 3 hosts: free memory 1536 MB < 3072 MB", err)

    def test_reports_agree_with_the_store_after_builds_resizes_and_deletes(self):
        from nova_lite.compute.resource_tracker import ResourceTracker
        from nova_lite.objects import Flavor
        from nova_lite.virt import loader
        self.server_create_processes(2, "--flavor", "m1.tiny", "--count", "2",
                                     "--project", "p1")
        self.server_create_processes(2, "--vcpus", "1", "--ram", "1024", "--project", "p2")
        servers = self.json("server", "list")
        self.assertEqual(6, len(servers))
        self.ok("server", "delete", servers[0]["ID"], "--yes-i-really-mean-it")
        store = Store(f"sqlite:///{self.db_path()}")
        self.addCleanup(store.close)
        victim = store.get_instance(servers[1]["ID"])
        driver = loader.load_driver("fake.small")
        driver.init_host(victim.host)
        rt = ResourceTracker(victim.host, driver, store=store)
        rt.resize_claim(victim, Flavor(name="bigger", vcpus=1, memory_mb=2048),
                        victim.node)
        nodes = store.get_compute_nodes()
        live = store.list_instances()
        stats = self.json("hypervisor", "stats")
        self.assertEqual(sum(n.used("MEMORY_MB") for n in nodes), stats["memory_mb_used"])
        self.assertEqual(sum(n.free("MEMORY_MB") for n in nodes), stats["free_ram_mb"])
        self.assertEqual(len(live), stats["running_vms"])
        for host in HOSTS:
            rows = {r["PROJECT"]: r for r in self.json("host", "describe", host)}
            mine = [i for i in live if i.host == host]
            for project in {i.project_id for i in mine}:
                self.assertEqual(sum(i.flavor.memory_mb for i in mine
                                     if i.project_id == project),
                                 rows[project]["memory_mb"], (host, project))
            node = [n for n in nodes if n.host == host][0]
            self.assertEqual(node.inventory("MEMORY_MB").reserved + node.used("MEMORY_MB"),
                             rows["(used_now)"]["memory_mb"])
            shown = self.json("hypervisor", "show", node.nodename)["MEMORY_MB"]
            self.assertEqual((node.used("MEMORY_MB"), node.free("MEMORY_MB")),
                             (shown["used"], shown["free"]))
