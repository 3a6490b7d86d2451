"""The [ironic] options."""

import configparser
import os

from nova_lite import conf

from nova_lite_ironic.config import IronicConfig
from nova_lite_ironic.driver import IronicDriver
from nova_lite_ironic.exception import ConfigError

from tests import base

ENDPOINT = {"endpoint_override": "http://127.0.0.1:6385"}


class TestConfig(base.TestCase):

    def test_defaults(self):
        config = IronicConfig.from_options(ENDPOINT)
        self.assertEqual(("api", "none", 1000, "1.46", 30.0, 2, 128),
                         (config.source, config.auth_type, config.api_page_size,
                          config.effective_api_version, config.timeout,
                          config.api_max_retries, config.hash_ring_points))
        self.assertEqual({}, config.filters)

    def test_from_an_ini_file(self):
        path = os.path.join(self.state_path, "nova-lite.conf")
        parser = configparser.ConfigParser()
        parser["DEFAULT"] = {"host": "bm1", "compute_driver": "ironic"}
        parser["ironic"] = {"endpoint_override": "http://ironic:6385", "api_page_size": "200",
                            "conductor_group": "rack2", "timeout": "15.5"}
        with open(path, "w", encoding="utf-8") as handle:
            parser.write(handle)
        driver = IronicDriver(settings=conf.load_settings(path))
        self.assertEqual(200, driver.config.api_page_size)
        self.assertEqual({"conductor_group": "rack2"}, driver.config.filters)
        self.assertEqual(15.5, driver.config.timeout)

    def test_keyword_options_win(self):
        settings = self.settings(ironic={"endpoint_override": "http://a:6385"})
        driver = IronicDriver(settings=settings, endpoint_override="http://b:6385")
        self.assertEqual("http://b:6385", driver.config.endpoint_override)

    def test_aliases(self):
        config = IronicConfig.from_options({"api_endpoint": "http://x:6385",
                                            "partition_key": "g1"})
        self.assertEqual("http://x:6385", config.endpoint_override)
        self.assertEqual("g1", config.conductor_group)

    def assertBad(self, option, options, *fragments):
        err = self.assertRaises(ConfigError, IronicConfig.from_options, options)
        self.assertIn(f"[ironic] {option}", str(err))
        for fragment in fragments:
            self.assertIn(fragment, str(err))

    def test_bad_values_name_the_option(self):
        self.assertBad("api_page_size", dict(ENDPOINT, api_page_size="1001"), "1001")
        self.assertBad("api_page_size", dict(ENDPOINT, api_page_size="0"))
        self.assertBad("api_page_size", dict(ENDPOINT, api_page_size="many"), "integer")
        self.assertBad("timeout", dict(ENDPOINT, timeout="-1"))
        self.assertBad("timeout", dict(ENDPOINT, timeout="soon"), "number")
        self.assertBad("auth_type", dict(ENDPOINT, auth_type="password"), "http_basic")
        self.assertBad("api_version", dict(ENDPOINT, api_version="one"), "MAJOR.MINOR")
        self.assertBad("api_version", dict(ENDPOINT, api_version="1.20"), "1.21")
        self.assertBad("api_version", dict(ENDPOINT, api_version="1.46", shard="s"), "1.82")
        self.assertBad("colour", dict(ENDPOINT, colour="red"), "unknown option")
        self.assertBad("endpoint_override", {}, "required")
        self.assertBad("api_max_retries", dict(ENDPOINT, api_max_retries="-1"))

    def test_unknown_source_names_installed_ones(self):
        driver = IronicDriver(settings=self.settings(ironic=dict(ENDPOINT, source="ldap")))
        err = self.assertRaises(ConfigError, driver.init_host, "h1")
        self.assertIn("[ironic] source", str(err))
        self.assertIn("api", str(err))
        self.assertIn("inventory", str(err))

    def test_cloud_needs_no_endpoint(self):
        config = IronicConfig.from_options({"cloud": "metal"})
        self.assertEqual("metal", config.cloud)

    def test_password_not_in_repr(self):
        config = IronicConfig.from_options(dict(ENDPOINT, auth_type="http_basic",
                                                username="u", password="hunter2"))
        self.assertNotIn("hunter2", repr(config))

    def test_nova_options_are_accepted_and_ignored_with_a_warning(self):
        config = IronicConfig.from_options(dict(ENDPOINT, api_retry_interval="2",
                                                peer_list="a,b"))
        self.assertEqual("http://127.0.0.1:6385", config.endpoint_override)
        self.assertIn("[ironic] peer_list is a Nova option", self.log.output)

    def test_keystone_auth_points_to_clouds_yaml(self):
        self.assertBad("auth_type", dict(ENDPOINT, auth_type="password"), "cloud")

    def test_tls_options(self):
        config = IronicConfig.from_options(dict(ENDPOINT, insecure="yes", cafile="/ca.pem"))
        self.assertTrue(config.insecure)
        self.assertBad("insecure", dict(ENDPOINT, insecure="perhaps"), "true or false")
