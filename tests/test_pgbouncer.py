"""nova-lite behind a real PgBouncer (Debian's ``pgbouncer``), in transaction mode.

A PgBouncer of the test's own is started with a configuration in a
temporary directory (a free port on 127.0.0.1, ``auth_type = trust``, a
database of the test's own behind it) and a pool of one or two server
sessions, so that every server session really is shared by many clients.
Through it: the database layer (lock bounds set per transaction, read-only
transactions, no statement prepared on the server, no ``LISTEN``), and a
cluster: two ``nova-lite compute`` processes, builds and deletes from the
operator's commands (scheduler and claims) and the API reading the records.

PgBouncer or PostgreSQL missing: skipped, or failed under
``NOVA_LITE_REQUIRE_ALL=1`` (as CI runs the suites).
"""

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import fixtures
import sqlalchemy as sa
import testtools

from nova_lite import conf, work
from nova_lite.api import make_app
from nova_lite.db import Store, rows
from nova_lite.db.listen import WorkListener
from nova_lite.exception import DatabaseBusy, InvalidInput, StoreError
from nova_lite.testing import components, databases
from nova_lite.web_server import BackgroundServer
from nova_lite.work import WorkRequest
from tests.test_cli import CliTestCase

#: The name the test's database has behind PgBouncer.
ALIAS = "nova_lite"


def pgbouncer_binary():
    """The ``pgbouncer`` program (Debian installs it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or shutil.which(
        "pgbouncer", path="/usr/sbin:/usr/local/sbin")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgBouncer(fixtures.Fixture):
    """A PgBouncer process in front of ``database`` on the test PostgreSQL server.

    ``pool_mode``: PgBouncer's (transaction or session); ``pool_size``: the
    server sessions it may open for the database.  After setUp, ``url`` is
    the database's URL through PgBouncer and :meth:`admin` runs a command
    of PgBouncer's console.
    """

    def __init__(self, database, pool_mode="transaction", pool_size=2):
        super().__init__()
        self.database = database
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.url = None

    def _setUp(self):
        server = sa.engine.make_url(components.postgresql_url())
        self.user = server.username or "postgres"
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.log = os.path.join(self.dir, "pgbouncer.log")
        with open(os.path.join(self.dir, "users.txt"), "w") as users:
            users.write(f'"{self.user}" ""\n')
        # PgBouncer refuses to run as root: it becomes another user, who
        # must be able to write its log in the directory.
        run_as = None
        if os.geteuid() == 0:
            run_as = "postgres" if _user_exists("postgres") else "nobody"
            entry = pwd.getpwnam(run_as)
            for name in ("", "users.txt"):
                os.chown(os.path.join(self.dir, name), entry.pw_uid, entry.pw_gid)
        for _ in range(5):   # a port taken between free_port() and the start: again
            self.port = free_port()
            self._write_config(server, run_as)
            if self._start():
                break
        else:
            raise AssertionError(f"PgBouncer did not start:\n{self.log_text()}")
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/{ALIAS}"

    def _write_config(self, server, run_as):
        self.config = os.path.join(self.dir, "pgbouncer.ini")
        lines = [
            "[databases]",
            f"{ALIAS} = host={server.host or '127.0.0.1'} port={server.port or 5432} "
            f"dbname={self.database} pool_size={self.pool_size}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {os.path.join(self.dir, 'users.txt')}",
            f"admin_users = {self.user}",
            f"pool_mode = {self.pool_mode}",
            f"default_pool_size = {self.pool_size}",
            "reserve_pool_size = 0",
            "max_client_conn = 500",
            f"logfile = {self.log}",
        ]
        if run_as:
            lines.append(f"user = {run_as}")
        with open(self.config, "w") as config:
            config.write("\n".join(lines) + "\n")

    def _start(self):
        proc = subprocess.Popen([pgbouncer_binary(), self.config], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Its own log says when it listens: the port is then this process's.
        listening = f"listening on 127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            if listening not in self.log_text():
                time.sleep(0.05)
                continue
            self.proc = proc
            self.addCleanup(self._stop)
            return True
        proc.kill()
        proc.wait()
        return False

    def _stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self):
        try:
            with open(self.log, encoding="utf-8", errors="replace") as log:
                return log.read()
        except OSError:
            return ""

    def admin(self, command):
        """Rows (dicts) of a command of PgBouncer's console (``SHOW POOLS``, ...)."""
        import psycopg
        # The console speaks only the simple query protocol: client-side binding.
        with psycopg.connect(f"postgresql://{self.user}@127.0.0.1:{self.port}/pgbouncer",
                             autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            cur = conn.cursor()
            cur.execute(command)
            names = [column.name for column in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def pool(self):
        """The SHOW POOLS row of the test's database."""
        (row,) = [p for p in self.admin("SHOW POOLS") if p["database"] == ALIAS]
        return row


def _user_exists(name):
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def use_pgbouncer(test):
    """Skip ``test`` (or fail it where required) unless PostgreSQL and PgBouncer are here."""
    databases.use_postgresql(test)
    problem = None if pgbouncer_binary() else (
        "no pgbouncer program (Debian package pgbouncer; tools/bootstrap.sh all installs it)")
    components.require(test, "pgbouncer", problem)


def server_sessions(database):
    """The server's sessions on ``database`` (read on a direct connection)."""
    engine = sa.create_engine(components.postgresql_url(), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity "
                                        "WHERE datname = :d"), {"d": database}).scalar()
    finally:
        engine.dispose()


class TestPooledDatabase(testtools.TestCase):
    """The database layer through one shared server session (transaction mode)."""

    def setUp(self):
        super().setUp()
        use_pgbouncer(self)
        self.database = self.useFixture(databases.PostgreSQLDatabase()).name
        # One server session: every client's transactions run on it in turn.
        self.bouncer = self.useFixture(PgBouncer(self.database, pool_size=1))

    def open(self, **kw):
        kw.setdefault("pooler", "transaction")
        store = Store(self.bouncer.url, **kw)
        self.addCleanup(store.close)
        return store

    def test_the_lock_bound_is_set_in_each_transaction_and_leaves_the_session_alone(self):
        store = self.open(busy_timeout=0.75)
        show = sa.text("SHOW lock_timeout")
        self.assertEqual("750ms", store.db.read("show", lambda c: c.execute(show).scalar()))
        self.assertEqual("750ms", store.db.write("show", lambda c: c.execute(show).scalar()))
        self.assertEqual("750ms", store.db.write_direct(
            "show", lambda c: c.execute(show).scalar()))
        self.assertEqual("750ms", store.db.read_direct(
            "show", lambda c: c.execute(show).scalar()))
        # A statement alone: in a transaction here, so that it has the bound.
        self.assertEqual("750ms", store.db.write_alone("show", lambda c: c.execute(show).scalar()))
        # Another client on the very same server session sees the server's default.
        import psycopg
        with psycopg.connect(self.bouncer.url, autocommit=True) as other:
            self.assertEqual("0", other.execute("SHOW lock_timeout").fetchone()[0])

    def test_a_read_of_statements_alone_is_a_transaction_here_and_reads_nodes_without_jit(self):
        # Its lock bound needs the transaction; and the session is the
        # server's, JIT on unless the server says otherwise: a read of nodes
        # turns it off for its own transaction.
        store = self.open(busy_timeout=0.75)
        self.assertEqual("750ms", store.db.read_each("show", lambda c: c.execute(
            sa.text("SHOW lock_timeout")).scalar()))
        self.assertEqual("750ms", store.db.read_each_direct("show", lambda c: c.execute(
            sa.text("SHOW lock_timeout")).scalar()))

        def nodes_then_jit(conn):
            rows.load_nodes_of(conn, ["no-such-node"])
            return conn.execute(sa.text("SHOW jit")).scalar()

        self.assertEqual("off", store.db.read_each("jit", nodes_then_jit))
        import psycopg
        with psycopg.connect(self.bouncer.url, autocommit=True) as other:
            server = other.execute("SHOW jit").fetchone()[0]
        self.assertEqual(server, store.db.read("jit", lambda c: c.execute(
            sa.text("SHOW jit")).scalar()))

    def test_a_lock_held_past_the_bound_fails_busy_and_writes_nothing(self):
        store = self.open(busy_timeout=0.3)
        store.heartbeat("h1")
        holder = sa.create_engine(
            sa.engine.make_url(components.postgresql_url()).set(database=self.database),
            poolclass=sa.pool.NullPool)
        self.addCleanup(holder.dispose)
        with holder.connect() as conn, conn.begin():
            conn.exec_driver_sql("LOCK TABLE services IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            self.assertRaises(DatabaseBusy, store.heartbeat, "h2")
            self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(["h1"], [s.host for s in store.list_services()])

    def test_a_snapshot_read_sets_its_isolation_for_its_transaction_only(self):
        store = self.open()
        show = sa.text("SHOW transaction_isolation")
        self.assertEqual("repeatable read", store.db.read_snapshot(
            "show", lambda c: c.execute(show).scalar()))
        self.assertEqual("read committed", store.db.read(
            "show", lambda c: c.execute(show).scalar()))

    def test_a_read_only_store_runs_read_only_transactions(self):
        self.open().heartbeat("h1")
        reader = self.open(readonly=True)
        self.assertEqual(["h1"], [s.host for s in reader.list_services()])
        error = self.assertRaises(StoreError, reader.db.read, "write", lambda c: c.execute(
            sa.text("DELETE FROM services")))
        self.assertIn("read-only transaction", str(error))
        self.assertEqual(["h1"], [s.host for s in reader.list_services()])

    def test_no_statement_is_prepared_on_the_shared_session(self):
        # psycopg prepares a statement run a few times on one connection; two
        # clients doing so on one server session would collide (or miss it).
        stores = [self.open(), self.open()]
        for round_ in range(12):
            for number, store in enumerate(stores):
                store.heartbeat(f"h{number}")
                self.assertEqual(2 if round_ or number else 1, len(store.list_services()))
        self.assertEqual(1, server_sessions(self.database))

    def test_a_direct_connection_setting_is_refused_by_the_pooler_clearly(self):
        # pooler = none gives lock_timeout as a startup option, which PgBouncer refuses.
        error = self.assertRaises(StoreError, Store, self.bouncer.url)
        self.assertIn("unsupported startup parameter: options", str(error))

    def test_the_work_listener_polls_behind_a_transaction_pooler(self):
        store = self.open()
        listener = WorkListener(store.url, "h1", pooler=store.pooler)
        self.addCleanup(listener.close)
        started = time.monotonic()
        self.assertFalse(listener.wait(0.2))
        self.assertGreaterEqual(time.monotonic() - started, 0.2)
        self.assertFalse(listener.listening)
        listener.wake()
        self.assertTrue(listener.wait(30))

    def test_a_bad_pooler_is_refused_before_anything_is_opened(self):
        error = self.assertRaises(InvalidInput, Store, self.bouncer.url, pooler="statement")
        self.assertIn("pooler must be one of none, session, transaction", str(error))
        self.assertEqual([], [p for p in self.bouncer.admin("SHOW CLIENTS")
                              if p["database"] == ALIAS])


class TestSessionPooler(testtools.TestCase):
    """Behind a pooler in session mode the service still listens for its work."""

    def setUp(self):
        super().setUp()
        use_pgbouncer(self)
        self.database = self.useFixture(databases.PostgreSQLDatabase()).name
        self.bouncer = self.useFixture(PgBouncer(self.database, pool_mode="session",
                                                 pool_size=4))

    def test_listening_and_the_lock_bound_work_through_it(self):
        store = Store(self.bouncer.url, pooler="session", busy_timeout=0.5)
        self.addCleanup(store.close)
        self.assertEqual("500ms", store.db.read("show", lambda c: c.execute(
            sa.text("SHOW lock_timeout")).scalar()))
        listener = WorkListener(store.url, "h1", pooler="session")
        self.addCleanup(listener.close)
        self.assertTrue(listener.wait(0))   # the first wait after connecting looks
        self.assertTrue(listener.listening)
        store.tasks.record([WorkRequest(host="h1", kind=work.AUDIT)])   # its NOTIFY
        self.assertTrue(listener.wait(30))


#: The compute hosts of the cluster.
HOSTS = ("cmp1", "cmp2")


class TestClusterBehindPgBouncer(CliTestCase):
    """Compute services, the operator's commands and the API through two server sessions."""

    def setUp(self):
        super().setUp()
        use_pgbouncer(self)
        self.database = self.useFixture(databases.PostgreSQLDatabase()).name
        self.bouncer = self.useFixture(PgBouncer(self.database, pool_size=2))
        os.makedirs(self.state, exist_ok=True)
        self.config = os.path.join(self.state, "nova-lite.conf")
        # Heartbeats and audit passes far apart: work is found only by the
        # worker's polls (a LISTEN through the pooler would wait report_interval).
        with open(self.config, "w") as config:
            config.write(
                "[DEFAULT]\nreport_interval = 60\nservice_down_time = 180\n"
                "update_resources_interval = 120\nreserved_host_memory_mb = 0\n"
                f"state_path = {self.state}\n[compute]\nwork_poll_interval = 0.2\n"
                f"[database]\nconnection = {self.bouncer.url}\npooler = transaction\n")
        self.nl("db", "sync")
        self.procs = {}

    def nl(self, *argv):
        return self.ok("--config-file", self.config, *argv)

    def nl_json(self, *argv):
        return json.loads(self.nl(*argv, "-f", "json"))

    def start(self, host):
        log = open(os.path.join(self.state, f"{host}.log"), "ab")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "nova_lite.cli.main", "--config-file", self.config,
             "compute", "--host", host, "--driver", "fake.small"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.procs[host] = proc
        self.addCleanup(self.stop, host)

    def stop(self, host):
        proc = self.procs[host]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)

    def log_of(self, host):
        with open(os.path.join(self.state, f"{host}.log"), encoding="utf-8",
                  errors="replace") as log:
            return log.read()

    def wait_until(self, condition, what, timeout=90):
        deadline = time.monotonic() + timeout
        while not condition():
            for host, proc in self.procs.items():
                if proc.poll() is not None:
                    self.fail(f"compute service {host} exited ({proc.returncode}):\n"
                              f"{self.log_of(host)}")
            if time.monotonic() > deadline:
                self.fail(f"timed out waiting for {what}")
            time.sleep(0.1)

    def api_get(self, server, path):
        with urllib.request.urlopen(server.url + path, timeout=30) as response:
            return json.load(response)

    def test_services_scheduler_and_api_share_two_server_sessions(self):
        for host in HOSTS:
            self.start(host)
        up = lambda: {s["Host"] for s in self.nl_json("service", "list")  # noqa: E731
                      if s["State"] == "up"}
        self.wait_until(lambda: up() == set(HOSTS), "both services up")
        self.wait_until(lambda: len(self.nl_json("hypervisor", "list")) == 2,
                        "both nodes recorded")

        # The services take the builds by polling, well within the timeout
        # (their heartbeat, the listener's fallback, is a minute apart).
        built = self.nl_json("server", "create", "--flavor", "m1.tiny", "--count", "4",
                             "--wait", "--timeout", "20")
        self.assertEqual(["active"] * 4, [s["Status"] for s in built])
        self.assertEqual(set(HOSTS), {s["Host"] for s in built})
        gone = built[0]["ID"]
        self.assertIn(f"Deleted server {gone}", self.nl(
            "server", "delete", gone, "--yes-i-really-mean-it", "--wait", "--timeout", "20"))
        stats = self.nl_json("hypervisor", "stats")
        self.assertEqual((3, 3 * 512), (stats["running_vms"], stats["memory_mb_used"]))
        # Each host's service audits itself on request: nothing differs.
        for host in HOSTS:
            code, out, err = self.cli("--config-file", self.config, "audit", "--host", host,
                                      "--timeout", "20")
            self.assertEqual(0, code, f"audit of {host}:\n{out}\n{err}")

        # The API reads the same records through the pooler.
        settings = conf.load_settings(self.config)
        reader = Store(self.bouncer.url, readonly=True, pooler=settings.database_pooler)
        self.addCleanup(reader.close)
        server = BackgroundServer(make_app(reader, settings)).start()
        self.addCleanup(server.stop)
        api_stats = self.api_get(server, "/v1/hypervisors/statistics")["hypervisor_statistics"]
        self.assertEqual((3, 3 * 512), (api_stats["running_vms"], api_stats["memory_mb_used"]))
        self.assertEqual({(host, "up") for host in HOSTS},
                         {(s["host"], s["state"])
                          for s in self.api_get(server, "/v1/services")["services"]})

        # Many clients, at most two server sessions: the pooler shared them.
        pool = self.bouncer.pool()
        servers = sum(pool[k] for k in ("sv_active", "sv_idle", "sv_used", "sv_tested",
                                        "sv_login"))
        self.assertGreaterEqual(pool["cl_active"] + pool["cl_waiting"], 3, pool)
        self.assertLessEqual(servers, 2, pool)
        self.assertLessEqual(server_sessions(self.database), 2)
        for host in HOSTS:
            log = self.log_of(host)
            self.assertIn(f"Not listening for work of host {host}", log)
            self.assertNotIn("Traceback", log)
