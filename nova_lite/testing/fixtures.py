"""Fixtures for driver authors and nova-lite's own tests."""

from typing import Any, cast

import fixtures

from nova_lite import conf
from nova_lite.virt import loader
from nova_lite.virt.fake import FakeDriver


class FakeDriverFixture(fixtures.Fixture):
    """A fake-hypervisor driver, loaded through its real entry point.

    ``name`` is the entry point (``fake``, ``fake.small``, ``fake.medium``,
    ``fake.multinode``); ``host`` is passed to ``init_host``; extra keyword
    arguments go to the driver.  After setUp, ``self.driver`` is ready and
    ``self.settings`` holds the Settings it got (state in a temp dir).
    Guests still spawned at cleanup are destroyed.
    """

    #: The loaded and ``init_host``-ed driver (after setUp; None before).
    driver: FakeDriver
    #: The Settings the driver got (after setUp: never None).
    settings: conf.Settings

    def __init__(self, name: str = "fake", host: str = "fake-host",
                 settings: conf.Settings | None = None, **driver_kwargs: Any) -> None:
        super().__init__()
        self.name = name
        self.host = host
        self.settings = cast(conf.Settings, settings)   # made in setUp when None
        self.driver_kwargs = driver_kwargs
        self.driver = cast(FakeDriver, None)   # loaded in setUp

    def _setUp(self) -> None:
        if self.settings is None:
            state = self.useFixture(fixtures.TempDir()).path
            self.settings = conf.Settings(host=self.host, state_path=state)
        self.driver = cast(FakeDriver, loader.load_driver(
            self.name, settings=self.settings, **self.driver_kwargs))
        self.driver.init_host(self.host)
        self.addCleanup(self.driver.destroy_all)
