"""``[metrics] per_node_series``: per node up to a fleet size, per host past it; PCI gauges.

Scraped over real HTTP from real stores (SQLite files and PostgreSQL) and
parsed with prometheus_client: below ``per_node_series_max_nodes`` (auto)
every node has its capacity and PCI gauges; past it no sample carries a
node label and the per-host sums equal the sums of the per-node figures;
``always`` and ``never`` hold at any size; ``nova_lite_per_node_series``
says which; the cached text is what prometheus_client writes in both modes.
"""

import collections

import sqlalchemy as sa

from nova_lite import conf, metrics
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.exception import InvalidConfig
from nova_lite.objects import PciDevice, PciRequest
from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory
from tests import base
from tests.test_metrics import parse, scrape

#: A GPU, and a PF with one VF of the same ids.
DEVICES = (PciDevice(address="0000:81:00.0", vendor_id="10de", product_id="1db4", numa_node=0),
           PciDevice(address="0000:05:00.0", vendor_id="8086", product_id="1520",
                     dev_type="type-PF"),
           PciDevice(address="0000:05:10.0", vendor_id="8086", product_id="1520",
                     dev_type="type-VF", parent_addr="0000:05:00.0"))
VF = PciRequest(count=1, vendor_id="8086", product_id="1520", dev_type="type-VF")
#: h1's GPU: a child provider with 2 vGPUs.
GPU = ChildProvider(name="h1_pci_0000_82_00_0", inventories={"VGPU": Inventory(total=2)})
#: Nodes of the fleet: h1 has one (with the devices and the GPU), h2 three.
NODES = 4


def samples_of(samples, name):
    """``{labels (a dict's items, sorted): value}`` of every sample called ``name``."""
    return {tuple(sorted(labels)): value for (n, labels), value in samples.items()
            if n == name}


def node_families(text):
    """The families of the nodes' gauges in ``text``, HELP lines on."""
    return [f for f in text.split("# HELP ") if f.startswith((
        "nova_lite_resource_", "nova_lite_pci_", "nova_lite_host_", "nova_lite_per_node",
        "nova_lite_provider_",
        "nova_lite_compute_nodes"))]


class SeriesTests:
    """Mixed into a TestCase with make_store()."""

    def setUp(self):
        super().setUp()
        self.store = self.make_store()
        settings = self.settings(reserved_host_memory_mb=0)
        _, self.rt1 = self.make_tracker(settings=settings, store=self.store, host="h1",
                                        pci_devices=DEVICES, providers=[GPU])
        _, self.rt2 = self.make_tracker("fake.multinode", settings=settings, store=self.store,
                                        host="h2", nodes=["a", "b", "c"])
        self.rt1.instance_claim(base.instance(base.flavor(), pci_requests=(VF,)), "h1")
        self.rt1.instance_claim(base.instance(base.flavor(
            extra_specs={"resources:VGPU": "1"})), "h1")
        self.rt2.instance_claim(base.instance(base.flavor(vcpus=2, memory_mb=100)), "b")
        for host in ("h1", "h2"):
            self.store.heartbeat(host, COMPUTE_BINARY)

    def scrape(self, **options):
        settings = self.settings(**options)
        server = metrics.MetricsServer(metrics.Exporter(self.store, settings)).start()
        self.addCleanup(server.stop)
        return parse(scrape(server.port)), server

    def test_child_providers_per_node_and_per_host(self):
        samples, _ = self.scrape(metrics_per_node_series_max_nodes=NODES)
        labels = dict(host="h1", node="h1", provider=GPU.name, resource_class="VGPU")
        self.assertEqual((2, 1, 1, 0), tuple(
            samples[(f"nova_lite_provider_resource_{k}", frozenset(labels.items()))]
            for k in ("capacity", "used", "free", "over")))
        # The node's own gauges hold none of it.
        self.assertEqual({}, {k: v for k, v in samples_of(
            samples, "nova_lite_resource_used").items() if dict(k)["resource_class"] == "VGPU"})
        samples, _ = self.scrape(metrics_per_node_series_max_nodes=NODES - 1)
        self.assertEqual({(("host", "h1"), ("resource_class", "VGPU")): 1},
                         samples_of(samples, "nova_lite_host_provider_resource_used"))
        self.assertEqual({}, samples_of(samples, "nova_lite_provider_resource_used"))

    def test_per_node_up_to_the_threshold_with_pci_devices_per_kind(self):
        samples, _ = self.scrape(metrics_per_node_series_max_nodes=NODES)
        self.assertEqual(1, samples[("nova_lite_per_node_series", frozenset())])
        capacity = samples_of(samples, "nova_lite_resource_capacity")
        self.assertEqual({("h1", "h1"), ("h2", "a"), ("h2", "b"), ("h2", "c")},
                         {(dict(k)["host"], dict(k)["node"]) for k in capacity})
        self.assertEqual({}, samples_of(samples, "nova_lite_host_resource_capacity"))

        def pci(vendor, product, dev_type):
            labels = dict(host="h1", node="h1", vendor_id=vendor, product_id=product,
                          dev_type=dev_type)
            return tuple(samples[(f"nova_lite_pci_devices{suffix}",
                                  frozenset(labels.items()))]
                         for suffix in ("", "_in_use", "_free"))
        self.assertEqual((1, 0, 1), pci("10de", "1db4", "type-PCI"))
        self.assertEqual((1, 1, 0), pci("8086", "1520", "type-VF"))
        self.assertEqual((1, 0, 0), pci("8086", "1520", "type-PF"))   # its VF is in use
        self.assertEqual(3, len(samples_of(samples, "nova_lite_pci_devices")))

    def test_per_host_past_the_threshold_sums_the_per_node_figures(self):
        detailed, _ = self.scrape(metrics_per_node_series="always")
        samples, server = self.scrape(metrics_per_node_series_max_nodes=NODES - 1)
        self.assertEqual(0, samples[("nova_lite_per_node_series", frozenset())])
        self.assertFalse([key for key in samples if "node" in dict(key[1])],
                         "no sample may carry a node label per host")
        self.assertFalse([name for name, _ in samples
                          if name.startswith(("nova_lite_resource_", "nova_lite_pci_"))])
        self.assertEqual({(("host", "h1"),): 1, (("host", "h2"),): 3},
                         samples_of(samples, "nova_lite_host_compute_nodes"))
        for suffix in ("total", "reserved", "capacity", "used", "free", "over"):
            expected = collections.Counter()
            for labels, amount in samples_of(detailed, f"nova_lite_resource_{suffix}").items():
                labels = dict(labels)
                expected[(labels["host"], labels["resource_class"])] += amount
            got = {(dict(k)["host"], dict(k)["resource_class"]): v for k, v in
                   samples_of(samples, f"nova_lite_host_resource_{suffix}").items()}
            self.assertEqual(dict(expected), got, suffix)
        for suffix in ("", "_in_use", "_free"):
            per_node = {tuple(sorted((k, v) for k, v in labels if k != "node")): amount
                        for labels, amount in samples_of(
                            detailed, f"nova_lite_pci_devices{suffix}").items()}
            self.assertEqual(per_node, samples_of(samples, f"nova_lite_host_pci_devices{suffix}"),
                             suffix)
        self.assertEqual(2, samples[("nova_lite_host_resource_used", frozenset(
            {"host": "h2", "resource_class": "VCPU"}.items()))])
        # A claim moves its host's sums at the next scrape.
        self.rt2.instance_claim(base.instance(base.flavor(vcpus=3)), "c")
        again = parse(scrape(server.port))
        self.assertEqual(5, again[("nova_lite_host_resource_used", frozenset(
            {"host": "h2", "resource_class": "VCPU"}.items()))])

    def test_always_and_never_hold_at_any_size(self):
        samples, _ = self.scrape(metrics_per_node_series="always",
                                 metrics_per_node_series_max_nodes=0)
        self.assertEqual(1, samples[("nova_lite_per_node_series", frozenset())])
        self.assertEqual(NODES, len({dict(k)["node"] for k in samples_of(
            samples, "nova_lite_resource_total")}))
        samples, _ = self.scrape(metrics_per_node_series="never")
        self.assertEqual(0, samples[("nova_lite_per_node_series", frozenset())])
        self.assertEqual({}, samples_of(samples, "nova_lite_resource_total"))
        self.assertEqual(2, len(samples_of(samples, "nova_lite_host_compute_nodes")))

    def test_cached_text_is_what_prometheus_client_writes_in_both_modes(self):
        for options in ({"metrics_per_node_series": "always"},
                        {"metrics_per_node_series": "never"}):
            settings = self.settings(**options)
            exporter = metrics.Exporter(self.store, settings)
            reference = metrics.registry(self.store, settings)
            for _ in range(2):   # cold, then from the cache
                ours = exporter.render().decode()
                theirs = metrics.render(reference).decode()
                self.assertEqual(node_families(theirs), node_families(ours), options)
                self.rt2.instance_claim(base.instance(base.flavor(memory_mb=10)), "a")

    def test_warm_up_reads_the_nodes_before_the_first_scrape(self):
        exporter = metrics.Exporter(self.store, self.settings())
        statements = []
        sa.event.listen(self.store.db.engine, "before_cursor_execute",
                        lambda conn, cursor, text, *args: statements.append(text))
        exporter.warm_up().join(timeout=60)
        self.assertTrue([t for t in statements if "FROM inventories" in t])
        statements.clear()
        samples = parse(exporter.render().decode())
        self.assertEqual([], [t for t in statements if "FROM inventories" in t])
        self.assertEqual(1, samples[("nova_lite_per_node_series", frozenset())])
        self.assertEqual(NODES, samples[("nova_lite_compute_nodes", frozenset())])

    def test_the_option_takes_three_words_and_a_size(self):
        self.assertEqual(("auto", conf.DEFAULT_PER_NODE_SERIES_MAX_NODES),
                         (conf.Settings().metrics_per_node_series,
                          conf.Settings().metrics_per_node_series_max_nodes))
        for bad in ({"metrics_per_node_series": "sometimes"},
                    {"metrics_per_node_series_max_nodes": -1}):
            self.assertRaises(InvalidConfig, conf.Settings, **bad)


class TestSeriesSQLite(SeriesTests, base.OnSQLiteFile, base.TestCase):
    pass


class TestSeriesPostgreSQL(SeriesTests, base.OnPostgreSQL, base.TestCase):
    pass
