"""Conformance tests of a driver the test builds itself."""

import testtools

from nova_lite.testing import DriverConformanceTests
from nova_lite_mydriver.driver import MyDriver


class TestMyDriverConformance(DriverConformanceTests, testtools.TestCase):
    def make_driver(self):
        return MyDriver(settings=self.make_settings(), endpoint="http://127.0.0.1:8080")
