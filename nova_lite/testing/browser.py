"""A real headless Chromium for page tests (Debian's ``chromium`` and ``chromium-driver``).

As with PostgreSQL (:mod:`nova_lite.testing.databases`), :func:`use_chromium`
skips the test when the browser is missing, and fails it when the
environment requires every component (``NOVA_LITE_REQUIRE_ALL=1``, or
``chromium`` in ``NOVA_LITE_REQUIRE``)::

    use_chromium(self)
    driver = self.useFixture(Chromium()).driver
    driver.get(url)

The binaries are looked up at ``$NOVA_LITE_CHROMIUM`` and
``$NOVA_LITE_CHROMEDRIVER``, else ``/usr/bin/chromium`` and
``/usr/bin/chromedriver``.
"""

import os
import shutil
import unittest
from typing import Any, cast

import fixtures

from nova_lite.testing import components

CHROMIUM = os.environ.get("NOVA_LITE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("NOVA_LITE_CHROMEDRIVER", "/usr/bin/chromedriver")


def chromium_problem() -> str | None:
    """None if Chromium, chromedriver and selenium are all here, else why not."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"{path} is missing (Debian package {package})"
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"selenium is not installed ({exc})"
    return None


def use_chromium(test: unittest.TestCase) -> None:
    """Skip ``test`` (or fail it where required) unless Chromium can be driven."""
    components.require(test, "chromium", chromium_problem())


class Chromium(fixtures.Fixture):
    """A headless Chromium driven by selenium; ``driver`` after setUp, quit at cleanup.

    ``width``/``height``: the window size in pixels (screenshots have it).
    The browser's console is recorded: :meth:`console` returns what it
    logged since the last call.
    """

    def __init__(self, width: int = 1280, height: int = 1000) -> None:
        super().__init__()
        self.width, self.height = width, height
        #: The selenium WebDriver (after setUp; None before).
        self.driver: Any = None

    def _setUp(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        profile = self.useFixture(fixtures.TempDir()).path
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", f"--window-size={self.width},{self.height}",
                    f"--user-data-dir={profile}", "--no-first-run"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        service = Service(executable_path=CHROMEDRIVER or shutil.which("chromedriver"))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.addCleanup(self.driver.quit)

    def console(self) -> list[dict[str, Any]]:
        """The browser console's entries since the last call: dicts with ``level``
        (``"SEVERE"``, ``"WARNING"``, ``"INFO"``...), ``message`` and ``source``."""
        return cast(list[dict[str, Any]], self.driver.get_log("browser"))


__all__ = ["Chromium", "use_chromium", "chromium_problem", "CHROMIUM", "CHROMEDRIVER"]
