"""Shared helpers of the core tests: records, trackers on real stores."""

import os
import time
import uuid

import fixtures
import testtools

from nova_lite import conf, objects
from nova_lite.compute.resource_tracker import ResourceTracker
from nova_lite.db import Store, rows
from nova_lite.testing import databases
from nova_lite.virt import loader


def flavor(name="m1.small", vcpus=1, memory_mb=512, root_gb=1, ephemeral_gb=0, swap=0,
           **kw):
    return objects.Flavor(name=name, vcpus=vcpus, memory_mb=memory_mb, root_gb=root_gb,
                          ephemeral_gb=ephemeral_gb, swap=swap, **kw)


def instance(flv=None, **kw):
    kw.setdefault("project_id", "demo")
    return objects.Instance(uuid=str(uuid.uuid4()), flavor=flv or flavor(), **kw)


def dedicated_request(cpus=1, memory_mb=512):
    """An instance NUMA request for ``cpus`` pinned CPUs in one cell."""
    return objects.InstanceNUMATopology(cells=[objects.InstanceNUMACell(
        id=0, cpuset=set(range(cpus)), memory_mb=memory_mb, cpu_policy="dedicated")])


def write_instance_row(store, inst):
    """Write ``inst``'s row as it is, leaving every allocation alone.

    Unlike ``ResourceTracker.update_usage`` nothing is freed: a deleted
    instance written this way leaves a leaked allocation behind.
    """
    store.db.write(f"write instance {inst.uuid}",
                   lambda conn: rows.upsert_instance(conn, inst, time.time()))


def terminate_backend(test, url, pid):
    """Have PostgreSQL at ``url`` end the session of backend ``pid`` (as a
    server restart or an idle timeout would) and wait until it is gone."""
    admin = Store(url)
    test.addCleanup(admin.close)
    admin.db.read("terminate", lambda conn: conn.exec_driver_sql(
        f"SELECT pg_terminate_backend({int(pid)})").scalar())
    deadline = time.monotonic() + 30
    while admin.db.read("backend alive", lambda conn: conn.exec_driver_sql(
            f"SELECT count(*) FROM pg_stat_activity WHERE pid = {int(pid)}").scalar()):
        test.assertLess(time.monotonic(), deadline, "the backend did not go away")
        time.sleep(0.01)   # poll interval; the condition decides


class TestCase(testtools.TestCase):
    """testtools.TestCase with helpers to build real trackers."""

    host = "host1"

    def setUp(self):
        super().setUp()
        self.state_path = self.useFixture(fixtures.TempDir()).path

    def settings(self, **kw):
        kw.setdefault("host", self.host)
        kw.setdefault("state_path", self.state_path)
        # Not the machine's /etc/nova-lite/provider_config: a directory no
        # test wrote, which does not exist.
        kw.setdefault("provider_config_location",
                      os.path.join(self.state_path, "provider_config"))
        return conf.Settings(**kw)

    def sqlite_store(self, **kw):
        db = self.useFixture(databases.SQLiteFile())
        store = Store(db.url, **kw)
        self.addCleanup(store.close)
        return store

    def make_tracker(self, driver_name="fake", settings=None, store=None, host=None,
                     audit=True, **driver_kwargs):
        """(driver, tracker) on a fresh SQLite file, audited once."""
        host = host or self.host
        settings = settings or self.settings(reserved_host_memory_mb=0)
        driver = loader.load_driver(driver_name, settings=settings, **driver_kwargs)
        driver.init_host(host)
        self.addCleanup(driver.destroy_all)
        store = store if store is not None else self.sqlite_store()
        rt = ResourceTracker(host, driver, store=store, settings=settings)
        if audit:
            result = rt.update_available_resource()
            self.assertEqual({}, dict(result.failed))
        return driver, rt

    def make_pinning_tracker(self):
        """(driver, tracker) of one node with 2 shared and 4 dedicated CPUs in one cell."""
        topo = objects.NUMATopology(cells=[objects.NUMACell(
            id=0, cpuset={0, 1}, pcpuset={2, 3, 4, 5}, memory_mb=8192)])
        return self.make_tracker(pcpus=4, vcpus=2, memory_mb=8192, local_gb=100,
                                 numa_topology=topo)

    def assertUsage(self, rt, nodename, expected):
        """Tracked usage, and a fresh tracker reading the records, both equal ``expected``."""
        self.assertEqual(expected, dict(rt.get_node(nodename).usage))
        stored = rt.store.get_compute_node(rt.host, nodename)
        self.assertEqual(expected, dict(stored.usage))


class OnSQLiteFile:
    """Mixin: ``make_store()`` opens a store on a new SQLite file."""

    def make_store(self):
        return self.sqlite_store()


class OnPostgreSQL:
    """Mixin: ``make_store()`` opens a store on a new PostgreSQL schema (one per test)."""

    def setUp(self):
        super().setUp()
        databases.use_postgresql(self)
        self.url = self.useFixture(databases.PostgreSQLSchema()).url

    def make_store(self):
        store = Store(self.url)
        self.addCleanup(store.close)
        return store
