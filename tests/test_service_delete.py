"""Deleting a compute service: the host leaves its aggregates, as in Nova."""

import attrs

from nova_lite import work
from nova_lite.exception import HostNotFound, ServiceInUse
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec
from nova_lite.work import WorkRequest
from tests import base
from tests.reliability.base import dump
from tests.test_cli import CliTestCase
from tests.test_cli_aggregates import install_missing_commands


class ServiceDeleteTests:
    """host1 and host2 in zone az1 (aggregate rack1), host1 also in ssd."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.trackers = {}
        for host in ("host1", "host2"):
            _, self.trackers[host] = self.make_tracker(store=self.store, host=host)
            self.store.heartbeat(host)
        aggs = self.store.aggregates
        aggs.create("rack1", "az1")
        aggs.create("ssd", metadata={"ssd": "true"})
        for name, host in (("rack1", "host1"), ("rack1", "host2"), ("ssd", "host1")):
            aggs.add_host(name, host)

    def test_the_host_leaves_its_aggregates_and_its_records_go(self):
        self.store.tasks.record([WorkRequest(host="host1", kind=work.AUDIT)])
        done = self.store.delete_compute_service("host1")
        self.assertEqual(("host1", ("rack1", "ssd"), ("host1",), 1),
                         (done.host, done.aggregates, done.nodes, done.tasks))
        self.assertEqual({"rack1": {"host2"}, "ssd": set()},
                         {a.name: set(a.hosts) for a in self.store.aggregates.list()})
        self.assertEqual(["host2"], [s.host for s in self.store.list_services()])
        self.assertEqual(["host2"], [n.host for n in self.store.get_compute_nodes()])
        self.assertEqual([work.CANCELLED], [t.state for t in self.store.tasks.find(
            host="host1")])
        # The aggregate it left may now be deleted, and the scheduler no longer sees it.
        self.store.aggregates.delete("ssd")
        manager = HostManager(self.store, self.settings(reserved_host_memory_mb=0))
        picks = {manager.select_destinations(RequestSpec(base.flavor(),
                                                         availability_zone="az1"))[0].host
                 for _ in range(4)}
        self.assertEqual({"host2"}, picks)

    def test_a_host_with_instances_is_refused(self):
        claim = self.trackers["host1"].instance_claim(base.instance(), "host1")
        before = dump(self.store)
        exc = self.assertRaises(ServiceInUse, self.store.delete_compute_service, "host1")
        self.assertIn("hosting 1 instance(s)", str(exc))
        self.assertIn(claim.instance.uuid, str(exc))
        self.assertEqual(before, dump(self.store))
        # Deleted, it no longer counts.
        self.trackers["host1"].update_usage(attrs.evolve(
            self.store.get_instance(claim.instance.uuid), vm_state="deleted"))
        self.store.delete_compute_service("host1")

    def test_a_host_with_a_move_in_progress_is_refused(self):
        claim = self.trackers["host1"].instance_claim(base.instance(), "host1")
        self.trackers["host2"].resize_claim(self.store.get_instance(claim.instance.uuid),
                                            base.flavor(name="m1.big", memory_mb=1024),
                                            "host2")
        before = dump(self.store)
        exc = self.assertRaises(ServiceInUse, self.store.delete_compute_service, "host2")
        self.assertIn("move(s) in progress", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_an_unknown_host(self):
        exc = self.assertRaises(HostNotFound, self.store.delete_compute_service, "ghost")
        self.assertIn("host1, host2", str(exc))

    def test_a_zone_left_empty_schedules_nothing(self):
        for host in ("host1", "host2"):
            self.store.delete_compute_service(host)
        self.assertRaises(NoValidHost, HostManager(self.store).select_destinations,
                          RequestSpec(base.flavor(), availability_zone="az1"))
        self.assertEqual(set(), self.store.aggregates.get("rack1").hosts)


class TestServiceDeleteSQLite(ServiceDeleteTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestServiceDeletePostgreSQL(ServiceDeleteTests, base.OnPostgreSQL, base.TestCase):
    pass


class ServiceDeleteCommandTests(CliTestCase):

    def setUp(self):
        super().setUp()
        from nova_lite.cli import service
        install_missing_commands(self, service.ENTRY_POINTS)
        self.compute_once()

    def test_delete(self):
        self.ok("aggregate", "create", "rack1", "--zone", "az1")
        self.ok("aggregate", "add", "host", "rack1", self.host)
        got, out, err = self.cli("service", "delete", self.host)
        self.assertEqual(2, got, err)
        self.assertIn("--yes-i-really-mean-it", err)
        out = self.ok("service", "delete", self.host, "--yes-i-really-mean-it")
        self.assertIn(f"Deleted the compute service of host {self.host} (1 compute node "
                      "record(s); removed from aggregate(s) rack1", out)
        self.assertEqual([], self.json("service", "list"))
        self.assertEqual([], self.json("aggregate", "show", "rack1")["hosts"])
        got, out, err = self.cli("service", "delete", self.host, "--yes-i-really-mean-it")
        self.assertEqual(1, got)
        self.assertIn("nothing was changed", err)
