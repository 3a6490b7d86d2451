"""``nova-lite aggregate ...`` on a real store: typed output, Nova's refusals."""

import importlib.metadata
import os

from nova_lite.cli import aggregate
from nova_lite.db import Store
from tests.entry_points import ThrowawayDistributions
from tests.test_cli import CliTestCase
from tests.test_cli_operator import OperatorCase


def install_missing_commands(test, commands):
    """Install those of ``commands`` ({entry point name: target}) that the
    installed distribution does not list yet, for the length of ``test``."""
    installed = {ep.name for ep in importlib.metadata.entry_points(group="nova_lite.cli")}
    missing = {name: target for name, target in commands.items() if name not in installed}
    if missing:
        test.useFixture(ThrowawayDistributions()).add(
            "nltest-aggregate-commands", entry_points={"nova_lite.cli": missing})


class AggregateCommandTests(CliTestCase):

    def setUp(self):
        super().setUp()
        install_missing_commands(self, aggregate.ENTRY_POINTS)
        os.makedirs(self.state, exist_ok=True)
        store = Store(f"sqlite:///{self.db_path()}", initialise=True)
        for host in ("host1", "host2"):
            store.heartbeat(host)
        store.close()

    def fails(self, code, *argv):
        got, out, err = self.cli(*argv)
        self.assertEqual(code, got, f"{argv}: {out}\n{err}")
        return err

    def test_an_aggregate_by_its_uuid(self):
        made = self.json("aggregate", "create", "fast", "--zone", "az1")
        uuid = made["uuid"]
        self.assertEqual(made, self.json("aggregate", "show", uuid))
        self.assertEqual(["host1"], self.json("aggregate", "add", "host", uuid, "host1")["hosts"])
        self.assertEqual({"k": "v"}, self.json("aggregate", "set", uuid, "--property",
                                               "k=v")["properties"])
        self.json("aggregate", "remove", "host", uuid.upper(), "host1")
        self.json("aggregate", "delete", uuid)
        self.assertEqual([], self.json("aggregate", "list"))
        self.assertIn("Name or uuid of the aggregate", self.cli("aggregate", "show", "-h")[1])

    def test_create_set_show_list_delete(self):
        made = self.json("aggregate", "create", "fast", "--zone", "az1",
                         "--property", "ssd=true")
        self.assertEqual({"name": "fast", "availability_zone": "az1", "hosts": [],
                          "properties": {"ssd": "true"}},
                         {k: made[k] for k in ("name", "availability_zone", "hosts",
                                               "properties")})
        self.json("aggregate", "create", "plain")
        self.assertEqual([["fast", "az1", [], {"ssd": "true"}], ["plain", None, [], {}]],
                         [[a["Name"], a["Availability Zone"], a["Hosts"], a["Properties"]]
                          for a in self.json("aggregate", "list")])
        added = self.json("aggregate", "add", "host", "fast", "host1")
        self.assertEqual(["host1"], added["hosts"])
        changed = self.json("aggregate", "set", "fast", "--property", "gpu=no",
                            "--zone", "az2")
        self.assertEqual(("az2", {"ssd": "true", "gpu": "no"}),
                         (changed["availability_zone"], changed["properties"]))
        unset = self.json("aggregate", "unset", "fast", "--property", "ssd")
        self.assertEqual({"gpu": "no"}, unset["properties"])
        self.assertEqual(unset, self.json("aggregate", "show", "fast"))
        err = self.fails(1, "aggregate", "delete", "fast")
        self.assertIn("not empty", err)
        self.json("aggregate", "remove", "host", "fast", "host1")
        self.assertEqual("fast", self.json("aggregate", "delete", "fast")["name"])
        self.assertEqual(["plain"], [a["Name"] for a in self.json("aggregate", "list")])

    def test_refusals(self):
        self.json("aggregate", "create", "a1", "--zone", "az1")
        self.json("aggregate", "create", "a2", "--zone", "az2")
        self.assertIn("already exists", self.fails(1, "aggregate", "create", "a1"))
        self.assertIn("'ghost' could not be found", self.fails(1, "aggregate", "show", "ghost"))
        self.json("aggregate", "add", "host", "a1", "host1")
        self.assertIn("already in availability zone", self.fails(
            1, "aggregate", "add", "host", "a2", "host1"))
        self.assertIn("'nohost'", self.fails(1, "aggregate", "add", "host", "a1", "nohost"))
        self.assertIn("KEY=VALUE", self.fails(2, "aggregate", "set", "a1", "--property", "x"))
        self.assertIn("--zone", self.fails(2, "aggregate", "create", "a3", "--zone", " "))
        self.assertEqual(["host1"], self.json("aggregate", "show", "a1")["hosts"])
        self.assertEqual([], self.json("aggregate", "show", "a2")["hosts"])


class ServerZoneTests(OperatorCase):
    """server create --availability-zone, with compute services as processes."""

    def setUp(self):
        super().setUp()
        install_missing_commands(self, aggregate.ENTRY_POINTS)
        self.start_computes()
        self.json("aggregate", "create", "rack", "--zone", "az1")
        self.json("aggregate", "add", "host", "rack", "hostb")

    def test_builds_stay_in_the_zone(self):
        built = self.create("--flavor", "m1.tiny", "--count", "2",
                            "--availability-zone", "az1")
        self.assertEqual(["hostb", "hostb"], [s["Host"] for s in built])
        elsewhere = self.create("--flavor", "m1.tiny", "--count", "2",
                                "--availability-zone", "nova")
        self.assertEqual(["hosta", "hostc"], sorted(s["Host"] for s in elsewhere))

    def test_an_unknown_zone_is_refused(self):
        before = self.snapshot()
        err = self.fail(2, "server", "create", "--flavor", "m1.tiny",
                        "--availability-zone", "az9")
        self.assertIn("'az9' is not an availability zone (known: az1, nova)", err)
        self.assertEqual(before, self.snapshot())

    def test_views_show_each_hosts_zone(self):
        zones = {s["Host"]: s["Zone"] for s in self.json("service", "list")}
        self.assertEqual({"hosta": "nova", "hostb": "az1", "hostc": "nova"}, zones)
        self.assertEqual("az1", self.json("hypervisor", "show", "--host", "hostb",
                                          "hostb")["availability_zone"])
        self.assertEqual("nova", self.json("hypervisor", "show", "--host", "hosta",
                                           "hosta")["availability_zone"])
        disabled = self.json("service", "disable", "hostb")
        self.assertEqual("az1", disabled["Zone"])
        self.json("aggregate", "remove", "host", "rack", "hostb")
        self.assertEqual("nova", self.json("service", "list", "--host", "hostb")[0]["Zone"])
