"""Fleet on PostgreSQL: N nodes under S compute services in steady state, beside pgbench.

Two layouts: ``ironic`` (100 nodes per service, as a bare-metal conductor
manages them: 100,000 nodes are 1,000 services) and ``libvirt`` (one node
per service: 10,000 hosts are 10,000 services).  Every service is a real
:class:`~nova_lite.compute.manager.ComputeService` over ``fake.multinode``
(Nova's default sizes, a report that never changes) on one PostgreSQL
database; no process per service is started.  A few worker processes
(``workers``: 2 for the ironic layout, 4 for the libvirt one; see
:data:`WORKERS`) each own a contiguous share of the services and
one :class:`~nova_lite.db.Store` (so a handful of connections each), and run
their services' database traffic as the services would:

- loading: each service's first pass (``run_once``: heartbeat, every node
  record and its inventories), then a second pass, so that the timed
  passes find nothing changed; meanwhile the services loaded beat every
  ``report_interval``, as their heartbeat threads would, also while their
  worker waits for the others to finish loading;
- steady state: each service's pass (``run_once()``, which beats first)
  every ``[DEFAULT] update_resources_interval`` seconds (60) and its
  heartbeat thread's beat (``beat()``, skipped when the pass beat less
  than ``report_interval`` ago) every ``[DEFAULT] report_interval``
  seconds (10), each timed from the last beat (the pass's or its own) as
  the service's heartbeat thread times it; the services' phases spread
  evenly over each interval.
  A worker that falls behind runs what is due oldest first and reports it
  (``passes_due`` beside ``passes_done``, the lateness of the passes).
  Each worker also counts the transactions and statements its services
  sent (SQLAlchemy's engine events, and the direct transactions as a
  :class:`nova_lite.db.direct.DirectObserver`, as
  :mod:`nova_lite.testing.db_cost` counts a pass).

After one pass interval (the first passes after the load record the
findings of the services loaded before them, whose beats are as old as
the load), in the same run, alternately for ``rounds`` rounds of ``window_s``
seconds each: ``pgbench`` alone (the fleet paused, its schedule shifted
on by the pause so that nothing piles up), the fleet alone, and the fleet
with ``pgbench`` beside it.  ``pgbench`` runs its default tpcb-like script
with ``pgbench_clients`` clients and threads, ``-M prepared``, on a
database of its own initialised at a scale of its client count.

Reported per window: the fleet database's transactions/s (the
``xact_commit`` + ``xact_rollback`` delta of ``pg_stat_database``), the
server's WAL bytes/s (``pg_current_wal_lsn()`` delta) and, from
``pg_stat_wal`` (PostgreSQL 14 and later), WAL records/s, WAL writes/s and
WAL flushes/s (``wal_sync``: the fsyncs that commits wait for, or the WAL
writer's for the heartbeats' ``synchronous_commit = off``); the
simulator's CPU (its worker processes', as a share of one core) and the
machine's (``/proc/stat``, every process: PostgreSQL, pgbench and anything
else running); passes and beats due and done.  WAL and ``pg_stat_wal``
figures are server-wide: another user of the server adds to them.  The
goal is pgbench's tps with the fleet over its tps alone (medians of the
rounds).  The read side of a fleet this size (``/v1/hypervisors``, the
metrics scrape, the scheduler) is measured by ``bench.paging`` and
``bench.scheduler``.
"""

import heapq
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from bench import common, references

NAME = "fleet_pg"
DEFAULT_SIZES = [10000, 100000]
TINY_SIZES = [4]
#: Nodes per service of each layout.
LAYOUTS = {"ironic": 100, "libvirt": 1}
#: The largest number of services a case is made for: a service's steady
#: pass costs a few milliseconds of Python, so 100,000 one-node services
#: (1,667 passes and 10,000 beats a second) need far more than 2 cores.
MAX_SERVICES = 10000
#: Worker processes per layout.  A worker runs its services' passes and
#: beats one after another and waits for each round trip, so a share of
#: 5,000 one-node services (83 passes and 417 beats a second) leaves one
#: worker no time to spare once the server's answers slow down: it falls
#: behind, beats come late, services look down and every pass then records
#: their findings.  The CPU of every worker counts against the goal all the
#: same.
WORKERS = {"ironic": 2, "libvirt": 4}
PGBENCH_CLIENTS = 2
WINDOW_S = 60
ROUNDS = 2
TARGETS = {"100000 nodes, ironic": {"pgbench_ratio": ">= 0.9"},
           "10000 nodes, libvirt": {"pgbench_ratio": ">= 0.5"}}


def cases(sizes):
    tiny = max(sizes) < 100
    out = []
    for nodes in sizes:
        for layout, per_service in LAYOUTS.items():
            per_service = min(per_service, max(1, nodes // 2))
            services = -(-nodes // per_service)
            if services > MAX_SERVICES:
                continue
            case = {"layout": layout, "nodes": nodes, "per_service": per_service,
                    "services": services, "workers": WORKERS[layout],
                    "pgbench_clients": PGBENCH_CLIENTS,
                    "window_s": 2 if tiny else WINDOW_S, "rounds": 1 if tiny else ROUNDS}
            if tiny:   # the test suite's: passes and beats within its seconds
                case.update(update_resources_interval=1.0, report_interval=0.4)
            out.append(case)
    return out


def service_hosts(case):
    """``[(host, [nodename, ...]), ...]`` of every service of the case."""
    out = []
    per = case["per_service"]
    for index in range(case["services"]):
        host = f"fleet-{index:05d}"
        count = min(per, case["nodes"] - index * per)
        out.append((host, [f"{host}-n{i:03d}" for i in range(count)]))
    return out


def _settings(case):
    from nova_lite import conf
    overrides = {k: case[k] for k in ("update_resources_interval", "report_interval")
                 if k in case}
    return conf.Settings(**overrides)


# -- the worker processes -------------------------------------------------------

class _Schedule:
    """Passes and beats of many services, due times on the monotonic clock (s).

    Service ``g`` of ``total`` starts its passes ``g / total`` of a pass
    interval after the start and its beats ``g / total`` of a report
    interval after it, so the load is even over each interval.
    """

    PASS, BEAT = 0, 1

    def __init__(self, indexes, total, pass_interval, beat_interval, start):
        self.intervals = {self.PASS: pass_interval, self.BEAT: beat_interval}
        self.heap = []
        for local, g in enumerate(indexes):
            for kind, interval in self.intervals.items():
                self.heap.append((start + interval * g / total, kind, local))
        heapq.heapify(self.heap)

    def next_due(self):
        return self.heap[0][0]

    def pop(self):
        """(due, kind, service) of the oldest task, taken off; :meth:`push` it again."""
        return heapq.heappop(self.heap)

    def push(self, due, kind, local):
        heapq.heappush(self.heap, (due, kind, local))

    def late(self, now):
        """{kind: how many tasks are due at ``now`` and not run}."""
        out = {self.PASS: 0, self.BEAT: 0}
        for due, kind, _ in self.heap:
            if due <= now:
                out[kind] += 1
        return out

    def shift(self, seconds):
        self.heap = [(due + seconds, kind, local) for due, kind, local in self.heap]
        heapq.heapify(self.heap)


class _LoadBeats:
    """While the services load, the ones loaded beat as their heartbeat
    threads would (every ``interval`` s): a service whose beat grew older
    than ``service_down_time`` would be down, and every later first pass
    would record its findings."""

    def __init__(self, interval):
        self.interval = interval
        self.next = time.monotonic() + interval

    def due(self, loaded):
        if time.monotonic() < self.next:
            return
        for svc in loaded:
            svc.beat()
        self.next = time.monotonic() + self.interval


class _DirectCounter:
    """Counts the direct transactions and their statements (a
    :class:`nova_lite.db.direct.DirectObserver`) into ``counters``."""

    def __init__(self, counters):
        self.counters = counters

    def direct_begin(self):
        self.counters["transactions"] += 1

    def direct_statement(self, sql):
        self.counters["statements"] += 1

    def direct_done(self, sql, cursor):
        pass

    def direct_ending(self, dbapi_connection, autocommit):
        pass


def _worker(url, case, indexes, conn):
    """Own the services ``indexes``; load them, then run them as ``conn`` says.

    Commands on ``conn``: ``"run"`` (start or resume), ``"pause"``,
    ``"mark"`` (answer the counters so far) and ``"stop"`` (answer the
    counters and end).
    """
    import sqlalchemy as sa

    from nova_lite.compute.manager import ComputeService
    from nova_lite.db import Store, direct
    from nova_lite.virt import loader
    settings = _settings(case)
    hosts = service_hosts(case)
    store = Store(url)
    services = []
    started = time.perf_counter()
    # The class is looked up once (the entry points' scan costs more than a
    # pass); each service gets its own driver, as load_driver builds it.
    plugin, version = loader.load_driver_class("fake.multinode")
    for g in indexes:
        host, names = hosts[g]
        driver = plugin(settings=settings, nodes=names)
        driver.api_version = version
        services.append(ComputeService(host, driver, store=store, settings=settings))
    failed = 0
    beats = _LoadBeats(settings.report_interval)
    for i, svc in enumerate(services):
        failed += len(svc.run_once().failed)
        beats.due(services[:i + 1])
    for svc in services:
        svc.run_once(beat=False)
        beats.due(services)
    conn.send({"loaded_s": time.perf_counter() - started, "failed": failed})

    counters = {"passes_done": 0, "beats_done": 0, "beats_skipped": 0, "errors": 0,
                "transactions": 0, "statements": 0}

    def count(key):
        def listener(*_args):
            counters[key] += 1
        return listener

    # What the services sent, counted at SQLAlchemy's engine events and as
    # an observer of the direct transactions (as nova_lite.testing.db_cost
    # counts a pass), from the start of the steady state.
    sa.event.listen(store.db.engine, "begin", count("transactions"))
    sa.event.listen(store.db.engine, "before_cursor_execute", count("statements"))
    direct.observe(store.db.engine, _DirectCounter(counters))
    lateness = []
    schedule = None
    paused_at = None
    running = False
    while True:
        now = time.monotonic()
        if schedule is None:
            # Loaded, waiting for the other workers: the services' heartbeat
            # threads beat on (else a worker that loaded first has its
            # services look down to the others' load passes, which then
            # record their findings).
            beats.due(services)
        wait = 0.5 if not running else max(0.0, schedule.next_due() - now)
        if wait > 0 or conn.poll():
            if conn.poll(min(wait, 0.5)):
                command = conn.recv()
                if command == "run":
                    now = time.monotonic()
                    if schedule is None:
                        schedule = _Schedule(indexes, case["services"],
                                             settings.update_resources_interval,
                                             settings.report_interval, now)
                    elif paused_at is not None:
                        schedule.shift(now - paused_at)
                    running, paused_at = True, None
                elif command == "pause":
                    running, paused_at = False, time.monotonic()
                elif command in ("mark", "stop"):
                    late = schedule.late(time.monotonic()) if schedule else {0: 0, 1: 0}
                    conn.send(dict(counters, passes_late=late[_Schedule.PASS],
                                   beats_late=late[_Schedule.BEAT],
                                   cpu_s=time.process_time(),
                                   lateness_s=lateness))
                    lateness = []
                    if command == "stop":
                        break
            continue
        due, kind, local = schedule.pop()
        svc = services[local]
        # As the service times them: the next pass an interval after this
        # one started; the next beat an interval after the last beat, the
        # pass's or the thread's (a beat skipped because a pass beat less
        # than report_interval ago waits for the rest of that interval).
        next_due = now + schedule.intervals[kind]
        try:
            if kind == _Schedule.PASS:
                lateness.append(round(now - due, 4))
                svc.run_once()
                counters["passes_done"] += 1
            elif svc.beat():
                counters["beats_done"] += 1
            else:
                counters["beats_skipped"] += 1
                next_due = now + max(0.001, svc._next_beat_in(now))
        except Exception:   # noqa: BLE001 - counted; the fleet runs on
            counters["errors"] += 1
        schedule.push(next_due, kind, local)
    store.close()


# -- the server's counters ------------------------------------------------------

def _server_counters(engine, database):
    """The server's cumulative counters now (see the module docstring)."""
    import sqlalchemy as sa
    with engine.connect() as conn:
        xacts = conn.execute(sa.text(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = :d"),
            {"d": database}).scalar_one()
        lsn = conn.execute(sa.text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one()
        wal = conn.execute(sa.text(
            "SELECT wal_records, wal_write, wal_sync FROM pg_stat_wal")).one()
    return {"xacts": int(xacts), "wal_bytes": int(lsn), "wal_records": int(wal[0]),
            "wal_writes": int(wal[1]), "wal_flushes": int(wal[2]), "at": time.monotonic(),
            "machine_cpu": _machine_cpu()}


def _machine_cpu():
    """(busy jiffies, total jiffies) of every CPU, from /proc/stat (None elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def _rates(before, after):
    seconds = after["at"] - before["at"]
    out = {f"{k}_per_s": round((after[k] - before[k]) / seconds, 1)
           for k in ("xacts", "wal_bytes", "wal_records", "wal_writes", "wal_flushes")}
    if before["machine_cpu"] and after["machine_cpu"]:
        busy = after["machine_cpu"][0] - before["machine_cpu"][0]
        total = after["machine_cpu"][1] - before["machine_cpu"][1]
        out["machine_cpu_busy"] = round(busy / total, 3) if total else None
    out["seconds"] = round(seconds, 2)
    return out


# -- pgbench --------------------------------------------------------------------

class _Pgbench:
    """pgbench on a database of its own on the fleet's server (scale = clients)."""

    def __init__(self, clients):
        import sqlalchemy as sa
        self.clients = clients
        self.binary = shutil.which("pgbench")
        self.name = f"{common.PG_BENCH_DB}_fleet_pgbench_{os.getpid()}"
        url = sa.engine.make_url(common._pg_database(self.name, create=True))
        self.connection = ["-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
                           "-U", url.username or "postgres", url.database]
        self.env = dict(os.environ, PGPASSWORD=url.password or "")
        init = subprocess.run(
            references.pgbench_init_command(self.binary, clients, self.connection),
            capture_output=True, text=True, env=self.env)
        if init.returncode:
            raise RuntimeError(f"pgbench -i failed: {init.stderr.strip()[-300:]}")

    def start(self, seconds):
        return subprocess.Popen(
            references.pgbench_command(self.binary, self.clients, seconds, self.connection),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)

    @staticmethod
    def tps(proc):
        out, err = proc.communicate()
        found = re.search(r"tps = ([0-9.]+)", out)
        if proc.returncode or not found:
            raise RuntimeError(f"pgbench failed: {(err or out).strip()[-300:]}")
        return float(found.group(1))

    def close(self):
        common._pg_database(self.name, create=False)


# -- autovacuum ------------------------------------------------------------------

class _AutovacuumStandIn:
    """What autovacuum would do, where the server runs without it.

    A fleet's tables grow from empty during the load, and its heartbeats
    leave a dead row version each.  With autovacuum off (as on this machine
    kind's PostgreSQL) nothing ever analyzes or vacuums them: the planner's
    statistics say the tables are empty, psycopg's prepared statements keep
    the generic plans made while they were (a full read of ``compute_nodes``
    in every pass: the load takes quadratic time), and the dead versions
    stay.  No operator runs a fleet so.  Started only when ``SHOW
    autovacuum`` says off, a thread does autovacuum's work by its rules and
    the server's own settings: every ``autovacuum_naptime``, ANALYZE each
    table of the fleet's database with more than
    ``autovacuum_analyze_threshold`` + ``autovacuum_analyze_scale_factor`` x
    its rows changed since the last analyze, and VACUUM each with more dead
    rows than the vacuum threshold and scale factor allow, or more rows
    inserted since its last vacuum than the insert threshold and scale
    factor allow.  What it ran is reported (``autovacuum``), and so is a
    round that failed (``errors``, ``last_error``).
    """

    SETTINGS = ("autovacuum_naptime", "autovacuum_analyze_threshold",
                "autovacuum_analyze_scale_factor", "autovacuum_vacuum_threshold",
                "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_insert_threshold",
                "autovacuum_vacuum_insert_scale_factor")

    def __init__(self, url):
        import sqlalchemy as sa
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
        with self.engine.connect() as conn:
            self.server_runs_it = conn.exec_driver_sql("SHOW autovacuum").scalar() == "on"
            found = dict(conn.exec_driver_sql(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%(n)s)",
                {"n": list(self.SETTINGS)}).all())
        self.settings = {name: float(found[name]) for name in self.SETTINGS}
        self.analyzed = self.vacuumed = self.errors = 0
        self.last_error = None
        self.busy_s = 0.0
        self._stop = None
        self._thread = None

    def start(self):
        import threading
        if self.server_runs_it:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autovacuum-stand-in",
                                        daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.settings["autovacuum_naptime"]):
            self.round()

    def round(self):
        """:meth:`once`, a failure kept for the report (``errors``, ``last_error``)
        and on stderr; as autovacuum's, the next round tries again.  Returns
        whether the round ran."""
        try:
            self.once()
            return True
        except Exception as exc:   # noqa: BLE001 - reported; the fleet's figures need it
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            print(f"fleet_pg: the autovacuum stand-in's round failed: {self.last_error}",
                  file=sys.stderr)
            return False

    def once(self):
        """One of autovacuum's rounds over the database's tables."""
        s = self.settings
        quote = self.engine.dialect.identifier_preparer.quote_identifier
        started = time.monotonic()
        with self.engine.connect() as conn:
            tables = conn.exec_driver_sql(
                "SELECT t.relname, t.n_mod_since_analyze, t.n_dead_tup, t.n_ins_since_vacuum, "
                "greatest(c.reltuples, 0) FROM pg_stat_user_tables t "
                "JOIN pg_class c ON c.oid = t.relid").all()
            for name, changed, dead, inserted, rows in tables:
                vacuum = dead > s["autovacuum_vacuum_threshold"] + \
                    s["autovacuum_vacuum_scale_factor"] * rows or \
                    inserted > s["autovacuum_vacuum_insert_threshold"] + \
                    s["autovacuum_vacuum_insert_scale_factor"] * rows
                analyze = changed > s["autovacuum_analyze_threshold"] + \
                    s["autovacuum_analyze_scale_factor"] * rows
                if vacuum or analyze:
                    verb = "VACUUM (ANALYZE)" if vacuum and analyze else \
                        "VACUUM" if vacuum else "ANALYZE"
                    conn.exec_driver_sql(f"{verb} {quote(name)}")
                    self.vacuumed += vacuum
                    self.analyzed += analyze
        self.busy_s += time.monotonic() - started

    def stop(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self.engine.dispose()

    def report(self):
        if self.server_runs_it:
            return "the server's"
        report = {"stand_in": True, "analyzed": self.analyzed, "vacuumed": self.vacuumed,
                  "busy_s": round(self.busy_s, 1)}
        if self.errors:
            # The statistics and plans the figures ran on may be stale.
            report.update(errors=self.errors, last_error=self.last_error)
        return report


# -- one case -------------------------------------------------------------------

def _send(pipes, command):
    for pipe in pipes:
        pipe.send(command)


def _marks(pipes):
    _send(pipes, "mark")
    return [pipe.recv() for pipe in pipes]


def _fleet_delta(before, after, seconds):
    """What the workers did between two marks."""
    def total(key, marks):
        return sum(m[key] for m in marks)
    done = total("passes_done", after) - total("passes_done", before)
    due = done + total("passes_late", after) - total("passes_late", before)
    beats = total("beats_done", after) - total("beats_done", before)
    skipped = total("beats_skipped", after) - total("beats_skipped", before)
    beats_due = beats + skipped + total("beats_late", after) - total("beats_late", before)
    transactions = total("transactions", after) - total("transactions", before)
    statements = total("statements", after) - total("statements", before)
    late = sorted(x for m in after for x in m["lateness_s"])
    cpu = total("cpu_s", after) - total("cpu_s", before)
    return {"passes_done": done, "passes_due": due,
            "passes_late_at_end": total("passes_late", after),
            "beats_done": beats, "beats_due": beats_due,
            "beats_skipped_after_a_pass": skipped,
            "pass_lateness_s": {"median": statistics.median(late) if late else None,
                                "p99": common.percentile(late, 0.99) if late else None,
                                "max": late[-1] if late else None},
            "errors": total("errors", after) - total("errors", before),
            "transactions": transactions, "statements": statements,
            "statements_per_transaction": round(statements / transactions, 2)
            if transactions else None,
            "simulator_cpu_cores": round(cpu / seconds, 3)}


def _window(engine, database, pipes, seconds, pgbench=None):
    """One measured window: the fleet's and the server's figures (and pgbench's tps)."""
    before_fleet = _marks(pipes) if pipes else None
    before = _server_counters(engine, database)
    proc = pgbench.start(seconds) if pgbench else None
    if proc:
        tps = pgbench.tps(proc)
    else:
        time.sleep(seconds)
    after = _server_counters(engine, database)
    figures = {"server": _rates(before, after)}
    if pipes:
        figures["fleet"] = _fleet_delta(before_fleet, _marks(pipes),
                                        figures["server"]["seconds"])
    if proc:
        figures["pgbench_tps"] = tps
    return figures


def run_case(case):
    import sqlalchemy as sa

    from nova_lite.db import Store
    problem = common.postgresql_available()
    if problem:
        return {"skipped": f"no PostgreSQL: {problem}"}
    if shutil.which("pgbench") is None:
        return {"skipped": "pgbench is not installed"}
    # fork where there is one: the workers start without importing again
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with common.store_url("postgresql") as url:
        Store(url).close()   # the schema, once, before the workers open it
        database = sa.engine.make_url(url).database
        engine = common._pg_admin_engine()
        pgbench = _Pgbench(case["pgbench_clients"])
        workers = min(case["workers"], case["services"])
        shares = [list(range(case["services"]))[i::workers] for i in range(workers)]
        pipes, procs = [], []
        autovacuum = _AutovacuumStandIn(url)
        autovacuum.start()
        try:
            for share in shares:
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(url, case, share, theirs))
                proc.start()
                theirs.close()   # a worker that dies then ends recv() with EOFError
                pipes.append(ours)
                procs.append(proc)
            loaded = [pipe.recv() for pipe in pipes]
            load_s = max(m["loaded_s"] for m in loaded)
            _send(pipes, "run")
            # One pass interval before the first window: the first passes
            # after the load find every service that loaded before them
            # down (its beat is as old as the load) and record its findings.
            time.sleep(_settings(case).update_resources_interval)
            rounds = []
            for _ in range(case["rounds"]):
                _send(pipes, "pause")
                alone = _window(engine, database, [], case["window_s"], pgbench)
                _send(pipes, "run")
                fleet = _window(engine, database, pipes, case["window_s"])
                both = _window(engine, database, pipes, case["window_s"], pgbench)
                rounds.append({"pgbench_alone": alone, "fleet_alone": fleet,
                               "fleet_with_pgbench": both})
            _send(pipes, "stop")
            for pipe in pipes:
                pipe.recv()
            for proc in procs:
                proc.join()
            counts = _counts(url)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
                    proc.join()
            autovacuum.stop()
            pgbench.close()
            engine.dispose()
    alone = statistics.median(r["pgbench_alone"]["pgbench_tps"] for r in rounds)
    both = statistics.median(r["fleet_with_pgbench"]["pgbench_tps"] for r in rounds)
    fleet = [r["fleet_alone"] for r in rounds]
    return {"load_s": round(load_s, 1), "load_failed_nodes": sum(m["failed"] for m in loaded),
            "compute_nodes": counts[0], "services_recorded": counts[1],
            "pgbench_alone_tps": alone, "pgbench_with_fleet_tps": both,
            "pgbench_ratio": round(both / alone, 3),
            "fleet_xacts_per_s": statistics.median(f["server"]["xacts_per_s"] for f in fleet),
            "fleet_wal_bytes_per_s": statistics.median(f["server"]["wal_bytes_per_s"]
                                                       for f in fleet),
            "fleet_wal_flushes_per_s": statistics.median(f["server"]["wal_flushes_per_s"]
                                                         for f in fleet),
            "simulator_cpu_cores": statistics.median(f["fleet"]["simulator_cpu_cores"]
                                                     for f in fleet),
            "passes_done": sum(f["fleet"]["passes_done"] for f in fleet),
            "passes_due": sum(f["fleet"]["passes_due"] for f in fleet),
            "autovacuum": autovacuum.report(),
            "rounds": rounds}


def _counts(url):
    """(compute node records, service records) in the fleet's database."""
    from nova_lite.db import Store
    store = Store(url, readonly=True)
    try:
        return len(store.get_compute_nodes()), len(store.list_services())
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
