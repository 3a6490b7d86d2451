"""The ``nova-lite`` command, run in-process through ``main([...])``.

Every test gets its own state path (a temp dir) and captures stdout and
stderr; the commands and drivers are the real entry points of the package.
"""

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import textwrap

import fixtures
import testtools
import yaml

from nova_lite import conf
from nova_lite.cli import context
from nova_lite.cli.main import main, redact_text
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.virt import loader
from tests import base
from tests.entry_points import ThrowawayDistributions

SECRET = "s3cr3t-pw"
PG_URL = f"postgresql://admin:{SECRET}@127.0.0.1:1/nova"   # nothing listens on port 1


class CliTestCase(testtools.TestCase):
    """Runs main() with a private state path and captured output."""

    host = "clihost"

    def setUp(self):
        super().setUp()
        self.state = os.path.join(self.useFixture(fixtures.TempDir()).path, "state")
        self.useFixture(fixtures.EnvironmentVariable(context.STATE_PATH_ENV))
        self.handlers = list(logging.getLogger().handlers)

    def cli(self, *argv, state=True):
        """``(exit code, stdout, stderr)`` of ``nova-lite [--state-path S] argv``."""
        args = (["--state-path", self.state] if state else []) + list(argv)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(args)
        self.assertEqual(self.handlers, logging.getLogger().handlers,
                         "main() must remove the log handlers it added")
        return code, out.getvalue(), err.getvalue()

    def ok(self, *argv, **kw):
        code, out, err = self.cli(*argv, **kw)
        self.assertEqual(0, code, f"nova-lite {' '.join(argv)} failed:\n{out}\n{err}")
        return out

    def json(self, *argv, **kw):
        return json.loads(self.ok(*argv, "-f", "json", **kw))

    def compute_once(self, *extra):
        return self.json("compute", "--once", "--host", self.host, *extra)

    def db_path(self):
        return os.path.join(self.state, "nova-lite.db")


class TestGlobal(CliTestCase):

    def test_version(self):
        code, out, _ = self.cli("--version")
        self.assertEqual(0, code)
        self.assertIn("nova-lite", out)

    def test_help_lists_every_command(self):
        code, out, _ = self.cli("--help")
        self.assertEqual(0, code)
        for name in ("driver list", "driver show", "compute", "node list", "node show",
                     "node delete", "audit"):
            self.assertIn(name, out)

    def test_help_gives_each_command_a_whole_sentence(self):
        import importlib.metadata
        import inspect
        _, out, _ = self.cli("--help")
        for ep in importlib.metadata.entry_points(group="nova_lite.cli"):
            if not ep.value.startswith("nova_lite.cli."):
                continue
            doc = inspect.getdoc(ep.load())
            first, _, rest = doc.partition("\n")
            name = ep.name.replace("_", " ")
            self.assertTrue(first.endswith("."), f"{name}: {first!r}")
            self.assertFalse(rest and not rest.startswith("\n"),
                             f"{name}: the summary runs on to a second line")
            self.assertEqual(first.count("("), first.count(")"), name)
            self.assertLessEqual(len(first), 95, name)
            self.assertIn(f"\n  {name}  {first.rstrip('.')}", re.sub(r"  +", "  ", out))

    def test_no_command_prints_help_and_fails(self):
        code, out, err = self.cli()
        self.assertEqual(2, code)
        self.assertIn("driver list", out)
        self.assertIn("a command is required", err)

    def test_unknown_command(self):
        code, out, err = self.cli("frobnicate")
        self.assertEqual(2, code)
        self.assertIn("frobnicate", out + err)

    def test_unknown_global_option(self):
        code, out, err = self.cli("--no-such-option", "driver", "list")
        self.assertEqual(2, code)
        self.assertIn("--no-such-option", err)
        self.assertEqual("", out)

    def test_missing_argument_names_it(self):
        code, _, err = self.cli("node", "show")
        self.assertEqual(2, code)
        self.assertIn("NODE", err)

    def test_empty_state_path_is_rejected(self):
        code, _, err = self.cli("--state-path", " ", "node", "list", state=False)
        self.assertEqual(2, code)
        self.assertIn("--state-path", err)

    def test_commands_from_other_distributions(self):
        dists = self.useFixture(ThrowawayDistributions())
        dists.add("nltest-cli", entry_points={"nova_lite.cli": {
            "hello_world": "nltest_cli_cmd:Hello"}}, modules={"nltest_cli_cmd": """
            from cliff import command

            class Hello(command.Command):
                "Say hello."

                def take_action(self, parsed_args):
                    self.app.stdout.write("hello from a plugin\\n")
            """})
        self.assertEqual("hello from a plugin\n", self.ok("hello", "world"))


class TestPasswords(CliTestCase):
    """No command prints a database password: not in help, errors or output."""

    def assertNoSecret(self, *texts):
        for text in texts:
            self.assertNotIn(SECRET, text)

    def test_help_with_password_url(self):
        for argv in (["--database-url", PG_URL, "--help"],
                     ["--database-url", PG_URL, "help", "compute"],
                     ["--database-url", PG_URL, "compute", "--help"],
                     ["--database-url", PG_URL, "node", "list", "--help"]):
            code, out, err = self.cli(*argv)
            self.assertEqual(0, code, argv)
            self.assertNoSecret(out, err)

    def test_help_with_password_in_config_file(self):
        path = self.write_config(f"[database]\nconnection = {PG_URL}\n")
        code, out, err = self.cli("--config-file", path, "--help")
        self.assertEqual(0, code)
        self.assertNoSecret(out, err)

    def write_config(self, text):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "nova-lite.conf")
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def test_unreachable_database_error_is_redacted(self):
        path = self.write_config(f"[database]\nconnection = {PG_URL}\n")
        for argv in (["--database-url", PG_URL, "node", "list"],
                     ["--config-file", path, "node", "list"],
                     ["--database-url", PG_URL, "-vv", "compute", "--once"],
                     ["--database-url", PG_URL, "--debug", "node", "list"]):
            try:
                code, out, err = self.cli(*argv)
            except Exception as exc:   # --debug re-raises; its text must be clean too
                self.assertNoSecret(str(exc))
                continue
            self.assertEqual(1, code, argv)
            self.assertNoSecret(out, err)
            self.assertIn("admin:***@127.0.0.1", err)

    def test_redact_text(self):
        self.assertEqual("postgresql://admin:***@db/nova and sqlite:////x.db",
                         redact_text("postgresql://admin:pw@db/nova and sqlite:////x.db"))


class TestStatePath(testtools.TestCase):
    """Where the state lives: flag, environment, config file, system, local."""

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.missing = os.path.join(self.tmp, "no-such-system-dir")
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.cli.context.SYSTEM_STATE_PATH", self.missing))

    def config(self, text):
        path = os.path.join(self.tmp, "c.conf")
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def test_flag_wins(self):
        state = context.choose_state_path(
            "/x/flag", self.config("[DEFAULT]\nstate_path = /x/file\n"),
            {context.STATE_PATH_ENV: "/x/env"})
        self.assertEqual(("/x/flag", "--state-path"), (state.path, state.source))

    def test_environment_then_config_file(self):
        cfg = self.config("[DEFAULT]\nstate_path = /x/file\n")
        self.assertEqual("/x/env", context.choose_state_path(
            None, cfg, {context.STATE_PATH_ENV: "/x/env"}).path)
        self.assertEqual("/x/file", context.choose_state_path(None, cfg, {}).path)

    def test_system_path_only_when_it_exists_and_is_writable(self):
        local = os.path.abspath(context.LOCAL_STATE_PATH)
        self.assertEqual(local, context.choose_state_path(None, None, {}).path)
        os.mkdir(self.missing)
        self.assertEqual(self.missing, context.choose_state_path(None, None, {}).path)

    def test_database_follows_state_path_unless_set(self):
        settings, _ = context.build_settings(state_path=self.tmp, environ={})
        self.assertEqual(f"sqlite:///{self.tmp}/nova-lite.db", settings.database_url)
        cfg = self.config("[database]\nconnection = sqlite:////elsewhere/x.db\n")
        settings, _ = context.build_settings(config_file=cfg, state_path=self.tmp, environ={})
        self.assertEqual("sqlite:////elsewhere/x.db", settings.database_url)
        settings, _ = context.build_settings(config_file=cfg, database_url="sqlite://",
                                             environ={})
        self.assertEqual("sqlite://", settings.database_url)

    def test_environment_variable_through_main(self):
        state = os.path.join(self.tmp, "from-env")
        self.useFixture(fixtures.EnvironmentVariable(context.STATE_PATH_ENV, state))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(0, main(["compute", "--once", "--host", "h"]))
        self.assertTrue(os.path.exists(os.path.join(state, "nova-lite.db")))
        self.assertIn(state, out.getvalue())


class TestDriverCommands(CliTestCase):

    def test_list_table(self):
        out = self.ok("driver", "list")
        for column in ("Name", "Distribution", "Version", "API version", "Load error"):
            self.assertIn(column, out)
        for name in ("fake", "fake.small", "fake.medium", "fake.multinode"):
            self.assertIn(f" {name} ", out)
        self.assertNotIn("Capabilities", out)   # behind --long, as the entry point
        long = self.ok("driver", "list", "--long")
        for column in ("Entry point", "Capabilities", "lifecycle"):
            self.assertIn(column, long)

    def test_list_json(self):
        rows = {r["Name"]: r for r in self.json("driver", "list")}
        self.assertEqual("nova-lite", rows["fake"]["Distribution"])
        self.assertEqual("1.0", rows["fake"]["API version"])
        self.assertIn("supports_lifecycle", rows["fake"]["Capabilities"])
        self.assertIsNone(rows["fake"]["Load error"])

    def test_list_long_adds_entry_point(self):
        rows = {r["Name"]: r for r in self.json("driver", "list", "--long")}
        self.assertEqual("nova_lite.virt.fake:FakeDriver", rows["fake"]["Entry point"])

    def test_show_formats(self):
        data = self.json("driver", "show", "fake.small")
        self.assertEqual("fake.small", data["name"])
        self.assertEqual("nova_lite.virt.fake:SmallFakeDriver", data["entry_point"])
        self.assertEqual("1.0", data["api_version"])
        self.assertIsNone(data["load_error"])
        self.assertEqual(data, yaml.safe_load(self.ok("driver", "show", "fake.small",
                                                      "-f", "yaml")))
        self.assertIn("fake.small", self.ok("driver", "show", "fake.small", "-f", "table"))
        value = self.ok("driver", "show", "fake.small", "-f", "value", "-c", "api_version")
        self.assertEqual("1.0\n", value)

    def test_show_unknown_names_it_and_the_installed_drivers(self):
        code, out, err = self.cli("driver", "show", "no-such-driver")
        self.assertEqual(1, code)
        self.assertIn("no-such-driver", err)
        for name in loader.installed_driver_names():
            self.assertIn(name, err)
        self.assertEqual("", out)

    def test_bad_format(self):
        code, _, err = self.cli("driver", "show", "fake", "-f", "xml")
        self.assertEqual(2, code)
        self.assertIn("xml", err)

    def test_broken_plugin_is_listed_with_its_error(self):
        dists = self.useFixture(ThrowawayDistributions())
        dists.add("nltest-broken", entry_points={loader.GROUP: {
            "nltest.broken": "nltest_broken_mod:Driver"}},
            modules={"nltest_broken_mod": "raise RuntimeError('boom at import')\n"})
        rows = {r["Name"]: r for r in self.json("driver", "list")}
        self.assertIn("boom at import", rows["nltest.broken"]["Load error"])
        self.assertIsNone(rows["fake"]["Load error"])
        data = self.json("driver", "show", "nltest.broken")
        self.assertIn("boom at import", data["load_error"])
        self.assertEqual("nltest-broken", data["distribution"])


class TestCompute(CliTestCase):

    def test_once_table(self):
        out = self.ok("compute", "--once", "--host", self.host)
        for text in (f"Node {self.host}", "Total", "Reserved", "Ratio", "Capacity", "Used",
                     "Free", "Detected", "Configured", "Effective", "reserved_host_memory_mb",
                     "initial_cpu_allocation_ratio", "799488"):
            self.assertIn(text, out)
        self.assertTrue(os.path.exists(self.db_path()))

    def test_once_json(self):
        data = self.compute_once()
        self.assertEqual([self.host], data["audited"])
        self.assertEqual({}, data["failed"])
        (node,) = data["nodes"]
        inv = {r["resource_class"]: r for r in node["inventory"]}
        self.assertEqual({"total": 800000, "reserved": 512, "allocation_ratio": 1.0,
                          "capacity": 799488, "used": 0, "free": 799488},
                         {k: inv["MEMORY_MB"][k] for k in ("total", "reserved",
                                                           "allocation_ratio", "capacity",
                                                           "used", "free")})
        self.assertEqual(4000, inv["VCPU"]["capacity"])
        sources = {(r["resource_class"], r["quantity"]): r for r in node["sources"]}
        self.assertEqual(
            {"detected": 0, "configured": 512, "option": "reserved_host_memory_mb",
             "effective": 512},
            {k: sources["MEMORY_MB", "reserved"][k] for k in ("detected", "configured",
                                                              "option", "effective")})
        self.assertEqual(1000, sources["VCPU", "total"]["detected"])
        self.assertEqual(4.0, sources["VCPU", "allocation_ratio"]["effective"])

    def test_once_yaml(self):
        data = yaml.safe_load(self.ok("compute", "--once", "--host", self.host, "-f", "yaml"))
        self.assertEqual(self.host, data["nodes"][0]["nodename"])

    def test_demo_admits_one_claim_and_rejects_one(self):
        data = self.compute_once("--demo")["demo"]
        self.assertTrue(data["ok"])
        self.assertTrue(data["admitted"]["admitted"])
        self.assertEqual({"DISK_GB": 1, "MEMORY_MB": 512, "VCPU": 1},
                         data["admitted"]["claimed"])
        self.assertEqual(799488 - 512, data["admitted"]["free_after"]["MEMORY_MB"])
        rejected = data["rejected"]
        self.assertFalse(rejected["admitted"])
        self.assertEqual(3, len(rejected["reasons"]))
        self.assertIn("Free memory", rejected["message"])
        self.assertTrue(rejected["message"].startswith("Insufficient compute resources: "))
        self.assertEqual(799488, data["released"]["free_after"]["MEMORY_MB"])

    def test_demo_table_and_rerun_leave_usage_unchanged(self):
        for _ in range(2):
            out = self.ok("compute", "--once", "--demo", "--host", self.host)
            self.assertIn("ADMITTED", out)
            self.assertIn("REJECTED", out)
            self.assertIn("Insufficient compute resources", out)
        (row,) = self.json("node", "list")
        self.assertEqual(0, row["Usage"]["MEMORY_MB"]["used"])

    def test_driver_and_host_options(self):
        data = self.json("compute", "--once", "--driver", "fake.multinode", "--host", "h9")
        self.assertEqual(["h9-node0", "h9-node1"], data["audited"])
        data = self.json("compute", "--once", "--driver", "fake.small", "--host", "h8")
        inv = {r["resource_class"]: r for r in data["nodes"][0]["inventory"]}
        self.assertEqual(1, inv["VCPU"]["total"])

    def test_config_file_values_show_as_configured(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "c.conf")
        with open(path, "w") as handle:
            handle.write(textwrap.dedent("""\
                [DEFAULT]
                reserved_host_memory_mb = 1024
                reserved_host_disk_mb = 2048
                cpu_allocation_ratio = 16.0
                """))
        data = self.json("--config-file", path, "compute", "--once", "--host", self.host)
        sources = {(r["resource_class"], r["quantity"]): r for r in data["nodes"][0]["sources"]}
        self.assertEqual(1024, sources["MEMORY_MB", "reserved"]["effective"])
        self.assertEqual(2, sources["DISK_GB", "reserved"]["configured"])
        self.assertEqual(16.0, sources["VCPU", "allocation_ratio"]["configured"])
        self.assertEqual("cpu_allocation_ratio", sources["VCPU", "allocation_ratio"]["option"])
        inv = {r["resource_class"]: r for r in data["nodes"][0]["inventory"]}
        self.assertEqual(16000, inv["VCPU"]["capacity"])

    def test_bad_config_value_names_option_and_value(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, "c.conf")
        with open(path, "w") as handle:
            handle.write("[DEFAULT]\nreserved_host_memory_mb = lots\n")
        code, _, err = self.cli("--config-file", path, "compute", "--once")
        self.assertEqual(1, code)
        self.assertIn("reserved_host_memory_mb", err)
        self.assertIn("lots", err)
        self.assertFalse(os.path.exists(self.state))

    def test_bad_arguments_change_nothing(self):
        for argv, code, text in (
                (["compute", "--demo"], 2, "--demo"),
                (["compute", "-f", "json"], 2, "--format"),
                (["compute", "--once", "--driver", "no-such-driver"], 1, "no-such-driver"),
                (["compute", "--once", "--bogus"], 2, "--bogus")):
            got, _, err = self.cli(*argv)
            self.assertEqual(code, got, argv)
            self.assertIn(text, err)
            self.assertFalse(os.path.exists(self.state), argv)

    def test_unknown_driver_lists_installed(self):
        _, _, err = self.cli("compute", "--once", "--driver", "no-such-driver")
        self.assertIn("fake.multinode", err)

    def test_service_runs_until_sigterm(self):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "nova_lite.cli.main", "--state-path", self.state,
             "compute", "--host", self.host],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.addCleanup(proc.wait)
        try:
            banner = proc.stdout.readline()
            self.assertIn("SIGTERM to stop", banner)
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(0, proc.returncode, err)
        self.assertIn("stopped after", err)


class TestNodeCommands(CliTestCase):

    def test_read_commands_need_a_database_and_create_none(self):
        for argv in (["node", "list"], ["node", "show", "x"], ["audit"]):
            code, _, err = self.cli(*argv)
            self.assertEqual(1, code, argv)
            self.assertIn("No nova-lite database", err)
            self.assertIn(self.state, err)
        self.assertFalse(os.path.exists(self.state))

    def test_list(self):
        self.compute_once("--driver", "fake.multinode")
        rows = self.json("node", "list")
        self.assertEqual([f"{self.host}-node0", f"{self.host}-node1"],
                         [r["Node"] for r in rows])
        self.assertEqual({"used": 0, "capacity": 4000, "free": 4000, "over": 0},
                         rows[0]["Usage"]["VCPU"])
        self.assertIsNone(rows[0]["Last error"])
        self.assertEqual([], self.json("node", "list", "--host", "other"))
        self.assertIn(f"{self.host}-node1", self.ok("node", "list"))

    def test_show_by_name_and_uuid(self):
        self.compute_once()
        data = self.json("node", "show", self.host)
        self.assertEqual(self.host, data["nodename"])
        self.assertEqual(799488, data["inventories"]["MEMORY_MB"]["capacity"])
        self.assertEqual(512, data["inventories"]["MEMORY_MB"]["reserved"])
        self.assertEqual({"DISK_GB": 0, "MEMORY_MB": 0, "VCPU": 0}, data["usage"])
        self.assertEqual(4000, data["free"]["VCPU"])
        self.assertIsInstance(data["generation"], int)
        self.assertIsNone(data["last_error"])
        self.assertEqual(data, self.json("node", "show", data["uuid"]))
        self.assertIn("capacity 799488", self.ok("node", "show", self.host))

    def test_show_unknown_names_it(self):
        self.compute_once()
        code, _, err = self.cli("node", "show", "ghost-node")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)
        self.assertIn(f"{self.host}/{self.host}", err)

    def test_delete_refuses_without_confirmation(self):
        self.compute_once()
        code, _, err = self.cli("node", "delete", self.host)
        self.assertEqual(2, code)
        self.assertIn("--yes-i-really-mean-it", err)
        self.assertIn("nothing was changed", err)
        self.assertEqual(1, len(self.json("node", "list")))

    def test_delete_with_confirmation(self):
        self.compute_once("--driver", "fake.multinode")
        out = self.ok("node", "delete", f"{self.host}-node1", "--yes-i-really-mean-it")
        self.assertIn("Deleted", out)
        self.assertEqual([f"{self.host}-node0"], [r["Node"] for r in self.json("node", "list")])

    def test_delete_unknown_node(self):
        self.compute_once()
        code, _, err = self.cli("node", "delete", "ghost-node", "--yes-i-really-mean-it")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)


class TestAuditCommand(CliTestCase):

    def tracker(self):
        settings = conf.Settings(host=self.host, state_path=self.state)
        store = Store(settings.database_url)
        self.addCleanup(store.close)
        driver = loader.load_driver("fake", settings=settings)
        driver.init_host(self.host)
        return ResourceTracker(self.host, driver, store=store, settings=settings)

    def test_consistent(self):
        self.compute_once()
        out = self.ok("audit", "--local", "--host", self.host)
        self.assertIn("consistent", out)
        for column in ("Hypervisor", "Tracked", "Records"):
            self.assertIn(column, out)
        data = self.json("audit", "--local", "--host", self.host)
        self.assertTrue(data["consistent"])
        self.assertEqual([self.host], [n["nodename"] for n in data["nodes"]])

    def test_names_the_record_without_a_guest(self):
        self.compute_once()
        rt = self.tracker()
        claim = rt.instance_claim(base.instance(), self.host)   # no guest in this process
        code, out, err = self.cli("audit", "--local", "--host", self.host, "-f", "json")
        self.assertEqual(3, code, err)
        data = json.loads(out)
        self.assertFalse(data["consistent"])
        kinds = {(d["kind"], d["uuid"]) for d in data["nodes"][0]["differences"]}
        self.assertEqual({("missing_guest", claim.instance.uuid)}, kinds)
        code, out, _ = self.cli("audit", "--local", "--host", self.host)
        self.assertEqual(3, code)
        self.assertIn(claim.instance.uuid, out)
        self.assertIn("missing_guest", out)

    def test_unknown_node(self):
        self.compute_once()
        code, _, err = self.cli("audit", "--local", "--host", self.host, "--node", "ghost-node")
        self.assertEqual(1, code)
        self.assertIn("ghost-node", err)


class TestOverAndEscaping(CliTestCase):
    """Free is never negative in any view, over is shown beside it, and names
    holding control characters are escaped for people."""

    def tracker(self, nodes, **sizes):
        settings = conf.Settings(host=self.host, state_path=self.state,
                                 reserved_host_memory_mb=0)
        os.makedirs(self.state, exist_ok=True)
        store = Store(settings.database_url)
        self.addCleanup(store.close)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=nodes,
                                    **sizes)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=store, settings=settings)
        rt.update_available_resource()
        return driver, rt

    def shrunken(self):
        driver, rt = self.tracker(["n1"], vcpus=8, memory_mb=8192, local_gb=20)
        for _ in range(2):
            rt.instance_claim(base.instance(base.flavor(root_gb=5)), "n1")
        driver.set_node_size("n1", local_gb=7)
        rt.update_available_resource()
        return rt

    def test_node_list_and_show_show_over(self):
        self.shrunken()
        (row,) = self.json("node", "list")
        self.assertEqual({"used": 10, "capacity": 7, "free": 0, "over": 3},
                         row["Usage"]["DISK_GB"])
        self.assertIn("DISK_GB: 10/7, free 0, over 3", self.ok("node", "list"))
        data = self.json("node", "show", "n1")
        self.assertEqual((0, 3), (data["free"]["DISK_GB"], data["over"]["DISK_GB"]))
        self.assertEqual(0, data["over"]["MEMORY_MB"])
        text = self.ok("node", "show", "n1")
        self.assertIn("| over", text)
        self.assertNotIn(": -", text)   # no negative figure anywhere

    def test_audit_shows_capacity_free_and_over(self):
        rt = self.shrunken()
        code, out, err = self.cli("audit", "--local", "--host", self.host, "--driver",
                                  "fake.multinode", "-f", "json")
        data = json.loads(out)
        (node,) = [n for n in data["nodes"] if n["nodename"] == "n1"]
        rows = {r["resource_class"]: r for r in node["resources"]}
        self.assertEqual((7, 0, 3), (rows["DISK_GB"]["capacity"], rows["DISK_GB"]["free"],
                                     rows["DISK_GB"]["over"]))
        code, out, err = self.cli("audit", "--local", "--host", self.host, "--driver",
                                  "fake.multinode")
        for column in ("Capacity", "Free", "Over"):
            self.assertIn(column, out)
        self.assertIn("over capacity in DISK_GB by 3", err)
        for alloc in rt.store.list_allocations():
            self.assertIn(alloc.instance_uuid, err)

    def test_compute_once_has_an_over_column(self):
        out = self.ok("compute", "--once", "--host", self.host)
        self.assertIn("| Over", out)
        data = self.compute_once()
        for row in data["nodes"][0]["inventory"]:
            self.assertEqual(0, row["over"])
            self.assertGreaterEqual(row["free"], 0)

    def test_control_characters_in_names_are_escaped(self):
        evil = "n\x1b[2J\x07\u202eevil\nnext"
        _, rt = self.tracker(["n1"], vcpus=2, memory_mb=2048, local_gb=10)
        # No name with a control character is recorded now; a database
        # written before that rule may still hold one.
        with rt.store.db.engine.begin() as conn:
            conn.execute(models.compute_nodes.update().values(
                nodename=evil, last_error="bad\x1b]0;title\x07 reason"))
        for argv in (("node", "list"), ("node", "show", evil),
                     ("audit", "--local", "--host", self.host, "--driver",
                      "fake.multinode")):
            _, out, _ = self.cli(*argv)
            self.assertNotIn("\x1b", out, argv)
            self.assertNotIn("\x07", out, argv)
            self.assertNotIn("\u202e", out, argv)
            self.assertIn("n\\x1b[2J", out, argv)
        self.assertIn("bad\\x1b]0;title\\x07 reason", self.ok("node", "list"))
        # Machines get the name as it is.
        self.assertEqual(evil, self.json("node", "list")[0]["Node"])


class TestSafeText(testtools.TestCase):

    def test_escapes_controls_only(self):
        from nova_lite.cli.output import cell, safe_text
        self.assertEqual("plain name-1.example", safe_text("plain name-1.example"))
        self.assertEqual("a\\x1b[31mb\\nc\\td\\u202e", safe_text("a\x1b[31mb\nc\td\u202e"))
        self.assertEqual("h\\x00", cell("h\x00"))
        self.assertEqual(safe_text("x\x9b"), safe_text(safe_text("x\x9b")))
