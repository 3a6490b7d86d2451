"""A node's traits: read from Ironic's ``traits`` field, reported, recorded.

Over the in-process fake (driver, tracker and store), the inventory file and
the ``api`` source's HTTP stub; the real Ironic cases are in
``test_real_ironic``.
"""

import logging
import os

import fixtures
import openstack.baremetal.v1.node as sdk_node
import os_traits

from nova_lite import traits as core_traits
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store
from nova_lite.objects import Flavor
from nova_lite.scheduler import HostManager, NoValidHost
from nova_lite.testing import databases

from nova_lite_ironic import report
from nova_lite_ironic.driver import IronicDriver
from nova_lite_ironic.exception import InventoryError
from nova_lite_ironic.node import BareMetalNode
from nova_lite_ironic.peers import StaticServiceView
from nova_lite_ironic.sources.inventory import dump_inventory, load_inventory
from nova_lite_ironic.sources.proxy import ProxySource

from tests import base
from tests.test_api_source import StubIronic, source_for

#: The traits the core adds to every node of the ironic driver (Nova's
#: IronicDriver capabilities), spelt out rather than computed.
IRONIC_CAPABILITY_TRAITS = frozenset({
    "COMPUTE_NET_ATTACH_INTERFACE", "COMPUTE_IMAGE_TYPE_AMI", "COMPUTE_IMAGE_TYPE_QCOW2",
    "COMPUTE_IMAGE_TYPE_RAW"})
#: What the core records on every node of the driver: those, and COMPUTE_NODE.
RECORDED_ALWAYS = IRONIC_CAPABILITY_TRAITS | {"COMPUTE_NODE"}
GOLD = ("CUSTOM_GOLD", "HW_CPU_X86_AVX2")


class FieldsRecorder:
    """A baremetal proxy passing calls to a fake and recording their ``fields``."""

    def __init__(self, fake):
        self.fake = fake
        self.fields = []

    def nodes(self, **kwargs):
        self.fields.append(list(kwargs.get("fields") or ()))
        return self.fake.nodes(**kwargs)

    def get_node(self, node, fields=None):
        self.fields.append(list(fields or ()))
        return self.fake.get_node(node, fields=fields)


class TestCapabilities(base.TestCase):

    def test_declared_as_novas_ironic_driver(self):
        caps = IronicDriver.capabilities
        self.assertEqual(IRONIC_CAPABILITY_TRAITS, core_traits.capability_traits(caps))
        # Nova's IronicDriver says False (or leaves the default) for these.
        for name in ("supports_same_host_resize", "supports_multiattach", "supports_pcpus",
                     "supports_secure_boot", "supports_device_tagging",
                     "supports_extend_volume", "supports_image_type_iso",
                     "supports_image_type_vmdk", "supports_trusted_certs"):
            self.assertFalse(getattr(caps, name), name)
        self.assertTrue(caps.supports_lifecycle and caps.supports_node_deletion_check)


class TestNodeRecord(base.TestCase):

    def test_traits_shape(self):
        node = base.bm_node(traits=["HW_CPU_X86_AVX2", "CUSTOM_GOLD", "CUSTOM_GOLD"])
        self.assertEqual(("CUSTOM_GOLD", "HW_CPU_X86_AVX2"), node.traits)
        self.assertEqual((), base.bm_node(traits=None).traits)
        self.assertEqual((), base.bm_node().traits)
        self.assertEqual(["CUSTOM_GOLD", "HW_CPU_X86_AVX2"], node.to_api()["traits"])
        err = self.assertRaises(ValueError, base.bm_node, traits="CUSTOM_GOLD")
        self.assertIn("must be a list", str(err))
        err = self.assertRaises(ValueError, base.bm_node, traits=["CUSTOM_A", 7])
        self.assertIn("must be strings", str(err))

    def test_from_api_dict_and_sdk_node(self):
        uuid = base.bm_node().uuid
        raw = {"uuid": uuid, "resource_class": "gold", "traits": list(GOLD)}
        self.assertEqual(GOLD, BareMetalNode.from_api(raw).traits)
        sdk = sdk_node.Node.existing(id=uuid, resource_class="gold", traits=list(GOLD))
        self.assertEqual(GOLD, BareMetalNode.from_api(sdk).traits)
        # A listing without the field (microversion < 1.37) gives none.
        self.assertEqual((), BareMetalNode.from_api({"uuid": uuid}).traits)
        self.assertEqual((), BareMetalNode.from_api(sdk_node.Node.existing(id=uuid)).traits)


class TestReport(base.TestCase):

    def test_standard_and_custom_traits_are_reported(self):
        res = report.node_resources(base.bm_node(traits=list(GOLD)))
        self.assertEqual(frozenset(GOLD), res.traits)
        self.assertNotIn("Leaving trait", self.log.output)

    def test_no_traits_report_none(self):
        self.assertEqual(frozenset(), report.node_resources(base.bm_node()).traits)
        self.assertEqual(frozenset(), report.node_resources(base.bm_node(traits=[])).traits)

    def test_a_bad_name_is_left_out_with_a_warning_naming_it_and_the_node(self):
        node = base.bm_node(traits=["CUSTOM_GOLD", "custom_lower", "CUSTOM_bad-name",
                                    "HW_CPU_X86_NOT_A_TRAIT", "HW_CPU_X86_AVX2"])
        res = report.node_resources(node)
        self.assertEqual(frozenset(GOLD), res.traits)
        self.assertEqual((0, {}), (res.vcpus, dict(res.reserved)))   # the rest is whole
        for name in ("custom_lower", "CUSTOM_bad-name", "HW_CPU_X86_NOT_A_TRAIT"):
            self.assertIn(f"Leaving trait {name!r} of bare-metal node {node.uuid} out of its "
                          f"report", self.log.output)
        self.assertIn("not a standard trait of os-traits", self.log.output)
        self.assertIn("may hold only upper-case letters", self.log.output)
        left = dict(report.node_traits(node).left_out)
        self.assertEqual({"custom_lower", "CUSTOM_bad-name", "HW_CPU_X86_NOT_A_TRAIT"},
                         set(left))

    def test_capability_traits_are_the_drivers_own(self):
        declared = frozenset({os_traits.COMPUTE_NET_ATTACH_INTERFACE})
        node = base.bm_node(traits=["CUSTOM_GOLD", os_traits.COMPUTE_NET_ATTACH_INTERFACE,
                                    os_traits.COMPUTE_VOLUME_MULTI_ATTACH,
                                    os_traits.COMPUTE_NODE])
        got = report.node_traits(node, declared)
        # Not a capability trait: reported as any other.
        self.assertEqual({"CUSTOM_GOLD", os_traits.COMPUTE_NODE}, set(got.traits))
        # Declared: the core adds it, so it is not the node's to report; not
        # declared: Nova removes it from the node, so it is left out, named.
        self.assertEqual([os_traits.COMPUTE_VOLUME_MULTI_ATTACH],
                         [name for name, _ in got.left_out])
        self.assertIn("does not declare", got.left_out[0][1])

    def test_warned_once_until_it_changes(self):
        node = base.bm_node(traits=["CUSTOM_GOLD", "nope"])
        warned = {}
        for _ in range(3):
            report.node_resources(node, warned=warned)
        self.assertEqual(1, self.log.output.count("Leaving trait 'nope'"))
        changed = base.bm_node(uuid=node.uuid, traits=["nope", "still_nope"])
        report.node_resources(changed, warned=warned)
        self.assertEqual(2, self.log.output.count("Leaving trait 'nope'"))
        self.assertEqual(1, self.log.output.count("Leaving trait 'still_nope'"))
        report.node_resources(base.bm_node(uuid=node.uuid), warned=warned)   # fixed
        self.assertEqual({}, warned)
        report.node_resources(node, warned=warned)   # broken again: said again
        self.assertEqual(3, self.log.output.count("Leaving trait 'nope'"))


class TestDriverOverFake(base.TestCase):

    def test_traits_come_with_the_listing_at_no_extra_call(self):
        fake = self.fake_fleet(12)
        gold = fake.add(base.bm_node(traits=list(GOLD)))
        recorder = FieldsRecorder(fake)
        driver = self.make_driver(recorder, page_size=5)
        fake.reset_counters()
        names = driver.get_available_nodes()
        reports = {name: driver.get_available_resource(name) for name in names}
        self.assertEqual((3, 0), (fake.list_calls, fake.get_calls))
        self.assertEqual(frozenset(GOLD), reports[gold.uuid].traits)
        for name in set(names) - {gold.uuid}:
            self.assertEqual(frozenset(), reports[name].traits)
        for fields in recorder.fields:
            self.assertIn("traits", fields)

    def test_a_cache_miss_get_carries_the_traits(self):
        fake = self.fake_fleet(1)
        driver = self.make_driver(fake)
        driver.get_available_nodes()
        late = fake.add(base.bm_node(traits=["CUSTOM_LATE"]))
        fake.reset_counters()
        self.assertEqual({"CUSTOM_LATE"}, driver.get_available_resource(late.uuid).traits)
        self.assertEqual((0, 1), (fake.list_calls, fake.get_calls))

    def test_traits_follow_the_source(self):
        fake = self.fake_fleet(0)
        node = fake.add(base.bm_node(traits=["CUSTOM_GOLD"]))
        driver = self.make_driver(fake)
        driver.get_available_nodes()
        self.assertEqual({"CUSTOM_GOLD"}, driver.get_available_resource(node.uuid).traits)
        fake.set(node.uuid, traits=["CUSTOM_SILVER"])
        driver.get_available_nodes()
        self.assertEqual({"CUSTOM_SILVER"}, driver.get_available_resource(node.uuid).traits)
        fake.set(node.uuid, traits=[])
        driver.get_available_nodes()
        self.assertEqual(frozenset(), driver.get_available_resource(node.uuid).traits)

    def test_a_source_without_the_traits_field_asks_no_traits(self):
        fake = self.fake_fleet(0)
        fake.add(base.bm_node(traits=["CUSTOM_GOLD"]))
        recorder = FieldsRecorder(fake)
        driver = IronicDriver(settings=self.settings(),
                              source=ProxySource(recorder, traits=False),
                              service_view=StaticServiceView([self.host]))
        driver.init_host(self.host)
        (name,) = driver.get_available_nodes()
        self.assertEqual(frozenset(), driver.get_available_resource(name).traits)
        self.assertNotIn("traits", recorder.fields[0])

    def test_a_bad_trait_costs_only_itself_and_is_warned_once(self):
        fake = self.fake_fleet(2)
        bad = fake.add(base.bm_node(traits=["CUSTOM_GOLD", "gold"], maintenance=True))
        driver = self.make_driver(fake)
        for _ in range(3):
            names = driver.get_available_nodes()
            self.assertEqual(3, len(names))
            res = driver.get_available_resource(bad.uuid)
        self.assertEqual({"CUSTOM_GOLD"}, res.traits)
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, dict(res.reserved))
        warnings = [line for line in self.log.output.splitlines() if "Leaving trait" in line]
        self.assertEqual([f"Leaving trait 'gold' of bare-metal node {bad.uuid} out of its "
                          "report: unknown trait 'gold': not a standard trait of os-traits "
                          f"{core_traits.OS_TRAITS_VERSION}, nor CUSTOM_<NAME>"], warnings)

    def test_malformed_traits_field_skips_the_node_naming_it(self):
        fake = self.fake_fleet(2)

        class Bent:
            """A proxy whose node list carries a traits field that is not a list."""

            def nodes(self, **kwargs):
                for row in fake.nodes(**kwargs):
                    yield dict(row, traits="CUSTOM_GOLD") if row["uuid"] == first else row

        first = fake.all()[0].uuid
        driver = self.make_driver(Bent())
        self.assertEqual([fake.all()[1].uuid], driver.get_available_nodes())
        self.assertIn(f"Skipping malformed node {first}", self.log.output)
        self.assertIn("node traits must be a list", self.log.output)


class TestRecordedTraits(base.TestCase):
    """Audit -> store -> ComputeNode.traits, and the scheduler reading them."""

    def setUp(self):
        super().setUp()
        db = self.useFixture(databases.SQLiteFile())
        self.store = Store(db.url)
        self.addCleanup(self.store.close)

    def service(self, fake, host="h1"):
        settings = self.settings(host=host)
        driver = IronicDriver(settings=settings, source=ProxySource(fake))
        return ComputeService(host, driver, store=self.store, settings=settings)

    def records(self):
        return {n.nodename: n for n in self.store.get_compute_nodes("h1")}

    def test_node_traits_plus_capability_traits_are_recorded(self):
        fake = self.fake_fleet(0)
        gold = fake.add(base.bm_node(traits=list(GOLD)))
        plain = fake.add(base.bm_node())
        svc = self.service(fake)
        svc.run_once()
        records = self.records()
        self.assertEqual(frozenset(GOLD) | RECORDED_ALWAYS, records[gold.uuid].traits)
        self.assertEqual(RECORDED_ALWAYS, records[plain.uuid].traits)

        fake.set(gold.uuid, traits=["CUSTOM_SILVER"])
        svc.run_once()
        self.assertEqual({"CUSTOM_SILVER"} | RECORDED_ALWAYS,
                         self.records()[gold.uuid].traits)

    def test_a_bad_trait_leaves_the_rest_of_the_node_recorded(self):
        fake = self.fake_fleet(0)
        node = fake.add(base.bm_node(traits=["CUSTOM_GOLD"]))
        svc = self.service(fake)
        svc.run_once()
        self.assertEqual({}, dict(self.records()[node.uuid].resources.reserved))
        # Ironic's os-traits knows a name ours does not, and the node goes
        # into maintenance in the same pass: the maintenance must be recorded.
        fake.set(node.uuid, traits=["CUSTOM_GOLD", "HW_CPU_X86_FROM_THE_FUTURE"],
                 maintenance=True)
        result = svc.run_once()
        self.assertIn(node.uuid, result.audited)
        record = self.records()[node.uuid]
        self.assertEqual({"CUSTOM_BAREMETAL": 1}, dict(record.resources.reserved))
        self.assertEqual({"CUSTOM_GOLD"} | RECORDED_ALWAYS, record.traits)
        self.assertIn("Leaving trait 'HW_CPU_X86_FROM_THE_FUTURE'", self.log.output)

    def test_a_flavor_requiring_a_trait_gets_the_node_with_it(self):
        fake = self.fake_fleet(3)
        gold = fake.add(base.bm_node(traits=["CUSTOM_GOLD"]))
        self.service(fake).run_once()
        specs = dict(base.baremetal_flavor().extra_specs)
        wanting = Flavor(name="bm.gold", vcpus=1, memory_mb=1024, root_gb=10,
                         extra_specs=dict(specs, **{"trait:CUSTOM_GOLD": "required"}))
        (selection,) = HostManager(self.store).select_destinations(wanting)
        self.assertEqual(gold.uuid, selection.nodename)
        shunning = Flavor(name="bm.plain", vcpus=1, memory_mb=1024, root_gb=10,
                          extra_specs=dict(specs, **{"trait:CUSTOM_GOLD": "forbidden"}))
        # Each pick is counted before the next: three picks take every other node.
        picked = HostManager(self.store).select_destinations(shunning, num_instances=3)
        self.assertEqual({n.uuid for n in fake.all()} - {gold.uuid},
                         {s.nodename for s in picked})
        hosts = HostManager(self.store)
        never = Flavor(name="bm.iso", vcpus=1, memory_mb=1024, root_gb=10,
                       extra_specs=dict(specs, **{"trait:COMPUTE_IMAGE_TYPE_ISO": "required"}))
        self.assertRaises(NoValidHost, hosts.select_destinations, never)


class TestInventoryTraits(base.TestCase):

    def write(self, text):
        path = os.path.join(self.state_path, "fleet.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def test_traits_key_is_read_and_round_trips(self):
        u1, u2 = base.bm_node().uuid, base.bm_node().uuid
        path = self.write(f"nodes:\n  - uuid: {u1}\n    resource_class: gold\n"
                          f"    traits: [HW_CPU_X86_AVX2, CUSTOM_GOLD]\n"
                          f"  - uuid: {u2}\n    resource_class: gold\n")
        fleet = {n.uuid: n for n in load_inventory(path)}
        self.assertEqual(GOLD, fleet[u1].traits)
        self.assertEqual((), fleet[u2].traits)
        again = load_inventory(self.write(dump_inventory(fleet.values())))
        self.assertEqual(sorted(fleet.values(), key=lambda n: n.uuid),
                         sorted(again, key=lambda n: n.uuid))

    def test_bad_traits_are_errors_naming_the_entry_and_the_name(self):
        u1 = base.bm_node().uuid
        for value, fragment in (("[CUSTOM_GOLD, gold]", "unknown trait 'gold'"),
                                ("[CUSTOM_go-ld]", "custom trait 'CUSTOM_go-ld'"),
                                ("[7]", "a trait name must be a string"),
                                ("CUSTOM_GOLD", "'traits' must be a list of trait names")):
            path = self.write(f"nodes:\n  - uuid: {u1}\n    traits: {value}\n")
            err = self.assertRaises(InventoryError, load_inventory, path)
            self.assertIn(f"{path}: nodes[0] ({u1})", str(err))
            self.assertIn(fragment, str(err))

    def test_driver_over_an_inventory_reports_the_traits(self):
        from nova_lite import conf
        from nova_lite.virt import loader
        u1 = base.bm_node().uuid
        path = self.write(f"nodes:\n  - uuid: {u1}\n    resource_class: gold\n"
                          f"    traits: [CUSTOM_GOLD]\n")
        driver = loader.load_driver("ironic", settings=conf.Settings(
            host="h1", state_path=self.state_path,
            sections={"ironic": {"source": "inventory", "inventory_file": path}}))
        driver.init_host("h1")
        self.assertEqual([u1], driver.get_available_nodes())
        self.assertEqual({"CUSTOM_GOLD"}, driver.get_available_resource(u1).traits)


class TestApiSourceTraits(base.TestCase):

    def stub(self):
        stub = self.useFixture(StubIronic(3))
        stub.nodes[0]["traits"] = list(GOLD)
        for node in stub.nodes[1:]:
            node["traits"] = []
        return stub

    def test_traits_asked_and_read_in_the_listing_and_the_get(self):
        stub = self.stub()
        source = source_for(stub)
        listed = {n.uuid: n for n in source.list_nodes()}
        self.assertEqual(GOLD, listed[stub.nodes[0]["uuid"]].traits)
        self.assertEqual((), listed[stub.nodes[1]["uuid"]].traits)
        self.assertEqual(GOLD, source.get_node(stub.nodes[0]["uuid"]).traits)
        lists = [r for r in stub.node_requests() if r[0] == "/v1/nodes"]
        self.assertEqual(1, len(lists))
        self.assertIn("traits", lists[0][1]["fields"][0].split(","))

    def test_below_1_37_traits_are_not_asked_and_nodes_have_none(self):
        stub = self.stub()
        log = self.useFixture(fixtures.FakeLogger(level=logging.WARNING,
                                                  name="nova_lite_ironic"))
        source = source_for(stub, api_version="1.36")
        self.assertEqual([(), (), ()], [n.traits for n in source.list_nodes()])
        _, query, headers = stub.node_requests()[-1]
        self.assertEqual("1.36", headers["X-OpenStack-Ironic-API-Version"])
        self.assertNotIn("traits", query["fields"][0].split(","))
        self.assertIn("microversion 1.36 is below 1.37", log.output)
        source_for(stub, api_version="1.37").list_nodes()
        self.assertIn("traits", stub.node_requests()[-1][1]["fields"][0].split(","))
