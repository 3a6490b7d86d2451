"""Child resource providers: reported, recorded, scheduled and claimed.

A node with two GPUs (children of 8 and 4 vGPUs, of different mdev types):
VGPU claims spread over both and fill each exactly, never beyond, from one
process and from several, on a SQLite file and on PostgreSQL.
"""

import contextlib
import io
import json
import uuid

import attrs
import sqlalchemy as sa
import testtools

from nova_lite import conf, leaks, objects
from nova_lite.cli.main import main
from nova_lite.compute.claims import ComputeResourcesUnavailable
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, models
from nova_lite.exception import (
    InstanceNotFound, InvalidConfig, InvalidInput, InvalidNodeResources)
from nova_lite.model.nested import place
from nova_lite.node_resources import NodeResources
from nova_lite.providers import ChildProvider, child_uuid
from nova_lite.resources import Inventory
from nova_lite.scheduler import HostManager, NoValidHost
from nova_lite.testing import databases
from nova_lite.virt import loader
from nova_lite.virt.fake import FakeDriver
from tests import base, processes, test_scheduler
from tests.test_provider_config import ConfigDir, document, provider

HOST = "gpuhost"
VGPUS = "nvidia-35:8,nvidia-36:4"
GPU_A, GPU_B = f"{HOST}_pci_0000_81_00_0", f"{HOST}_pci_0000_82_00_0"


def gpu(name, total, *traits):
    return ChildProvider(name=name, inventories={"VGPU": Inventory(total=total, max_unit=total)},
                         traits=traits)


def vgpu_flavor(count=1, name="vgpu", **traits):
    specs = {"resources:VGPU": str(count)}
    specs.update({f"trait:{k}": v for k, v in traits.items()})
    return objects.Flavor(name=name, vcpus=1, memory_mb=64, root_gb=1, extra_specs=specs)


class TestChildProviderRecords(testtools.TestCase):

    def test_a_report_with_children_round_trips_through_its_dict(self):
        report = NodeResources(vcpus=4, memory_mb=1024, local_gb=10, providers=[
            gpu("g0", 8, "CUSTOM_NVIDIA_35"),
            ChildProvider(name="g0-part", parent="g0",
                          inventories={"CUSTOM_SLICE": Inventory(total=2, reserved=1)})])
        self.assertEqual(report, NodeResources.from_dict(json.loads(json.dumps(
            report.to_dict()))))

    def test_a_report_without_children_keeps_its_dict(self):
        self.assertNotIn("providers", NodeResources(vcpus=1, memory_mb=1, local_gb=1).to_dict())

    def test_bad_trees_are_refused_naming_the_child(self):
        exc = self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1, local_gb=1,
                                providers=[gpu("g0", 1), gpu("g0", 2)])
        self.assertIn("two child providers are named 'g0'", str(exc))
        exc = self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1, local_gb=1,
                                providers=[ChildProvider(name="a", parent="nobody")])
        self.assertIn("child provider 'a' names parent 'nobody'", str(exc))
        exc = self.assertRaises(InvalidInput, NodeResources, vcpus=1, memory_mb=1, local_gb=1,
                                providers=[ChildProvider(name="a", parent="b"),
                                           ChildProvider(name="b", parent="a")])
        self.assertIn("is its own ancestor", str(exc))

    def test_a_malformed_child_in_a_legacy_dict_is_named(self):
        data = NodeResources(vcpus=1, memory_mb=1, local_gb=1).to_dict()
        data["providers"] = [{"name": "g0", "inventories": {"VGPU": {"totl": 4}}}]
        exc = self.assertRaises(InvalidNodeResources, NodeResources.from_dict, data, "n1")
        self.assertIn("'providers' is malformed", str(exc))
        self.assertIn("inventory VGPU must be a mapping with 'total'", str(exc))

    def test_a_child_may_not_offer_the_nodes_own_classes(self):
        exc = self.assertRaises(InvalidInput, ChildProvider, name="cell0",
                                inventories={"MEMORY_MB": Inventory(total=1024)})
        self.assertIn("MEMORY_MB", str(exc))

    def test_uuids_are_stable_and_per_node(self):
        self.assertEqual(child_uuid("n1", "g0"), child_uuid("n1", "g0"))
        self.assertNotEqual(child_uuid("n1", "g0"), child_uuid("n2", "g0"))

    def test_the_fake_option_is_checked(self):
        settings = conf.Settings(sections={"fake": {"vgpus": "nvidia-35:0"}})
        exc = self.assertRaises(InvalidConfig, FakeDriver, settings=settings)
        self.assertIn("vgpus", str(exc))
        self.assertIn("<mdev type>:<count>", str(exc))


class TestPlace(testtools.TestCase):

    children = (gpu("a", 2, "CUSTOM_A"), gpu("b", 3, "CUSTOM_B"))

    def test_the_child_with_most_room_wins_and_each_fills_exactly(self):
        usage = {}
        picks = []
        for _ in range(5):
            landed = place(self.children, usage, {"VGPU": 1})
            self.assertEqual((), landed.reasons)
            (name,) = landed.amounts
            picks.append(name)
            usage.setdefault(name, {"VGPU": 0})["VGPU"] += 1
        self.assertEqual(["b", "a", "b", "a", "b"], picks)
        landed = place(self.children, usage, {"VGPU": 1})
        self.assertEqual({}, dict(landed.amounts))
        self.assertIn("VGPU: no child provider has room for 1", landed.reasons[0])

    def test_an_amount_is_never_split_over_two_children(self):
        landed = place(self.children, {}, {"VGPU": 4})
        self.assertEqual({}, dict(landed.amounts))

    def test_required_and_forbidden_traits_choose_the_child(self):
        landed = place(self.children, {}, {"VGPU": 1}, required_traits={"CUSTOM_A"})
        self.assertEqual(["a"], list(landed.amounts))
        landed = place(self.children, {}, {"VGPU": 1}, forbidden_traits={"CUSTOM_B"})
        self.assertEqual(["a"], list(landed.amounts))
        landed = place(self.children, {}, {"VGPU": 1}, required_traits={"CUSTOM_C"})
        self.assertIn("a: lacks trait CUSTOM_C", landed.reasons[0])


class ProviderClaims:
    """One host with ``[fake] vgpus`` = two GPUs of 8 and 4 vGPUs."""

    def make_store(self):
        return self.sqlite_store()

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        self.conf = self.settings(host=HOST, reserved_host_memory_mb=0,
                                  sections={"fake": {"vgpus": VGPUS}})
        self.driver, self.rt = self.make_tracker(settings=self.conf, store=self.store,
                                                 host=HOST, vcpus=64, memory_mb=65536,
                                                 local_gb=1000)
        self.store.heartbeat(HOST)

    def children(self):
        with self.store.db.engine.connect() as conn:
            return {r.name: r for r in conn.execute(models.resource_providers.select())}

    def node(self):
        return self.store.get_compute_node(HOST, HOST)

    def claim(self, flavor=None):
        inst = base.instance(flavor or vgpu_flavor())
        return self.rt.instance_claim(inst, HOST)

    def test_the_audit_records_each_gpu_as_a_child_of_the_node(self):
        rows = self.children()
        node = self.node()
        self.assertEqual({GPU_A, GPU_B}, set(rows))
        self.assertEqual(child_uuid(node.uuid, GPU_A), rows[GPU_A].uuid)
        self.assertEqual((node.uuid, node.uuid, 0),
                         (rows[GPU_A].root_uuid, rows[GPU_A].parent_uuid,
                          rows[GPU_A].generation))
        self.assertEqual(8, json.loads(rows[GPU_A].inventories)["VGPU"]["total"])
        self.assertEqual(["CUSTOM_NVIDIA_36"], json.loads(rows[GPU_B].traits))
        # A steady audit changes nothing.
        self.rt.update_available_resource()
        self.assertEqual(rows, self.children())

    def test_vgpu_claims_spread_and_fill_each_gpu_exactly(self):
        landed = []
        for _ in range(12):
            claim = self.claim()
            (name,) = claim.allocation.providers
            landed.append(name)
        self.assertEqual({GPU_A: 8, GPU_B: 4}, {n: landed.count(n) for n in set(landed)})
        # Most room first (a tie goes by name): A (8) takes five, then they alternate.
        self.assertEqual([GPU_A] * 5 + [GPU_B, GPU_A] * 3 + [GPU_B], landed)
        exc = self.assertRaises(ComputeResourcesUnavailable, self.claim)
        self.assertIn("VGPU: no child provider has room for 1", str(exc))
        node = self.node()
        self.assertEqual({GPU_A: {"VGPU": 8}, GPU_B: {"VGPU": 4}},
                         {k: dict(v) for k, v in node.provider_usage.items()})
        # What children hold is theirs: the node itself holds no VGPU and is
        # not over capacity in it.
        self.assertNotIn("VGPU", node.usage)
        self.assertEqual({}, node.over_classes())
        rows = self.children()
        self.assertEqual((8, 4), (rows[GPU_A].generation, rows[GPU_B].generation))

    def test_a_claim_naming_a_child_with_no_record_is_refused_and_writes_nothing(self):
        self.claim()   # the tracker now holds the node as recorded
        with self.store.db.engine.begin() as conn:
            conn.execute(models.resource_providers.delete())
        inst = base.instance(vgpu_flavor())
        exc = self.assertRaises(InvalidInput, self.rt.instance_claim, inst, HOST)
        self.assertIn("is no longer recorded; nothing was claimed", str(exc))
        self.assertEqual([], self.store.list_allocations(instance_uuid=inst.uuid))
        self.assertRaises(InstanceNotFound, self.store.get_instance, inst.uuid)

    def test_an_instance_claimed_twice_is_refused_the_second_time(self):
        claim = self.claim()
        exc = self.assertRaises(InvalidInput, self.rt.instance_claim,
                                attrs.evolve(claim.instance, host=None, node=None), HOST)
        self.assertIn("already holds a claim", str(exc))
        self.assertEqual(1, sum(per.get("VGPU", 0) for per in
                                self.node().provider_usage.values()))

    def test_a_freed_vgpu_can_be_claimed_again(self):
        claims = [self.claim() for _ in range(12)]
        self.rt.abort_instance_claim(claims[0].instance, HOST)
        again = self.claim()
        self.assertEqual(dict(claims[0].allocation.providers), dict(again.allocation.providers))

    def test_a_trait_of_one_gpu_steers_the_claim_to_it(self):
        flavor = vgpu_flavor(CUSTOM_NVIDIA_36="required")
        for _ in range(4):
            self.assertEqual([GPU_B], list(self.claim(flavor).allocation.providers))
        exc = self.assertRaises(ComputeResourcesUnavailable, self.claim, flavor)
        self.assertIn(f"{GPU_A}: lacks trait CUSTOM_NVIDIA_36", str(exc))

    def test_the_scheduler_sees_the_children(self):
        _, other = self.make_tracker(settings=self.settings(host="plain",
                                                            reserved_host_memory_mb=0),
                                     store=self.store, host="plain")
        self.store.heartbeat("plain")
        manager = HostManager(self.store, self.settings(reserved_host_memory_mb=0))
        for _ in range(3):
            self.assertEqual(HOST, manager.select_destinations(vgpu_flavor())[0].host)
        chosen = manager.select_destinations(vgpu_flavor(CUSTOM_NVIDIA_36="required"))
        self.assertEqual(HOST, chosen[0].host)
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                vgpu_flavor(count=9))
        self.assertIn("VGPU: no child provider has room for 9", str(exc))
        self.assertIn("removed 2 of 2 hosts", str(exc))
        exc = self.assertRaises(NoValidHost, manager.select_destinations,
                                vgpu_flavor(CUSTOM_NVIDIA_99="required"))
        self.assertIn("lacks required trait(s) CUSTOM_NVIDIA_99", str(exc))

    def test_a_leak_on_a_child_is_found_and_healed(self):
        claims = [self.claim() for _ in range(3)]
        leaked = claims[0]
        (name,) = leaked.allocation.providers
        before = self.children()[name].generation
        base.write_instance_row(self.store, attrs.evolve(leaked.instance, vm_state="deleted"))
        self.rt.update_available_resource()
        node = self.node()
        self.assertEqual(2, sum(per.get("VGPU", 0) for per in node.provider_usage.values()))
        self.assertEqual(before + 1, self.children()[name].generation)
        self.assertNotIn(leaked.instance.uuid,
                         {a.consumer_uuid for a in self.store.list_allocations(node.uuid)})

    def test_a_missing_allocation_is_rebuilt_on_a_child(self):
        claim = self.claim(vgpu_flavor(CUSTOM_NVIDIA_36="required"))
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete().where(
                models.allocations.c.consumer_uuid == claim.instance.uuid))
        self.assertEqual({}, dict(self.node().provider_usage))
        self.rt.update_available_resource()
        node = self.node()
        self.assertEqual({GPU_B: {"VGPU": 1}}, {k: dict(v) for k, v in
                                                node.provider_usage.items()})
        self.assertNotIn("VGPU", node.usage)

    def test_a_missing_migration_allocation_is_rebuilt_on_a_child(self):
        claim = self.claim(vgpu_flavor(CUSTOM_NVIDIA_36="required"))
        move = self.rt.resize_claim(claim.instance, vgpu_flavor(2, name="vgpu2"), HOST)
        held = {a.consumer_type: a for a in self.store.list_allocations(self.node().uuid)
                if a.consumer_uuid in (claim.instance.uuid, move.migration.uuid)}
        self.assertEqual({"instance", "migration"}, set(held))
        before = {k: dict(v) for k, v in self.node().provider_usage.items()}
        self.assertEqual(3, sum(per["VGPU"] for per in before.values()))
        lost = held["migration"]
        generations = {n: r.generation for n, r in self.children().items()}
        with self.store.db.engine.begin() as conn:
            conn.execute(models.allocations.delete().where(
                models.allocations.c.consumer_uuid == lost.consumer_uuid))
        self.rt.update_available_resource()
        rebuilt = {a.consumer_uuid: a for a in self.store.list_allocations(
            self.node().uuid)}[lost.consumer_uuid]
        # The migration holds the new flavor (no trait): the claim put its two
        # vGPUs on the GPU with most room, A, and the rebuild lands them there
        # again, moving A to its next generation.
        self.assertEqual({GPU_A: {"VGPU": 2}}, {k: dict(v) for k, v in lost.providers.items()})
        self.assertEqual({GPU_A: {"VGPU": 2}},
                         {k: dict(v) for k, v in rebuilt.providers.items()})
        self.assertEqual(before, {k: dict(v) for k, v in self.node().provider_usage.items()})
        self.assertEqual((generations[GPU_A] + 1, generations[GPU_B]),
                         (self.children()[GPU_A].generation,
                          self.children()[GPU_B].generation))
        self.assertNotIn("VGPU", self.node().usage)

    def cli(self, *argv, exit_code=0):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["--database-url", self.store.url, *argv])
        self.assertEqual(exit_code, code, out.getvalue())
        return out.getvalue()

    def test_the_commands_show_the_tree(self):
        for _ in range(6):   # five on A (most room, ties by name), then one on B
            self.claim()
        rows = json.loads(self.cli("inventory", "list", HOST, "--tree", "-f", "json"))
        children = {r["Provider"]: r for r in rows if r["Resource Class"] == "VGPU"}
        self.assertEqual({GPU_A: (8, 5, 3), GPU_B: (4, 1, 3)},
                         {k: (r["Capacity"], r["Used"], r["Free"]) for k, r in children.items()})
        self.assertEqual({HOST}, {r["Provider"] for r in rows if r["Resource Class"] != "VGPU"})
        table = self.cli("inventory", "list", HOST, "--tree")
        self.assertIn("| Provider ", table)
        self.assertNotIn("Provider", self.cli("inventory", "list", HOST))
        for command in ("hypervisor", "node"):
            shown = json.loads(self.cli(command, "show", HOST, "-f", "json"))["providers"]
            self.assertEqual([GPU_A, GPU_B], [p["name"] for p in shown])
            self.assertEqual((5, 5, ["CUSTOM_NVIDIA_35"]),
                             (shown[0]["inventories"][0]["used"], shown[0]["generation"],
                              shown[0]["traits"]))
            text = self.cli(command, "show", HOST, "-c", "providers")
            self.assertIn(f"{GPU_B}: VGPU 1 of 4 used, 3 free [CUSTOM_NVIDIA_36]", text)

    def test_explain_goes_provider_by_provider_and_names_a_shrunken_gpu(self):
        claims = [self.claim() for _ in range(6)]   # five on A, one on B
        data = json.loads(self.cli("node", "explain", HOST, "-f", "json"))
        self.assertTrue(data["consistent"], data["culprits"])
        by_provider = {(r["provider"], r["resource_class"]): r for r in data["resources"]}
        self.assertNotIn((None, "VGPU"), by_provider)
        gpu_a = by_provider[(GPU_A, "VGPU")]
        self.assertEqual((8, 5, 3), (gpu_a["capacity"], gpu_a["used"], gpu_a["free"]))
        self.assertEqual(sorted(c.instance.uuid for c in claims[:5]),
                         sorted(line["consumer_uuid"] for line in gpu_a["consumers"]))
        self.assertEqual(1, by_provider[(None, "VCPU")]["consumers"][0]["amount"])
        text = self.cli("node", "explain", HOST)
        self.assertIn(f"VGPU on child provider {GPU_B}: total 4", text)
        # The driver now reports GPU A with room for 3: the 5 held are 2 over.
        self.driver.set_node_providers(HOST, [gpu(GPU_A, 3, "CUSTOM_NVIDIA_35"),
                                              gpu(GPU_B, 4, "CUSTOM_NVIDIA_36")])
        self.rt.update_available_resource()
        data = json.loads(self.cli("node", "explain", HOST, "-f", "json"))
        self.assertEqual([("shrunken_host", f"{GPU_A}/VGPU", {"VGPU": 2})],
                         [(c["kind"], c["subject"], c["resources"]) for c in data["culprits"]])
        report = leaks.find_leaks(self.store, self.conf, host=HOST)
        self.assertEqual([("over_capacity", f"{GPU_A}/VGPU", {"VGPU": 2})],
                         [(f.kind, f.subject, dict(f.resources)) for f in report.findings])

    def test_provider_yaml_gives_one_gpu_a_trait_a_flavor_can_ask_for(self):
        config = self.useFixture(ConfigDir())
        config.write("gpus.yaml", document(
            provider(f"name: {GPU_A}", traits=["CUSTOM_GOLD_GPU"])))
        settings = self.settings(host=HOST, reserved_host_memory_mb=0,
                                 provider_config_location=config.path,
                                 sections={"fake": {"vgpus": VGPUS}})
        rt = ResourceTracker(HOST, self.driver, store=self.store, settings=settings)
        rt.update_available_resource()
        self.assertEqual(["CUSTOM_GOLD_GPU", "CUSTOM_NVIDIA_35"],
                         json.loads(self.children()[GPU_A].traits))
        self.assertEqual(1, self.children()[GPU_A].generation)
        flavor = vgpu_flavor(CUSTOM_GOLD_GPU="required")
        for _ in range(3):
            claim = rt.instance_claim(base.instance(flavor), HOST)
            self.assertEqual([GPU_A], list(claim.allocation.providers))
        # A class the driver reports for a child may not be added again: that
        # node's audit fails, naming the file, the child and the class.
        self.driver.set_node_providers(HOST, [
            ChildProvider(name="fpga0", inventories={"CUSTOM_SLICE": Inventory(total=2)})])
        config.write("gpus.yaml", document(provider("name: fpga0",
                                                    {"CUSTOM_SLICE": {"total": 1}})))
        rt = ResourceTracker(HOST, self.driver, store=self.store, settings=settings)
        failed = rt.update_available_resource().failed
        self.assertIn("adds resource class CUSTOM_SLICE to child provider 'fpga0'",
                      failed[HOST])
        self.assertIn("gpus.yaml", failed[HOST])

    def test_a_gpu_the_driver_stops_reporting_leaves_the_records(self):
        self.claim()
        self.driver.set_node_providers(HOST, [gpu(GPU_B, 4, "CUSTOM_NVIDIA_36")])
        self.rt.update_available_resource()
        self.assertEqual({GPU_B}, set(self.children()))
        generation = self.children()[GPU_B].generation
        self.driver.set_node_providers(HOST, [gpu(GPU_B, 6, "CUSTOM_NVIDIA_36")])
        self.rt.update_available_resource()
        self.assertEqual(generation + 1, self.children()[GPU_B].generation)


class TestProviderClaimsSQLite(ProviderClaims, base.TestCase):
    pass


class TestProviderClaimsPostgreSQL(ProviderClaims, base.TestCase):
    make_store = test_scheduler.PostgreSQLSchedulerTests.make_store


# -- several processes --------------------------------------------------

PROCESSES = 3
CLAIMS_PER_PROCESS = 6


def _claim_worker(url, state_path, barrier, results):
    landed, refused, errors = [], 0, []
    try:
        settings = conf.Settings(host=HOST, state_path=state_path, reserved_host_memory_mb=0,
                                 provider_config_location=state_path + "/none",
                                 sections={"fake": {"vgpus": VGPUS}})
        driver = loader.load_driver("fake", settings=settings, vcpus=64, memory_mb=65536,
                                    local_gb=1000)
        driver.init_host(HOST)
        store = Store(url)
        rt = ResourceTracker(HOST, driver, store=store, settings=settings)
        barrier.wait(timeout=60)
        rt.update_available_resource()
        for _ in range(CLAIMS_PER_PROCESS):
            inst = objects.Instance(uuid=str(uuid.uuid4()), flavor=vgpu_flavor(),
                                    project_id="p")
            try:
                landed.extend(rt.instance_claim(inst, HOST).allocation.providers)
            except ComputeResourcesUnavailable as exc:
                if "no child provider has room" not in str(exc):
                    errors.append(str(exc))
                refused += 1
        store.close()
    except Exception as exc:   # reported to the parent, which fails the test
        errors.append(repr(exc))
    results.put((landed, refused, errors))


class ConcurrentProviderClaims:

    def make_url(self):
        return self.useFixture(databases.SQLiteFile()).url

    def test_claims_from_several_processes_fill_each_gpu_exactly(self):
        url = self.make_url()
        outcomes = processes.run_together(
            self, _claim_worker, [(url, self.state_path)] * PROCESSES)
        errors = [e for _, _, errs in outcomes for e in errs]
        self.assertEqual([], errors)
        landed = [name for names, _, _ in outcomes for name in names]
        self.assertEqual({GPU_A: 8, GPU_B: 4}, {n: landed.count(n) for n in set(landed)})
        self.assertEqual(PROCESSES * CLAIMS_PER_PROCESS - 12,
                         sum(refused for _, refused, _ in outcomes))
        store = Store(url)
        self.addCleanup(store.close)
        node = store.get_compute_node(HOST, HOST)
        self.assertEqual({GPU_A: {"VGPU": 8}, GPU_B: {"VGPU": 4}},
                         {k: dict(v) for k, v in node.provider_usage.items()})
        with store.db.engine.connect() as conn:
            generations = {name: generation for name, generation in conn.execute(sa.select(
                models.resource_providers.c.name, models.resource_providers.c.generation))}
        self.assertEqual({GPU_A: 8, GPU_B: 4}, generations)


class TestConcurrentProviderClaimsSQLite(ConcurrentProviderClaims, base.TestCase):
    pass


class TestConcurrentProviderClaimsPostgreSQL(ConcurrentProviderClaims, base.TestCase):

    def make_url(self):
        databases.use_postgresql(self)
        return self.useFixture(databases.PostgreSQLDatabase()).url
