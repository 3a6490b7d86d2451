"""Every command's error cases: the documented exit status, a clear message, nothing changed.

The exit status table of README.md and doc/source/operator/cli.rst is read
here: both must list the same command families with the same codes, every
command of this distribution must be in exactly one family, and the cases
below must exercise exactly the codes each family documents.  Each case
runs on a real SQLite state (fake driver) and must leave the database, the
state directory and stdout as they were.
"""

import importlib.metadata
import os
import re
import sqlite3

import fixtures
import testtools

from nova_lite import conf
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store
from nova_lite.virt import loader
from tests.test_cli import CliTestCase
from nova_lite.cli import aggregate, service
from tests.test_cli_aggregates import install_missing_commands
from tests.test_moves import MOVE_COMMANDS, use_move_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
CLI_RST = os.path.join(ROOT, "doc", "source", "operator", "cli.rst")
GLOBAL = "every command"
CONFIRM = "--yes-i-really-mean-it"

# The move commands count even where the installed metadata predates them
# (tests.test_moves.use_move_commands makes them runnable there).
COMMANDS = sorted({ep.name.replace("_", " ")
                   for ep in importlib.metadata.entry_points(group="nova_lite.cli")
                   if ep.value.startswith("nova_lite.cli.")}
                  | {name.replace("_", " ") for name in MOVE_COMMANDS}
                  | {name.replace("_", " ") for name in aggregate.ENTRY_POINTS}
                  | {name.replace("_", " ") for name in service.ENTRY_POINTS})
_NAME = re.compile(r"`+([a-z]+(?: [a-z]+)*)`+")


def _family(first_cell):
    names = tuple(_NAME.findall(first_cell))
    return names if names else GLOBAL


def readme_table():
    """``{family: {code: when}}`` from README.md's exit code table."""
    with open(README, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = lines.index("| Commands | 1: error | 2: bad arguments | 3 |")
    table = {}
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        table[_family(cells[0])] = {code: when for code, when in zip((1, 2, 3), cells[1:])
                                    if when != "-"}
    return table


def rst_table():
    """``{family: {code: when}}`` from cli.rst's exit status list-table."""
    with open(CLI_RST, encoding="utf-8") as handle:
        text = handle.read()
    body = text.split(".. list-table:: Exit status by command", 1)[1]
    rows, cells = [], None
    for line in body.splitlines()[1:]:
        if line and not line.startswith("   "):
            break
        if line.startswith("   * - "):
            cells = [line[7:]]
            rows.append(cells)
        elif line.startswith("     - "):
            cells.append(line[7:])
        elif line.strip() and cells is not None and not line.startswith("   :"):
            cells[-1] += " " + line.strip()
    table = {}
    for cells in rows[1:]:
        table[_family(cells[0])] = {code: when for code, when in zip((1, 2, 3), cells[1:])
                                    if when.strip() != "\\-"}
    return table


class TestTheTable(testtools.TestCase):

    def test_readme_and_guide_agree(self):
        readme, rst = readme_table(), rst_table()
        self.assertEqual(list(rst), list(readme))
        self.assertEqual({f: set(c) for f, c in rst.items()},
                         {f: set(c) for f, c in readme.items()})

    def test_every_command_is_in_one_family(self):
        families = [f for f in rst_table() if f != GLOBAL]
        listed = [name for family in families for name in family]
        self.assertEqual(sorted(listed), sorted(set(listed)), "a command in two families")
        self.assertEqual(COMMANDS, sorted(listed))


def _dump(path):
    """Every row of the SQLite file at ``path``, read without changing it."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _files(top):
    return sorted(os.path.relpath(os.path.join(d, f), top)
                  for d, _, names in os.walk(top) for f in names
                  if not f.endswith(("-wal", "-shm")))


class TestErrorCases(CliTestCase):
    """Each case: (family, argv, exit status, words on stderr)."""

    host = "exithost"

    def setUp(self):
        super().setUp()
        use_move_commands(self)
        install_missing_commands(self, aggregate.ENTRY_POINTS)
        install_missing_commands(self, service.ENTRY_POINTS)
        self.tmp = self.useFixture(fixtures.TempDir()).path
        self.compute_once()
        self.live = self.json("server", "create", "--flavor", "m1.tiny")[0]["ID"]
        self.gone = self.json("server", "create", "--flavor", "m1.tiny")[0]["ID"]
        self.ok("server", "delete", self.gone, CONFIRM)
        self.compute_once()   # the host builds and deletes
        settings = conf.Settings(state_path=self.state)
        store = Store(settings.database_url)
        self.addCleanup(store.close)
        # The live server's guest is gone from its host: an audit differs (exit 3).
        host_driver = loader.load_driver("fake", settings=settings)
        host_driver.init_host(self.host)
        host_driver.attach_store(store)
        host_driver.destroy(store.get_instance(self.live))
        for host in ("amb1", "amb2"):   # node "shared" on two hosts
            driver = loader.load_driver("fake.multinode", settings=settings,
                                        nodes=["shared"])
            driver.init_host(host)
            ResourceTracker(host, driver, store=store,
                            settings=settings).update_available_resource()
        self.newer = os.path.join(self.tmp, "newer.db")
        Store(f"sqlite:///{self.newer}").close()
        conn = sqlite3.connect(self.newer)
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
        conn.commit()
        conn.close()
        self.bad_conf = os.path.join(self.tmp, "bad.conf")
        with open(self.bad_conf, "w") as handle:
            handle.write("[DEFAULT]\nreserved_host_memory_mb = lots\n")
        self.full = os.path.join(self.tmp, "full")
        os.mkdir(self.full)
        with open(os.path.join(self.full, "x"), "w"):
            pass
        self.empty_state = os.path.join(self.tmp, "empty-state")
        os.mkdir(self.empty_state)
        self.yaml = os.path.join(self.tmp, "flavors.yaml")
        with open(self.yaml, "w") as handle:
            handle.write("half:\n  vcpus: 1.9\n  memory_mb: 512\n")

    def cases(self):
        h, new = self.host, os.path.join(self.tmp, "new-dir")
        tiny = ["--flavor", "m1.tiny"]
        return [
            (GLOBAL, ["frobnicate"], 2, ["frobnicate"]),
            (GLOBAL, ["--bogus", "node", "list"], 2, ["unknown option '--bogus'"]),
            (GLOBAL, ["node", "show"], 2, ["NODE"]),
            (GLOBAL, ["node", "list", "extra"], 2, ["unrecognized arguments: extra"]),
            (GLOBAL, ["hypervisor", "list", "-f", "xml"], 2, ["xml"]),
            (GLOBAL, ["hypervisor", "list", "-c", "vCPUs", "-c", "Host"], 2,
             ["-c: no column 'vCPUs'", "vCPUs (capacity)"]),
            (GLOBAL, ["hypervisor", "stats", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["host", "describe", h, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["node", "list", "--sort-column", "nope"], 2, ["--sort-column", "nope"]),
            (GLOBAL, ["server", "list", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["server", "show", self.live, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["server", "create", *tiny, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["service", "list", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["service", "disable", h, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["service", "enable", h, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["compute", "--once", "--host", h, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["db", "sync", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["db", "version", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["driver", "list", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["driver", "show", "fake", "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["driver", "scaffold", "acme", "--dir", new, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["claim", "test", "--node", h, *tiny, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["node", "explain", h, "-c", "nope"], 2, ["'nope'"]),
            (GLOBAL, ["--state-path", " ", "node", "list"], 2, ["--state-path"]),
            (GLOBAL, ["--database-url", "", "node", "list"], 2, ["--database-url"]),
            (GLOBAL, ["--config-file", "/nonexistent.conf", "node", "list"], 1,
             ["/nonexistent.conf", "no such file"]),
            (GLOBAL, ["--config-file", self.bad_conf, "node", "list"], 1,
             ["reserved_host_memory_mb", "lots"]),
            (GLOBAL, ["--state-path", self.empty_state, "node", "list"], 1,
             ["No nova-lite database"]),
            (GLOBAL, ["--database-url", f"sqlite:///{self.tmp}", "node", "list"], 1,
             ["is a directory"]),
            (GLOBAL, ["--database-url", f"sqlite:///{self.newer}", "node", "list"], 1,
             ["9999", "newer"]),
            ("driver list", ["driver", "show", "nope"], 1, ["'nope'", "fake.multinode"]),
            ("driver list", ["driver", "scaffold", "Bad Name", "--dir", new], 2,
             ["invalid driver name"]),
            ("driver list", ["driver", "scaffold", "fake", "--dir", new], 2,
             ["already installed"]),
            ("driver list", ["driver", "scaffold", "acme", "--dir", self.full], 2,
             ["not empty"]),
            ("compute", ["compute", "--once", "--host", h, "--driver", "nope"], 1, ["nope"]),
            ("compute", ["compute", "--demo"], 2, ["--demo needs --once"]),
            ("compute", ["compute", "-f", "json"], 2, ["--format and --column need --once"]),
            ("compute", ["compute", "--once", "--host", " "], 2, ["--host"]),
            ("audit", ["audit", "--local", "--host", h, "--driver", "nope"], 1, ["nope"]),
            ("audit", ["audit", "--local", "--host", h, "--node", "ghost"], 1, ["ghost"]),
            ("audit", ["audit", "--local", "--host", "typo", "--driver", "fake"], 1,
             ["'typo' not found"]),
            ("audit", ["audit", "--local", "--host", h, "--heal", "--migration",
                       "6d1b3c36-0000-4000-8000-00000000beef"], 1,
             ["Migration 6d1b3c36-0000-4000-8000-00000000beef not found"]),
            # Asking a host: refused from the records, before anything is recorded.
            ("audit", ["audit", "--host", "typo"], 1, ["'typo' not found"]),
            ("audit", ["audit", "--host", h, "--node", "ghost"], 1, ["ghost"]),
            ("audit", ["audit", "--node", "ghost"], 1, ["'ghost' not found"]),
            ("audit", ["audit", "--host", h, "--heal", "--migration",
                       "6d1b3c36-0000-4000-8000-00000000beef"], 1,
             ["Migration 6d1b3c36-0000-4000-8000-00000000beef not found"]),
            ("audit", ["audit", "--host", "amb1"], 1,
             ["Host amb1 has no compute service record", "--local"]),
            ("audit", ["audit", "--host", h, "--migration", "x"], 2, ["--migration names"]),
            ("audit", ["audit", "--host", " "], 2, ["--host must not be empty"]),
            ("audit", ["audit", "--host", h, "--node", " "], 2, ["--node must not be empty"]),
            ("audit", ["audit", "--host", h, "--driver", "fake"], 2,
             ["--driver is the driver of --local"]),
            ("audit", ["audit", "--host", h, "--timeout", "0"], 2, ["--timeout"]),
            ("audit", ["audit", "--local", "--timeout", "5"], 2, ["--timeout"]),
            ("audit", ["audit", "--heal"], 2, ["name it with --host or --node"]),
            ("audit", ["audit", "--local", "--host", h], 3, []),   # its guest is gone
            ("node list", ["node", "show", "ghost"], 1, ["'ghost' not found", "amb1/shared"]),
            ("node list", ["node", "explain", "ghost"], 1, ["'ghost' not found"]),
            ("node list", ["node", "delete", "ghost", CONFIRM], 1, ["'ghost' not found"]),
            ("node list", ["hypervisor", "show", "ghost"], 1, ["'ghost' not found"]),
            ("node list", ["inventory", "list", "ghost"], 1, ["'ghost' not found"]),
            ("node list", ["node", "show", h, "--host", "amb1"], 1, ["on host 'amb1'"]),
            ("node list", ["host", "describe", "ghost"], 1, ["'ghost'", "amb2"]),
            ("node list", ["node", "show", "shared"], 2, ["several hosts (amb1, amb2)",
                                                          "--host"]),
            ("node list", ["node", "explain", "shared"], 2, ["several hosts"]),
            ("node list", ["node", "delete", "shared", CONFIRM], 2, ["several hosts"]),
            ("node list", ["hypervisor", "show", "shared"], 2, ["several hosts"]),
            ("node list", ["inventory", "list", "shared"], 2, ["several hosts"]),
            ("node list", ["node", "show", " "], 2, ["NODE must not be empty"]),
            ("node list", ["node", "delete", h], 2, [CONFIRM, "nothing was changed"]),
            ("node list", ["node", "list", "--limit", "0"], 2, ["--limit"]),
            ("node list", ["hypervisor", "list", "--limit", "1001"], 2,
             ["--limit must be at most 1000"]),
            ("node list", ["node", "list", "--marker", "ghost"], 1,
             ["marker [ghost] not found"]),
            ("node list", ["hypervisor", "list", "--marker", "ghost"], 1,
             ["marker [ghost] not found"]),
            ("server create", ["server", "list", "--marker", "ghost"], 1,
             ["marker [ghost] not found"]),
            ("server create", ["server", "list", "--limit", "x"], 2, ["--limit"]),
            ("claim test", ["claim", "test", "--node", "ghost", *tiny], 1, ["'ghost'"]),
            ("claim test", ["claim", "test", "--node", h, "--flavor", "m9"], 1,
             ["unknown flavor 'm9'", "m1.tiny"]),
            ("claim test", ["claim", "test", "--node", h], 2, ["a flavor is required"]),
            ("claim test", ["claim", "test", "--node", h, *tiny, "--vcpus", "1", "--ram",
                            "1"], 2, ["not both"]),
            ("claim test", ["claim", "test", "--node", h, "--vcpus", "0", "--ram", "1"], 2,
             ["vcpus", ">= 1"]),
            ("claim test", ["claim", "test", "--node", "shared", *tiny], 2, ["several"]),
            ("claim test", ["claim", "test", "--node", h, "--flavors-file", self.tmp,
                            "--flavor", "x"], 2, [f"{self.tmp} is a directory"]),
            ("claim test", ["claim", "test", "--node", h, "--flavors-file", self.yaml,
                            "--flavor", "half"], 2,
             [self.yaml, "'half'", "vcpus = 1.9 is not an integer"]),
            ("server create", ["server", "show", "ghost"], 1, ["No server 'ghost'"]),
            ("server create", ["server", "delete", "ghost", CONFIRM], 1, ["No server 'ghost'"]),
            ("server create", ["server", "delete", self.gone, CONFIRM], 1, ["already deleted"]),
            ("server create", ["server", "create", "--flavor", "m9"], 1, ["unknown flavor"]),
            ("server create", ["server", "create", "--vcpus", "100000", "--ram", "1"], 1,
             ["No valid host"]),
            ("server create", ["server", "create", *tiny, "--count", "0"], 2, ["--count"]),
            ("server create", ["server", "create", "--count", "x"], 2, ["--count"]),
            ("server create", ["server", "create", *tiny, "--project", " "], 2,
             ["--project must not be empty"]),
            ("server create", ["server", "create", "--flavors-file", "/nope.yaml",
                               "--flavor", "x"], 2, ["/nope.yaml: no such file"]),
            ("server create", ["server", "delete", self.live], 2, [CONFIRM]),
            ("server resize", ["server", "resize", "ghost", *tiny], 1, ["No server 'ghost'"]),
            ("server resize", ["server", "resize", "confirm", self.live], 1,
             ["not resized"]),
            ("server resize", ["server", "resize", "revert", self.live, "--wait"], 1,
             ["not resized"]),
            ("server resize", ["server", "migrate", self.live, "--host", "nowhere"], 1,
             ["Host 'nowhere' not found"]),
            ("server resize", ["server", "resize", self.live, *tiny], 2, ["same flavor"]),
            ("server resize", ["server", "resize", self.live], 2, ["a flavor is required"]),
            ("server resize", ["server", "migrate", self.live, "--host", " "], 2,
             ["--host must not be empty"]),
            ("server resize", ["server", "migrate", self.live, "--timeout", "0"], 2,
             ["--timeout"]),
            ("service list", ["service", "enable", "ghost"], 1, ["'ghost'", h]),
            ("service list", ["service", "disable", "ghost"], 1, ["'ghost'", h]),
            ("service list", ["service", "disable", h, "--reason", " "], 2, ["--reason"]),
            ("service delete", ["service", "delete", "ghost", CONFIRM], 1, ["'ghost'", h]),
            ("service delete", ["service", "delete", h, CONFIRM], 1,
             ["hosting", self.live]),
            ("service delete", ["service", "delete", h], 2, [CONFIRM]),
            ("aggregate create", ["aggregate", "show", "ghost"], 1, ["'ghost'"]),
            ("aggregate create", ["aggregate", "delete", "ghost"], 1, ["'ghost'"]),
            ("aggregate create", ["aggregate", "unset", "ghost", "--property", "k"], 1,
             ["'ghost'"]),
            ("aggregate create", ["aggregate", "remove", "host", "ghost", h], 1, ["'ghost'"]),
            ("aggregate create", ["aggregate", "list", "-c", "nope"], 2, ["'nope'"]),
            ("aggregate create", ["aggregate", "add", "host", "ghost", h], 1, ["'ghost'"]),
            ("aggregate create", ["aggregate", "create", "a", "--zone", " "], 2, ["--zone"]),
            ("aggregate create", ["aggregate", "set", "ghost", "--property", "x"], 2,
             ["KEY=VALUE"]),
            ("db sync", ["--database-url", f"sqlite:///{self.newer}", "db", "sync"], 1,
             ["9999", "newer"]),
            ("db archive", ["db", "archive", "--before", "last week"], 2,
             ["--before 'last week'", "ISO 8601"]),
            ("db archive", ["db", "archive", "--max-rows", "0"], 2, ["--max-rows", ">= 1"]),
            ("db archive", ["db", "purge"], 2, ["--before DATE or --all"]),
            ("db archive", ["db", "purge", "--all"], 2, ["--yes-i-really-mean-it"]),
            ("db archive", ["db", "purge", "--before", "2026-02-30"], 2, ["'2026-02-30'"]),
            ("metrics serve", ["api", "serve", "--bind", "192.0.2.1", "--port", "0"], 1,
             ["Cannot listen on 192.0.2.1:0"]),
            ("metrics serve", ["metrics", "serve", "--bind", "no.such.invalid", "--port",
                               "0"], 1, ["Cannot listen on no.such.invalid:0"]),
            ("metrics serve", ["api", "serve", "--port", "70000"], 2, ["--port", "70000"]),
            ("metrics serve", ["metrics", "serve", "--port", "-1"], 2, ["--port"]),
            ("metrics serve", ["metrics", "textfile", "/nonexistent-dir/x.prom"], 2,
             ["/nonexistent-dir"]),
        ]

    def test_every_case(self):
        table = rst_table()
        family_of = {name: family for family in table if family != GLOBAL
                     for name in family}
        exercised = {family: set() for family in table}
        commands_run = set()
        db, newer = self.db_path(), self.newer
        for family, argv, code, words in self.cases():
            before = (_dump(db), _dump(newer), _files(self.state), _files(self.tmp))
            got, out, err = self.cli(*argv)
            self.assertEqual(code, got, f"{argv}:\n{out}\n{err}")
            for word in words:
                self.assertIn(word, err, argv)
            if code != 3:
                self.assertEqual("", out, argv)
            self.assertEqual(before, (_dump(db), _dump(newer), _files(self.state),
                                      _files(self.tmp)), f"{argv} changed something")
            exercised[GLOBAL if family == GLOBAL else family_of[family]].add(code)
            commands_run.update(n for n in COMMANDS if f" {n} " in f" {' '.join(argv)} ")
        self.assertEqual({f: set(codes) for f, codes in table.items()}, exercised)
        self.assertEqual(set(COMMANDS), commands_run)

    def test_errors_name_what_is_wrong_once(self):
        code, _, err = self.cli("--database-url", "postgresql://u:pw@127.0.0.1:1/x",
                                "node", "list", state=False)
        self.assertEqual(1, code)
        self.assertEqual(1, err.count("Cannot open database"), err)
        self.assertIn("Cannot open database postgresql://u:***@127.0.0.1:1/x: ", err)
        self.assertEqual(1, err.count("127.0.0.1:1"), err)
        self.assertNotIn("pw", err)
        with open(os.path.join(self.tmp, "junk.db"), "w") as handle:
            handle.write("not a database\n" * 100)
        for url, argv in ((f"sqlite:///{self.tmp}/junk.db", ["node", "list"]),
                          (f"sqlite:///{self.tmp}/junk.db", ["compute", "--once"]),
                          (f"sqlite:///{self.tmp}/junk.db", ["db", "sync"]),
                          (f"sqlite:///{self.newer}", ["node", "list"]),
                          (f"sqlite:///{self.newer}", ["server", "create", "--flavor",
                                                       "m1.tiny"])):
            code, _, err = self.cli("--database-url", url, *argv, state=False)
            self.assertEqual(1, code, argv)
            self.assertEqual(1, err.count(url), (argv, err))


class TestNoStateIsCreated(CliTestCase):
    """A bad argument on a fresh machine creates no state directory."""

    def test_bad_arguments_create_nothing(self):
        for argv in (["server", "create", "--count", "0", "--flavor", "m1.tiny"],
                     ["compute", "--once", "-c", "nope"],
                     ["db", "sync", "-c", "nope"],
                     ["service", "disable", "h", "--reason", ""]):
            code, out, _ = self.cli(*argv)
            self.assertEqual(2, code, argv)
            self.assertEqual("", out)
            self.assertFalse(os.path.exists(self.state), argv)

