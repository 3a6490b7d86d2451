"""Prometheus metrics: scraped over real HTTP from real stores, parsed by prometheus_client.

Capacity is floor((total - reserved) x ratio) exactly (a ratio where binary
floats would round wrong), free is never negative on an over-committed
node, claim counters move with the claims the tracker decides, audits are
timed, services are up or down, the textfile is written atomically, and
the compute service serves them when ``[metrics] port`` is set.
"""

import math
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from fractions import Fraction

import testtools
from prometheus_client.parser import text_string_to_metric_families

from nova_lite import audit, metrics
from nova_lite.compute.manager import ComputeService
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.exception import ComputeResourcesUnavailable
from nova_lite.virt import loader
from tests import base


def parse(text):
    """``{(name, frozenset(labels.items())): value}`` of every sample."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(port, path="/metrics"):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        assert answer.status == 200
        return answer.read().decode()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MetricsTests:
    """Mixed into a TestCase with make_store()."""

    def serve(self, store, settings):
        server = metrics.MetricsServer(metrics.Exporter(store, settings)).start()
        self.addCleanup(server.stop)
        return server

    def tracker(self, settings, **driver_kwargs):
        driver = loader.load_driver("fake", settings=settings, **driver_kwargs)
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=self.make_store(), settings=settings)
        rt.update_available_resource()
        return rt

    def test_capacity_is_floor_of_total_minus_reserved_times_ratio(self):
        # 100 MiB x 0.29 is 29 exactly; in binary floats it is 28.999999999999996.
        settings = self.settings(reserved_host_memory_mb=512, ram_allocation_ratio=0.29,
                                 cpu_allocation_ratio=1.5, reserved_host_cpus=1)
        rt = self.tracker(settings, vcpus=7, memory_mb=612, local_gb=10)
        rt.store.heartbeat(self.host, COMPUTE_BINARY)
        samples = parse(scrape(self.serve(rt.store, settings).port))
        labels = dict(host=self.host, node=self.host)
        self.assertEqual(29, value(samples, "nova_lite_resource_capacity",
                                   resource_class="MEMORY_MB", **labels))
        self.assertEqual(9, value(samples, "nova_lite_resource_capacity",
                                  resource_class="VCPU", **labels))
        node = rt.store.get_compute_node(self.host, self.host)
        for rc, inv in node.inventories.items():
            got = {k: value(samples, f"nova_lite_resource_{k}", resource_class=rc, **labels)
                   for k in ("total", "reserved", "allocation_ratio", "capacity", "free")}
            exact = math.floor((inv.total - inv.reserved) * Fraction(inv.allocation_ratio))
            self.assertEqual(exact, got["capacity"], rc)
            self.assertEqual((inv.total, inv.reserved), (got["total"], got["reserved"]), rc)
            self.assertEqual(float(inv.allocation_ratio), got["allocation_ratio"], rc)
            self.assertEqual(exact, got["free"], rc)
        self.assertEqual(1, value(samples, "nova_lite_service_up", host=self.host,
                                  binary=COMPUTE_BINARY))
        self.assertEqual(1, value(samples, "nova_lite_compute_nodes"))

    def test_free_never_negative_on_an_over_committed_node(self):
        settings = self.settings(reserved_host_memory_mb=0, cpu_allocation_ratio=4.0)
        rt = self.tracker(settings, vcpus=2, memory_mb=8192, local_gb=100)
        for _ in range(6):
            rt.instance_claim(base.instance(base.flavor(vcpus=1, memory_mb=256)), self.host)
        # The ratio is lowered under the six admitted claims: capacity 2, used 6.
        lowered = self.settings(reserved_host_memory_mb=0, cpu_allocation_ratio=1.0)
        driver = loader.load_driver("fake", settings=lowered, vcpus=2, memory_mb=8192,
                                    local_gb=100)
        driver.init_host(self.host)
        ResourceTracker(self.host, driver, store=rt.store,
                        settings=lowered).update_available_resource()
        samples = parse(scrape(self.serve(rt.store, lowered).port))
        labels = dict(host=self.host, node=self.host, resource_class="VCPU")
        self.assertEqual((2, 6, 0, 4), tuple(value(samples, f"nova_lite_resource_{k}", **labels)
                                             for k in ("capacity", "used", "free", "over")))
        negative = [k for k, v in samples.items() if k[0].endswith("_free") and v < 0]
        self.assertEqual([], negative)

    def test_claim_counters_move(self):
        settings = self.settings(reserved_host_memory_mb=0)
        rt = self.tracker(settings, vcpus=4, memory_mb=2048, local_gb=100)
        server = self.serve(rt.store, settings)
        before = parse(scrape(server.port))
        rt.instance_claim(base.instance(base.flavor(memory_mb=512)), self.host)
        rt.instance_claims([base.instance(base.flavor(memory_mb=256)) for _ in range(2)],
                           self.host)
        self.assertRaises(ComputeResourcesUnavailable, rt.instance_claim,
                          base.instance(base.flavor(memory_mb=4096, root_gb=500)), self.host)
        after = parse(scrape(server.port))

        def moved(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)
        self.assertEqual(3, moved("nova_lite_claims_total", result="admitted", reason="none"))
        self.assertEqual(1, moved("nova_lite_claims_total", result="rejected",
                                  reason="MEMORY_MB"))
        self.assertEqual(1, moved("nova_lite_claim_rejection_reasons_total",
                                  reason="MEMORY_MB"))
        self.assertEqual(1, moved("nova_lite_claim_rejection_reasons_total",
                                  reason="DISK_GB"))
        self.assertEqual(1024, value(after, "nova_lite_resource_used", host=self.host,
                                     node=self.host, resource_class="MEMORY_MB"))

    def test_audits_are_timed_and_their_differences_counted(self):
        settings = self.settings(reserved_host_memory_mb=0)
        rt = self.tracker(settings)
        server = self.serve(rt.store, settings)
        before = parse(scrape(server.port))
        rt.update_available_resource()
        rt.instance_claim(base.instance(), self.host)   # claimed, never spawned
        audit.audit_host(rt)
        after = parse(scrape(server.port))
        for kind in (metrics.RESOURCE_AUDIT, metrics.VIEWS_AUDIT):
            self.assertGreaterEqual(
                value(after, "nova_lite_audit_duration_seconds_count", audit=kind) -
                value(before, "nova_lite_audit_duration_seconds_count", audit=kind), 1, kind)
        self.assertEqual(1, value(after, "nova_lite_audit_differences", host=self.host,
                                  kind=audit.RECORD_WITHOUT_GUEST))
        self.assertEqual(0, value(after, "nova_lite_audit_differences", host=self.host,
                                  kind=audit.GUEST_WITHOUT_RECORD))

    def test_service_down_after_service_down_time(self):
        settings = self.settings(reserved_host_memory_mb=0, service_down_time=1e-3)
        rt = self.tracker(settings)
        rt.store.heartbeat(self.host, COMPUTE_BINARY)
        samples = parse(metrics.render(metrics.registry(rt.store, settings)).decode())
        self.assertEqual(0, value(samples, "nova_lite_service_up", host=self.host,
                                  binary=COMPUTE_BINARY))
        self.assertEqual(1, value(samples, "nova_lite_service_enabled", host=self.host,
                                  binary=COMPUTE_BINARY))


    def test_exporter_writes_what_prometheus_client_writes(self):
        settings = self.settings(reserved_host_memory_mb=0, ram_allocation_ratio=1.5)
        store = self.make_store()
        driver = loader.load_driver("fake.multinode", settings=settings,
                                    nodes=["n-1", 'odd"name\\x', "n-2"])
        driver.init_host(self.host)
        rt = ResourceTracker(self.host, driver, store=store, settings=settings)
        rt.update_available_resource()
        rt.instance_claim(base.instance(base.flavor(vcpus=3, memory_mb=700)), "n-2")
        store.heartbeat(self.host, COMPUTE_BINARY)
        exporter = metrics.Exporter(store, settings)
        reference = metrics.registry(store, settings)

        def without_process(text):
            # the process metrics move between the two renders (other tests' claims)
            families = text.split("# HELP ")
            return [f for f in families if not f.startswith(("nova_lite_claim",
                                                             "nova_lite_audit",
                                                             "nova_lite_leak"))]
        for _ in range(2):   # cold, then from the per-node cache
            self.assertEqual(without_process(metrics.render(reference).decode()),
                             without_process(exporter.render().decode()))
            rt.instance_claim(base.instance(base.flavor(vcpus=1, memory_mb=100)), "n-1")
        samples = parse(exporter.render().decode())
        self.assertEqual(700 + 2 * 100, value(samples, "nova_lite_resource_used", host=self.host,
                                    node="n-1", resource_class="MEMORY_MB") +
                         value(samples, "nova_lite_resource_used", host=self.host,
                               node="n-2", resource_class="MEMORY_MB"))


class TestMetricsSQLite(base.OnSQLiteFile, MetricsTests, base.TestCase):
    pass


class TestMetricsPostgreSQL(base.OnPostgreSQL, MetricsTests, base.TestCase):
    pass


class TestReasonLabels(testtools.TestCase):

    def test_labels_are_a_small_fixed_set(self):
        cases = {"Free memory 8192.00 MB < requested 16384 MB": "MEMORY_MB",
                 "Free disk 45.00 GB < requested 50 GB": "DISK_GB",
                 "Free vcpu 1.00 VCPU < requested 2 VCPU": "VCPU",
                 "CUSTOM_GPU: amount 3 is not a multiple of step_size 2": "CUSTOM_GPU",
                 "Node n1 is owned by host h2, not h1": "node_owner",
                 "Requested instance NUMA topology cannot fit": "numa",
                 "no PCI devices left": "pci", "something else": "other"}
        for reason, label in cases.items():
            self.assertEqual(label, metrics.reason_label(reason), reason)


class TestTextfileAndServices(base.TestCase):

    def test_textfile_is_written_atomically_and_parses(self):
        settings = self.settings(reserved_host_memory_mb=0)
        _, rt = self.make_tracker(settings=settings)
        path = os.path.join(self.state_path, "nova_lite.prom")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("old\n")
        metrics.write_textfile(path, metrics.Exporter(rt.store, settings))
        with open(path, encoding="utf-8") as handle:
            samples = parse(handle.read())
        self.assertEqual(["nova_lite.prom"], sorted(os.listdir(self.state_path)))
        self.assertGreater(value(samples, "nova_lite_resource_capacity", host=self.host,
                                 node=self.host, resource_class="VCPU"), 0)

    def test_compute_service_serves_metrics_when_configured(self):
        port = free_port()
        settings = self.settings(reserved_host_memory_mb=0, metrics_port=port)
        driver = loader.load_driver("fake", settings=settings)
        service = ComputeService(self.host, driver, store=self.sqlite_store(),
                                 settings=settings)
        service.run_once()
        server = service.start_metrics()
        self.addCleanup(server.stop)
        samples = parse(scrape(port))
        self.assertEqual(1, value(samples, "nova_lite_service_up", host=self.host,
                                  binary=COMPUTE_BINARY))

    def test_off_by_default(self):
        self.assertEqual(0, self.settings().metrics_port)
        driver = loader.load_driver("fake", settings=self.settings())
        service = ComputeService(self.host, driver, store=self.sqlite_store(),
                                 settings=self.settings())
        self.assertIsNone(service.start_metrics())


class TestCommands(base.TestCase):
    """``nova-lite metrics serve|textfile`` as real processes."""

    def nova_lite(self, *argv):
        return [sys.executable, "-m", "nova_lite.cli.main", "--state-path", self.state_path,
                *argv]

    def setUp(self):
        super().setUp()
        subprocess.run(self.nova_lite("compute", "--once"), check=True, capture_output=True,
                       timeout=120)

    def test_textfile_command(self):
        path = os.path.join(self.state_path, "out.prom")
        subprocess.run(self.nova_lite("metrics", "textfile", path), check=True,
                       capture_output=True, timeout=120)
        with open(path, encoding="utf-8") as handle:
            self.assertIn("nova_lite_resource_capacity", handle.read())
        bad = subprocess.run(self.nova_lite("metrics", "textfile", "/nonexistent/dir/x.prom"),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(2, bad.returncode, bad.stderr)

    def test_serve_command_until_sigterm(self):
        proc = subprocess.Popen(self.nova_lite("metrics", "serve", "--port", "0"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        self.assertIn("nova_lite_resource_capacity", scrape(port))
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(0, proc.wait(timeout=30), proc.stderr.read())
