"""The driver over the in-process fake: cache, call budget, sharing, lifecycle."""

import uuid

from openstack import exceptions as sdk_exc

from nova_lite.exception import NodeNotFound

from nova_lite_ironic import node as nodes
from nova_lite_ironic.exception import DriverNotReady, NodeConfigurationError, SourceError
from nova_lite_ironic.peers import StaticServiceView

from tests import base


class OrderRecorder:
    """A source and an instance view that log the order of their calls."""

    def __init__(self, fake, calls):
        self.fake, self.calls = fake, calls

    def nodes(self, **kwargs):
        self.calls.append("nodes")
        return self.fake.nodes(**kwargs)

    def get_node(self, *args, **kwargs):
        return self.fake.get_node(*args, **kwargs)

    def instance_uuids(self, host):
        self.calls.append("instances")
        return set()


class TestNodeList(base.TestCase):

    def test_nodename_is_the_node_uuid(self):
        fake = self.fake_fleet(3)
        driver = self.make_driver(fake)
        self.assertEqual(sorted(n.uuid for n in fake.all()), driver.get_available_nodes())

    def test_one_list_call_per_page_never_per_node(self):
        fake = self.fake_fleet(25)
        driver = self.make_driver(fake, page_size=10)
        fake.reset_counters()
        names = driver.get_available_nodes()
        for name in names:
            driver.get_available_resource(name)
            self.assertTrue(driver.node_is_available(name))
        self.assertEqual(25, len(names))
        self.assertEqual(3, fake.list_calls)   # 10 + 10 + 5
        self.assertEqual(0, fake.get_calls)

    def test_full_last_page_costs_one_empty_page(self):
        fake = self.fake_fleet(20)
        driver = self.make_driver(fake, page_size=10)
        fake.reset_counters()
        self.assertEqual(20, len(driver.get_available_nodes()))
        self.assertEqual(3, fake.list_calls)

    def test_refreshed_once_per_call_of_get_available_nodes(self):
        fake = self.fake_fleet(5)
        driver = self.make_driver(fake)
        fake.reset_counters()
        driver.get_available_nodes()
        driver.get_available_nodes(refresh=True)
        self.assertEqual(2, fake.list_calls)

    def test_nodes_listed_before_instances(self):
        calls = []
        recorder = OrderRecorder(self.fake_fleet(2), calls)
        from nova_lite_ironic.driver import IronicDriver
        from nova_lite_ironic.sources.proxy import ProxySource
        driver = IronicDriver(settings=self.settings(), source=ProxySource(recorder),
                              service_view=StaticServiceView([self.host]),
                              instance_view=recorder)
        driver.init_host(self.host)
        driver.get_available_nodes()
        self.assertEqual(["nodes", "instances"], calls)

    def test_cache_miss_makes_single_gets(self):
        fake = self.fake_fleet(2)
        driver = self.make_driver(fake)
        driver.get_available_nodes()
        late = fake.add(base.bm_node())
        fake.reset_counters()
        self.assertTrue(driver.node_is_available(late.uuid))
        self.assertEqual(late.uuid, driver.get_available_resource(late.uuid).uuid)
        self.assertFalse(driver.node_is_available(str(uuid.uuid4())))
        self.assertEqual((0, 3), (fake.list_calls, fake.get_calls))

    def test_cache_miss_before_any_listing_is_one_get(self):
        fake = self.fake_fleet(3)
        driver = self.make_driver(fake)
        node = fake.all()[0]
        fake.reset_counters()
        self.assertEqual(node.uuid, driver.get_available_resource(node.uuid).uuid)
        self.assertTrue(driver.node_is_available(node.uuid))
        self.assertEqual((0, 2), (fake.list_calls, fake.get_calls))

    def test_unknown_node_raises_naming_it(self):
        driver = self.make_driver(self.fake_fleet(1))
        driver.get_available_nodes()
        missing = str(uuid.uuid4())
        err = self.assertRaises(NodeNotFound, driver.get_available_resource, missing)
        self.assertIn(missing, str(err))

    def test_node_without_resource_class_fails_alone(self):
        fake = self.fake_fleet(2)
        bad = fake.add(base.bm_node(resource_class=None))
        driver = self.make_driver(fake)
        names = driver.get_available_nodes()
        self.assertEqual(3, len(names))
        self.assertRaises(NodeConfigurationError, driver.get_available_resource, bad.uuid)
        for name in set(names) - {bad.uuid}:
            self.assertEqual("CUSTOM_BAREMETAL", driver.get_available_resource(name)
                             .resource_class)

    def test_listing_error_means_not_ready(self):
        fake = self.fake_fleet(2)
        driver = self.make_driver(fake)
        fake.list_error = sdk_exc.HttpException("503 Service Unavailable")
        err = self.assertRaises(DriverNotReady, driver.get_available_nodes)
        self.assertIn("503", str(err))
        fake.list_error = None
        self.assertEqual(2, len(driver.get_available_nodes()))

    def test_connection_error_means_not_ready(self):
        fake = self.fake_fleet(1)
        driver = self.make_driver(fake)
        fake.list_error = ConnectionRefusedError("refused")
        self.assertRaises(DriverNotReady, driver.get_available_nodes)

    def test_view_error_means_not_ready(self):
        class Broken:
            def live_hosts(self):
                raise RuntimeError("database is locked")
        driver = self.make_driver(self.fake_fleet(1), service_view=Broken())
        err = self.assertRaises(DriverNotReady, driver.get_available_nodes)
        self.assertIn("database is locked", str(err))

    def test_node_state_follows_the_source(self):
        fake = self.fake_fleet(1)
        node = fake.all()[0]
        driver = self.make_driver(fake)
        driver.get_available_nodes()
        self.assertEqual({}, dict(driver.get_available_resource(node.uuid).reserved))
        fake.set(node.uuid, maintenance=True)
        driver.get_available_nodes()
        self.assertEqual({"CUSTOM_BAREMETAL": 1},
                         dict(driver.get_available_resource(node.uuid).reserved))


class TestDeletion(base.TestCase):

    def test_is_node_deleted_only_when_the_source_says_so(self):
        fake = self.fake_fleet(2)
        driver = self.make_driver(fake)
        a, b = driver.get_available_nodes()
        self.assertFalse(driver.is_node_deleted(a))
        fake.remove(a)
        driver.get_available_nodes()
        fake.reset_counters()
        self.assertTrue(driver.is_node_deleted(a))
        self.assertEqual(1, fake.get_calls)
        self.assertFalse(driver.is_node_deleted(b))
        self.assertEqual(1, fake.get_calls)  # b is in the cache: no call

    def test_node_of_another_service_is_not_deleted(self):
        fake = self.fake_fleet(40)
        driver = self.make_driver(fake, hosts=["host1", "host2"])
        mine = set(driver.get_available_nodes())
        others = [n.uuid for n in fake.all() if n.uuid not in mine]
        self.assertTrue(others)
        self.assertFalse(driver.is_node_deleted(others[0]))

    def test_doubt_keeps_the_record(self):
        fake = self.fake_fleet(1)
        driver = self.make_driver(fake)
        driver.get_available_nodes()
        fake.get_error = sdk_exc.HttpException("500")
        self.assertFalse(driver.is_node_deleted(str(uuid.uuid4())))
        self.assertIn("keeping its record", self.log.output)


class TestSharing(base.TestCase):

    def drivers(self, fake, hosts, instances=None):
        return {h: self.make_driver(fake, host=h, hosts=hosts, instances=instances)
                for h in hosts}

    def test_services_split_the_fleet_with_no_node_counted_twice(self):
        fake = self.fake_fleet(60)
        drivers = self.drivers(fake, ["h1", "h2", "h3"])
        seen = {h: set(d.get_available_nodes()) for h, d in drivers.items()}
        union = set().union(*seen.values())
        self.assertEqual({n.uuid for n in fake.all()}, union)
        self.assertEqual(60, sum(len(s) for s in seen.values()))
        for share in seen.values():
            self.assertGreater(len(share), 5)

    def test_node_with_another_services_instance_is_never_taken(self):
        fake = self.fake_fleet(30)
        theirs = str(uuid.uuid4())
        nodes_ = fake.all()
        for node in nodes_:   # whatever the ring says, h1 must not take it
            fake.set(node.uuid, instance_uuid=theirs, provision_state=nodes.ACTIVE)
        driver = self.make_driver(fake, host="h1", hosts=["h1"],
                                  instances={"h2": {theirs}})
        self.assertEqual([], driver.get_available_nodes())
        self.assertEqual([], driver.list_instances())

    def test_node_with_own_instance_is_kept_whatever_the_ring(self):
        fake = self.fake_fleet(30)
        ours = str(uuid.uuid4())
        for node in fake.all():
            fake.set(node.uuid, instance_uuid=ours, provision_state=nodes.ACTIVE)
        driver = self.make_driver(fake, host="h1", hosts=["h1", "h2", "h3"],
                                  instances={"h1": {ours}})
        self.assertEqual(30, len(driver.get_available_nodes()))

    def test_service_dying_moves_its_nodes_to_the_survivors(self):
        fake = self.fake_fleet(60)
        live = StaticServiceView(["h1", "h2", "h3"])
        drivers = {h: self.make_driver(fake, host=h, service_view=live)
                   for h in ("h1", "h2", "h3")}
        before = {h: set(d.get_available_nodes()) for h, d in drivers.items()}
        live.hosts.discard("h3")
        after = {h: set(drivers[h].get_available_nodes()) for h in ("h1", "h2")}
        self.assertEqual({n.uuid for n in fake.all()}, after["h1"] | after["h2"])
        self.assertFalse(after["h1"] & after["h2"])
        self.assertTrue(before["h1"] <= after["h1"] and before["h2"] <= after["h2"])
        self.assertIn("Compute services sharing the bare-metal fleet changed", self.log.output)

    def test_service_joining_takes_a_share(self):
        fake = self.fake_fleet(60)
        live = StaticServiceView(["h1"])
        d1 = self.make_driver(fake, host="h1", service_view=live)
        self.assertEqual(60, len(d1.get_available_nodes()))
        live.hosts.add("h2")
        d2 = self.make_driver(fake, host="h2", service_view=live)
        one, two = set(d1.get_available_nodes()), set(d2.get_available_nodes())
        self.assertEqual(60, len(one | two))
        self.assertFalse(one & two)
        self.assertTrue(two)

    def test_service_host_in_another_case_is_the_same_member(self):
        # The services table says "Host1", this service is "host1": one member,
        # so it takes the whole fleet (Nova lower-cases ring members).
        fake = self.fake_fleet(20)
        driver = self.make_driver(fake, host="host1",
                                  service_view=StaticServiceView(["Host1"]))
        self.assertEqual(20, len(driver.get_available_nodes()))

    def test_own_host_is_always_on_the_ring(self):
        fake = self.fake_fleet(10)
        driver = self.make_driver(fake, host="h1", service_view=StaticServiceView([]))
        self.assertEqual(10, len(driver.get_available_nodes()))

    def test_attach_service_view_accepts_a_callable(self):
        fake = self.fake_fleet(40)
        driver = self.make_driver(fake, host="h1")
        self.assertEqual(40, len(driver.get_available_nodes()))
        driver.attach_service_view(lambda: ["h1", "h2"])
        self.assertLess(len(driver.get_available_nodes()), 40)


class TestLifecycle(base.TestCase):

    def test_spawn_destroy_and_list(self):
        fake = self.fake_fleet(2)
        driver = self.make_driver(fake)
        name = driver.get_available_nodes()[0]
        inst = base.instance(node=name, host=self.host)
        driver.spawn(inst)
        self.assertEqual([inst.uuid], driver.list_instances())
        self.assertEqual(nodes.ACTIVE, fake.node(name).provision_state)
        self.assertEqual({"CUSTOM_BAREMETAL": 1},
                         dict(driver.get_available_resource(name).reserved))
        # the node stays ours across refreshes: the instance is ours
        self.assertIn(name, driver.get_available_nodes())
        driver.destroy(inst)
        self.assertEqual([], driver.list_instances())
        self.assertEqual(nodes.AVAILABLE, fake.node(name).provision_state)
        self.assertIsNone(fake.node(name).instance_uuid)

    def test_failed_deploy_releases_the_node(self):
        fake = self.fake_fleet(1)
        driver = self.make_driver(fake)
        name = driver.get_available_nodes()[0]
        fake.deploy_error = sdk_exc.HttpException("deploy failed")
        inst = base.instance(node=name, host=self.host)
        self.assertRaises(SourceError, driver.spawn, inst)
        self.assertIsNone(fake.node(name).instance_uuid)
        self.assertEqual([], driver.list_instances())

    def test_spawn_needs_a_node(self):
        driver = self.make_driver(self.fake_fleet(1))
        driver.get_available_nodes()
        self.assertRaises(ValueError, driver.spawn, base.instance())

    def test_destroy_of_unknown_instance_is_a_no_op(self):
        driver = self.make_driver(self.fake_fleet(1))
        driver.get_available_nodes()
        driver.destroy(base.instance())

    def test_cannot_deploy_a_node_in_maintenance(self):
        fake = self.fake_fleet(1)
        driver = self.make_driver(fake)
        name = driver.get_available_nodes()[0]
        fake.set(name, maintenance=True)
        self.assertRaises(SourceError, driver.spawn, base.instance(node=name))
        self.assertIsNone(fake.node(name).instance_uuid)
