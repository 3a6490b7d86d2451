"""The read-only JSON API over real HTTP (waitress), on SQLite files and PostgreSQL.

Every route is in the OpenAPI document and every response matches its
schema; the figures are the ones ``hypervisor list|stats -f json`` print;
unknown nodes are 404, bad query values 400, other methods 405 (nothing
changes), and a database failure 503, each with a JSON error body.
"""

import contextlib
import io
import json
import re
import sqlite3
import urllib.error
import urllib.request

import fixtures

from nova_lite.api import app as api_app
from nova_lite.api import make_app, openapi
from nova_lite.cli import context
from nova_lite.cli.main import main
from nova_lite.db import Store
from nova_lite.db.store import COMPUTE_BINARY
from nova_lite.testing import databases
from nova_lite.web_server import BackgroundServer
from tests import base
from tests.test_heal import snapshot


def request(url, method="GET"):
    """``(status, content type, body bytes)`` of one real HTTP request."""
    req = urllib.request.Request(url, method=method, data=b"{}" if method in (
        "POST", "PUT", "PATCH") else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            return answer.status, answer.headers.get("Content-Type"), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read()


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
        _, self.rt1 = self.make_tracker(settings=self.settings_, store=self.writer,
                                        host="h1", vcpus=10, memory_mb=4096, local_gb=40)
        _, self.rt2 = self.make_tracker(settings=self.settings_, store=self.writer,
                                        host="h2", vcpus=3, memory_mb=2048, local_gb=20)
        self.rt1.instance_claim(base.instance(base.flavor(vcpus=2, memory_mb=1024)), "h1")
        self.writer.heartbeat("h1", COMPUTE_BINARY)
        self.reader = Store(self.url, readonly=True)
        self.addCleanup(self.reader.close)
        self.server = BackgroundServer(make_app(self.reader, self.settings_)).start()
        self.addCleanup(self.server.stop)
        self.doc = json.loads(request(self.server.url + "/v1/openapi.json")[2])

    def get(self, path, status=200):
        code, ctype, body = request(self.server.url + path)
        self.assertEqual(status, code, body)
        if path == "/":
            return body
        self.assertTrue(ctype.startswith("application/json"), ctype)
        data = json.loads(body)
        if status != 200:
            validate(self, {"$ref": "#/components/schemas/Error"}, data, self.doc)
            self.assertEqual(status, data["error"]["code"])
        return data

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
            if path == "/":
                self.assertIn(b"nova-lite overview", body)
                continue
            validate(self, answer["content"]["application/json"]["schema"], body, self.doc,
                     path)
            for code in answer and item["get"]["responses"]:
                self.assertIn(code, item["get"]["responses"])

    def test_figures_match_the_commands(self):
        self.useFixture(fixtures.EnvironmentVariable(context.STATE_PATH_ENV))

        def cli(*argv):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(0, main(["--database-url", self.url, *argv, "-f", "json"]))
            return json.loads(out.getvalue())
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
                     "/v1/nodes/h1/explain?verbose=1", "/v1/hypervisors?limit=3"):
            self.get(path, 400)

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

    def test_database_failure_is_503_with_json(self):
        self.get("/v1/cluster")
        path = self.url[len("sqlite:///"):]
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("DROP TABLE allocations")
            conn.execute("DROP TABLE compute_nodes")
            conn.commit()
        self.rt1.store.close()
        for path in ("/v1/cluster", "/v1/hypervisors", "/v1/findings", "/v1/nodes/h1/explain"):
            data = self.get(path, 503)
            self.assertIn("database failure", data["error"]["message"])


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
