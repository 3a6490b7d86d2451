"""Every command's output in every formatter holds typed values, never a Python repr.

Each command that prints through cliff's formatters runs on a real SQLite
state (fake driver) in ``json``, ``yaml``, ``value``, ``table`` and ``csv``
(lists) or ``shell`` (show).  JSON must hold only null, booleans, numbers,
strings, lists and mappings with no repr inside a string; YAML must parse
to the same data; ``value``/``csv``/``shell`` must give, cell by cell, the
text the documentation promises for the JSON value (null empty, booleans
``true``/``false``, lists and mappings compact JSON).
"""

import csv
import importlib.metadata
import io
import json
import os
import re

import fixtures
import testtools
import yaml
from cliff import lister

from nova_lite.cli.typed import normalize_column
from tests.test_cli import CliTestCase

#: The commands of this distribution, as typed on the command line.
COMMANDS = sorted(ep.name.replace("_", " ")
                  for ep in importlib.metadata.entry_points(group="nova_lite.cli")
                  if ep.value.startswith("nova_lite.cli."))

#: Commands that print no formatted record, and why.
NOT_FORMATTED = {
    "node delete": "prints one line (Deleted ...)",
    "service delete": "prints one line (Deleted the compute service ...)",
    "server delete": "prints one line (Deleted server ...)",
    "server resize": "prints one line (the task recorded, or how the move ended)",
    "server resize confirm": "prints one line (the task recorded, or how the move ended)",
    "server resize revert": "prints one line (the task recorded, or how the move ended)",
    "server migrate": "prints one line (the task recorded, or how the move ended)",
    "metrics serve": "serves until a signal",
    "metrics textfile": "writes a file",
    "api serve": "serves until a signal",
}

#: Python reprs that must never reach a machine: dict/list/tuple reprs, objects.
REPR = re.compile(r"^[\[{(]'|': |\bobject at 0x|^<[a-zA-Z_.]+[ >]")


def command_class(name):
    (ep,) = [ep for ep in importlib.metadata.entry_points(group="nova_lite.cli")
             if ep.name == name.replace(" ", "_")]
    return ep.load()


def expected_text(value):
    """The text ``value``, ``csv`` and ``shell`` give for a JSON value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def command_argv(name, host, server, tmp, run=0):
    """The arguments that run ``name`` successfully on the state TypedOutputCase builds."""
    return {
        "driver list": ["driver", "list"],
        "driver show": ["driver", "show", "fake"],
        "driver scaffold": ["driver", "scaffold", "acme", "--dir",
                            os.path.join(tmp, f"acme{run}")],
        "compute": ["compute", "--once", "--host", host, "--demo"],
        "node list": ["node", "list", "--limit", "5"],
        "node show": ["node", "show", host],
        "node explain": ["node", "explain", host],
        "audit": ["audit", "--local", "--host", "otherhost"],
        "service list": ["service", "list"],
        "service enable": ["service", "enable", "otherhost"],
        "service disable": ["service", "disable", host, "--reason", "kernel upgrade"],
        "hypervisor list": ["hypervisor", "list", "--limit", "5"],
        "hypervisor show": ["hypervisor", "show", host],
        "hypervisor stats": ["hypervisor", "stats"],
        "host describe": ["host", "describe", host],
        "inventory list": ["inventory", "list", host],
        "claim test": ["claim", "test", "--node", host, "--flavor", "m1.large"],
        "server create": ["server", "create", "--flavor", "m1.tiny"],
        "server list": ["server", "list", "--all", "--limit", "5"],
        "server show": ["server", "show", server],
        "db sync": ["db", "sync"],
        "db version": ["db", "version"],
        "db archive": ["db", "archive", "--max-rows", "10"],
        "db purge": ["db", "purge", "--all", "--yes-i-really-mean-it"],
        "aggregate list": ["aggregate", "list"],
        "aggregate show": ["aggregate", "show", "agg1"],
        # The writing ones, each on what prepare() made for this run.
        "aggregate create": ["aggregate", "create", f"new{run}", "--zone", "az1",
                             "--property", "ssd=true"],
        "aggregate set": ["aggregate", "set", "agg1", "--property", f"k{run}=v"],
        "aggregate unset": ["aggregate", "unset", "agg1", "--property", f"u{run}"],
        "aggregate add host": ["aggregate", "add", "host", f"add{run}", host],
        "aggregate remove host": ["aggregate", "remove", "host", f"rm{run}", host],
        "aggregate delete": ["aggregate", "delete", f"del{run}"],
    }[name]


def prepare(test, name, run):
    """Make what run ``run`` of writing command ``name`` changes (see command_argv)."""
    if name == "aggregate unset":
        test.ok("aggregate", "set", "agg1", "--property", f"u{run}=v")
    elif name in ("aggregate add host", "aggregate remove host", "aggregate delete"):
        aggregate = {"aggregate add host": "add", "aggregate remove host": "rm",
                     "aggregate delete": "del"}[name] + str(run)
        test.ok("aggregate", "create", aggregate)
        if name == "aggregate remove host":
            test.ok("aggregate", "add", "host", aggregate, test.host)


class TestEveryCommandIsCovered(testtools.TestCase):

    def test_every_command_has_a_case_or_a_reason(self):
        for name in COMMANDS:
            formatted = hasattr(command_class(name), "formatter_namespace")
            self.assertEqual(name not in NOT_FORMATTED, formatted, name)
            if formatted:
                self.assertTrue(command_argv(name, "h", "u", "/x"), name)
        self.assertEqual(set(TestEveryFormatter.READ_ONLY) | set(TestWritingCommands.WRITING),
                         set(COMMANDS) - set(NOT_FORMATTED))


class TypedOutputCase(CliTestCase):

    host = "typedhost"

    def setUp(self):
        super().setUp()
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.compute_once("--driver", "fake")
        self.server = self.json("server", "create", "--flavor", "m1.tiny", "--project",
                                "p1")[0]["ID"]
        # The host builds it: no task is left open, whose age would move between runs.
        self.compute_once("--driver", "fake")
        self.ok("service", "disable", self.host, "--reason", "kernel upgrade")
        self.ok("compute", "--once", "--host", "otherhost")   # enabled: reason null
        self.ok("aggregate", "create", "agg1", "--zone", "az1", "--property", "ssd=true")
        self.ok("aggregate", "add", "host", "agg1", "otherhost")
        self.runs = 0

    def run_format(self, name, formatter):
        self.runs += 1
        prepare(self, name, self.runs)
        return self.ok(*command_argv(name, self.host, self.server, self.tmp, self.runs),
                       "-f", formatter)

    def assertTyped(self, data, where):
        """``data`` holds only JSON types, and no string is a repr or a stray None."""
        if isinstance(data, dict):
            for key, value in data.items():
                self.assertIsInstance(key, str, where)
                self.assertTyped(value, f"{where}.{key}")
        elif isinstance(data, list):
            for i, value in enumerate(data):
                self.assertTyped(value, f"{where}[{i}]")
        elif isinstance(data, str):
            self.assertNotIn(data, ("None", "True", "False", "yes", "no"), where)
            self.assertIsNone(REPR.search(data), f"{where}: {data!r}")
        else:
            self.assertIsInstance(data, (type(None), bool, int, float), where)


class TestEveryFormatter(TypedOutputCase):
    """Read-only commands: every formatter gives the same typed values."""

    READ_ONLY = ("driver list", "driver show", "node list", "node show", "node explain",
                 "audit", "service list", "hypervisor list", "hypervisor show",
                 "hypervisor stats", "host describe", "inventory list", "claim test",
                 "server list", "server show", "db version", "aggregate list",
                 "aggregate show")

    def check_command(self, name):
        cls = command_class(name)
        is_list = issubclass(cls, lister.Lister)
        data = json.loads(self.run_format(name, "json"))
        self.assertTyped(data, name)
        self.assertEqual(data, yaml.safe_load(self.run_format(name, "yaml")), name)
        rows = data if is_list else [data]
        if is_list:
            self.assertTrue(rows, name)
        if getattr(cls, "columns", None):
            for row in rows:
                self.assertEqual(list(cls.columns), list(row), name)
        # value: one line per row (list) or per field (show)
        lines = self.run_format(name, "value").splitlines()
        if is_list:
            self.assertEqual([" ".join(str(expected_text(v)) for v in row.values())
                              for row in rows], lines, name)
        else:
            self.assertEqual([expected_text(v) for v in data.values()], lines, name)
        if is_list:
            table = list(csv.reader(io.StringIO(self.run_format(name, "csv"))))
            self.assertEqual(list(rows[0]), table[0], name)
            self.assertEqual([[expected_text(v) for v in row.values()] for row in rows],
                             table[1:], name)
        else:
            shell = self.run_format(name, "shell").splitlines()
            parsed = [re.fullmatch(r'([a-z0-9_]+)="(.*)"', line) for line in shell]
            self.assertNotIn(None, parsed, (name, shell))
            self.assertEqual(
                [(normalize_column(k), expected_text(v)) for k, v in data.items()],
                [(normalize_column(m.group(1)), m.group(2).replace('\\"', '"'))
                 for m in parsed], name)
        table = self.run_format(name, "table")
        self.assertIsNone(re.search(r"\bNone\b|\{'|\['", table), (name, table))
        return data

    def test_read_only_commands(self):
        for name in self.READ_ONLY:
            self.check_command(name)

    def test_values_the_tester_found_as_text(self):
        server = json.loads(self.run_format("server show", "json"))
        ((node_uuid, held),) = server["allocations"].items()
        self.assertEqual({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, held)
        self.assertEqual(json.loads(self.run_format("node show", "json"))["uuid"], node_uuid)
        self.assertEqual("p1", server["project_id"])
        shown = json.loads(self.run_format("hypervisor show", "json"))
        self.assertEqual(4.0, shown["VCPU"]["ratio"])
        self.assertIsInstance(shown["MEMORY_MB"]["used"], int)
        self.assertIn('vcpu="{\\"capacity\\": 4000, ', self.run_format("hypervisor show", "shell"))
        services = {s["Host"]: s for s in json.loads(self.run_format("service list", "json"))}
        self.assertIsNone(services["otherhost"]["Disabled Reason"])
        self.assertEqual("kernel upgrade", services[self.host]["Disabled Reason"])
        self.assertNotIn("None", self.run_format("service list", "csv"))
        claim = json.loads(self.run_format("claim test", "json"))
        self.assertEqual({"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 80}, claim["requested"])
        self.assertIs(True, claim["fits"])
        version = json.loads(self.run_format("db version", "json"))
        self.assertIs(True, version["Current"])
        self.assertEqual([], version["Pending"])
        inventory = {r["Resource Class"]: r for r in
                     json.loads(self.run_format("inventory list", "json"))}
        self.assertIsNone(inventory["VCPU"]["Max Unit"])
        self.assertIn("| -", self.ok("inventory", "list", self.host, "-c", "max_unit"))

    def test_empty_list_prints_its_header(self):
        for argv, header in ((["server", "list", "--host", "nowhere"], "| ID "),
                             (["node", "list", "--host", "nowhere"], "| Host ")):
            out = self.ok(*argv)
            self.assertIn(header, out)
            self.assertEqual([], json.loads(self.ok(*argv, "-f", "json")))
            self.assertEqual("", self.ok(*argv, "-f", "value"))


class TestWritingCommands(TypedOutputCase):
    """Commands that change something each run: typed in every formatter."""

    WRITING = ("driver scaffold", "compute", "service enable", "service disable",
               "server create", "db sync", "db archive", "db purge", "aggregate create",
               "aggregate set", "aggregate unset", "aggregate add host",
               "aggregate remove host", "aggregate delete")

    def test_writing_commands(self):
        for name in self.WRITING:
            cls = command_class(name)
            is_list = issubclass(cls, lister.Lister)
            data = json.loads(self.run_format(name, "json"))
            self.assertTyped(data, name)
            again = yaml.safe_load(self.run_format(name, "yaml"))
            self.assertTyped(again, name)
            self.assertEqual(sorted(data[0] if is_list else data),
                             sorted(again[0] if is_list else again), name)
            extra = ["csv"] if is_list else ["shell"]
            for formatter in ["value", "table", *extra]:
                out = self.run_format(name, formatter)
                self.assertIsNone(re.search(r"\bNone\b|\{'|\['|\bTrue\b", out),
                                  (name, formatter, out))

    def test_compute_report_fields(self):
        data = json.loads(self.run_format("compute", "json"))
        self.assertEqual(["host", "driver", "api_version", "state_path", "database",
                          "audited", "failed", "orphans_deleted", "orphans_kept", "nodes",
                          "demo"], list(data))
        self.assertEqual("fake", self.ok("compute", "--once", "--host", self.host, "-c",
                                         "driver", "-f", "value").strip())
        value = self.ok("compute", "--once", "--host", self.host, "-c", "audited", "-f",
                        "value")
        self.assertEqual([self.host], json.loads(value))

    def test_db_sync_lists_what_it_applied(self):
        data = json.loads(self.run_format("db sync", "json"))
        self.assertEqual([], data["Applied"])
        self.assertIn("nothing (already current)", self.run_format("db sync", "table"))


class TestTablesFitATerminal(CliTestCase):
    """The default table of every list command fits 80 columns on a host named as in
    the guides (compute1), with real sizes; --long shows every column."""

    host = "compute1"

    def test_default_tables_fit_and_long_shows_every_column(self):
        self.compute_once("--driver", "fake.small")
        self.ok("server", "create", "--flavor", "m1.tiny")
        for argv in (["driver", "list"], ["node", "list"], ["service", "list"],
                     ["hypervisor", "list"], ["host", "describe", self.host],
                     ["inventory", "list", self.host], ["server", "list"]):
            out = self.ok(*argv)
            self.assertLessEqual(max(len(line) for line in out.splitlines()), 80,
                                 f"{argv}:\n{out}")
            cls = command_class(" ".join(argv[:2]))
            if cls.default_columns is not None:
                header = self.ok(*argv, "--long").splitlines()[1]
                self.assertEqual(list(cls.columns),
                                 [c.strip() for c in header.strip("|").split("|")], argv)
                self.assertEqual(list(cls.columns), list(self.json(*argv)[0]), argv)


class TestConversions(testtools.TestCase):
    """The three renderings of one value (see nova_lite.cli.typed)."""

    def test_plain_text_and_human(self):
        from fractions import Fraction

        from nova_lite.cli.output import TextColumn
        from nova_lite.cli.typed import human, plain, text
        value = {"ratio": Fraction(7, 10), "ids": ("b", "a"), "set": {2, 1}, "none": None,
                 "ok": True, 3: TextColumn("n\x1b")}
        self.assertEqual({"ratio": 0.7, "ids": ["b", "a"], "set": [1, 2], "none": None,
                          "ok": True, "3": "n\x1b"}, plain(value))
        self.assertEqual('{"ratio": 0.7, "ids": ["b", "a"], "set": [1, 2], "none": null, '
                         '"ok": true, "3": "n\\u001b"}', text(value))
        self.assertEqual(("", "true", 4, 0.7, "x"),
                         (text(None), text(True), text(4), text(Fraction(7, 10)), text("x")))
        self.assertEqual(("-", "yes", 4, "0.7", "a, b", "-", "n\\x1b"),
                         (human(None), human(True), human(4), human(Fraction(7, 10)),
                          human(["a", "b"]), human([]), human(TextColumn("n\x1b"))))
        self.assertEqual("VCPU: 1\nMEMORY_MB: [1]", human({"VCPU": 1, "MEMORY_MB": [1]}))
