"""Against a real Ironic (standalone, fake hardware): the driver's view follows it.

Each test enrolls its own nodes in a shard of its own on the shared server
(see ``tests/real.py``); the driver is configured with that shard.
"""

import os
import signal
import time
import uuid

import fixtures

from nova_lite import conf
from nova_lite.virt import loader

from nova_lite_ironic.testing.ironic_server import IronicServer, IronicUnavailable

from tests import base, real


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); read its state
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


class RealIronicTestCase(base.TestCase):
    """Shared server + a fleet helper with a shard of this test's own."""

    def setUp(self):
        super().setUp()
        self.server = real.server(self)
        self.fleet = real.fleet(self)

    def ironic_settings(self, host=None, **options):
        ironic = {"endpoint_override": self.server.endpoint, "shard": self.fleet.shard}
        ironic.update({k: str(v) for k, v in options.items()})
        return conf.Settings(host=host or self.host, state_path=self.state_path,
                             sections={"ironic": ironic})

    def load(self, host=None, **options):
        """The ``ironic`` driver through its entry point, init_host-ed."""
        driver = loader.load_driver("ironic", settings=self.ironic_settings(host, **options))
        driver.init_host(host or self.host)
        self.addCleanup(driver.source.close)
        return driver


class TestServerFixture(base.TestCase):
    """The fixture itself: config, readiness by HTTP, stop by PID."""

    def test_start_probe_and_stop_by_pid(self):
        real.server(self)  # skips/fails the same way when Ironic is unavailable
        server = IronicServer()
        server.setUp()
        try:
            pid = server.pid
            self.assertTrue(pid_alive(pid))
            self.assertTrue(server.probe())
            with open(server.config_path, encoding="utf-8") as handle:
                config = handle.read()
            for line in ("auth_strategy = noauth", "rpc_transport = none",
                         "enabled_hardware_types = fake-hardware",
                         "enabled_deploy_interfaces = fake",
                         "enabled_network_interfaces = noop", "dhcp_provider = none",
                         "host_ip = 127.0.0.1", f"port = {server.port}",
                         f"connection = sqlite:///{server.db_path}"):
                self.assertIn(line, config)
            self.assertTrue(os.path.exists(server.db_path))
            self.assertLess(server.startup_seconds, 60)
        finally:
            server.cleanUp()
        self.assertFalse(pid_alive(pid))
        self.assertFalse(server.probe(timeout=0.5))

    def test_readiness_is_by_http_not_pid(self):
        real.server(self)
        server = IronicServer()
        waited = []
        original = server.probe

        def probe(timeout=2.0):
            waited.append(server.pid)
            return original(timeout)
        server.probe = probe
        with server:
            self.assertTrue(waited)
            self.assertTrue(original())

    def test_a_server_that_dies_is_reported_with_its_log(self):
        srv = real.server(self)
        broken = IronicServer(venv=srv.venv, start_timeout=30)
        broken._run_dbsync = lambda: None
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite_ironic.testing.ironic_server._CONFIG_TEMPLATE",
            "[DEFAULT]\nrpc_transport = bogus\n"))
        err = self.assertRaises(fixtures.MultipleExceptions, broken.setUp)
        first = err.args[0][1]
        self.assertIsInstance(first, IronicUnavailable)
        self.assertIn("before it was ready", str(first))
        self.assertIn("rpc_transport", str(first))


class TestStateMachine(RealIronicTestCase):
    """Enroll, manage, provide, deploy, maintenance: through the REST API."""

    def test_enroll_manage_provide_deploy_maintenance(self):
        started = time.monotonic()
        a, b, c = self.fleet.enroll(3, resource_class="iron-nfv", capabilities="boot_mode:uefi")
        per_node = (time.monotonic() - started) / 3
        self.assertLess(per_node, 20.0)
        for node_uuid in (a, b, c):
            node = self.fleet.get(node_uuid)
            self.assertEqual(("available", "power off", False),
                             (node.provision_state, node.power_state, node.is_maintenance))
        instance = self.fleet.deploy(a)
        self.assertEqual(("active", instance), (self.fleet.get(a).provision_state,
                                                self.fleet.get(a).instance_id))
        self.fleet.maintenance(b)
        self.assertTrue(self.fleet.get(b).is_maintenance)

        driver = self.load()
        driver.attach_instance_view(lambda host: {instance})
        names = driver.get_available_nodes()
        self.assertEqual(sorted([a, b, c]), names)
        reports = {n: driver.get_available_resource(n) for n in names}
        self.assertEqual({"CUSTOM_IRON_NFV": 1}, dict(reports[a].reserved))
        self.assertEqual({"CUSTOM_IRON_NFV": 1}, dict(reports[b].reserved))
        self.assertEqual({}, dict(reports[c].reserved))
        self.assertEqual("uefi", reports[c].stats["boot_mode"])
        self.assertEqual(c, reports[c].hypervisor_hostname)
        self.assertEqual([instance], driver.list_instances())

        self.fleet.maintenance(b, on=False)
        self.fleet.action([c], "manage", "manageable")
        driver.get_available_nodes()
        self.assertEqual({}, dict(driver.get_available_resource(b).reserved))
        self.assertEqual({"CUSTOM_IRON_NFV": 1}, dict(driver.get_available_resource(c).reserved))

    def test_foreign_instance_node_is_not_listed(self):
        a, b = self.fleet.enroll(2)
        self.fleet.deploy(a)   # an instance no service of ours knows
        driver = self.load()
        self.assertEqual([b], driver.get_available_nodes())

    def test_driver_lifecycle_deploys_through_ironic(self):
        (a,) = self.fleet.enroll(1)
        driver = self.load()
        driver.get_available_nodes()
        inst = base.instance(node=a, host=self.host)
        driver.spawn(inst)
        node = self.fleet.get(a)
        self.assertEqual(("active", inst.uuid), (node.provision_state, node.instance_id))
        self.assertEqual([inst.uuid], driver.list_instances())
        driver.destroy(inst)
        node = self.fleet.get(a)
        self.assertEqual(("available", None), (node.provision_state, node.instance_id))
        self.assertEqual([], driver.list_instances())


class TestCallBudget(RealIronicTestCase):
    """What the driver asks of the API, read from Ironic's own request log."""

    def test_one_request_per_page_with_only_the_needed_fields(self):
        self.fleet.enroll(12, provide=False)
        driver = self.load(api_page_size=5)
        before = real.count_node_lists(self.server)
        names = driver.get_available_nodes()
        for name in names:
            driver.get_available_resource(name)
            driver.node_is_available(name)
        self.assertEqual(12, len(names))
        self.assertEqual(3, real.count_node_lists(self.server) - before)
        with open(self.server.log_path, encoding="utf-8") as handle:
            lines = [line for line in handle if "GET /v1/nodes?" in line
                     and f"shard={self.fleet.shard}" in line]
        last = lines[-1]
        self.assertIn("fields=uuid%2Cname%2Cresource_class%2Cpower_state%2Cprovision_state"
                      "%2Cmaintenance%2Cinstance_uuid%2Cproperties%2Ctraits%2Cshard", last)
        self.assertIn("limit=5", last)

    def test_single_get_on_cache_miss(self):
        self.fleet.enroll(2)
        driver = self.load()
        driver.get_available_nodes()
        (late,) = self.fleet.enroll(1)
        lists, gets = real.count_node_lists(self.server), real.count_node_gets(self.server)
        self.assertTrue(driver.node_is_available(late))
        self.assertEqual(late, driver.get_available_resource(late).uuid)
        self.assertFalse(driver.node_is_available(str(uuid.uuid4())))
        self.assertEqual(0, real.count_node_lists(self.server) - lists)
        self.assertEqual(3, real.count_node_gets(self.server) - gets)

    def test_deleted_node_is_reported_deleted(self):
        a, b = self.fleet.enroll(2)
        driver = self.load()
        driver.get_available_nodes()
        self.assertFalse(driver.is_node_deleted(a))
        self.fleet.delete(a)
        self.assertEqual([b], driver.get_available_nodes())
        self.assertTrue(driver.is_node_deleted(a))
        self.assertFalse(driver.is_node_deleted(b))


class TestNotReady(base.TestCase):

    def test_unreachable_ironic_means_not_ready(self):
        from nova_lite_ironic.exception import DriverNotReady
        from nova_lite_ironic.testing.ironic_server import free_port
        settings = conf.Settings(host="h1", state_path=self.state_path, sections={"ironic": {
            "endpoint_override": f"http://127.0.0.1:{free_port()}", "timeout": "5"}})
        driver = loader.load_driver("ironic", settings=settings)
        driver.init_host("h1")
        self.assertRaises(DriverNotReady, driver.get_available_nodes)

    def test_stopped_ironic_means_not_ready_then_recovers(self):
        real.server(self)
        server = self.useFixture(IronicServer())
        from nova_lite_ironic.exception import DriverNotReady
        from nova_lite_ironic.testing.fleet import Fleet
        helper = Fleet(server.endpoint)
        self.addCleanup(helper.close)
        helper.enroll(1, provide=False)
        settings = conf.Settings(host="h1", state_path=self.state_path, sections={"ironic": {
            "endpoint_override": server.endpoint, "timeout": "2"}})
        driver = loader.load_driver("ironic", settings=settings)
        driver.init_host("h1")
        self.assertEqual(1, len(driver.get_available_nodes()))
        os.killpg(server.pid, signal.SIGSTOP)   # a hung API (master and worker)
        try:
            self.assertRaises(DriverNotReady, driver.get_available_nodes)
        finally:
            os.killpg(server.pid, signal.SIGCONT)
        self.assertEqual(1, len(driver.get_available_nodes()))


class TestTrackerFollowsIronic(RealIronicTestCase):
    """The core's compute service and tracker over the real Ironic."""

    def setUp(self):
        super().setUp()
        from nova_lite.db import Store
        from nova_lite.testing import databases
        db = self.useFixture(databases.SQLiteFile())
        self.store = Store(db.url)
        self.addCleanup(self.store.close)

    def service(self, host):
        from nova_lite.compute.manager import ComputeService
        driver = self.load(host)
        return ComputeService(host, driver, store=self.store, settings=driver.settings)

    def records(self, host=None):
        return {n.nodename: n for n in self.store.get_compute_nodes(host)}

    def test_claimable_only_when_available(self):
        from nova_lite.compute.claims import ComputeResourcesUnavailable
        free, maint, active, managed = self.fleet.enroll(4, resource_class="iron-gold")
        self.fleet.maintenance(maint)
        self.fleet.deploy(active)
        self.fleet.action([managed], "manage", "manageable")
        svc = self.service("h1")
        svc.run_once()
        self.assertEqual({free, maint, managed}, set(self.records("h1")))  # active: foreign
        flavor = base.baremetal_flavor("CUSTOM_IRON_GOLD")
        with svc.tracker.instance_claim(base.instance(flavor=flavor), free) as claim:
            svc.driver.spawn(claim.instance)
        self.assertEqual("active", self.fleet.get(free).provision_state)
        for name in (maint, managed, free):
            self.assertRaises(ComputeResourcesUnavailable, svc.tracker.instance_claim,
                              base.instance(flavor=flavor), name)
        result = svc.run_once()   # the deployed node stays ours (our instance)
        self.assertIn(free, result.audited)
        self.assertRaises(ComputeResourcesUnavailable, svc.tracker.instance_claim,
                          base.instance(flavor=flavor), free)

    def test_deleting_a_node_removes_its_record_at_the_next_audit(self):
        a, b, c = self.fleet.enroll(3)
        svc = self.service("h1")
        svc.run_once()
        self.assertEqual({a, b, c}, set(self.records("h1")))
        self.fleet.delete(b)
        result = svc.run_once()
        self.assertEqual((b,), result.orphans_deleted)
        self.assertEqual({a, c}, set(self.records("h1")))

    def test_second_service_splits_the_fleet(self):
        uuids = set(self.fleet.enroll(16, provide=False))
        one, two = self.service("h1"), self.service("h2")
        for _ in range(2):
            one.run_once()
            two.run_once()
        mine = {h: set(self.records(h)) for h in ("h1", "h2")}
        self.assertEqual(uuids, mine["h1"] | mine["h2"])
        self.assertFalse(mine["h1"] & mine["h2"])
        self.assertTrue(mine["h1"] and mine["h2"])
        self.assertEqual(16, len(self.records()))


class TestDeployedNodesNeverNegative(RealIronicTestCase):
    """Deployed nodes of a real Ironic: used 1, free 0, over 0, never claimed twice;
    and a fresh process's audit of the consistent host finds no difference."""

    RAW_CLASS = "gpu_a100 (8x)"
    CLASS = "CUSTOM_GPU_A100_8X_"   # Nova's name for it

    def setUp(self):
        super().setUp()
        from nova_lite.db import Store
        from nova_lite.testing import databases
        self.db = self.useFixture(databases.SQLiteFile())
        self.store = Store(self.db.url)
        self.addCleanup(self.store.close)

    def test_deployed_nodes_and_fresh_process_audit(self):
        import json
        import subprocess
        import sys

        from nova_lite import audit
        from nova_lite.compute.claims import ComputeResourcesUnavailable
        from nova_lite.compute.manager import ComputeService
        from nova_lite.compute.resource_tracker import ResourceTracker

        nodes = self.fleet.enroll(3, resource_class=self.RAW_CLASS)
        driver = self.load("h1")
        svc = ComputeService("h1", driver, store=self.store, settings=driver.settings)
        svc.run_once()
        flavor = base.baremetal_flavor(self.CLASS)
        deployed = nodes[:2]
        for name in deployed:
            with svc.tracker.instance_claim(base.instance(flavor=flavor), name) as claim:
                driver.spawn(claim.instance)
        svc.run_once()
        stored = {n.nodename: n for n in self.store.get_compute_nodes("h1")}
        for name in nodes:
            for node in (svc.tracker.get_node(name), stored[name]):
                self.assertEqual([self.CLASS], sorted(node.inventories))
                figures = (node.inventory(self.CLASS).total, node.used(self.CLASS),
                           node.free(self.CLASS), node.over(self.CLASS))
                self.assertEqual((1, 1, 0, 0) if name in deployed else (1, 0, 1, 0),
                                 figures, name)
        for name in deployed:
            self.assertRaises(ComputeResourcesUnavailable, svc.tracker.instance_claim,
                              base.instance(flavor=flavor), name)

        # A fresh driver and tracker (nothing cached) see a consistent host.
        fresh = self.load("h1", )
        fresh.attach_store(self.store)
        report = audit.audit_host(ResourceTracker("h1", fresh, store=self.store,
                                                  settings=fresh.settings))
        self.assertTrue(report.consistent, report.all_differences())
        rows = {n.nodename: {r.resource_class: r for r in n.resources} for n in report.nodes}
        for name in deployed:
            self.assertEqual((1, 0, 0), (rows[name][self.CLASS].tracked,
                                         rows[name][self.CLASS].free,
                                         rows[name][self.CLASS].over))

        # And the command, in a process of its own, exits 0.
        path = os.path.join(self.state_path, "nova-lite.conf")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"[DEFAULT]\nhost = h1\nstate_path = {self.state_path}\n"
                         f"compute_driver = ironic\n[database]\nconnection = {self.db.url}\n"
                         f"[ironic]\nendpoint_override = {self.server.endpoint}\n"
                         f"shard = {self.fleet.shard}\n")
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from nova_lite.cli.main import main; "
             "sys.exit(main(sys.argv[1:]))", "--config-file", path, "audit", "--local", "-f",
             "json"],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(0, proc.returncode, proc.stdout + proc.stderr)
        data = json.loads(proc.stdout)
        self.assertTrue(data["consistent"])
        self.assertEqual(sorted(nodes), sorted(n["nodename"] for n in data["nodes"]))


class TestTraitsFromIronic(RealIronicTestCase):
    """Nodes' traits from a real Ironic: asked in the listing, recorded by the audit."""

    GOLD = ("CUSTOM_GOLD", "HW_CPU_X86_AVX2")
    #: Nova's IronicDriver capabilities, as the core adds their traits.
    CAPABILITY_TRAITS = frozenset({
        "COMPUTE_NET_ATTACH_INTERFACE", "COMPUTE_IMAGE_TYPE_AMI", "COMPUTE_IMAGE_TYPE_QCOW2",
        "COMPUTE_IMAGE_TYPE_RAW"})
    #: What the core records on every node: those, and COMPUTE_NODE.
    ALWAYS = CAPABILITY_TRAITS | {"COMPUTE_NODE"}

    def setUp(self):
        super().setUp()
        from nova_lite.db import Store
        from nova_lite.testing import databases
        db = self.useFixture(databases.SQLiteFile())
        self.store = Store(db.url)
        self.addCleanup(self.store.close)

    def service(self, host="h1", **options):
        from nova_lite.compute.manager import ComputeService
        driver = self.load(host, **options)
        return ComputeService(host, driver, store=self.store, settings=driver.settings)

    def recorded_traits(self):
        return {n.nodename: n.traits for n in self.store.get_compute_nodes("h1")}

    def test_audit_records_the_nodes_traits_in_one_listing(self):
        gold = self.fleet.enroll(2, traits=self.GOLD)
        (plain,) = self.fleet.enroll(1)
        self.assertEqual(sorted(self.GOLD), sorted(self.fleet.get(gold[0]).traits))
        svc = self.service()
        before = real.count_node_lists(self.server), real.count_node_gets(self.server)
        result = svc.run_once()
        self.assertEqual(sorted(gold + [plain]), sorted(result.audited))
        self.assertEqual((1, 0), (real.count_node_lists(self.server) - before[0],
                                  real.count_node_gets(self.server) - before[1]))
        recorded = self.recorded_traits()
        for name in gold:
            self.assertEqual(frozenset(self.GOLD) | self.ALWAYS, recorded[name])
        self.assertEqual(self.ALWAYS, recorded[plain])

        # Changed in Ironic, changed in the record at the next audit.
        self.fleet.set_traits(gold[0], ["CUSTOM_SILVER"])
        self.fleet.set_traits(gold[1], [])
        self.fleet.set_traits(plain, ["CUSTOM_GOLD"])
        svc.run_once()
        recorded = self.recorded_traits()
        self.assertEqual({"CUSTOM_SILVER"} | self.ALWAYS, recorded[gold[0]])
        self.assertEqual(self.ALWAYS, recorded[gold[1]])
        self.assertEqual({"CUSTOM_GOLD"} | self.ALWAYS, recorded[plain])

    def test_ironic_refuses_a_name_that_is_not_a_trait(self):
        from openstack import exceptions as sdk_exc
        (node,) = self.fleet.enroll(1, provide=False, traits=["CUSTOM_GOLD"])
        for name in ("gold", "CUSTOM_go-ld", "HW_CPU_X86_NOT_A_TRAIT"):
            self.assertRaises(sdk_exc.BadRequestException, self.fleet.set_traits, node, [name])
        self.assertEqual(["CUSTOM_GOLD"], self.fleet.get(node).traits)

    def test_a_trait_our_os_traits_lacks_is_left_out_and_the_node_recorded(self):
        # Ironic with a newer os-traits knows a standard name nova-lite's does
        # not: played by taking a name out of nova-lite's table.
        from nova_lite import traits as core_traits
        (node,) = self.fleet.enroll(1, traits=self.GOLD)
        svc = self.service()
        svc.run_once()
        self.assertEqual(frozenset(self.GOLD) | self.ALWAYS,
                         self.recorded_traits()[node])
        self.useFixture(fixtures.MonkeyPatch(
            "nova_lite.traits.STANDARD_TRAITS",
            core_traits.STANDARD_TRAITS - {"HW_CPU_X86_AVX2"}))
        self.fleet.maintenance(node)
        result = svc.run_once()
        self.assertIn(node, result.audited)
        record = {n.nodename: n for n in self.store.get_compute_nodes("h1")}[node]
        self.assertEqual({"CUSTOM_GOLD"} | self.ALWAYS, record.traits)
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, dict(record.resources.reserved))
        self.assertIn(f"Leaving trait 'HW_CPU_X86_AVX2' of bare-metal node {node} out of its "
                      "report: unknown trait", self.log.output)

    def test_below_microversion_1_37_no_traits_are_asked(self):
        import openstack.connection
        from openstack import exceptions as sdk_exc
        self.fleet.enroll(1, provide=False, traits=["CUSTOM_GOLD"])
        old = openstack.connection.Connection(
            auth_type="none", baremetal_endpoint_override=self.server.endpoint,
            baremetal_api_version="1.36")
        self.addCleanup(old.close)
        # Ironic refuses the field below 1.37 ...
        self.assertRaises(sdk_exc.HttpException, lambda: list(
            old.baremetal.nodes(fields=["uuid", "traits"], limit=1)))
        # ... so the driver does not ask for it, and its nodes have none.
        from nova_lite_ironic.config import IronicConfig
        from nova_lite_ironic.sources.api import ApiSource
        source = ApiSource.from_config(IronicConfig.from_options(
            {"endpoint_override": self.server.endpoint, "api_version": "1.36"}))
        self.addCleanup(source.close)
        listed = source.list_nodes()
        self.assertTrue(listed)
        self.assertEqual({()}, {n.traits for n in listed})
        self.assertIn("microversion 1.36 is below 1.37", self.log.output)
