"""Fixtures for driver authors and nova-lite's own tests."""

import fixtures

from nova_lite import conf
from nova_lite.virt import loader


class FakeDriverFixture(fixtures.Fixture):
    """A fake-hypervisor driver, loaded through its real entry point.

    ``name`` is the entry point (``fake``, ``fake.small``, ``fake.medium``,
    ``fake.multinode``); ``host`` is passed to ``init_host``; extra keyword
    arguments go to the driver.  After setUp, ``self.driver`` is ready and
    ``self.settings`` holds the Settings it got (state in a temp dir).
    Guests still spawned at cleanup are destroyed.
    """

    def __init__(self, name="fake", host="fake-host", settings=None, **driver_kwargs):
        super().__init__()
        self.name = name
        self.host = host
        self.settings = settings
        self.driver_kwargs = driver_kwargs
        self.driver = None

    def _setUp(self):
        if self.settings is None:
            state = self.useFixture(fixtures.TempDir()).path
            self.settings = conf.Settings(host=self.host, state_path=state)
        self.driver = loader.load_driver(self.name, settings=self.settings,
                                         **self.driver_kwargs)
        self.driver.init_host(self.host)
        self.addCleanup(self.driver.destroy_all)
