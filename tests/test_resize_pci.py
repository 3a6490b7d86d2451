"""A resize claims the new flavor's PCI requests on the destination, as Nova does.

h1 and h2 each run the fake driver reporting a GPU (10de:1db4) and a PF
with one VF; ``[pci] alias`` names them ``gpu`` and ``vf``.  Confirm makes
the new requests (and devices) the instance's and frees the old devices;
revert keeps the old ones.  On SQLite files and PostgreSQL.
"""

import attrs

from nova_lite import leaks, work
from nova_lite.compute import api, moves
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.exception import InvalidInput
from nova_lite.objects import Flavor, PciRequest
from nova_lite.scheduler import NoValidHost, RequestSpec
from tests import base
from nova_lite.virt import loader
from tests.reliability.base import dump
from tests.test_heal import age_migration
from tests.test_moves import SMALL, Hosts
from tests.test_pci_alias import ALIASES, DEVICES

GPU_ADDR, VF_ADDR = "0000:81:00.0", "0000:05:10.0"
GPU_SMALL = Flavor(name="gpu.small", vcpus=1, memory_mb=512, root_gb=1,
                   extra_specs={"pci_passthrough:alias": "gpu:1"})
VF_BIG = Flavor(name="vf.big", vcpus=2, memory_mb=1024, root_gb=1,
                extra_specs={"pci_passthrough:alias": "vf:1"})
PLAIN_BIG = Flavor(name="m1.big", vcpus=2, memory_mb=1024, root_gb=1)


class ResizePciTests(Hosts):

    def add_host(self, host, settings=None, **driver_kwargs):
        self.settings_ = self.settings(reserved_host_memory_mb=0, work_poll_interval=0.02,
                                       pci_alias=ALIASES)
        return super().add_host(host, self.settings_, pci_devices=DEVICES, **driver_kwargs)

    def built(self, flavor, host):
        spec = api.with_alias_requests(RequestSpec(flavor, project_id="demo",
                                                   force_hosts=(host,)), self.settings_)
        result = api.build(self.store, spec, settings=self.settings_)
        self.drive()
        inst = self.store.get_instance(result.instances[0].uuid)
        self.assertEqual(("active", host), (inst.vm_state, inst.host))
        return inst

    def in_use(self, host):
        return set(self.services[host].tracker.get_node(host).pci_in_use)

    def resized(self, inst, flavor):
        task = moves.resize(self.store, inst, flavor, settings=self.settings_)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        return self.migration(inst.uuid)

    def test_resize_to_a_pci_flavor_claims_then_confirm_keeps(self):
        inst = self.built(SMALL, "h1")
        self.assertEqual((), inst.pci_requests)
        mig = self.resized(inst, GPU_SMALL)
        self.assertEqual("h2", mig.dest_compute)
        self.assertEqual(["gpu"], [r.alias_name for r in mig.new_pci_requests])
        self.assertEqual({GPU_ADDR}, self.in_use("h2"))
        (held,) = [a for a in self.store.list_allocations(instance_uuid=inst.uuid)
                   if a.consumer_uuid == mig.uuid]
        self.assertEqual((GPU_ADDR,), held.pci_devices)
        # Waiting: the instance's own record is unchanged.
        self.assertEqual((), self.store.get_instance(inst.uuid).pci_requests)
        self.assertClean()
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("h2", GPU_SMALL, (GPU_ADDR,)),
                         (now.host, now.flavor, now.pci_devices))
        self.assertEqual(mig.new_pci_requests, now.pci_requests)
        self.assertEqual({GPU_ADDR}, self.in_use("h2"))
        self.assertClean()

    def test_resize_away_from_pci_then_revert_keeps_the_old_devices(self):
        inst = self.built(GPU_SMALL, "h1")
        self.assertEqual({GPU_ADDR}, self.in_use("h1"))
        old_requests = inst.pci_requests
        mig = self.resized(inst, PLAIN_BIG)
        self.assertEqual((), mig.new_pci_requests)
        self.assertEqual(set(), self.in_use("h2"))
        task = moves.revert(self.store, inst)
        self.drive()
        self.assertTrue(moves.outcome(self.store, task).ok, self.kinds(task))
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(("h1", GPU_SMALL, old_requests, (GPU_ADDR,)),
                         (now.host, now.flavor, now.pci_requests, now.pci_devices))
        self.assertEqual({GPU_ADDR}, self.in_use("h1"))
        self.assertClean()
        # Resized again and confirmed: the old devices go back to h1.
        self.resized(inst, PLAIN_BIG)
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual(((), ()), (now.pci_requests, now.pci_devices))
        self.assertEqual(set(), self.in_use("h1"))
        self.assertEqual(set(), self.in_use("h2"))
        self.assertClean()

    def test_resize_to_another_alias(self):
        inst = self.built(GPU_SMALL, "h1")
        mig = self.resized(inst, VF_BIG)
        self.assertEqual({VF_ADDR}, self.in_use("h2"))
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual((["vf"], (VF_ADDR,)),
                         ([r.alias_name for r in now.pci_requests], now.pci_devices))
        self.assertEqual(mig.new_pci_requests, now.pci_requests)
        self.assertEqual(set(), self.in_use("h1"))
        self.assertClean()

    def test_no_free_device_anywhere_is_no_valid_host(self):
        self.built(GPU_SMALL, "h2")   # h2's only GPU
        inst = self.built(SMALL, "h1")
        before = dump(self.store)
        exc = self.assertRaises(NoValidHost, moves.resize, self.store, inst, GPU_SMALL,
                                settings=self.settings_)
        self.assertIn("PciPassthroughFilter removed 1 of 1 hosts", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_an_unknown_alias_changes_nothing(self):
        inst = self.built(SMALL, "h1")
        before = dump(self.store)
        fpga = attrs.evolve(GPU_SMALL, name="fpga", extra_specs={
            "pci_passthrough:alias": "fpga:1"})
        exc = self.assertRaises(InvalidInput, moves.resize, self.store, inst, fpga,
                                settings=self.settings_)
        self.assertIn("no PCI alias 'fpga'", str(exc))
        self.assertEqual(before, dump(self.store))

    def test_requests_from_no_alias_are_kept(self):
        # A request given by the caller (no alias) stays, as Nova keeps a port's;
        # the old flavor's alias requests go.
        own = PciRequest(count=1, vendor_id="8086", product_id="1520", dev_type="type-VF")
        inst = attrs.evolve(self.built(GPU_SMALL, "h1"))
        with_own = attrs.evolve(inst, pci_requests=(*inst.pci_requests, own))
        self.assertEqual((own,), moves.resize_pci_requests(with_own, PLAIN_BIG,
                                                           self.settings_))
        got = moves.resize_pci_requests(with_own, VF_BIG, self.settings_)
        self.assertEqual(["vf", None], [r.alias_name for r in got])

    def test_a_migration_keeps_the_requests(self):
        inst = self.built(GPU_SMALL, "h1")
        task = moves.migrate(self.store, inst, settings=self.settings_)
        self.assertNotIn("pci_requests", task.params)
        self.drive()
        mig = self.migration(inst.uuid)
        self.assertIsNone(mig.new_pci_requests)
        self.assertEqual({GPU_ADDR}, self.in_use("h2"))
        self.drive_confirm(inst)
        now = self.store.get_instance(inst.uuid)
        self.assertEqual((inst.pci_requests, (GPU_ADDR,), "h2"),
                         (now.pci_requests, now.pci_devices, now.host))
        self.assertEqual(work.DONE, moves.outcome(self.store, task).tasks[-1].state)


class TestResizePciSQLite(ResizePciTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestResizePciPostgreSQL(ResizePciTests, base.OnPostgreSQL, base.TestCase):
    pass


class HealConfirmPciTests:
    """Heal confirming a finished resize whose source is gone gives the
    instance the requests its destination claimed for, as a confirm does."""

    host = "healhost"

    def test_heal_confirm_takes_the_moves_requests(self):
        settings = self.settings(reserved_host_memory_mb=0, migration_stuck_age=600)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=["n1", "n2"],
                                    memory_mb=4096, pci_devices=DEVICES)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=self.make_store(), settings=settings)
        rt.update_available_resource()
        gpu = PciRequest(count=1, vendor_id="10de", product_id="1db4", alias_name="gpu")
        inst = rt.instance_claim(base.instance(GPU_SMALL, pci_requests=(gpu,)), "n1").instance
        self.assertEqual((GPU_ADDR,), inst.pci_devices)
        mig = rt.resize_claim(attrs.evolve(inst, pci_requests=()), PLAIN_BIG, "n2").migration
        self.assertEqual((), rt.store.list_migrations(inst.uuid)[0].new_pci_requests)
        for status in ("migrating", "post-migrating", "finished"):
            rt.update_migration_status(mig, status)
        age_migration(rt.store, mig.uuid, 601)
        (action,) = leaks.heal(rt.store, leaks.find_leaks(rt.store, rt.settings,
                                                          host=self.host))
        self.assertEqual(leaks.APPLIED, action.outcome)
        stored = rt.store.get_instance(inst.uuid)
        self.assertEqual(("n2", PLAIN_BIG, (), ()), (stored.node, stored.flavor,
                                                    stored.pci_requests, stored.pci_devices))


class TestHealConfirmPciSQLite(HealConfirmPciTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestHealConfirmPciPostgreSQL(HealConfirmPciTests, base.OnPostgreSQL, base.TestCase):
    pass
