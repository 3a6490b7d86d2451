"""``--limit`` and ``--marker`` of the list commands, on SQLite files and PostgreSQL.

Paging through ``hypervisor list``, ``node list`` and ``server list`` gives
every row once, in the list's order, with the same figures as the whole
list; a page is read alone (the node query carries the keyset and the
LIMIT, and the inventories read are the page's); a bad LIMIT exits 2 and an
unknown MARKER exits 1 naming it.
"""

import contextlib
import io
import json

import fixtures
import sqlalchemy as sa

from nova_lite.cli import context
from nova_lite.cli.main import main
from nova_lite.db import Store
from nova_lite.exception import MarkerNotFound
from tests import base

#: (command, the JSON key of its marker, the JSON key of its sort order)
LISTS = ((("hypervisor", "list"), "ID", ("Host", "Hypervisor Hostname")),
         (("node", "list", "--long"), "UUID", ("Host", "Node")),
         (("server", "list", "--long"), "ID", ("ID",)))


class PagingTests:
    """Mixed into a TestCase with make_store()."""

    def setUp(self):
        super().setUp()
        self.useFixture(fixtures.EnvironmentVariable(context.STATE_PATH_ENV))
        settings = self.settings(reserved_host_memory_mb=0)
        self.writer = self.make_store()
        _, rt = self.make_tracker("fake.multinode", settings=settings, store=self.writer,
                                  host="h1", nodes=["n-3", "n-1", "n-2", "n-5", "n-4"])
        self.make_tracker(settings=settings, store=self.writer, host="h0")
        for name in ("n-1", "n-1", "n-4", "n-5"):
            rt.instance_claim(base.instance(base.flavor(vcpus=1, memory_mb=64)), name)

    def cli(self, *argv):
        """``(exit status, stdout, stderr)`` of ``nova-lite --database-url URL argv``."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--database-url", self.url, *argv])
        return code, out.getvalue(), err.getvalue()

    def rows(self, *argv):
        code, out, err = self.cli(*argv, "-f", "json")
        self.assertEqual(0, code, err)
        return json.loads(out)

    def test_pages_give_every_row_once_in_order(self):
        for command, key, order in LISTS:
            whole = self.rows(*command)
            self.assertEqual(6 if command[0] != "server" else 4, len(whole), command)
            self.assertEqual(sorted(whole, key=lambda r: [r[k] for k in order]), whole)
            for limit in (1, 2, 4, 6, 7):
                paged, marker = [], None
                for _ in range(10):
                    page = self.rows(*command, "--limit", str(limit),
                                     *(("--marker", marker) if marker else ()))
                    self.assertLessEqual(len(page), limit)
                    paged.extend(page)
                    if len(page) < limit:
                        break
                    marker = page[-1][key]
                self.assertEqual(whole, paged, (command, limit))

    def test_marker_alone_starts_after_it(self):
        whole = self.rows("hypervisor", "list")
        self.assertEqual(whole[3:], self.rows("hypervisor", "list", "--marker", whole[2]["ID"]))
        h1 = self.rows("node", "list", "--host", "h1", "--long")
        self.assertEqual(h1[1:3], self.rows("node", "list", "--host", "h1", "--long",
                                            "--marker", h1[0]["UUID"], "--limit", "2"))
        running = {r["Hypervisor Hostname"]: r["Running VMs"] for r in self.rows(
            "hypervisor", "list", "--limit", "2", "--marker", whole[0]["ID"])}
        self.assertEqual({"n-1": 2, "n-2": 0}, running)

    def test_bad_limit_exits_2_and_unknown_marker_exits_1_naming_it(self):
        for command, _, _ in LISTS:
            for limit in ("0", "-1", "x", "1.5", "1001"):
                code, _, err = self.cli(*command, "--limit", limit)
                self.assertEqual(2, code, (command, limit, err))
                self.assertIn("--limit", err)
            code, _, err = self.cli(*command, "--marker", "ghost")
            self.assertEqual(1, code, (command, err))
            self.assertIn("marker [ghost] not found", err)
        # A node of another host is no marker of this host's list.
        other = self.rows("node", "list", "--host", "h0", "--long")[0]["UUID"]
        code, _, err = self.cli("node", "list", "--host", "h1", "--marker", other)
        self.assertEqual((1, True), (code, f"marker [{other}] not found" in err), err)

    def test_a_page_is_read_alone(self):
        reader = Store(self.url, readonly=True)
        self.addCleanup(reader.close)
        statements = []
        sa.event.listen(reader.db.engine, "before_cursor_execute",
                        lambda conn, cursor, text, params, context, many:
                        statements.append((text, params)))
        whole = reader.get_compute_nodes()
        statements.clear()
        page = reader.get_compute_nodes(limit=2, marker=whole[1].uuid)
        self.assertEqual([n.uuid for n in whole[2:4]], [n.uuid for n in page])
        self.assertEqual(whole[2:4], page)
        node_query = [t for t, _ in statements if "FROM compute_nodes" in t
                      and "ORDER BY" in t]
        self.assertEqual(1, len(node_query), statements)
        self.assertIn("LIMIT", node_query[0])
        self.assertRegex(node_query[0], r"\(compute_nodes.host, compute_nodes.nodename\) >")
        inventory = [p for t, p in statements if "FROM inventories" in t]
        self.assertEqual(1, len(inventory), statements)
        values = set(inventory[0].values() if isinstance(inventory[0], dict)
                     else inventory[0])
        self.assertTrue({n.uuid for n in page} <= values)
        self.assertFalse({n.uuid for n in whole[:2] + whole[4:]} & values)
        self.assertRaises(MarkerNotFound, reader.list_instances, marker="ghost")
        self.assertEqual(reader.list_instances()[1:3],
                         reader.list_instances(limit=2,
                                               marker=reader.list_instances()[0].uuid))


class TestPagingSQLite(PagingTests, base.OnSQLiteFile, base.TestCase):

    def make_store(self):
        store = self.sqlite_store()
        self.url = store.db.url
        return store


class TestPagingPostgreSQL(PagingTests, base.OnPostgreSQL, base.TestCase):
    pass
