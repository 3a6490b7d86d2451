"""Shared helpers of nova-lite-ironic's tests."""

import logging
import uuid

import fixtures
import testtools

from nova_lite import conf, objects

from nova_lite_ironic import node as nodes
from nova_lite_ironic.driver import IronicDriver
from nova_lite_ironic.peers import StaticInstanceView, StaticServiceView
from nova_lite_ironic.sources.fake import FakeBaremetal
from nova_lite_ironic.sources.proxy import ProxySource

#: A flavor that takes one whole bare-metal node of class CUSTOM_BAREMETAL.
def baremetal_flavor(rc="CUSTOM_BAREMETAL", name="bm.whole"):
    return objects.Flavor(name=name, vcpus=1, memory_mb=1024, root_gb=10, extra_specs={
        f"resources:{rc}": "1", "resources:VCPU": "0", "resources:MEMORY_MB": "0",
        "resources:DISK_GB": "0"})


def instance(node=None, host=None, flavor=None, **kw):
    kw.setdefault("project_id", "demo")
    return objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor or baremetal_flavor(),
                            host=host, node=node, **kw)


def bm_node(**fields):
    """A BareMetalNode, available and powered off unless told otherwise."""
    fields.setdefault("uuid", str(uuid.uuid4()))
    fields.setdefault("resource_class", "baremetal")
    fields.setdefault("power_state", nodes.POWER_OFF)
    fields.setdefault("provision_state", nodes.AVAILABLE)
    fields.setdefault("properties", {"cpu_arch": "x86_64"})
    return nodes.BareMetalNode(**fields)


class TestCase(testtools.TestCase):
    """testtools.TestCase capturing logs (``self.log.output``)."""

    host = "host1"

    def setUp(self):
        super().setUp()
        self.log = self.useFixture(fixtures.FakeLogger(level=logging.INFO,
                                                       name="nova_lite_ironic"))
        self.state_path = self.useFixture(fixtures.TempDir()).path

    def settings(self, ironic=None, **kw):
        kw.setdefault("host", self.host)
        kw.setdefault("state_path", self.state_path)
        return conf.Settings(sections={"ironic": dict(ironic or {})}, **kw)

    def fake_fleet(self, count=0, **fields):
        """A FakeBaremetal with ``count`` nodes built from ``fields``."""
        fake = FakeBaremetal()
        for _ in range(count):
            fake.add(bm_node(**fields))
        return fake

    def make_driver(self, fake, host=None, hosts=None, instances=None, page_size=1000,
                    init=True, **kwargs):
        """An IronicDriver over ``fake`` for ``host`` sharing with ``hosts``."""
        host = host or self.host
        kwargs.setdefault("service_view", StaticServiceView(hosts or [host]))
        kwargs.setdefault("instance_view", StaticInstanceView(instances or {}))
        driver = IronicDriver(settings=self.settings(host=host),
                              source=ProxySource(fake, page_size=page_size), **kwargs)
        if init:
            driver.init_host(host)
        return driver
