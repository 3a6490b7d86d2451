"""References: each claim rate beside a reference measured in the same run.

- ``sqlite-file``: 1,000 claims from one process on a SQLite file, against
  a plain ``sqlite3`` loop of the same transaction shape (BEGIN IMMEDIATE,
  update the node's generation, insert one allocation, COMMIT; WAL,
  synchronous=NORMAL) on a file of its own (``ratio``, informative), and
  ``own_rows``: a plain ``sqlite3`` loop writing exactly what a claim
  writes (the generation swap, the instance's row and the allocation's, on
  nova-lite's own schema as a Store creates it: its indexes, foreign keys
  and the triggers that move the node's change sequence), binding every
  column as a plain loop does.  Goal: ``own_rows_ratio`` at least 60%;
  the claims and ``own_rows`` run three times, alternately, and their
  medians are compared (``rounds`` has every figure), as the PostgreSQL
  cases do.  Beside it, informative, ``own_rows_untriggered_per_s``: the same loop on
  the tables alone (no change-sequence triggers), which is what the change
  sequence costs every writer of a node; and
  ``own_rows_without_nulls_per_s``: the same loop naming in its INSERTs
  only the columns whose values are not NULL, as a claim's statements do
  (``sqlite3`` binds each None through a failed lookup of an adapter): the
  most any claim with these records could reach.
- ``postgresql-1``: 1,000 claims from one process against ``pgbench`` with
  one client (its default tpcb-like script, 10 s, the prepared protocol
  ``-M prepared``) on a database of its own on the same server, initialised
  at a scale of at least its client count (``pgbench -i -s``, as pgbench's
  documentation asks: fewer branches than clients makes its clients wait
  on each other's row locks).  Goal: at least 90%.  Beside it the client's
  share: ``claims_per_cpu_s`` (claims per second of the claiming process's
  CPU time) and ``client_cpu_share`` (the claim rate over it: 1.0 means the
  client's CPU was the whole of a claim's time, less means the server and
  the waits for it took the rest).
- ``postgresql-4``: 4 processes, one node each (bench.concurrency's
  ``node-per-process``), against ``pgbench`` with 4 clients (scale 4,
  ``-M prepared``).  Goal: at least 80%.
- ``postgresql-shared``: 4 processes on one shared node against the
  1-process rate of this run.  Goal: at least 80%.

Each PostgreSQL case, and the SQLite goal, runs its claims and its
reference three times, alternately, and compares their medians (``rounds``
has every figure): one run of either side moved by a factor of 1.5 to 2
with the machine's minute, the disk's flush time above all, which bounds
both.

Each ratio is taken in one run, so a busy or slow machine moves both sides.
A case whose reference cannot run here (no ``pgbench``, no PostgreSQL) says
so instead of a figure.
"""

import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench import claims, common, concurrency

NAME = "references"
DEFAULT_SIZES = [1000]
TINY_SIZES = [5]
CASES = ("sqlite-file", "postgresql-1", "postgresql-4", "postgresql-shared")
TARGETS = {"sqlite-file": {"own_rows_ratio": ">= 0.6"}, "postgresql-1": {"ratio": ">= 0.9"},
           "postgresql-4": {"ratio": ">= 0.8"}, "postgresql-shared": {"ratio": ">= 0.8"}}
PGBENCH_SECONDS = 10
#: Rounds of each PostgreSQL case and of the SQLite goal, the claims and their reference run
#: alternately: the medians are compared (one run of either side moved by a
#: factor of 1.5 with the machine's minute, the disk's flush time above all).
ROUNDS = 3
#: pgbench's query protocol: prepared statements, as psycopg (the claims'
#: driver) prepares a statement on the server once it has run five times.
PGBENCH_PROTOCOL = "prepared"


def cases(sizes):
    return [{"case": name, "claims": n} for n in sizes for name in CASES]


def sqlite_loop_per_s(count):
    """Transactions per second of the plain sqlite3 loop (see the module docstring)."""
    directory = tempfile.mkdtemp(prefix="nova-lite-bench-")
    try:
        conn = sqlite3.connect(os.path.join(directory, "loop.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE nodes (uuid TEXT PRIMARY KEY, generation INTEGER)")
        conn.execute("CREATE TABLE allocations (consumer TEXT, node TEXT, vcpu INTEGER, "
                     "memory_mb INTEGER, disk_gb INTEGER, PRIMARY KEY (consumer, node))")
        conn.execute("INSERT INTO nodes VALUES ('n', 0)")
        consumers = [str(uuid.uuid4()) for _ in range(count)]
        common.settle_heap()
        start = time.perf_counter()
        for generation, consumer in enumerate(consumers):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE nodes SET generation = ? WHERE uuid = ? AND generation = ?",
                         (generation + 1, "n", generation))
            conn.execute("INSERT INTO allocations VALUES (?, ?, ?, ?, ?)",
                         (consumer, "n", 1, 512, 1))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.close()
        return round(count / elapsed, 1)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def sqlite_own_rows_per_s(count, triggers=True, nulls=True, checkpoints=True):
    """Transactions per second of plain ``sqlite3`` writing a claim's own rows
    (see the module docstring), the instance and allocation rows built by
    nova-lite's own serialisers; on the schema a Store creates, or with
    ``triggers=False`` on its tables alone.  With ``nulls=False`` the
    INSERTs name only the columns whose values are not NULL (the others
    take their NULL default), as a claim's own statements do.  With
    ``checkpoints=False`` the loop's connection never checkpoints (its
    ``wal_autocheckpoint`` is 0); the log is copied when it closes, after
    the timing."""
    import sqlalchemy as sa
    from nova_lite.compute import accounting
    from nova_lite.db import Store, models, rows
    from nova_lite.objects import Allocation, ZERO_OVERHEAD
    directory = tempfile.mkdtemp(prefix="nova-lite-bench-")
    path = os.path.join(directory, "own.db")
    try:
        if triggers:
            Store(f"sqlite:///{path}").close()
        else:
            engine = sa.create_engine(f"sqlite:///{path}")
            models.metadata.create_all(engine)
            engine.dispose()
        conn = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            conn.execute(f"PRAGMA {pragma}")
        if not checkpoints:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("INSERT INTO compute_nodes (uuid, host, nodename, generation, reported, "
                     "created_at, updated_at) VALUES ('n', 'h', 'h', 0, 1, 0, 0)")
        now = time.time()
        claimed = []
        for inst in common.make_instances(count):
            alloc = Allocation(consumer_uuid=inst.uuid, consumer_type="instance",
                               instance_uuid=inst.uuid, node_uuid="n", flavor=inst.flavor,
                               resources=accounting.requested_resources(inst.flavor,
                                                                        ZERO_OVERHEAD))
            instance = rows.new_instance_values(inst, now)
            allocation = rows.allocation_values(alloc, now)
            if not nulls:
                instance = {k: v for k, v in instance.items() if v is not None}
                allocation = {k: v for k, v in allocation.items() if v is not None}
            claimed.append((tuple(instance.values()), tuple(allocation.values())))
        inst_sql = (f"INSERT INTO instances ({', '.join(instance)}) "
                    f"VALUES ({', '.join('?' * len(instance))})")
        alloc_sql = (f"INSERT INTO allocations ({', '.join(allocation)}) "
                     f"VALUES ({', '.join('?' * len(allocation))})")
        common.settle_heap()
        start = time.perf_counter()
        for generation, (instance_row, allocation_row) in enumerate(claimed):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE compute_nodes SET generation = generation + 1 "
                         "WHERE uuid = 'n' AND generation = ? RETURNING generation",
                         (generation,)).fetchone()
            conn.execute(inst_sql, instance_row)
            conn.execute(alloc_sql, allocation_row)
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        conn.close()
        return round(count / elapsed, 1)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def pgbench_scale(clients):
    """pgbench's scale factor for ``clients`` clients: at least the client count
    (each client then mostly updates a branch row of its own), at least 1."""
    return max(clients, 1)


def pgbench_command(binary, clients, seconds, connection):
    """The ``pgbench`` run: ``clients`` clients and threads, ``seconds`` s,
    the prepared protocol, against ``connection`` (its -h/-p/-U/dbname)."""
    return [binary, "-c", str(clients), "-j", str(clients), "-T", str(seconds),
            "-M", PGBENCH_PROTOCOL, *connection]


def pgbench_init_command(binary, clients, connection):
    """The ``pgbench -i`` run for ``clients`` clients (scale :func:`pgbench_scale`)."""
    return [binary, "-i", "-q", "-s", str(pgbench_scale(clients)), *connection]


def pgbench_tps(clients, seconds=PGBENCH_SECONDS):
    """tps of pgbench's default script with ``clients`` clients, on a database of its own
    initialised at scale :func:`pgbench_scale`, with ``-M prepared``."""
    binary = shutil.which("pgbench")
    if binary is None:
        return None, "pgbench is not installed"
    import sqlalchemy as sa
    name = f"{common.PG_BENCH_DB}_pgbench"
    url = sa.engine.make_url(common._pg_database(name, create=True))
    parsed = ["-h", url.host or "127.0.0.1", "-p", str(url.port or 5432),
              "-U", url.username or "postgres", url.database]
    env = dict(os.environ, PGPASSWORD=url.password or "")
    try:
        init = subprocess.run(pgbench_init_command(binary, clients, parsed),
                              capture_output=True, text=True, env=env)
        if init.returncode:
            return None, f"pgbench -i failed: {init.stderr.strip()[-300:]}"
        run = subprocess.run(pgbench_command(binary, clients, seconds, parsed),
                             capture_output=True, text=True, env=env)
        found = re.search(r"tps = ([0-9.]+)", run.stdout)
        if run.returncode or not found:
            return None, f"pgbench failed: {(run.stderr or run.stdout).strip()[-300:]}"
        return float(found.group(1)), None
    finally:
        common._pg_database(name, create=False)


def run_case(case):
    name, count = case["case"], case["claims"]
    if name == "sqlite-file":
        loops = max(count, 1000)
        ours_rounds, own_rounds = [], []
        for _ in range(ROUNDS):
            ours_rounds.append(claims.run_case({"store": "sqlite-file", "claims": count})
                               ["claims_per_s"])
            own_rounds.append(sqlite_own_rows_per_s(loops))
        ours, own_rows = statistics.median(ours_rounds), statistics.median(own_rounds)
        reference = sqlite_loop_per_s(loops)
        untriggered = sqlite_own_rows_per_s(loops, triggers=False)
        without_nulls = sqlite_own_rows_per_s(loops, nulls=False)
        elsewhere = sqlite_own_rows_per_s(loops, checkpoints=False)
        return {"claims_per_s": ours, "reference_per_s": reference,
                "reference": "plain sqlite3 loop, same transaction shape",
                "ratio": round(ours / reference, 3),
                "own_rows_per_s": own_rows,
                "own_rows_ratio": round(ours / own_rows, 3),
                "rounds": {"claims": ours_rounds, "own_rows": own_rounds},
                "own_rows_untriggered_per_s": untriggered,
                "own_rows_without_nulls_per_s": without_nulls,
                "own_rows_checkpoints_elsewhere_per_s": elsewhere,
                "own_rows_of_reference": round(own_rows / reference, 3)}
    reason = common.postgresql_available()
    if reason:
        return {"skipped": reason}
    seconds = PGBENCH_SECONDS if count >= 100 else 1   # the test suite's tiny runs
    rounds = ROUNDS
    if name == "postgresql-shared":
        single, shared = [], []
        for _ in range(rounds):
            single.append(claims.run_case({"store": "postgresql", "claims": count})
                          ["claims_per_s"])
            shared.append(concurrency.run_case({"store": "postgresql", "layout": "shared-node",
                                                "processes": 4, "claims": count})
                          ["claims_per_s"])
        ours, tps = statistics.median(shared), statistics.median(single)
        return {"claims_per_s": ours, "reference_per_s": tps,
                "reference": f"1 process, same run (medians of {rounds}, alternately)",
                "ratio": round(ours / tps, 3), "rounds": {"shared": shared, "single": single}}
    clients = 1 if name == "postgresql-1" else 4
    ours_rounds, tps_rounds, client_rounds, why = [], [], [], None
    for _ in range(rounds):
        if clients == 1:
            figures = claims.run_case({"store": "postgresql", "claims": count})
            # Where the claim's time goes: the client's CPU per claim against
            # the wall time per claim (the rest is the server and the wait for it).
            client_rounds.append(figures["claims_per_cpu_s"])
        else:
            figures = concurrency.run_case({"store": "postgresql", "layout": "node-per-process",
                                            "processes": 4, "claims": count})
        ours_rounds.append(figures["claims_per_s"])
        tps, why = pgbench_tps(clients, seconds)
        if tps is None:
            break
        tps_rounds.append(tps)
    ours = statistics.median(ours_rounds)
    client = {}
    if client_rounds:
        per_cpu = statistics.median(client_rounds)
        client = {"claims_per_cpu_s": per_cpu, "client_cpu_share": round(ours / per_cpu, 3)}
    if why is not None:
        return {"claims_per_s": ours, "skipped_reference": why, **client}
    tps = statistics.median(tps_rounds)
    return {"claims_per_s": ours, "reference_per_s": tps,
            "reference": f"pgbench, {clients} client{'s' if clients > 1 else ''}, tpcb-like, "
                         f"scale {pgbench_scale(clients)}, -M {PGBENCH_PROTOCOL}, {seconds} s; "
                         f"medians of {rounds} rounds, alternately with the claims",
            "ratio": round(ours / tps, 3),
            "rounds": {"claims": ours_rounds, "reference": tps_rounds}, **client}

if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
