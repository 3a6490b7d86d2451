"""Security basics.

- Database credentials never appear in logs, errors or ``--help``; the
  read-only API's 503 names no part of the database URL at all (user,
  host, port, database, query parameters), however the database fails.
- Network endpoints: a running ``nova-lite compute`` service is inspected
  through /proc: it holds no listening TCP, UDP or Unix socket.  ``nova-lite
  api serve`` listens on loopback only unless told otherwise, and its
  responses carry nosniff and a Content-Security-Policy.
- State files are created owner-only: the state directory 0700, the
  database file 0600, and SQLite's -wal/-shm files 0600, whatever the umask.
- CLI commands that delete records refuse without an explicit
  confirmation flag, and change nothing.
"""

import contextlib
import importlib.metadata
import io
import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import fixtures

from nova_lite import conf
from nova_lite.db import models
from nova_lite.api import app as api_app
from nova_lite.api import make_app
from nova_lite.cli.main import main as cli_main
from nova_lite.compute.manager import ComputeService
from nova_lite.db import Store
from nova_lite.exception import StoreError
from nova_lite.testing import components, databases
from nova_lite.virt import loader
from nova_lite.web_server import BackgroundServer
from tests.reliability import base

SECRET = "Sup3r-S3cret-Pw"
HOST = "sec-host"


def _pg_url_with_password(database, port=None):
    """The test server's URL with a user:password (trust auth ignores it)."""
    import sqlalchemy as sa
    url = sa.engine.make_url(components.postgresql_url())
    url = url.set(username=url.username or "postgres", password=SECRET, database=database)
    if port is not None:
        url = url.set(port=port)
    return url.render_as_string(hide_password=False)


class TestCredentialsStaySecret(base.TestCase):
    log_level = logging.DEBUG

    def _assert_secret_absent(self, *texts):
        for text in texts + (self.logs.output,):
            self.assertNotIn(SECRET, text)

    def _chain(self, exc):
        texts = []
        while exc is not None:
            texts += [str(exc), repr(exc)]
            exc = exc.__cause__ or exc.__context__
        return texts

    def test_failed_connect_names_no_password(self):
        url = f"postgresql://nova:{SECRET}@127.0.0.1:1/nova"   # nothing listens on port 1
        exc = self.assertRaises(StoreError, Store, url)
        self.assertIn("nova:***@127.0.0.1:1/nova", str(exc))
        self._assert_secret_absent(*self._chain(exc))

    def test_unknown_database_names_no_password(self):
        databases.use_postgresql(self)
        exc = self.assertRaises(StoreError, Store, _pg_url_with_password("no_such_database"))
        self.assertIn("no_such_database", str(exc))
        self._assert_secret_absent(*self._chain(exc))

    def test_a_running_service_logs_no_password(self):
        databases.use_postgresql(self)
        db = self.useFixture(databases.PostgreSQLDatabase())
        url = _pg_url_with_password(db.name)
        settings = conf.Settings(host=HOST, state_path=self.useFixture(
            fixtures.TempDir()).path, database_url=url, driver_timeout=0.5)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=["a", "b"])
        service = ComputeService(HOST, driver, settings=settings)   # opens settings' URL
        self.addCleanup(service.store.close)
        service.run_once()
        driver.inject_fault("b", exception=RuntimeError("boom"))
        driver.set_nodes(["b"])
        service.run_once()
        self.assertIn("Deleting orphan compute node", self.logs.output)
        self._assert_secret_absent(repr(settings), repr(service.store), str(settings))

    def test_cli_help_and_errors_show_no_password(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        config = os.path.join(tmp, "nova-lite.conf")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f"[database]\nconnection = postgresql://nova:{SECRET}@127.0.0.1:1/nova\n")
        log_file = os.path.join(tmp, "nova-lite.log")
        self.useFixture(fixtures.EnvironmentVariable("NOVA_LITE_STATE_PATH", tmp))
        commands = [["--help"], ["compute", "--help"], ["node", "list", "--help"],
                    ["node", "delete", "--help"], ["audit", "--help"]]
        commands += [[*argv] for argv in (["node", "list"], ["audit", "--host", HOST],
                                          ["compute", "--once", "--host", HOST])]
        for argv in commands:
            for prefix in (["--config-file", config, "-vv", "--debug", "--log-file", log_file],
                           ["--database-url", f"postgresql://u:{SECRET}@127.0.0.1:1/x"]):
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = cli_main(prefix + argv)
                said = out.getvalue() + err.getvalue()
                if "--help" not in argv:
                    self.assertNotEqual(0, code, said)   # nothing listens on port 1
                self._assert_secret_absent(said)
        with open(log_file, encoding="utf-8") as f:
            logged = f.read()
        self.assertIn("127.0.0.1:1", logged + self.logs.output)
        self._assert_secret_absent(logged)

    def test_soak_summary_shows_no_password(self):
        from bench import soak
        out = subprocess.run(
            [sys.executable, os.path.join(base.REPO_ROOT, "bench", "soak.py"), "--help"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(0, out.returncode)
        self.assertEqual("postgresql://u:***@h/db",
                         soak.redact_url(f"postgresql://u:{SECRET}@h/db"))


class TcpProxy(fixtures.Fixture):
    """Forwards a loopback port to ``target`` (host, port) until :meth:`cut`.

    After ``cut`` the port refuses connections and every forwarded
    connection is closed: the database as seen by a client went away.
    """

    def __init__(self, target):
        super().__init__()
        self.target = target

    def _setUp(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets = []
        self.lock = threading.Lock()
        self.addCleanup(self.cut)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self):
        """Refuse new connections and close the forwarded ones."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def _api_get(url):
    """``(status, headers, body text)`` of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read().decode()


class TestApiErrorsNameNoDatabaseUrl(base.TestCase):
    """A 503 of the API says what failed, never where the database is."""

    log_level = logging.DEBUG
    PATHS = ("/v1/cluster", "/v1/hypervisors", "/v1/findings", "/v1/services",
             "/v1/nodes/n0/explain")

    def setUp(self):
        super().setUp()
        databases.use_postgresql(self)
        self.db = self.useFixture(databases.PostgreSQLDatabase())
        writer = Store(self.db.url)
        self.addCleanup(writer.close)
        settings = conf.Settings(host=HOST, state_path=self.useFixture(
            fixtures.TempDir()).path)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=["n0"])
        ComputeService(HOST, driver, store=writer, settings=settings).run_once()
        self.settings_ = settings

    def serve(self, url):
        """The API over a read-only store at ``url``: its base URL, once it answers."""
        reader = Store(url, readonly=True)
        self.addCleanup(reader.close)
        server = BackgroundServer(make_app(reader, self.settings_)).start()
        self.addCleanup(server.stop)
        self.assertEqual(200, _api_get(server.url + "/v1/cluster")[0])
        return server.url

    def url_of(self, port):
        import sqlalchemy as sa
        url = sa.engine.make_url(components.postgresql_url())
        url = url.set(username=url.username or "postgres", password=SECRET, port=port,
                      database=self.db.name,
                      query={"application_name": "nl-secret-app", "connect_timeout": "7"})
        return url, url.render_as_string(hide_password=False)

    def failures(self, api_url, parts):
        """The 503 messages of every path, checked to name no part of the URL."""
        messages = []
        for path in self.PATHS:
            code, headers, body = _api_get(api_url + path)
            self.assertEqual(503, code, (path, body))
            self.assertEqual("nosniff", headers["X-Content-Type-Options"])
            message = json.loads(body)["error"]["message"]
            self.assertTrue(message.startswith("database unavailable: "), message)
            for part in parts:
                self.assertNotIn(part.lower(), body.lower(), path)
            messages.append(message)
        self.assertNotIn(SECRET, self.logs.output)
        return messages

    def parts(self, url):
        return [SECRET, url.username, url.host, str(url.port), self.db.name, "nl-secret-app",
                "connect_timeout", "application_name", "postgresql", "psycopg", "localhost"]

    def test_connection_refused(self):
        import sqlalchemy as sa
        real = sa.engine.make_url(components.postgresql_url())
        proxy = self.useFixture(TcpProxy((real.host or "127.0.0.1", real.port or 5432)))
        sa_url, url = self.url_of(proxy.port)
        api_url = self.serve(url)
        logged = self.useFixture(fixtures.FakeLogger(
            name="nova_lite.api.app", level=logging.WARNING,
            format="%(levelname)s %(message)s"))
        proxy.cut()
        messages = self.failures(api_url, self.parts(sa_url) + [str(real.port or 5432)])
        self.assertEqual("database unavailable: connection refused", messages[-1])
        # The detail is in the server's log, at WARNING (password masked).
        self.assertRegex(logged.output, r"WARNING API GET /v1/services: database unavailable "
                                        r"\(connection refused\): .*"
                                        + f"127.0.0.1:{proxy.port}/{self.db.name}")

    def test_database_dropped(self):
        import sqlalchemy as sa
        real = sa.engine.make_url(components.postgresql_url())
        sa_url, url = self.url_of(real.port)
        api_url = self.serve(url)
        databases._admin_execute(components.postgresql_url(),   # noqa: SLF001
                                 f'DROP DATABASE "{self.db.name}" WITH (FORCE)')
        messages = self.failures(api_url, self.parts(sa_url))
        self.assertEqual("database unavailable: the database does not exist", messages[-1])


class TestNoNetworkEndpoints(base.SQLiteBackend, base.TestCase):

    def test_compute_service_listens_on_nothing(self):
        state = os.path.join(self.useFixture(fixtures.TempDir()).path, "state")
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from nova_lite.cli.main import main; "
             "sys.exit(main())", "--state-path", state, "compute", "--host", HOST],
            cwd=base.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(_reap, proc)
        db = os.path.join(state, "nova-lite.db")
        deadline = time.monotonic() + 60
        while not _heartbeat_seen(db):
            self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() else "")
            self.assertLess(time.monotonic(), deadline, "the service never started")
            time.sleep(0.1)
        self.assertEqual([], _listening(proc.pid))
        proc.send_signal(signal.SIGTERM)   # and it stops cleanly
        self.assertEqual(0, proc.wait(30), proc.stderr.read())


    def test_api_serve_listens_on_loopback_only(self):
        state = os.path.join(self.useFixture(fixtures.TempDir()).path, "state")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = cli_main(["--state-path", state, "compute", "--once", "--host", HOST])
        self.assertEqual(0, code, out.getvalue())
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from nova_lite.cli.main import main; "
             "sys.exit(main())", "--state-path", state, "api", "serve", "--port", "0"],
            cwd=base.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(_reap, proc)
        line = proc.stdout.readline()   # printed once the socket is bound
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        self.assertIsNotNone(match, line + (proc.stderr.read() if proc.poll() else ""))
        found = _listening(proc.pid)
        self.assertEqual([f"tcp 0100007F:{int(match.group(1)):04X}"], found)
        for path in ("/", "/v1/cluster", "/v1/nope"):
            code, headers, _ = _api_get(match.group(0).rstrip("/") + path)
            self.assertEqual("nosniff", headers["X-Content-Type-Options"], path)
            self.assertEqual(api_app.CONTENT_SECURITY_POLICY,
                             headers["Content-Security-Policy"], path)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(0, proc.wait(30), proc.stderr.read())

    def test_the_probe_sees_a_listener(self):
        # The check above is not vacuous: a process that listens is seen.
        proc = subprocess.Popen(
            [sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "
             "s.bind(('127.0.0.1', 0)); s.listen(); print('up', flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(_reap, proc)
        self.assertEqual("up", proc.stdout.readline().strip())
        found = _listening(proc.pid)
        self.assertEqual(1, len(found), found)
        self.assertTrue(found[0].startswith("tcp 0100007F:"), found)   # 127.0.0.1


def _heartbeat_seen(db):
    if not os.path.exists(db):
        return False
    try:
        store = Store("sqlite:///" + db)
    except StoreError:
        return False
    try:
        return any(s.host == HOST for s in store.list_services())
    except StoreError:
        return False
    finally:
        store.close()


def _listening(pid):
    """Sockets of process ``pid`` that accept connections or datagrams."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            inodes.add(match.group(1))
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{proto}", encoding="ascii") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            local, state, inode = row[1], row[3], row[9]
            if inode in inodes and (state == "0A" or proto.startswith("udp")):
                found.append(f"{proto} {local}")
    with open(f"/proc/{pid}/net/unix", encoding="ascii") as f:
        for row in (line.split() for line in f.readlines()[1:]):
            if row[6] in inodes and int(row[3], 16) & 0x10000:   # __SO_ACCEPTCON
                found.append(f"unix {row[7] if len(row) > 7 else '@'}")
    return found


def _reap(proc):
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


class TestStateFilePermissions(base.TestCase):

    def _check(self, umask):
        old = os.umask(umask)
        self.addCleanup(os.umask, old)
        state = os.path.join(self.useFixture(fixtures.TempDir()).path, "state")
        path = os.path.join(state, "nova-lite.db")
        store = Store("sqlite:///" + path)
        self.addCleanup(store.close)
        settings = conf.Settings(host=HOST, state_path=state)
        ComputeService(HOST, loader.load_driver("fake", settings=settings), store=store,
                       settings=settings).run_once()
        self.assertEqual(0o700, stat.S_IMODE(os.stat(state).st_mode))
        files = sorted(os.listdir(state))
        self.assertIn("nova-lite.db", files)
        self.assertIn("nova-lite.db-wal", files)   # WAL mode, written while open
        for name in files:
            mode = stat.S_IMODE(os.stat(os.path.join(state, name)).st_mode)
            self.assertEqual(0o600, mode, f"{name} is {oct(mode)}")

    def test_owner_only_with_the_usual_umask(self):
        self._check(0o022)

    def test_owner_only_with_an_open_umask(self):
        self._check(0o000)

    def test_cli_state_path(self):
        old = os.umask(0o002)
        self.addCleanup(os.umask, old)
        state = os.path.join(self.useFixture(fixtures.TempDir()).path, "state")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["--state-path", state, "compute", "--once", "--host", HOST])
        self.assertEqual(0, code, out.getvalue() + err.getvalue())
        self.assertEqual(0o700, stat.S_IMODE(os.stat(state).st_mode))
        for name in os.listdir(state):
            path = os.path.join(state, name)
            if os.path.isfile(path):
                self.assertEqual(0o600, stat.S_IMODE(os.stat(path).st_mode), name)


class TestDeletingCommandsNeedConfirmation(base.SQLiteBackend, base.TestCase):

    DELETING = re.compile(r"(^|_)(delete|purge|remove|prune|reset|drop|clean)")

    def setUp(self):
        super().setUp()
        self.url = self.database_url()
        self.store = Store(self.url)
        self.addCleanup(self.store.close)
        settings = conf.Settings(host=HOST, state_path=self.useFixture(
            fixtures.TempDir()).path)
        driver = loader.load_driver("fake.multinode", settings=settings, nodes=["n0", "n1"])
        ComputeService(HOST, driver, store=self.store, settings=settings).run_once()

    def _cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["--database-url", self.url, *argv])
        return code, out.getvalue() + err.getvalue()

    def test_every_deleting_command_is_known_here(self):
        names = sorted(ep.name for ep in importlib.metadata.entry_points(group="nova_lite.cli")
                       if self.DELETING.search(ep.name))
        # A new deleting command must get its own refusal test below.  The
        # aggregate commands count whether or not the installed metadata lists
        # them yet.
        self.assertEqual(["aggregate_delete", "aggregate_remove_host", "db_purge",
                          "node_delete", "server_delete", "service_delete"],
                         sorted(set(names) | {"aggregate_delete", "aggregate_remove_host"}))

    def test_aggregate_delete_and_remove_host_refuse_to_lose_anything(self):
        # As in Nova they take no confirmation: what they would lose is refused
        # instead (an aggregate that still has hosts; a host whose instances
        # would change zone).
        from nova_lite.cli import aggregate
        from tests.test_cli_aggregates import install_missing_commands
        install_missing_commands(self, aggregate.ENTRY_POINTS)
        self.store.aggregates.create("rack", "az1")
        self.store.aggregates.add_host("rack", HOST)
        with self.store.db.engine.begin() as conn:
            conn.execute(models.instances.insert().values(
                uuid="00000000-0000-0000-0000-000000000001", host=HOST, node="n0",
                vm_state="active", flavor="{}", created_at=0.0, updated_at=0.0))
        before = base.dump(self.store)
        code, said = self._cli("aggregate", "delete", "rack")
        self.assertEqual(1, code, said)
        self.assertIn("not empty", said)
        code, said = self._cli("aggregate", "remove", "host", "rack", HOST)
        self.assertEqual(1, code, said)
        self.assertIn("has instances", said)
        self.assertDumpEqual(before, base.dump(self.store))
        self.assertEqual(frozenset({HOST}), self.store.aggregates.get("rack").hosts)

    def test_node_delete_refuses_without_confirmation(self):
        before = base.dump(self.store)
        code, said = self._cli("node", "delete", "n0")
        self.assertEqual(2, code, said)
        self.assertIn("--yes-i-really-mean-it", said)
        self.assertIn("nothing was changed", said)
        self.assertDumpEqual(before, base.dump(self.store))
        code, said = self._cli("node", "delete", "n0", "--yes-i-really-mean-it")
        self.assertEqual(0, code, said)
        self.assertEqual(["n1"], [n.nodename for n in self.store.get_compute_nodes(HOST)])

    def test_service_delete_refuses_without_confirmation(self):
        self.store.heartbeat(HOST)
        before = base.dump(self.store)
        code, said = self._cli("service", "delete", HOST)
        self.assertEqual(2, code, said)
        self.assertIn("--yes-i-really-mean-it", said)
        self.assertIn("nothing was changed", said)
        self.assertDumpEqual(before, base.dump(self.store))
        code, said = self._cli("service", "delete", HOST, "--yes-i-really-mean-it")
        self.assertEqual(0, code, said)
        self.assertEqual([], self.store.list_services(HOST))

    def test_db_purge_refuses_without_confirmation(self):
        before = base.dump(self.store)
        code, said = self._cli("db", "purge", "--all")
        self.assertEqual(2, code, said)
        self.assertIn("--yes-i-really-mean-it", said)
        self.assertIn("nothing was changed", said)
        self.assertDumpEqual(before, base.dump(self.store))
        code, said = self._cli("db", "purge", "--all", "--yes-i-really-mean-it")
        self.assertEqual(0, code, said)

    def test_server_delete_refuses_without_confirmation(self):
        import uuid

        from nova_lite.compute.resource_tracker import ResourceTracker
        from nova_lite.objects import Flavor, Instance
        driver = loader.load_driver("fake.multinode", nodes=["n0", "n1"])
        driver.init_host(HOST)
        claim = ResourceTracker(HOST, driver, store=self.store).instance_claim(
            Instance(uuid=str(uuid.uuid4()), flavor=Flavor(name="f", vcpus=1, memory_mb=64)),
            "n0")
        before = base.dump(self.store)
        code, said = self._cli("server", "delete", claim.instance.uuid)
        self.assertEqual(2, code, said)
        self.assertIn("--yes-i-really-mean-it", said)
        self.assertIn("nothing was changed", said)
        self.assertDumpEqual(before, base.dump(self.store))
        code, said = self._cli("server", "delete", claim.instance.uuid, "--yes-i-really-mean-it")
        self.assertEqual(0, code, said)
        self.assertEqual("deleting", self.store.get_instance(claim.instance.uuid).task_state)
        from nova_lite.compute.manager import ComputeService
        ComputeService(HOST, driver, store=self.store).do_work()   # the host deletes it
        self.assertEqual("deleted", self.store.get_instance(claim.instance.uuid).vm_state)
