"""The ``api`` source on the wire: microversion, fields, pages and auth.

A tiny HTTP server on 127.0.0.1 plays Ironic's node API and records every
request, so the tests see exactly what openstacksdk sends for the driver.
"""

import base64
import http.server
import json
import os
import threading
import urllib.parse
import uuid

import fixtures

from nova_lite_ironic.config import IronicConfig
from nova_lite_ironic.exception import ConfigError, SourceError
from nova_lite_ironic.sources.api import ApiSource

from tests import base


class StubIronic(fixtures.Fixture):
    """An HTTP server answering version discovery, node lists and node GETs."""

    def __init__(self, node_count=0, fail_lists=False):
        super().__init__()
        self.nodes = sorted(
            ({"uuid": str(uuid.uuid4()), "resource_class": "baremetal",
              "power_state": "power off", "provision_state": "available",
              "maintenance": False, "instance_uuid": None, "name": None,
              "properties": {"cpu_arch": "x86_64"}} for _ in range(node_count)),
            key=lambda n: n["uuid"])
        self.fail_lists = fail_lists
        self.requests = []

    def _setUp(self):
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parsed = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(parsed.query)
                stub.requests.append((parsed.path, query, dict(self.headers)))
                status, body = stub.answer(parsed.path.rstrip("/"), query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(self.httpd.server_close)
        self.addCleanup(self.httpd.shutdown)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def answer(self, path, query):
        version = {"id": "v1", "status": "CURRENT", "min_version": "1.1",
                   "version": "1.90", "links": [{"href": self.endpoint + "/v1/",
                                                  "rel": "self"}]}
        if path in ("", "/"):
            return 200, {"name": "OpenStack Ironic API", "versions": [version],
                         "default_version": version}
        if path == "/v1":
            return 200, {"id": "v1", "version": version}
        if path == "/v1/nodes":
            if self.fail_lists:
                return 503, {"error_message": "conductor gone"}
            fields = query.get("fields", [""])[0].split(",")
            limit = int(query.get("limit", ["1000"])[0])
            marker = query.get("marker", [None])[0]
            rows = [n for n in self.nodes if marker is None or n["uuid"] > marker][:limit]
            return 200, {"nodes": [{k: v for k, v in n.items() if k in fields} for n in rows]}
        if path.startswith("/v1/nodes/"):
            wanted = path.rsplit("/", 1)[1]
            for node in self.nodes:
                if node["uuid"] == wanted:
                    return 200, node
            return 404, {"error_message": json.dumps({
                "faultstring": f"Node {wanted} could not be found."})}
        return 404, {}

    def node_requests(self):
        return [r for r in self.requests if r[0].startswith("/v1/nodes")]


def source_for(stub, **options):
    options.setdefault("endpoint_override", stub.endpoint)
    return ApiSource.from_config(IronicConfig.from_options({}, **options))


class TestApiSource(base.TestCase):

    def test_explicit_microversion_on_every_request(self):
        stub = self.useFixture(StubIronic(3))
        source = source_for(stub)
        source.list_nodes()
        source.get_node(stub.nodes[0]["uuid"])
        self.assertIsNone(source.get_node(str(uuid.uuid4())))
        requests = stub.node_requests()
        self.assertEqual(3, len(requests))
        for _, _, headers in requests:
            self.assertEqual("1.46", headers.get("X-OpenStack-Ironic-API-Version"))

    def test_configured_microversion(self):
        stub = self.useFixture(StubIronic(1))
        source_for(stub, api_version="1.65").list_nodes()
        self.assertEqual("1.65", stub.node_requests()[-1][2]["X-OpenStack-Ironic-API-Version"])

    def test_shard_raises_the_default_microversion_and_filters(self):
        stub = self.useFixture(StubIronic(1))
        source_for(stub, shard="rack-1").list_nodes()
        _, query, headers = stub.node_requests()[-1]
        self.assertEqual("1.82", headers["X-OpenStack-Ironic-API-Version"])
        self.assertEqual(["rack-1"], query["shard"])
        self.assertIn("shard", query["fields"][0].split(","))

    def test_only_needed_fields_and_one_request_per_page(self):
        stub = self.useFixture(StubIronic(25))
        found = source_for(stub, api_page_size=10).list_nodes()
        self.assertEqual([n["uuid"] for n in stub.nodes], [n.uuid for n in found])
        lists = [r for r in stub.node_requests() if r[0] == "/v1/nodes"]
        self.assertEqual(3, len(lists))
        self.assertNotIn("marker", lists[0][1])
        self.assertEqual([stub.nodes[9]["uuid"]], lists[1][1]["marker"])
        self.assertEqual([stub.nodes[19]["uuid"]], lists[2][1]["marker"])
        for _, query, _ in lists:
            self.assertEqual(["10"], query["limit"])
            self.assertEqual(["uuid,name,resource_class,power_state,provision_state,"
                              "maintenance,instance_uuid,properties,traits"], query["fields"])

    def test_default_page_is_1000(self):
        stub = self.useFixture(StubIronic(3))
        source_for(stub).list_nodes()
        lists = [r for r in stub.node_requests() if r[0] == "/v1/nodes"]
        self.assertEqual(1, len(lists))
        self.assertEqual(["1000"], lists[0][1]["limit"])

    def test_server_error_is_a_source_error(self):
        stub = self.useFixture(StubIronic(2, fail_lists=True))
        err = self.assertRaises(SourceError, source_for(stub, api_max_retries=1).list_nodes)
        self.assertIn("listing nodes from Ironic API", str(err))
        self.assertEqual(2, len([r for r in stub.node_requests() if r[0] == "/v1/nodes"]))

    def test_http_basic_sends_credentials(self):
        stub = self.useFixture(StubIronic(1))
        source_for(stub, auth_type="http_basic", username="nova",
                   password="s3cret").list_nodes()
        auth = stub.node_requests()[-1][2].get("Authorization")
        self.assertEqual("Basic " + base64.b64encode(b"nova:s3cret").decode(), auth)

    def test_noauth_sends_no_credentials(self):
        stub = self.useFixture(StubIronic(1))
        source_for(stub, auth_type="noauth").list_nodes()
        headers = stub.node_requests()[-1][2]
        self.assertNotIn("Authorization", headers)
        self.assertEqual("notused", headers.get("X-Auth-Token", "notused"))

    def test_clouds_yaml_cloud(self):
        stub = self.useFixture(StubIronic(2))
        path = os.path.join(self.state_path, "clouds.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(f"clouds:\n  metal:\n    auth_type: http_basic\n    auth:\n"
                         f"      username: admin\n      password: pw\n"
                         f"      endpoint: {stub.endpoint}\n"
                         f"    baremetal_endpoint_override: {stub.endpoint}\n")
        source = ApiSource.from_config(IronicConfig.from_options(
            {"cloud": "metal", "clouds_yaml": path}))
        self.assertEqual(2, len(source.list_nodes()))
        _, _, headers = stub.node_requests()[-1]
        self.assertEqual("Basic " + base64.b64encode(b"admin:pw").decode(),
                         headers["Authorization"])
        self.assertEqual("1.46", headers["X-OpenStack-Ironic-API-Version"])

    def test_http_basic_needs_credentials(self):
        self.assertRaises(ConfigError, IronicConfig.from_options,
                          {"endpoint_override": "http://x:6385", "auth_type": "http_basic"})
