"""nova_lite.audit: hypervisor view vs tracked view vs records, on real trackers."""

import json

import attrs

from nova_lite import audit
from nova_lite.exception import NodeNotFound
from nova_lite.virt import driver as driver_api
from nova_lite.virt.fake import FakeDriver
from tests import base


def kinds(report):
    """``{(kind, uuid)}`` of every difference in a HostAudit."""
    return {(d.kind, d.uuid) for d in report.all_differences()}


class TestAudit(base.TestCase):

    def spawn_claimed(self, driver, rt, nodename=None, **flavor_kw):
        nodename = nodename or self.host
        claim = rt.instance_claim(base.instance(base.flavor(**flavor_kw)), nodename)
        with claim:
            driver.spawn(claim.instance)
        return claim.instance

    def test_consistent_host(self):
        driver, rt = self.make_tracker()
        inst = self.spawn_claimed(driver, rt)
        report = audit.audit_host(rt)
        self.assertTrue(report.consistent, report)
        self.assertEqual((), report.all_differences())
        (node,) = report.nodes
        self.assertEqual((inst.uuid,), node.guests)
        rows = {r.resource_class: r for r in node.resources}
        self.assertEqual((1, 1, 1), (rows["VCPU"].hypervisor, rows["VCPU"].tracked,
                                     rows["VCPU"].records))
        self.assertEqual("ok", rows["MEMORY_MB"].status)

    def test_audit_only_reads(self):
        driver, rt = self.make_tracker()
        rt.instance_claim(base.instance(), self.host)    # a record without a guest
        before = rt.store.get_compute_node(self.host, self.host)
        allocations = rt.store.list_allocations()
        audit.audit_host(rt)
        after = rt.store.get_compute_node(self.host, self.host)
        self.assertEqual(before.generation, after.generation)
        self.assertEqual(allocations, rt.store.list_allocations())

    def test_guest_without_record_is_named(self):
        driver, rt = self.make_tracker()
        ghost = base.instance(node=self.host)
        driver.spawn(ghost)
        report = audit.audit_host(rt)
        self.assertFalse(report.consistent)
        (diff,) = report.differences
        self.assertEqual((audit.GUEST_WITHOUT_RECORD, ghost.uuid, self.host),
                         (diff.kind, diff.uuid, diff.nodename))
        self.assertIn("no instance record exists", diff.detail)
        rows = {r.resource_class: r for r in report.nodes[0].resources}
        self.assertEqual("hypervisor differs", rows["VCPU"].status)

    def test_guest_of_deleted_record(self):
        driver, rt = self.make_tracker()
        inst = self.spawn_claimed(driver, rt)
        rt.update_usage(attrs.evolve(inst, vm_state="deleted"))   # guest left behind
        report = audit.audit_host(rt)
        self.assertEqual({(audit.GUEST_WITHOUT_RECORD, inst.uuid)}, kinds(report))
        self.assertIn("deleted", report.differences[0].detail)

    def test_guests_of_many_nodes_have_no_node(self):
        driver, rt = self.make_tracker("fake.multinode")
        ghost = base.instance(node=f"{self.host}-node1")
        driver.spawn(ghost)
        (diff,) = audit.audit_host(rt).differences
        self.assertEqual((ghost.uuid, None), (diff.uuid, diff.nodename))

    def test_record_without_guest_is_named(self):
        driver, rt = self.make_tracker()
        claim = rt.instance_claim(base.instance(), self.host)
        report = audit.audit_host(rt)
        self.assertEqual({(audit.RECORD_WITHOUT_GUEST, claim.instance.uuid)}, kinds(report))
        (diff,) = report.nodes[0].differences
        self.assertEqual(self.host, diff.nodename)
        self.assertIn("building", diff.detail)
        # the accounting itself agrees: tracked == records
        self.assertTrue(all(r.tracked_matches_records for r in report.nodes[0].resources))

    def test_allocation_without_record_is_named(self):
        driver, rt = self.make_tracker()
        inst = self.spawn_claimed(driver, rt)
        driver.destroy(inst)
        # The allocation leaks.
        base.write_instance_row(rt.store, attrs.evolve(inst, vm_state="deleted"))
        report = audit.audit_host(rt)
        self.assertEqual({(audit.ALLOCATION_WITHOUT_RECORD, inst.uuid)}, kinds(report))
        rows = {r.resource_class: r for r in report.nodes[0].resources}
        self.assertEqual((1, 0, "differs"), (rows["VCPU"].tracked, rows["VCPU"].records,
                                             rows["VCPU"].status))
        self.assertIn("deleted", report.nodes[0].differences[0].detail)
        # the periodic audit repairs it; the views then agree
        rt.update_available_resource()
        self.assertTrue(audit.audit_host(rt).consistent)

    def test_record_without_allocation_is_named(self):
        driver, rt = self.make_tracker()
        inst = base.instance(host=self.host, node=self.host, vm_state="active")
        base.write_instance_row(rt.store, inst)
        driver.spawn(inst)
        report = audit.audit_host(rt)
        self.assertEqual({(audit.RECORD_WITHOUT_ALLOCATION, inst.uuid)}, kinds(report))
        rt.update_available_resource()    # rebuilds it from the record
        self.assertTrue(audit.audit_host(rt).consistent)

    def test_allocation_mismatch_is_named(self):
        driver, rt = self.make_tracker()
        inst = self.spawn_claimed(driver, rt)
        base.write_instance_row(rt.store, attrs.evolve(inst, flavor=base.flavor(vcpus=2)))
        report = audit.audit_host(rt)
        self.assertEqual({(audit.ALLOCATION_MISMATCH, inst.uuid)}, kinds(report))
        self.assertIn("VCPU=2", report.nodes[0].differences[0].detail)

    def test_resize_in_progress_is_consistent(self):
        driver, rt = self.make_tracker()
        inst = self.spawn_claimed(driver, rt)
        claim = rt.resize_claim(rt.store.get_instance(inst.uuid), base.flavor(vcpus=2),
                                self.host)
        report = audit.audit_host(rt)
        self.assertTrue(report.consistent, report.all_differences())
        rows = {r.resource_class: r for r in report.nodes[0].resources}
        self.assertEqual(3, rows["VCPU"].records)
        self.assertIsNotNone(claim.migration)

    def test_resize_of_pinned_instance_is_consistent(self):
        driver, rt = self.make_pinning_tracker()
        claim = rt.instance_claim(base.instance(numa_topology=base.dedicated_request()),
                                  self.host)
        driver.spawn(claim.instance)
        rt.resize_claim(rt.store.get_instance(claim.instance.uuid),
                        base.flavor(name="m1.bigger", memory_mb=1024), self.host)
        report = audit.audit_host(rt)
        self.assertTrue(report.consistent, report.all_differences())
        rows = {r.resource_class: r for r in report.nodes[0].resources}
        self.assertEqual(2, rows["PCPU"].records)   # the migration asks for PCPU too

    def test_orphan_and_unrecorded_nodes(self):
        driver, rt = self.make_tracker("fake.multinode")
        driver.set_nodes([f"{self.host}-node0", f"{self.host}-new"])
        report = audit.audit_host(rt)
        self.assertEqual({(audit.NODE_NOT_REPORTED, f"{self.host}-node1"),
                          (audit.NODE_NOT_RECORDED, f"{self.host}-new")}, kinds(report))
        new = [n for n in report.nodes if n.nodename == f"{self.host}-new"][0]
        self.assertIsNone(new.node_uuid)
        self.assertIsNone(new.resources[0].tracked)

    def test_failed_report_is_named(self):
        driver, rt = self.make_tracker("fake.multinode")
        driver.inject_fault(f"{self.host}-node1", exception=RuntimeError("hypervisor gone"))
        report = audit.audit_host(rt)
        self.assertEqual({(audit.NODE_REPORT_FAILED, f"{self.host}-node1")}, kinds(report))
        self.assertIn("hypervisor gone", report.all_differences()[0].detail)
        ok = [n for n in report.nodes if n.nodename == f"{self.host}-node0"][0]
        self.assertTrue(ok.consistent)

    def test_one_node(self):
        driver, rt = self.make_tracker("fake.multinode")
        report = audit.audit_host(rt, nodename=f"{self.host}-node1")
        self.assertEqual([f"{self.host}-node1"], [n.nodename for n in report.nodes])
        self.assertRaises(NodeNotFound, audit.audit_host, rt, nodename="ghost")

    def test_driver_without_guest_listing(self):
        class NoLifecycle(FakeDriver):
            capabilities = driver_api.Capabilities()

            def list_instances(self):
                raise AssertionError("must not be called")

        settings = self.settings(reserved_host_memory_mb=0)
        drv = NoLifecycle(settings=settings)
        drv.init_host(self.host)
        from nova_lite.compute.resource_tracker import ResourceTracker
        rt = ResourceTracker(self.host, drv, store=self.sqlite_store(), settings=settings)
        rt.update_available_resource()
        rt.instance_claim(base.instance(), self.host)
        report = audit.audit_host(rt)
        self.assertTrue(report.consistent)
        self.assertFalse(report.guests_listed)
        self.assertIn("supports_lifecycle", report.note)
        self.assertIsNone(report.nodes[0].guests)

    def test_to_dict_is_json(self):
        driver, rt = self.make_tracker()
        rt.instance_claim(base.instance(), self.host)
        data = json.loads(json.dumps(audit.audit_host(rt).to_dict()))
        self.assertFalse(data["consistent"])
        self.assertFalse(data["nodes"][0]["consistent"])
        # claimed but not spawned: the hypervisor does not count it yet
        self.assertEqual({"hypervisor differs"},
                         {r["status"] for r in data["nodes"][0]["resources"]})
        self.assertEqual("missing_guest", data["nodes"][0]["differences"][0]["kind"])

    def test_difference_kind_is_validated(self):
        self.assertRaises(ValueError, audit.Difference, "no_such_kind", "x")
