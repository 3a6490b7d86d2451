"""Public helpers for driver authors: the conformance suite and fixtures."""

from nova_lite.testing.conformance import DriverConformanceTests
from nova_lite.testing.fixtures import FakeDriverFixture

__all__ = ["DriverConformanceTests", "FakeDriverFixture"]
