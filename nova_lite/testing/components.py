"""Tests that need a real component (PostgreSQL, libvirt, Ironic).

Outside CI a missing component skips the test with the reason.  When the
environment says the component is required (``NOVA_LITE_REQUIRE_ALL=1``,
or its name in the comma-separated ``NOVA_LITE_REQUIRE``), a missing
component fails the test instead: CI never skips silently.
"""

import os
import unittest

DEFAULT_POSTGRESQL_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def is_required(component: str) -> bool:
    """True if the environment demands ``component`` be present."""
    if os.environ.get("NOVA_LITE_REQUIRE_ALL", "") in ("1", "true", "yes"):
        return True
    wanted = {c.strip() for c in os.environ.get("NOVA_LITE_REQUIRE", "").split(",")}
    return component in wanted


def require(test: unittest.TestCase, component: str, problem: str | None) -> None:
    """Skip ``test`` (or fail it when required) if ``problem`` is not None."""
    if problem is None:
        return
    if is_required(component):
        test.fail(f"{component} is required here but unavailable: {problem}")
    test.skipTest(f"{component} unavailable: {problem}")


def postgresql_url() -> str:
    """Admin URL of the test PostgreSQL server (env NOVA_LITE_TEST_POSTGRESQL_URL)."""
    return os.environ.get("NOVA_LITE_TEST_POSTGRESQL_URL", DEFAULT_POSTGRESQL_URL)
