"""PCI devices as child providers of their node (``[pci] report_in_placement``).

A third party's driver, installed as a real distribution with a real entry
point (as the driver guide's no-op example is), reports a host with two
GPUs (10de:1db4, one of them tagged with a trait) and a NIC whose physical
function has three virtual functions (tagged with a resource class).  The
tracker records one child provider per GPU and one for the NIC's PF; claims
with ``pci_passthrough:alias`` take devices as PciStats picks them and land
one unit on each picked device's provider, fill each exactly and refuse
beyond, from one process and from several, on a SQLite file and on
PostgreSQL; every view shows the providers; a leak on one is healed.
"""

import contextlib
import io
import json
import os
import sys
import uuid

import attrs
import sqlalchemy as sa
import testtools

from nova_lite import conf, leaks, metrics, objects
from nova_lite.api import make_app
from nova_lite.cli.main import main
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.exception import InvalidInput
from nova_lite.objects import PciDevice
from nova_lite.pci import PciStats
from nova_lite.pci_alias import flavor_pci_requests, parse_aliases
from nova_lite.pci_providers import PCI_TRAIT, device_class, pci_tree, with_pci_children
from nova_lite.providers import ChildProvider
from nova_lite.scheduler import HostManager, NoValidHost, RequestSpec
from nova_lite.testing import databases
from nova_lite.virt import loader
from nova_lite.web_server import BackgroundServer
from nova_lite.compute import moves
from tests import base, processes, test_pci_alias, test_resize_pci, test_scheduler
from tests.entry_points import ThrowawayDistributions
from tests.test_api import request
from tests.test_metrics import parse, scrape
from tests.test_moves import Hosts

HOST = "pcihost"
GPU_A, GPU_B, NIC = (f"{HOST}_0000:81:00.0", f"{HOST}_0000:82:00.0", f"{HOST}_0000:83:00.0")
GPU_CLASS = "CUSTOM_PCI_10DE_1DB4"

#: The third party's plugin: the driver guide's no-op pattern, with PCI devices.
PLUGIN = '''
from nova_lite.virt import driver

DEVICES = [
    driver.PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4",
                     numa_node=0),
    driver.PciDevice(address="0000:82:00.0", vendor_id="10de", product_id="1db4",
                     numa_node=1, traits={"CUSTOM_GPU_GOLD"}),
    driver.PciDevice(address="0000:83:00.0", vendor_id="8086", product_id="1572",
                     dev_type="type-PF", numa_node=0),
] + [driver.PciDevice(address=f"0000:83:02.{i}", vendor_id="8086", product_id="154c",
                      dev_type="type-VF", numa_node=0, parent_addr="0000:83:00.0",
                      resource_class="nic_vf") for i in range(3)]


class PciHostDriver(driver.ComputeDriver):
    """One node named after the host, with two GPUs and a NIC with 3 VFs."""

    api_versions = ("1.0",)
    capabilities = driver.Capabilities(supports_pci=True)

    def __init__(self, settings=None, children=()):
        super().__init__(settings=settings)
        self.children = list(children)

    def init_host(self, host):
        self.host = host

    def get_available_nodes(self, refresh=False):
        return [self.host]

    def get_available_resource(self, nodename):
        return driver.NodeResources(
            vcpus=64, memory_mb=65536, local_gb=1000, hypervisor_type="pcihost",
            hypervisor_version=1, hypervisor_hostname=nodename, pci_devices=DEVICES,
            providers=self.children)
'''

ALIASES = json.dumps([
    {"name": "gpu", "vendor_id": "10de", "product_id": "1db4"},
    {"name": "gold", "vendor_id": "10de", "product_id": "1db4", "traits": "CUSTOM_GPU_GOLD"},
    {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF",
     "resource_class": "nic_vf"},
    {"name": "pf", "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"},
])


def install_plugin(test):
    """Install the plugin as distribution nova-lite-pcihost, entry point ``pcihost``;
    returns the directory it is installed in."""
    dists = test.useFixture(ThrowawayDistributions())
    dists.add("nova-lite-pcihost", version="1.0",
              entry_points={loader.GROUP: {"pcihost": "nova_lite_pcihost:PciHostDriver"}},
              modules={"nova_lite_pcihost": PLUGIN})
    return dists.path


def pci_flavor(spec="gpu:1", name="pci", **extra):
    return objects.Flavor(name=name, vcpus=1, memory_mb=64, root_gb=1,
                          extra_specs={"pci_passthrough:alias": spec, **extra})


def pci_settings(state_path, **kw):
    kw.setdefault("pci_report_in_placement", True)
    return conf.Settings(host=HOST, state_path=state_path, reserved_host_memory_mb=0,
                         provider_config_location=os.path.join(state_path, "none"),
                         pci_alias=ALIASES, **kw)


def pci_instance(settings, flavor):
    return objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id="p",
                            pci_requests=flavor_pci_requests(flavor.extra_specs,
                                                             settings.pci_aliases))


class TestDerivedProviders(testtools.TestCase):

    devices = (PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4",
                         traits={"CUSTOM_GOLD"}),
               PciDevice(address="0000:83:00.0", vendor_id="8086", product_id="1572",
                         dev_type="type-PF"),
               PciDevice(address="0000:83:02.0", vendor_id="8086", product_id="154c",
                         dev_type="type-VF", parent_addr="0000:83:00.0",
                         resource_class="nic_vf"),
               PciDevice(address="0000:83:02.1", vendor_id="8086", product_id="154c",
                         dev_type="type-VF", parent_addr="0000:83:00.0",
                         resource_class="nic_vf"),
               PciDevice(address="0000:84:00.0", vendor_id="8086", product_id="1572",
                         dev_type="type-PF"),
               PciDevice(address="0000:85:00.1", vendor_id="15b3", product_id="101e",
                         dev_type="vdpa", parent_addr="0000:85:00.0"))

    def test_one_provider_per_device_and_one_per_pfs_vfs(self):
        tree = pci_tree("n1", self.devices)
        self.assertEqual(
            [("n1_0000:81:00.0", {GPU_CLASS: 1}, {PCI_TRAIT, "CUSTOM_GOLD"}),
             ("n1_0000:83:00.0", {"CUSTOM_PCI_8086_1572": 1, "CUSTOM_NIC_VF": 2}, {PCI_TRAIT}),
             ("n1_0000:84:00.0", {"CUSTOM_PCI_8086_1572": 1}, {PCI_TRAIT})],
            [(c.name, {rc: inv.total for rc, inv in c.inventories.items()}, set(c.traits))
             for c in tree.children])
        self.assertEqual(("n1_0000:83:00.0", "CUSTOM_NIC_VF"), tree.holder["0000:83:02.1"])
        self.assertNotIn("0000:85:00.1", tree.holder)   # vDPA serves ports only

    def test_a_devices_class_and_traits_are_checked_and_kept(self):
        self.assertEqual("CUSTOM_NIC_VF", device_class(self.devices[2]))
        self.assertEqual("CUSTOM_PCI_8086_1572", device_class(self.devices[1]))
        exc = self.assertRaises(InvalidInput, PciDevice, address="0000:81:00.0",
                                vendor_id="10de", product_id="1db4", traits=["not a trait"])
        self.assertIn("PciDevice.traits", str(exc))
        dev = self.devices[0]
        self.assertEqual({"address": "0000:81:00.0", "vendor_id": "10de", "product_id": "1db4",
                          "dev_type": "type-PCI", "numa_node": None, "parent_addr": None,
                          "traits": ["CUSTOM_GOLD"]}, dev.to_dict())
        self.assertEqual(dev, PciDevice(**dev.to_dict()))

    def test_a_driver_child_of_the_same_name_is_refused(self):
        report = objects.NodeResources(
            vcpus=1, memory_mb=1, local_gb=1, pci_devices=self.devices[:1],
            providers=[ChildProvider(name="n1_0000:81:00.0")])
        exc = self.assertRaises(InvalidInput, with_pci_children, "n1", report)
        self.assertIn("node n1: the driver reports child provider 'n1_0000:81:00.0'", str(exc))

    def test_an_alias_with_class_and_traits_picks_only_such_devices(self):
        aliases = parse_aliases(json.dumps([
            {"name": "gold", "vendor_id": "10de", "product_id": "1db4",
             "traits": "CUSTOM_GOLD"},
            {"name": "vf", "vendor_id": "8086", "product_id": "154c",
             "resource_class": "nic_vf"},
            {"name": "other", "vendor_id": "8086", "product_id": "154c",
             "resource_class": "CUSTOM_OTHER"}]))
        self.assertEqual(("CUSTOM_NIC_VF", frozenset()),
                         (aliases["vf"].resource_class, aliases["vf"].traits))
        stats = PciStats(devices=self.devices)
        self.assertEqual(("0000:81:00.0",), stats.claim([aliases["gold"].request(1)]))
        self.assertEqual(("0000:83:02.0", "0000:83:02.1"),
                         stats.claim([aliases["vf"].request(2)]))
        self.assertFalse(stats.supports([aliases["other"].request(1)]))
        plain = PciStats(devices=[attrs.evolve(self.devices[0], traits=())])
        self.assertFalse(plain.supports([aliases["gold"].request(1)]))
        exc = self.assertRaises(InvalidInput, parse_aliases, json.dumps(
            {"name": "x", "vendor_id": "10de", "product_id": "1db4", "traits": "bad one"}))
        self.assertIn("alias 'x'", str(exc))


class PciProviderClaims:
    """The plugin's host, audited with report_in_placement on."""

    def make_store(self):
        return self.sqlite_store()

    def setUp(self):
        super().setUp()
        install_plugin(self)
        self.store = self.make_store()
        self.conf = pci_settings(self.state_path)
        self.driver = loader.load_driver("pcihost", settings=self.conf)
        self.driver.init_host(HOST)
        self.rt = ResourceTracker(HOST, self.driver, store=self.store, settings=self.conf)
        self.assertEqual({}, dict(self.rt.update_available_resource().failed))
        self.store.heartbeat(HOST, COMPUTE_BINARY)

    def children(self):
        with self.store.db.engine.connect() as conn:
            return {r.name: r for r in conn.execute(models.resource_providers.select())}

    def node(self):
        return self.store.get_compute_node(HOST, HOST)

    def usage(self):
        return {k: dict(v) for k, v in self.node().provider_usage.items()}

    def claim(self, spec="gpu:1", **extra):
        return self.rt.instance_claim(pci_instance(self.conf, pci_flavor(spec, **extra)), HOST)

    def test_the_audit_records_each_device_as_a_child(self):
        rows = self.children()
        self.assertEqual({GPU_A, GPU_B, NIC}, set(rows))
        self.assertEqual({"CUSTOM_NIC_VF": 3, "CUSTOM_PCI_8086_1572": 1},
                         {rc: inv["total"] for rc, inv in
                          json.loads(rows[NIC].inventories).items()})
        self.assertEqual(["COMPUTE_MANAGED_PCI_DEVICE", "CUSTOM_GPU_GOLD"],
                         json.loads(rows[GPU_B].traits))
        self.assertEqual({0}, {r.generation for r in rows.values()})
        # A steady pass derives the same providers and writes nothing.
        self.assertFalse(self.rt.update_available_resource().wrote)
        self.assertEqual(rows, self.children())

    def test_claims_land_on_the_picked_devices_provider_and_fill_exactly(self):
        first = self.claim()
        # PciStats picks the lowest address; the unit is on that device's provider.
        self.assertEqual(("0000:81:00.0",), first.instance.pci_devices)
        self.assertEqual({GPU_A: {GPU_CLASS: 1}}, dict(first.allocation.providers))
        self.assertEqual(1, first.allocation.resources[GPU_CLASS])
        second = self.claim()
        self.assertEqual(("0000:82:00.0",), second.instance.pci_devices)
        self.assertEqual({GPU_B: {GPU_CLASS: 1}}, dict(second.allocation.providers))
        exc = self.assertRaises(ComputeResourcesUnavailable, self.claim)
        self.assertIn("Claim pci failed: requested 1 x 10de:1db4", str(exc))
        vfs = [self.claim("vf:1") for _ in range(3)]
        self.assertEqual([{NIC: {"CUSTOM_NIC_VF": 1}}] * 3,
                         [dict(c.allocation.providers) for c in vfs])
        self.assertRaises(ComputeResourcesUnavailable, self.claim, "vf:1")
        # The PF is not free while its VFs are in use (the SR-IOV rule), and
        # its unit on the same provider is not taken.
        self.assertRaises(ComputeResourcesUnavailable, self.claim, "pf:1")
        self.assertEqual({GPU_A: {GPU_CLASS: 1}, GPU_B: {GPU_CLASS: 1},
                          NIC: {"CUSTOM_NIC_VF": 3}}, self.usage())
        self.assertNotIn(GPU_CLASS, self.node().usage)
        rows = self.children()
        self.assertEqual((1, 1, 3), (rows[GPU_A].generation, rows[GPU_B].generation,
                                     rows[NIC].generation))

    def test_an_alias_trait_chooses_the_device_and_its_provider(self):
        claim = self.claim("gold:1")
        self.assertEqual(("0000:82:00.0",), claim.instance.pci_devices)
        self.assertEqual({GPU_B: {GPU_CLASS: 1}}, dict(claim.allocation.providers))

    def test_a_class_of_pci_providers_is_asked_for_by_alias_only(self):
        flavor = objects.Flavor(name="direct", vcpus=1, memory_mb=64, root_gb=1,
                                extra_specs={f"resources:{GPU_CLASS}": "1"})
        exc = self.assertRaises(ComputeResourcesUnavailable, self.rt.instance_claim,
                                base.instance(flavor), HOST)
        self.assertIn(f"{GPU_CLASS}: offered by PCI devices only; ask for them with "
                      "pci_passthrough:alias", str(exc))
        self.assertEqual({}, self.usage())

    def test_release_frees_the_provider(self):
        claims = [self.claim() for _ in range(2)]
        before = self.children()[GPU_A].generation
        self.rt.abort_instance_claim(claims[0].instance, HOST)
        self.assertEqual({GPU_B: {GPU_CLASS: 1}}, self.usage())
        self.assertEqual(before + 1, self.children()[GPU_A].generation)
        again = self.claim()
        self.assertEqual({GPU_A: {GPU_CLASS: 1}}, dict(again.allocation.providers))

    def test_a_leak_on_a_pci_provider_is_found_and_healed(self):
        claims = [self.claim("vf:1") for _ in range(2)]
        before = self.children()[NIC].generation
        base.write_instance_row(self.store, attrs.evolve(claims[0].instance,
                                                         vm_state="deleted"))
        report = leaks.find_leaks(self.store, self.conf, host=HOST)
        self.assertIn((claims[0].instance.uuid, 1),
                      [(f.subject, dict(f.resources).get("CUSTOM_NIC_VF"))
                       for f in report.findings])
        self.rt.update_available_resource()
        self.assertEqual({NIC: {"CUSTOM_NIC_VF": 1}}, self.usage())
        self.assertEqual(before + 1, self.children()[NIC].generation)
        # The freed VF is taken again, by a claim that lands on the same provider.
        self.assertEqual({NIC: {"CUSTOM_NIC_VF": 1}},
                         dict(self.claim("vf:1").allocation.providers))

    def test_a_missing_allocation_is_rebuilt_on_the_devices_provider(self):
        claim = self.claim("gold:1")
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete().where(
                models.allocations.c.consumer_uuid == claim.instance.uuid))
        self.assertEqual({}, self.usage())
        self.rt.update_available_resource()
        self.assertEqual({GPU_B: {GPU_CLASS: 1}}, self.usage())
        (alloc,) = self.store.list_allocations(instance_uuid=claim.instance.uuid)
        self.assertEqual(("0000:82:00.0",), alloc.pci_devices)

    def test_the_scheduler_agrees_with_the_claim(self):
        manager = HostManager(self.store, pci_settings(self.state_path))
        requests = flavor_pci_requests(pci_flavor("gpu:2").extra_specs, self.conf.pci_aliases)
        spec = RequestSpec(pci_flavor("gpu:2"), pci_requests=requests)
        self.assertEqual(HOST, manager.select_destinations(spec)[0].host)
        spec = RequestSpec(pci_flavor("gpu:3"),
                           pci_requests=(attrs.evolve(requests[0], count=3),))
        exc = self.assertRaises(NoValidHost, manager.select_destinations, spec)
        self.assertEqual(1, str(exc).count("Claim pci failed"), str(exc))
        direct = objects.Flavor(name="direct", vcpus=1, memory_mb=64, root_gb=1,
                                extra_specs={f"resources:{GPU_CLASS}": "1"})
        exc = self.assertRaises(NoValidHost, manager.select_destinations, direct)
        self.assertEqual(1, str(exc).count("ask for them with pci_passthrough:alias"),
                         str(exc))

    def cli(self, *argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["--database-url", self.store.url, *argv])
        self.assertEqual(0, code, out.getvalue())
        return out.getvalue()

    def test_every_view_shows_the_pci_providers(self):
        self.claim()
        self.claim("vf:2")
        for command in ("hypervisor", "node"):
            shown = json.loads(self.cli(command, "show", HOST, "-f", "json"))["providers"]
            self.assertEqual({GPU_A: (GPU_CLASS, 1, 1), GPU_B: (GPU_CLASS, 1, 0),
                              NIC: ("CUSTOM_NIC_VF", 3, 2)},
                             {p["name"]: next((i["resource_class"], i["capacity"], i["used"])
                                              for i in p["inventories"]
                                              if i["resource_class"] != "CUSTOM_PCI_8086_1572")
                              for p in shown})
        devices = json.loads(self.cli("hypervisor", "show", HOST, "-f", "json"))["pci_devices"]
        self.assertEqual({"0000:81:00.0": (GPU_A, True), "0000:82:00.0": (GPU_B, False),
                          "0000:83:02.2": (NIC, False)},
                         {d["address"]: (d["provider"], d["in_use"]) for d in devices
                          if d["address"] in ("0000:81:00.0", "0000:82:00.0", "0000:83:02.2")})
        self.assertIn(f"0000:81:00.0 10de:1db4 type-PCI numa 0 in use on {GPU_A}",
                      self.cli("node", "show", HOST, "-c", "pci_devices"))
        rows = json.loads(self.cli("inventory", "list", HOST, "--tree", "-f", "json"))
        self.assertEqual((3, 2, 1), next((r["Capacity"], r["Used"], r["Free"]) for r in rows
                                         if r["Provider"] == NIC
                                         and r["Resource Class"] == "CUSTOM_NIC_VF"))
        data = json.loads(self.cli("node", "explain", HOST, "-f", "json"))
        self.assertTrue(data["consistent"], data["culprits"])
        by_provider = {(r["provider"], r["resource_class"]): r for r in data["resources"]}
        self.assertEqual(1, by_provider[(GPU_A, GPU_CLASS)]["used"])
        # The read-only API and the metrics.
        reader = Store(self.store.url, readonly=True)
        self.addCleanup(reader.close)
        server = BackgroundServer(make_app(reader, self.conf)).start()
        self.addCleanup(server.stop)
        found = json.loads(request(server.url + f"/v1/hypervisors/{HOST}")[2])["hypervisor"]
        self.assertEqual([GPU_A, GPU_B, NIC], [p["name"] for p in found["providers"]])
        exporter = metrics.MetricsServer(metrics.Exporter(self.store, self.conf)).start()
        self.addCleanup(exporter.stop)
        samples = parse(scrape(exporter.port))
        labels = dict(host=HOST, node=HOST, provider=NIC, resource_class="CUSTOM_NIC_VF")
        self.assertEqual(2, samples[("nova_lite_provider_resource_used",
                                     frozenset(labels.items()))])

    def test_off_the_devices_are_not_providers(self):
        settings = pci_settings(self.state_path, pci_report_in_placement=False)
        rt = ResourceTracker(HOST, self.driver, store=self.store, settings=settings)
        rt.update_available_resource()
        self.assertEqual({}, self.children())
        claim = rt.instance_claim(pci_instance(settings, pci_flavor()), HOST)
        self.assertEqual(("0000:81:00.0",), claim.instance.pci_devices)
        self.assertEqual({}, dict(claim.allocation.providers))

    def test_a_driver_child_named_like_a_device_fails_that_nodes_audit(self):
        self.driver.children = [ChildProvider(name=GPU_A)]
        failed = self.rt.update_available_resource().failed
        self.assertIn(f"the driver reports child provider {GPU_A!r}", failed[HOST])


class TestPciProviderClaimsSQLite(PciProviderClaims, base.TestCase):
    pass


class TestPciProviderClaimsPostgreSQL(PciProviderClaims, base.TestCase):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


# -- several processes --------------------------------------------------

PROCESSES = 3
CLAIMS_PER_PROCESS = 2


def _claim_worker(url, state_path, plugin_path, barrier, results):
    landed, refused, errors = [], 0, []
    try:
        sys.path.insert(0, plugin_path)   # the plugin, installed by the parent
        settings = pci_settings(state_path)
        driver = loader.load_driver("pcihost", settings=settings)
        driver.init_host(HOST)
        store = Store(url)
        rt = ResourceTracker(HOST, driver, store=store, settings=settings)
        barrier.wait(timeout=60)
        rt.update_available_resource()
        for _ in range(CLAIMS_PER_PROCESS):
            try:
                claim = rt.instance_claim(pci_instance(settings, pci_flavor("vf:1")), HOST)
                landed.append((list(claim.instance.pci_devices),   # plain values: they are pickled
                               {k: dict(v) for k, v in claim.allocation.providers.items()}))
            except ComputeResourcesUnavailable as exc:
                if "Claim pci failed" not in str(exc):
                    errors.append(str(exc))
                refused += 1
        store.close()
    except Exception as exc:   # reported to the parent, which fails the test
        errors.append(repr(exc))
    results.put((landed, refused, errors))


class ConcurrentPciProviderClaims:

    def make_url(self):
        return self.useFixture(databases.SQLiteFile()).url

    def test_claims_from_several_processes_fill_the_vfs_exactly(self):
        plugin_path = install_plugin(self)
        url = self.make_url()
        outcomes = processes.run_together(
            self, _claim_worker, [(url, self.state_path, plugin_path)] * PROCESSES)
        self.assertEqual([], [e for _, _, errs in outcomes for e in errs])
        landed = [item for items, _, _ in outcomes for item in items]
        self.assertEqual(["0000:83:02.0", "0000:83:02.1", "0000:83:02.2"],
                         sorted(dev for devices, _ in landed for dev in devices))
        self.assertEqual([{NIC: {"CUSTOM_NIC_VF": 1}}] * 3, [p for _, p in landed])
        self.assertEqual(PROCESSES * CLAIMS_PER_PROCESS - 3,
                         sum(refused for _, refused, _ in outcomes))
        store = Store(url)
        self.addCleanup(store.close)
        node = store.get_compute_node(HOST, HOST)
        self.assertEqual({NIC: {"CUSTOM_NIC_VF": 3}},
                         {k: dict(v) for k, v in node.provider_usage.items()})
        with store.db.engine.connect() as conn:
            generations = {name: generation for name, generation in conn.execute(sa.select(
                models.resource_providers.c.name, models.resource_providers.c.generation))}
        self.assertEqual({GPU_A: 0, GPU_B: 0, NIC: 3}, generations)


class TestConcurrentPciProviderClaimsSQLite(ConcurrentPciProviderClaims, base.TestCase):
    pass


class TestConcurrentPciProviderClaimsPostgreSQL(ConcurrentPciProviderClaims, base.TestCase):

    def make_url(self):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLDatabase()).url


# -- resize, confirm, revert --------------------------------------------

class ResizePciProviderTests(test_resize_pci.ResizePciTests):
    """Every resize test of tests/test_resize_pci.py with the devices as
    providers (its assertClean audits every host), and where the units go."""

    def add_host(self, host, settings=None, **driver_kwargs):
        self.settings_ = self.settings(reserved_host_memory_mb=0, work_poll_interval=0.02,
                                       pci_alias=test_pci_alias.ALIASES,
                                       pci_report_in_placement=True)
        return Hosts.add_host(self, host, self.settings_, pci_devices=test_pci_alias.DEVICES,
                              **driver_kwargs)

    def provider_usage(self, host):
        node = self.store.get_compute_node(host, host)
        return {k: dict(v) for k, v in node.provider_usage.items()}

    def test_the_units_follow_the_devices_through_resize_and_confirm(self):
        gpu, vfs = {"h1_0000:81:00.0": {GPU_CLASS: 1}}, {
            "h2_0000:05:00.0": {"CUSTOM_PCI_8086_1520": 1}}
        inst = self.built(test_resize_pci.GPU_SMALL, "h1")
        self.assertEqual(gpu, self.provider_usage("h1"))
        self.resized(inst, test_resize_pci.VF_BIG)
        self.assertEqual((gpu, vfs), (self.provider_usage("h1"), self.provider_usage("h2")))
        self.drive_confirm(inst)
        self.assertEqual(({}, vfs), (self.provider_usage("h1"), self.provider_usage("h2")))

    def test_revert_gives_the_destinations_units_back(self):
        inst = self.built(test_resize_pci.GPU_SMALL, "h1")
        self.resized(inst, test_resize_pci.VF_BIG)
        task = moves.revert(self.store, inst)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        self.assertEqual(({"h1_0000:81:00.0": {GPU_CLASS: 1}}, {}),
                         (self.provider_usage("h1"), self.provider_usage("h2")))
        self.assertClean()


class TestResizePciProvidersSQLite(ResizePciProviderTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestResizePciProvidersPostgreSQL(ResizePciProviderTests, base.OnPostgreSQL,
                                       base.TestCase):
    pass
