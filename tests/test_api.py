"""The read-only JSON API over real HTTP (waitress), on SQLite files and PostgreSQL.

Every route is in the OpenAPI document and every response matches its
schema; the figures are the ones ``hypervisor list|stats -f json`` print;
unknown nodes and hosts (in the path or in any query parameter) are 404,
bad query values 400, other methods 405 (nothing changes), and a database
failure 503 naming no part of the database URL, each with a JSON error
body listed in the document; every response carries nosniff and the CSP.
"""

import contextlib
import io
import json
import logging
import os
import re
import sqlite3
import urllib.error
import urllib.parse
import urllib.request

import fixtures
import sqlalchemy

from nova_lite.api import app as api_app
from nova_lite.api import errors, make_app, openapi, query
from nova_lite.cli import context
from nova_lite.cli.main import main
from nova_lite.db import Store
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.providers import ChildProvider
from nova_lite.resources import Inventory
from nova_lite.testing import databases
from nova_lite.web_server import BackgroundServer
from tests import base
from tests.test_heal import snapshot


def request(url, method="GET", headers=None):
    """``(status, content type, body bytes)`` of one real HTTP request.

    ``headers``: a dict the response's headers are stored in, if given.
    """
    req = urllib.request.Request(url, method=method, data=b"{}" if method in (
        "POST", "PUT", "PATCH") else None)
    try:
        answer = urllib.request.urlopen(req, timeout=30)
    except urllib.error.HTTPError as exc:
        answer = exc
    with answer:
        if headers is not None:
            headers.update(answer.headers.items())
        return answer.status, answer.headers.get("Content-Type"), answer.read()


#: Values of ``interval`` the page refuses, and why.
BAD_INTERVALS = ("abc", "Infinity", "-Infinity", "NaN", "", " ", "0", "0.5", "0.999",
                 "-1", "-5", "3600.5", "3601", "1e3", "1e-9", " 5", "5s", "0x10", "5,0",
                 "1" * 400)
GOOD_INTERVALS = ("1", "2.5", "5", "60", "3600", "0001")


def assert_secure_headers(test, headers, what):
    """``headers`` carry nosniff and the API's Content-Security-Policy."""
    test.assertEqual("nosniff", headers.get("X-Content-Type-Options"), what)
    test.assertEqual(api_app.CONTENT_SECURITY_POLICY, headers.get("Content-Security-Policy"),
                     what)


def validate(test, schema, data, doc, where="$"):
    """Check ``data`` against the JSON-schema subset the document uses."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        schema = doc["components"]["schemas"][name]
    if "enum" in schema:
        test.assertIn(data, schema["enum"], where)
        return
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        python = {"integer": int, "number": (int, float), "string": str, "boolean": bool,
                  "object": dict, "array": list, "null": type(None)}
        test.assertTrue(any(isinstance(data, python[k]) and not (
            k in ("integer", "number") and isinstance(data, bool)) for k in kinds),
            f"{where}: {data!r} is not {kinds}")
    if isinstance(data, dict):
        for key in schema.get("required", ()):
            test.assertIn(key, data, where)
        for key, sub in schema.get("properties", {}).items():
            if key in data:
                validate(test, sub, data[key], doc, f"{where}.{key}")
        if "additionalProperties" in schema:
            for key, item in data.items():
                validate(test, schema["additionalProperties"], item, doc, f"{where}.{key}")
    if isinstance(data, list) and "items" in schema:
        for i, item in enumerate(data):
            validate(test, schema["items"], item, doc, f"{where}[{i}]")


class ApiTests:
    """Mixed into a TestCase with make_store() and url."""

    def setUp(self):
        super().setUp()
        self.settings_ = self.settings(reserved_host_memory_mb=0, cpu_allocation_ratio=0.7)
        self.writer = self.make_store()
        # h1 has a GPU (a child provider), so every view of it shows one.
        gpu = ChildProvider(name="h1_pci_0000_81_00_0", traits=["CUSTOM_NVIDIA_35"],
                            inventories={"VGPU": Inventory(total=4, max_unit=4)})
        _, self.rt1 = self.make_tracker(settings=self.settings_, store=self.writer,
                                        host="h1", vcpus=10, memory_mb=4096, local_gb=40,
                                        providers=[gpu])
        _, self.rt2 = self.make_tracker(settings=self.settings_, store=self.writer,
                                        host="h2", vcpus=3, memory_mb=2048, local_gb=20)
        self.rt1.instance_claim(base.instance(base.flavor(vcpus=2, memory_mb=1024)), "h1")
        self.writer.heartbeat("h1", COMPUTE_BINARY)
        self.reader = Store(self.url, readonly=True)
        self.addCleanup(self.reader.close)
        self.server = BackgroundServer(make_app(self.reader, self.settings_)).start()
        self.addCleanup(self.server.stop)
        self.doc = json.loads(request(self.server.url + "/v1/openapi.json")[2])

    def get(self, path, status=200, method="GET"):
        """The body of ``path`` (JSON decoded), checked: status, headers, error shape."""
        headers = {}
        code, ctype, body = request(self.server.url + path, method, headers)
        self.assertEqual(status, code, (path, body))
        assert_secure_headers(self, headers, path)
        if method == "HEAD":
            self.assertEqual(b"", body)
            return None
        if status == 200 and not ctype.startswith("application/json"):
            return body
        self.assertTrue(ctype.startswith("application/json"), ctype)
        data = json.loads(body)
        if status != 200:
            validate(self, {"$ref": "#/components/schemas/Error"}, data, self.doc)
            self.assertEqual(status, data["error"]["code"])
        return data

    def test_a_nodes_child_providers_are_shown(self):
        flavor = base.flavor(name="vgpu", vcpus=1, memory_mb=64,
                             extra_specs={"resources:VGPU": "1"})
        self.rt1.instance_claim(base.instance(flavor), "h1")
        found = self.get("/v1/hypervisors/h1")["hypervisor"]
        validate(self, {"$ref": "#/components/schemas/Hypervisor"}, found,
                 self.doc)
        (gpu,) = found["providers"]
        self.assertEqual(("h1_pci_0000_81_00_0", ["CUSTOM_NVIDIA_35"], 1),
                         (gpu["name"], gpu["traits"], gpu["generation"]))
        self.assertEqual({"resource_class": "VGPU", "total": 4, "reserved": 0, "ratio": 1.0,
                          "capacity": 4, "used": 1, "free": 3, "over": 0},
                         gpu["inventories"][0])
        (h1,) = [h for h in self.get("/v1/hosts")["hosts"] if h["host"] == "h1"]
        self.assertEqual({"total": 1, "resources": {"VGPU": {"capacity": 4, "used": 1,
                                                             "free": 3}}}, h1["providers"])

    def test_each_host_shows_its_availability_zone(self):
        self.writer.heartbeat("h2", COMPUTE_BINARY)
        agg = self.writer.aggregates.create("rack1", availability_zone="az2")
        self.writer.aggregates.add_host(agg.name, "h2")   # h1 has an instance
        cli_zones = {(s["Host"], s["Zone"]) for s in self.cli("service", "list")}
        self.assertEqual({("h1", "nova"), ("h2", "az2")}, cli_zones)
        services = {(s["host"], s["zone"]) for s in self.get("/v1/services")["services"]}
        hosts = {(h["host"], h["zone"]) for h in self.get("/v1/hosts")["hosts"]}
        shown = {(name, self.get(f"/v1/hypervisors/{name}")["hypervisor"]["zone"])
                 for name in ("h1", "h2")}
        self.assertEqual([cli_zones] * 3, [services, hosts, shown])

    def test_every_route_is_documented_and_every_response_matches(self):
        routes = {re.sub(r"<(\w+)>", r"{\1}", rule.rule)
                  for rule in make_app(self.reader, self.settings_).url_map.iter_rules()}
        self.assertEqual(routes, set(self.doc["paths"]))
        self.assertEqual(len(api_app.ROUTES), len(routes))
        examples = {"{node}": "h1", "{host}": "h1"}
        for path, item in self.doc["paths"].items():
            concrete = path
            for key, val in examples.items():
                concrete = concrete.replace(key, val)
            answer = item["get"]["responses"]["200"]
            body = self.get(concrete)
            if "application/json" not in answer["content"]:
                self.assertIsInstance(body, bytes)
                self.assertEqual(set(answer["content"]), {request(
                    self.server.url + concrete)[1].split(";")[0]})
                continue
            validate(self, answer["content"]["application/json"]["schema"], body, self.doc,
                     path)
            for code in answer and item["get"]["responses"]:
                self.assertIn(code, item["get"]["responses"])

    def cli(self, *argv):
        """What ``nova-lite ARGV -f json`` prints about this database, decoded."""
        self.useFixture(fixtures.EnvironmentVariable(context.STATE_PATH_ENV))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(0, main(["--database-url", self.url, *argv, "-f", "json"]))
        return json.loads(out.getvalue())

    def test_figures_match_the_commands(self):
        cli = self.cli
        listed = {r["Hypervisor Hostname"]: r for r in cli("hypervisor", "list")}
        rows = {r["nodename"]: r for r in self.get("/v1/hypervisors")["hypervisors"]}
        self.assertEqual(set(listed), set(rows))
        for name, row in rows.items():
            self.assertEqual(
                (listed[name]["vCPUs (capacity)"], listed[name]["vCPUs Used"],
                 listed[name]["Memory MB (capacity)"], listed[name]["Free RAM MB"],
                 listed[name]["Disk GB (capacity)"]),
                (row["vcpus"], row["vcpus_used"], row["memory_mb"], row["free_ram_mb"],
                 row["local_gb"]))
        self.assertEqual(cli("hypervisor", "stats"),
                         self.get("/v1/hypervisors/statistics")["hypervisor_statistics"])
        cluster = {r["resource_class"]: r for r in self.get("/v1/cluster")["resources"]}
        stats = cli("hypervisor", "stats")
        # 10 x 0.7 is 7 exactly; 3 x 0.7 is 2.
        self.assertEqual(9, cluster["VCPU"]["capacity"])
        self.assertEqual((stats["vcpus"], stats["vcpus_used"], stats["memory_mb"],
                          stats["free_ram_mb"]),
                         (cluster["VCPU"]["capacity"], cluster["VCPU"]["used"],
                          cluster["MEMORY_MB"]["capacity"], cluster["MEMORY_MB"]["free"]))
        hosts = {h["host"]: h for h in self.get("/v1/hosts")["hosts"]}
        self.assertEqual(("up", "down"), (hosts["h1"]["state"], hosts["h2"]["state"]))
        described = self.get("/v1/hosts/h1")["host"]
        self.assertEqual(cli("host", "describe", "h1"),
                         [{"HOST": r["host"], "PROJECT": r["project"], "cpu": r["cpu"],
                           "memory_mb": r["memory_mb"], "disk_gb": r["disk_gb"]}
                          for r in described])

    def test_unknown_names_are_404_and_bad_queries_400(self):
        for path in ("/v1/hypervisors/ghost", "/v1/nodes/ghost/explain", "/v1/hosts/ghost",
                     "/v1/findings?node=ghost", "/v1/nope", "/v1/hypervisors/h1?host=h2"):
            self.assertIn("ghost" if "ghost" in path else "", self.get(path, 404)["error"][
                "message"])
        for path in ("/v1/findings?node=", "/v1/findings?host=%20", "/v1/cluster?x=1",
                     "/v1/nodes/h1/explain?verbose=1", "/v1/hypervisors?page=3"):
            self.get(path, 400)

    def concrete(self, path, name="h1"):
        """A documented path template with its names filled in (``/`` left as is)."""
        return re.sub(r"\{(node|host)\}", name, path)

    def page_through(self, path):
        """Every row of a paged list, following its next links; and the pages' sizes."""
        names, sizes = [], []
        while path is not None:
            self.assertLess(len(sizes), 50, "the next links never end")
            data = self.get(path)
            validate(self, self.doc["paths"]["/v1/hypervisors"]["get"]["responses"]["200"][
                "content"]["application/json"]["schema"], data, self.doc)
            names.extend((r["host"], r["nodename"]) for r in data["hypervisors"])
            sizes.append(len(data["hypervisors"]))
            links = data["hypervisors_links"]
            self.assertLessEqual(len(links), 1)
            path = links[0]["href"] if links else None
            if links:
                self.assertEqual("next", links[0]["rel"])
                self.assertEqual(data["hypervisors"][-1]["uuid"], urllib.parse.parse_qs(
                    urllib.parse.urlsplit(path).query)["marker"][0])
        return names, sizes

    def test_hypervisors_page_by_limit_and_marker_in_host_and_name_order(self):
        self.make_tracker("fake.multinode", settings=self.settings_, store=self.writer,
                          host="h0", nodes=["n-c", "n-a", "n-b", "n-d"])
        everything = [("h0", "n-a"), ("h0", "n-b"), ("h0", "n-c"), ("h0", "n-d"),
                      ("h1", "h1"), ("h2", "h2")]
        self.assertEqual((everything, [6]), self.page_through("/v1/hypervisors"))
        for limit, sizes in ((1, [1] * 6), (4, [4, 2]), (5, [5, 1]), (6, [6]), (7, [6])):
            self.assertEqual((everything, sizes),
                             self.page_through(f"/v1/hypervisors?limit={limit}"), limit)
        # The figures of a page are those of the whole list.
        whole = self.get("/v1/hypervisors")["hypervisors"]
        by_uuid = {r["uuid"]: r for r in whole}
        marker = whole[3]["uuid"]
        page = self.get(f"/v1/hypervisors?marker={marker}&limit=1")["hypervisors"]
        self.assertEqual([by_uuid[whole[4]["uuid"]]], page)
        self.assertEqual(1, page[0]["running_vms"])   # h1 holds the claim of setUp
        # A claim moves its node's row on the next page read.
        self.rt1.instance_claim(base.instance(base.flavor(vcpus=3, memory_mb=10)), "h1")
        moved = self.get(f"/v1/hypervisors?marker={marker}&limit=1")["hypervisors"][0]
        self.assertEqual((page[0]["vcpus_used"] + 3, 2),
                         (moved["vcpus_used"], moved["running_vms"]))
        # After the last node: an empty page with no next link.
        self.assertEqual({"hypervisors": [], "hypervisors_links": []},
                         self.get(f"/v1/hypervisors?marker={whole[-1]['uuid']}"))

    def test_a_page_comes_from_the_node_cache_read_at_start(self):
        statements = []
        sqlalchemy.event.listen(self.reader.db.engine, "before_cursor_execute",
                                lambda conn, cursor, text, *args: statements.append(text))
        app = make_app(self.reader, self.settings_)
        app.warm_up().join(timeout=60)   # the cache reads every node once
        self.assertTrue([t for t in statements if "FROM inventories" in t])
        statements.clear()
        server = BackgroundServer(app).start()
        self.addCleanup(server.stop)
        status, _, body = request(server.url + "/v1/hypervisors?limit=1")
        self.assertEqual((200, 1), (status, len(json.loads(body)["hypervisors"])))
        # (The look for changes names the changed nodes' allocations; none changed.)
        self.assertEqual([], [t for t in statements if "FROM inventories" in t
                              or "FROM allocations" in t and not t.startswith("SELECT look.")])
        instances = [t for t in statements if "FROM instances" in t]
        self.assertEqual(1, len(instances), statements)
        self.assertIn("GROUP BY", instances[0])
        self.assertIn("count(*)", instances[0])

    def test_bad_limit_or_unknown_marker_is_a_400_naming_it(self):
        for limit in ("0", "-1", "abc", "1.5", "1e3", " 1", "+1", "0x10", "1001", "١",
                      "9" * 40):
            message = self.get("/v1/hypervisors?limit=" + urllib.parse.quote(limit),
                               400)["error"]["message"]
            self.assertIn("'limit'", message, limit)
            self.assertIn("1000", message)
        self.assertIn("'limit'", self.get("/v1/hypervisors?limit=1&limit=2", 400)[
            "error"]["message"])
        for marker in ("ghost", "h1", "1b8fab8e-0000-0000-0000-000000000000"):
            message = self.get(f"/v1/hypervisors?marker={marker}", 400)["error"]["message"]
            self.assertIn("'marker'", message)
            self.assertIn(f"marker [{marker}] not found", message)

    def test_default_page_size_and_maximum_are_api_max_limit(self):
        settings = self.settings(reserved_host_memory_mb=0, api_max_limit=1)
        server = BackgroundServer(make_app(self.reader, settings)).start()
        self.addCleanup(server.stop)
        status, _, body = request(server.url + "/v1/hypervisors")
        data = json.loads(body)
        self.assertEqual((200, 1), (status, len(data["hypervisors"])))
        self.assertEqual("/v1/hypervisors?limit=1&marker=" + data["hypervisors"][0]["uuid"],
                         data["hypervisors_links"][0]["href"])
        status, _, body = request(server.url + "/v1/hypervisors?limit=2")
        self.assertEqual(400, status)
        self.assertIn("from 1 to 1 ([api] max_limit)", json.loads(body)["error"]["message"])
        doc = json.loads(request(server.url + "/v1/openapi.json")[2])
        limit = [p for p in doc["paths"]["/v1/hypervisors"]["get"]["parameters"]
                 if p["name"] == "limit"][0]
        self.assertEqual((1, 1), (limit["schema"]["maximum"], limit["schema"]["default"]))

    def test_unknown_host_or_node_in_any_query_parameter_is_404(self):
        before = snapshot(self.writer)
        checked = []
        for path, item in self.doc["paths"].items():
            for param in item["get"]["parameters"]:
                if param["in"] != "query" or param["name"] not in ("host", "node"):
                    continue
                for value in ("typo", "H1", "h1 ", "\x00", "h1/h1", "'\"<b>", "x" * 300):
                    url = f"{self.concrete(path)}?{param['name']}={urllib.parse.quote(value)}"
                    message = self.get(url, 404)["error"]["message"]
                    self.assertIn(repr(value)[:errors.MAX_ECHO - 4], message, url)
                    self.assertIn(f"query parameter {param['name']!r}", message, url)
                    self.assertLessEqual(len(message), 300, url)
                self.assertIn("404", item["get"]["responses"], path)
                checked.append((path, param["name"]))
        # Every endpoint taking a host or node is covered, from the document and the code.
        expected = {(self.concrete(p, "{node}") if "node" in p else p, n)
                    for p, item in self.doc["paths"].items()
                    for n in ("host", "node") if n in {
                        q["name"] for q in item["get"]["parameters"] if q["in"] == "query"}}
        self.assertEqual(expected, set(checked))
        self.assertEqual(sum(n in ("host", "node") for names in api_app.QUERY.values()
                             for n in names), len(checked))
        self.assertEqual(before, snapshot(self.writer))

    def test_findings_of_a_typo_host_are_404_never_clean(self):
        self.assertTrue(self.get("/v1/findings?host=h1")["clean"])
        data = self.get("/v1/findings?host=typo", 404)
        self.assertNotIn("clean", data)
        self.assertIn("'typo'", data["error"]["message"])
        self.assertIn("'typo'", self.get("/v1/findings?host=h1&node=typo", 404)["error"][
            "message"])
        self.assertIn("'typo'", self.get("/v1/findings?host=typo&node=h1", 404)["error"][
            "message"])
        # A node known elsewhere, asked on another known host: 404 naming both.
        message = self.get("/v1/findings?host=h2&node=h1", 404)["error"]["message"]
        self.assertIn("'h1'", message)
        self.assertIn("'h2'", message)
        # By uuid.
        uuid = next(n.uuid for n in self.writer.get_compute_nodes("h1"))
        self.assertTrue(self.get(f"/v1/findings?node={uuid}")["clean"])
        self.get(f"/v1/findings?node={uuid[:-1]}", 404)

    def test_a_host_known_by_its_service_alone_is_known(self):
        self.get("/v1/findings?host=svc-only", 404)
        self.writer.heartbeat("svc-only", COMPUTE_BINARY)
        data = self.get("/v1/findings?host=svc-only")
        self.assertEqual(([], True), (data["findings"], data["clean"]))

    def test_bad_query_parameters_are_400_and_change_nothing(self):
        before = snapshot(self.writer)
        for path in ("/v1/findings?host=h1&host=h1", "/v1/findings?node=h1&node=typo",
                     "/v1/nodes/h1/explain?host=h1&host=h2", "/?interval=5&interval=5",
                     "/v1/findings?host", "/v1/openapi.json?x=1", "/static/page.js?v=1"):
            message = self.get(path, 400)["error"]["message"]
            self.assertRegex(message, r"'(host|node|interval|x|v)'")
        for value in BAD_INTERVALS:
            url = "/?interval=" + urllib.parse.quote(value, safe="")
            message = self.get(url, 400)["error"]["message"]
            self.assertIn("'interval'", message)
            if value.strip():
                self.assertIn(f"from {query.MIN_INTERVAL_S} to {query.MAX_INTERVAL_S}", message)
                self.assertIn(repr(value)[:errors.MAX_ECHO - 4], message)
        for value in GOOD_INTERVALS:
            self.assertIn(b"nova-lite overview", self.get("/?interval=" + value))
        self.assertEqual(before, snapshot(self.writer))

    def test_the_page_interval_range_is_documented(self):
        param = self.doc["paths"]["/"]["get"]["parameters"][0]
        self.assertEqual(("interval", "number", 1, 3600, 5),
                         (param["name"], param["schema"]["type"], param["schema"]["minimum"],
                          param["schema"]["maximum"], param["schema"]["default"]))
        self.assertEqual((1, 3600, 5), (query.MIN_INTERVAL_S, query.MAX_INTERVAL_S,
                                         query.DEFAULT_INTERVAL_S))
        # The page's own clamp uses the same bounds.
        script = self.get("/static/page.js").decode()
        for name in ("MIN_INTERVAL_S", "MAX_INTERVAL_S", "DEFAULT_INTERVAL_S"):
            self.assertIn(f"const {name} = {getattr(query, name)};", script)

    def test_every_response_carries_nosniff_and_the_csp(self):
        cases = [("/", 200), ("/?interval=2", 200), ("/static/page.css", 200),
                 ("/static/page.js", 200), ("/static/favicon.svg", 200),
                 ("/v1/openapi.json", 200), ("/v1/cluster", 200),
                 ("/v1/hypervisors/h1", 200), ("/v1/findings", 200), ("/v1/nope", 404),
                 ("/static/index.html", 404), ("/favicon.ico", 404),
                 ("/v1/hosts/ghost", 404), ("/v1/findings?host=typo", 404),
                 ("/?interval=abc", 400), ("/v1/cluster?x=1", 400)]
        for path, status in cases:
            self.get(path, status)
            self.get(path, status, method="HEAD")
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            for path in ("/", "/static/page.js", "/v1/findings", "/v1/nope"):
                headers = {}
                code = request(self.server.url + path, method, headers)[0]
                self.assertIn(code, (404, 405), (method, path))
                assert_secure_headers(self, headers, (method, path))
        # The page's own files have the types nosniff needs, and it inlines nothing.
        types = {}
        for path in ("/static/page.css", "/static/page.js", "/static/favicon.svg"):
            headers = {}
            request(self.server.url + path, headers=headers)
            types[path] = headers["Content-Type"]
        self.assertEqual({"/static/page.css": "text/css; charset=utf-8",
                          "/static/page.js": "text/javascript; charset=utf-8",
                          "/static/favicon.svg": "image/svg+xml"}, types)
        page = self.get("/").decode()
        self.assertNotRegex(page, r"<script(?![^>]*\bsrc=)|<style|\sstyle=|\son[a-z]+=")

    def test_documented_errors_are_the_ones_answered(self):
        for path, item in self.doc["paths"].items():
            documented = set(item["get"]["responses"])
            url = self.concrete(path)
            answered = {"200"}
            answered.add(str(request(self.server.url + url + "?bogus=1")[0]))
            answered.add(str(request(self.server.url + url, "POST")[0]))
            if "{" in path:
                answered.add(str(request(self.server.url + self.concrete(path, "ghost"))[0]))
            for param in item["get"]["parameters"]:
                if param["in"] == "query":
                    bad = "ghost" if param["name"] in ("host", "node") else "abc"
                    answered.add(str(request(
                        f"{self.server.url}{url}?{param['name']}={bad}")[0]))
            # 503 (database failure) and 500 are answered in their own tests.
            self.assertEqual(documented - {"500", "503"}, answered, path)

    def test_an_internal_error_is_a_json_500_with_no_details(self):
        broken = BackgroundServer(make_app(self.reader, None)).start()   # no settings
        self.addCleanup(broken.stop)
        logs = self.useFixture(fixtures.FakeLogger(level=logging.WARNING))
        headers = {}
        code, ctype, body = request(broken.url + "/v1/hypervisors", headers=headers)
        self.assertEqual((500, "application/json"), (code, ctype))
        self.assertEqual({"error": {"code": 500, "title": "Internal Server Error",
                                    "message": "internal error; the server's log has the "
                                               "details"}}, json.loads(body))
        assert_secure_headers(self, headers, "500")
        self.assertIn("AttributeError", logs.output)

    def test_read_only_other_methods_are_405_and_change_nothing(self):
        before = snapshot(self.writer)
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            for path in ("/v1/cluster", "/v1/hypervisors/h1", "/v1/findings", "/"):
                code, ctype, body = request(self.server.url + path, method)
                self.assertEqual(405, code, (method, path))
                data = json.loads(body)
                self.assertEqual(405, data["error"]["code"])
                self.assertIn("read-only", data["error"]["message"])
        self.assertEqual(before, snapshot(self.writer))

    def test_cluster_follows_new_claims(self):
        first = self.get("/v1/cluster")
        self.rt2.instance_claim(base.instance(base.flavor(vcpus=1, memory_mb=512)), "h2")
        second = self.get("/v1/cluster")
        used = {r["resource_class"]: r["used"] for r in second["resources"]}
        before = {r["resource_class"]: r["used"] for r in first["resources"]}
        self.assertEqual(before["MEMORY_MB"] + 512, used["MEMORY_MB"])


class TestApiSQLite(ApiTests, base.TestCase):

    def make_store(self):
        db = self.useFixture(databases.SQLiteFile())
        self.url = db.url
        store = Store(db.url)
        self.addCleanup(store.close)
        return store

    def test_database_failure_is_503_naming_no_part_of_the_url(self):
        self.get("/v1/cluster")
        db_file = self.url[len("sqlite:///"):]
        with contextlib.closing(sqlite3.connect(db_file)) as conn:
            conn.execute("DROP TABLE allocations")
            conn.execute("DROP TABLE compute_nodes")
            conn.commit()
        self.rt1.store.close()
        logs = self.useFixture(fixtures.FakeLogger(level=logging.WARNING,
                                                   format="%(levelname)s %(message)s"))
        url_parts = [p for p in os.path.abspath(db_file).split(os.sep) if p]
        for path, template in (("/v1/cluster", "/v1/cluster"),
                               ("/v1/hypervisors", "/v1/hypervisors"),
                               ("/v1/findings", "/v1/findings"),
                               ("/v1/findings?host=h1", "/v1/findings"),
                               ("/v1/nodes/h1/explain", "/v1/nodes/{node}/explain")):
            data = self.get(path, 503)
            self.assertEqual("database unavailable: schema missing (run nova-lite db sync)",
                             data["error"]["message"])
            self.assertIn("503", self.doc["paths"][template]["get"]["responses"])
            for part in url_parts + ["sqlite", "OperationalError"]:
                self.assertNotIn(part, json.dumps(data), path)
        # The server's log has the detail, at WARNING.
        self.assertRegex(logs.output, r"WARNING API GET /v1/cluster: database unavailable "
                                      r"\(schema missing .*\): .*no such table")


class TestApiPostgreSQL(ApiTests, base.OnPostgreSQL, base.TestCase):
    pass


class TestOpenApiDocument(base.TestCase):

    def test_schemas_name_every_record_field(self):
        doc = openapi.document()
        self.assertEqual("3.1.0", doc["openapi"])
        row = doc["components"]["schemas"]["HypervisorRow"]
        self.assertIn("free_ram_mb", row["required"])
        self.assertEqual(["integer", "null"],
                         doc["components"]["schemas"]["ResourceLine"]["properties"][
                             "detected"]["type"])


class TestNodeCache(base.TestCase):
    """The cache re-reads only what changed, and never serves a stale record."""

    def test_follows_claims_new_and_deleted_nodes(self):
        from nova_lite import cluster
        store = self.sqlite_store()
        _, rt = self.make_tracker(store=store, driver_name="fake.multinode",
                                  nodes=[f"n{i}" for i in range(5)])
        cache = cluster.NodeCache(store)

        def fresh():
            return cluster.cluster_totals(store.get_compute_nodes())
        self.assertEqual(fresh(), cache.totals())
        rt.instance_claim(base.instance(base.flavor(vcpus=2, memory_mb=1024)), "n3")
        self.assertEqual(fresh(), cache.totals())
        self.assertEqual(2, cache.totals().resource("VCPU").used)
        _, rt2 = self.make_tracker(store=store, host="other", driver_name="fake.multinode",
                                   nodes=["m0", "m1"])
        self.assertEqual(fresh(), cache.totals())
        self.assertEqual(7, cache.totals().nodes)
        store.delete_compute_node("other", "m1")
        self.assertEqual(fresh(), cache.totals())
        self.assertEqual([n.uuid for n in store.get_compute_nodes()],
                         [n.uuid for n in cache.nodes()])
        self.assertEqual(cluster.ClassTotals("GPU", 0, 0, 0, 0, 0, 0),
                         cache.totals().resource("GPU"))
