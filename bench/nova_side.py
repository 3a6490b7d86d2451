"""OpenStack Nova's own ResourceTracker on nova-lite's bench scenarios.

Run by :mod:`bench.nova_compare` with the interpreter of the Nova virtualenv
(``tools/nova-venv.sh``), never imported by nova-lite: it imports Nova
and the standard library only.

    .venv-nova/bin/python -P bench/nova_side.py \\
        '{"scenario": "claims", "size": 1000, "mode": "sqlite"}'

prints one JSON object: the scenario's figure, ``counted`` (the vCPUs the
node uses after it, or the nodes tracked) and ``nova`` (Nova's version).
Scenarios, each on Nova's ``fake.FakeDriver``
(1000 vCPU, 800,000 MB, 600,000 GB per node, as nova-lite's ``fake``):

- ``claims``: ``size`` instance claims of 1 vCPU / 512 MB / 1 GB on one
  node, one after another (``instance_claim``); claims per second.
- ``audit``: one node holding ``size`` instances, all running on the
  driver; after two warm-up passes, ``update_available_resource`` timed
  ``repeat`` times (the median, in ms).
- ``fleet``: ``size`` nodes on one host; after the first pass, each steady
  pass (``update_available_resource`` of every node, as Nova's compute
  manager does) timed ``repeat`` times (the median, in ms).

Modes: ``sqlite``, Nova's main database on a SQLite file of its own
(``nova-manage db sync``'s migrations); ``nodb``, no database at all:
every object method that would reach one is replaced by an in-memory
answer, so what is left is Nova's own Python.  Placement is out of both:
the report client answers from a provider tree in memory and sends
nothing, and notifications go to oslo.messaging's ``noop`` driver.
"""

import itertools
import json
import logging
import statistics
import sys
import tempfile
import time
import uuid
from unittest import mock

HOST = "nova-bench-host"
CPU_RATIO, RAM_RATIO = 16.0, 4.0   # as bench.audit's, so 5,000 instances fit


def configure(mode, workdir):
    """Nova's configuration, objects and notifier; the database if ``mode`` has one."""
    import oslo_messaging as messaging

    import nova.conf
    from nova import objects, rpc
    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[])
    conf.set_override("host", HOST)
    conf.set_override("state_path", workdir)
    conf.set_override("compute_driver", "fake.FakeDriver")
    conf.set_override("cpu_allocation_ratio", CPU_RATIO)
    conf.set_override("ram_allocation_ratio", RAM_RATIO)
    if mode == "sqlite":
        conf.set_override("connection", f"sqlite:///{workdir}/nova.db", group="database")
    objects.register_all()
    transport = messaging.get_notification_transport(conf, url="fake:/")
    rpc.LEGACY_NOTIFIER = messaging.Notifier(transport, driver="noop")
    rpc.NOTIFIER = messaging.Notifier(transport, driver="noop")
    if mode == "sqlite":
        from nova.db import migration
        migration.db_sync(database="main")


def without_database(stack):
    """Answer in memory every object call the scenarios make of a database."""
    from nova import exception, objects
    ids = itertools.count(1)

    def create(node):
        """What ComputeNode.create leaves set: its id, and no PCI pools of its own."""
        node.id = next(ids)
        if not node.obj_attr_is_set("pci_device_pools"):
            node.pci_device_pools = None
    answers = {
        "nova.objects.InstanceList.get_by_host_and_node": objects.InstanceList(objects=[]),
        "nova.objects.MigrationList.get_in_progress_and_error":
            objects.MigrationList(objects=[]),
        "nova.objects.BlockDeviceMappingList.get_by_instance_uuid":
            objects.BlockDeviceMappingList(objects=[]),
        "nova.objects.PciDeviceList.get_by_compute_node": objects.PciDeviceList(objects=[]),
    }
    patches = [mock.patch(target, return_value=value) for target, value in answers.items()]
    patches += [
        mock.patch("nova.objects.Instance.save"),
        mock.patch("nova.objects.ComputeNode.save"),
        mock.patch.object(objects.ComputeNode, "create", autospec=True, side_effect=create),
        mock.patch("nova.objects.ComputeNode.get_by_uuid",
                   side_effect=exception.ComputeHostNotFound(host=HOST)),
    ]
    for patch in patches:
        stack.append(patch)
        patch.start()


def tracker(mode, nodes):
    """(context, ResourceTracker, FakeDriver) of ``HOST`` with ``nodes``."""
    from nova import context as nova_context
    from nova import objects
    from nova.compute import provider_tree, resource_tracker
    from nova.scheduler.client import report
    from nova.virt import fake
    ctxt = nova_context.get_admin_context()
    driver = fake.FakeDriver(virtapi=None)
    driver._set_nodes(list(nodes))

    def tree(context, rp_uuid, name=None, parent_provider_uuid=None):
        found = provider_tree.ProviderTree()
        found.new_root(name, rp_uuid)
        return found
    client = mock.MagicMock(spec=report.SchedulerReportClient)
    client.get_provider_tree_and_ensure_root.side_effect = tree
    client.get_allocations_for_resource_provider.return_value = mock.Mock(allocations={})
    rt = resource_tracker.ResourceTracker(HOST, driver, reportclient=client)
    service = objects.Service(ctxt, host=HOST, binary="nova-compute", topic="compute")
    if mode == "sqlite":
        service.create()
    else:
        service.id, service.disabled = 1, False
        patch = mock.patch("nova.objects.Service.get_by_compute_host", return_value=service)
        patch.start()
    rt.set_service_ref(service)
    return ctxt, rt, driver


def new_instance(ctxt, mode, node=None):
    """A new Instance of 1 vCPU / 512 MB / 1 GB (recorded if ``mode`` has a
    database); on ``node`` (a ComputeNode) if given, else not yet placed."""
    from nova import objects
    flavor = objects.Flavor(id=1, flavorid="1", name="bench.1c512m1g", vcpus=1,
                            memory_mb=512, root_gb=1, ephemeral_gb=0, swap=0,
                            rxtx_factor=1.0, vcpu_weight=0, disabled=False, is_public=True,
                            extra_specs={}, description=None)
    instance = objects.Instance(
        ctxt, uuid=str(uuid.uuid4()), project_id="bench", user_id="bench",
        vm_state="building" if node is None else "active",
        task_state="scheduling" if node is None else None, power_state=0, flavor=flavor,
        old_flavor=None, new_flavor=None, vcpus=1, memory_mb=512, root_gb=1,
        ephemeral_gb=0, numa_topology=None,
        pci_requests=objects.InstancePCIRequests(requests=[]), system_metadata={},
        metadata={}, resources=None, instance_type_id=1, image_ref="", os_type=None,
        launched_on=None, availability_zone=None,
        host=None if node is None else HOST,
        node=None if node is None else node.hypervisor_hostname,
        compute_id=None if node is None else node.id)
    if mode == "sqlite":
        instance.create()
    return instance


def timed(fn, repeat):
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return round(statistics.median(samples) * 1000, 3)


SCENARIOS, MODES = ("claims", "audit", "fleet"), ("sqlite", "nodb")


def run(case, workdir):
    mode, size, scenario = case["mode"], case["size"], case["scenario"]
    if scenario not in SCENARIOS or mode not in MODES:
        raise SystemExit(f"unknown scenario {scenario!r} or mode {mode!r}: "
                         f"{', '.join(SCENARIOS)}; {', '.join(MODES)}")
    configure(mode, workdir)
    patches = []
    if mode == "nodb":
        without_database(patches)
    if scenario == "fleet":
        nodes = [f"node-{i:06d}" for i in range(size)]
    else:
        nodes = [HOST]
    ctxt, rt, driver = tracker(mode, nodes)

    def audit_every_node(startup=False):
        for node in nodes:
            rt.update_available_resource(ctxt, node, startup=startup)
    audit_every_node(startup=True)
    node = rt.compute_nodes[nodes[0]]
    if scenario == "claims":
        instances = [new_instance(ctxt, mode) for _ in range(size)]
        allocations = {node.uuid: {"resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}}
        start = time.perf_counter()
        for instance in instances:
            rt.instance_claim(ctxt, instance, node.hypervisor_hostname, allocations)
        elapsed = time.perf_counter() - start
        return {"claims_per_s": round(size / elapsed, 1),
                "counted": rt.compute_nodes[nodes[0]].vcpus_used}
    if scenario == "audit":
        from nova.compute import power_state
        from nova.virt import fake
        instances = [new_instance(ctxt, mode, node) for _ in range(size)]
        if mode == "nodb":
            from nova import objects
            mock.patch("nova.objects.InstanceList.get_by_host_and_node",
                       return_value=objects.InstanceList(objects=instances)).start()
        for instance in instances:
            driver.instances[instance.uuid] = fake.FakeInstance(
                instance.uuid, power_state.RUNNING, instance.uuid)
        audit_every_node()
        audit_every_node()
        median_ms = timed(audit_every_node, case.get("repeat", 5))
        return {"audit_ms": median_ms, "counted": rt.compute_nodes[nodes[0]].vcpus_used}
    audit_every_node()   # fleet: one warm-up pass after the first
    return {"steady_pass_ms": timed(audit_every_node, case.get("repeat", 3)),
            "counted": len(rt.compute_nodes)}


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    case = json.loads(argv[1])
    logging.disable(logging.WARNING)   # Nova warns of the fake driver and the test config
    import nova.version
    with tempfile.TemporaryDirectory(prefix="nova-bench-") as workdir:
        figures = run(case, workdir)
    figures["nova"] = nova.version.version_string()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
