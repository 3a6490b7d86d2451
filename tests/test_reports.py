"""The operator reports are pure functions of the records."""

import testtools

from nova_lite import conf, reports
from nova_lite.objects import ComputeNode, Instance
from nova_lite.resources import Inventory
from nova_lite.db import ServiceRecord
from tests import base


def node(host, used_mb, total_mb=4096, reserved=512):
    return ComputeNode(
        uuid=f"uuid-{host}", host=host, nodename=host, generation=3,
        inventories={"MEMORY_MB": Inventory(total=total_mb, reserved=reserved),
                     "VCPU": Inventory(total=4, allocation_ratio=4)},
        usage={"MEMORY_MB": used_mb, "VCPU": 1})


class TestReports(testtools.TestCase):

    def test_node_over_capacity_shows_zero_free_and_the_excess(self):
        shrunk = node("h1", used_mb=5000)
        lines = {line.resource_class: line for line in reports.resource_lines(
            shrunk, conf.Settings())}
        mem = lines["MEMORY_MB"]
        self.assertEqual((4096, 512, 3584, 5000, 0, 1416, 512),
                         (mem.total, mem.reserved, mem.capacity, mem.used, mem.free, mem.over,
                          mem.configured_reserved))
        stats = reports.hypervisor_stats([shrunk, node("h2", used_mb=1000)], [])
        self.assertEqual((0 + 2584, 1416, 2, 32), (stats.free_ram_mb, stats.memory_mb_over,
                                                   stats.count, stats.vcpus))

    def test_rows_state_and_running_vms(self):
        services = [ServiceRecord("h1", "nova-lite-compute", 0.0, 100.0, 1, False),
                    ServiceRecord("h2", "nova-lite-compute", 0.0, 100.0, 1, True, "maint")]
        live = base.instance(host="h1", node="h1")
        gone = base.instance(host="h1", node="h1", vm_state="deleted")
        rows = reports.hypervisor_rows([node("h1", 10), node("h2", 10), node("h3", 10)],
                                       services, [live, gone], service_down_time=60, now=130)
        self.assertEqual([("up", "enabled", 1), ("up", "disabled", 0), ("down", "disabled", 0)],
                         [(r.state, r.status, r.running_vms) for r in rows])
        rows = reports.hypervisor_rows([node("h1", 10)], services, [], 60, now=1000)
        self.assertEqual("down", rows[0].state)

    def test_host_describe_rows(self):
        insts = [Instance(uuid=f"i{n}", flavor=base.flavor(memory_mb=256 * n, root_gb=n),
                          project_id=p, host="h1", node="h1")
                 for n, p in ((1, "b"), (2, "a"), (3, "a"))]
        insts.append(base.instance(host="h1", node="h1", vm_state="deleted"))
        rows = reports.host_describe("h1", [node("h1", 1536), node("h2", 99)], insts)
        self.assertEqual([("(total)", 4096), ("(used_now)", 512 + 1536), ("(used_max)", 1536),
                          ("a", 1280), ("b", 256)], [(r.project, r.memory_mb) for r in rows])
        self.assertEqual(5, rows[3].disk_gb)
