"""Conformance tests of a driver loaded through its entry point."""

import testtools

from nova_lite.testing import DriverConformanceTests


class TestMyDriverConformance(DriverConformanceTests, testtools.TestCase):
    driver_name = "mydriver"                 # entry point name
    driver_kwargs = {"endpoint": "http://127.0.0.1:8080"}   # to the constructor
