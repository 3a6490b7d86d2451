"""Plumbing shared by the benchmark scenarios.

Every scenario is a module with ``python -m bench.<name>``.  Run plainly it
starts one subprocess per case (so each case's peak RSS is its own), then
prints ONE JSON object: the scenario, the date, the machine, the sizes and
one result per case.  ``--case '<json>'`` runs a single case in the current
process and prints its result; that is what the parent runs.

A scenario module provides:

- ``NAME``: the scenario's name;
- ``TARGETS``: the figures it is held to (informative, never asserted);
- ``cases(sizes)``: the case dicts for a list of sizes;
- ``run_case(case)``: run one case here and return its figures (a dict);
- ``DEFAULT_SIZES`` and ``TINY_SIZES`` (the latter for the test suite).
"""

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid

from nova_lite.testing import components

#: Where the PostgreSQL cases connect to create their own scratch database
#: (default: the test suite's server, ``NOVA_LITE_TEST_POSTGRESQL_URL``).
PG_ADMIN_URL = os.environ.get("NOVA_LITE_BENCH_PG_URL") or components.postgresql_url()
#: Prefix of the scratch databases the PostgreSQL cases create (and drop).
PG_BENCH_DB = "nova_lite_bench"
HOST = "bench-host"


# -- the machine ---------------------------------------------------------------

def _cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine():
    """CPU count and model, Python and library versions: what a figure depends on."""
    import sqlalchemy
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "sqlalchemy": sqlalchemy.__version__,
        "sqlite": sqlite3.sqlite_version,
        "reference_us": reference_speed(),
    }


def reference_speed(repeat=5):
    """Microseconds two fixed workloads take here (best of ``repeat``): ``python``, ``sqlite``.

    Machines of the same "kind" differ: the same code has run twice as
    fast on one 2-vCPU EPYC as on another.  These two numbers say how fast
    this one is, so figures from different days can be compared by their
    ratio to them.  ``python``: a loop of 100,000 integer additions and
    dict stores; ``sqlite``: 1,000 single-row INSERTs, each committed, into
    an in-memory database (what a claim's transaction is made of).
    """
    def python_work():
        table = {}
        for i in range(100_000):
            table[i & 1023] = i + 1

    def sqlite_work():
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER)")
        for i in range(1000):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?)", (f"{i * 7919 % 1000:04d}", i))
            conn.execute("COMMIT")
        conn.close()

    def best_us(work):
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return round(min(times) * 1e6, 1)

    return {"python": best_us(python_work), "sqlite": best_us(sqlite_work)}


def peak_rss_mib():
    """This process's peak resident set size so far, in MiB (``ru_maxrss``)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":   # bytes there, KiB on Linux
        kib //= 1024
    return round(kib / 1024, 1)


# -- timing --------------------------------------------------------------------

def settle_heap():
    """Collect the garbage of a case's setup before its clock starts.

    A fresh process's first full collection (50 to 70 ms here, over the
    objects its imports made) would otherwise land in whatever runs next:
    in the first 1,000 claims, not in the reference loops run after them.
    Every timed section of the claim benchmarks starts after one, its
    references too, so neither side pays for the other's setup.
    """
    gc.collect()


def measure(fn, *args):
    """``((wall s, CPU s), fn(*args))``; CPU is the whole process's, every thread."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = fn(*args)
    return (time.perf_counter() - wall0, time.process_time() - cpu0), result


def timings(samples):
    """Summary of :func:`measure` samples, in milliseconds.

    Wall time is the figure; CPU time is beside it because it hardly moves
    when other processes load the machine.
    """
    wall = sorted(s[0] * 1000 for s in samples)
    cpu = sorted(s[1] * 1000 for s in samples)
    return {"runs": len(wall), "min_ms": round(wall[0], 3),
            "median_ms": round(statistics.median(wall), 3), "max_ms": round(wall[-1], 3),
            "cpu_median_ms": round(statistics.median(cpu), 3)}


def percentile(sorted_values, fraction):
    """The value at ``fraction`` (0..1) of an already sorted list."""
    index = min(len(sorted_values) - 1, int(round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


# -- worker processes -----------------------------------------------------------

def gather(results, procs, timeout=1800):
    """One result per process of ``procs`` from the queue ``results``.

    A process that ends with an error before it sends its result (or the
    ``timeout``, s) stops the others and raises RuntimeError with the exit
    codes, rather than leaving the caller (and processes waiting on a
    barrier) blocked.
    """
    import queue
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < len(procs):
            try:
                got.append(results.get(timeout=0.2))
                continue
            except queue.Empty:
                pass
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"worker process exit codes {failed}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(procs) - len(got)} worker process(es) sent no "
                                   f"result in {timeout} s")
    except BaseException:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join()
        raise
    return got


# -- stores --------------------------------------------------------------------

@contextlib.contextmanager
def store_url(kind):
    """A database URL for ``kind`` ("memory", "sqlite-file" or "postgresql").

    SQLite files live in a temporary directory removed afterwards; PostgreSQL
    gets a scratch database of its own, named once only (:data:`PG_BENCH_DB`,
    the process id and a random part), dropped afterwards with the fake
    guests its services kept under the default ``state_path``.  A name used
    before would give a case the guests an earlier case's fake hosts left
    there (the guests directory is named by the URL).
    """
    if kind == "memory":
        yield "sqlite://"
    elif kind == "sqlite-file":
        tmp = tempfile.mkdtemp(prefix="nova-lite-bench-")
        try:
            yield f"sqlite:///{tmp}/nova-lite.db"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    elif kind == "postgresql":
        name = f"{PG_BENCH_DB}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        url = _pg_database(name, create=True)
        try:
            yield url
        finally:
            _pg_database(name, create=False)
            _remove_fake_guests(url)
    else:
        raise ValueError(f"unknown store kind {kind!r}")


def _remove_fake_guests(url):
    """Remove the fake guests directory of the database at ``url`` (default settings)."""
    from nova_lite import conf
    from nova_lite.virt.fake_guests import guests_directory

    # guests_directory reads only a store's url
    directory = guests_directory(types.SimpleNamespace(url=url), conf.Settings())
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def _pg_admin_engine():
    import sqlalchemy as sa
    from nova_lite.db.engine import normalize_url
    return sa.create_engine(normalize_url(PG_ADMIN_URL), isolation_level="AUTOCOMMIT")


def postgresql_available():
    """None if PostgreSQL answers at :data:`PG_ADMIN_URL`, else why not."""
    try:
        engine = _pg_admin_engine()
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
        return None
    except Exception as exc:   # noqa: BLE001 - reported as the reason to skip
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def _pg_database(name, create):
    """Drop database ``name`` (WITH FORCE), then create it if asked; returns its URL."""
    import sqlalchemy as sa
    engine = _pg_admin_engine()
    with engine.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if create:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(
        hide_password=False)


# -- running cases -----------------------------------------------------------

def run_in_subprocess(module, case, timeout=None):
    """Run ``python -m module --case <case>`` and return the JSON it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--case", json.dumps(case)],
        capture_output=True, text=True, timeout=timeout,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if proc.returncode != 0:
        return dict(case, error=f"exit status {proc.returncode}",
                    stderr=proc.stderr.strip().splitlines()[-20:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_here(scenario, case):
    """Run one case in this process; its figures plus the case and peak RSS."""
    figures = scenario.run_case(case)
    return dict(case, **figures, peak_rss_mib=peak_rss_mib())


def report(scenario, sizes, results):
    """The scenario's one JSON object."""
    return {
        "scenario": scenario.NAME,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "sizes": sizes,
        "targets": scenario.TARGETS,
        "results": results,
    }


def module_name(scenario):
    """``bench.<name>``, also when the module runs as ``__main__``."""
    spec = getattr(scenario, "__spec__", None)
    return spec.name if spec is not None else f"bench.{scenario.NAME}"


def main(scenario, argv=None):
    """Command line of a scenario module (see the module docstring)."""
    module = module_name(scenario)
    parser = argparse.ArgumentParser(prog=f"python -m {module}",
                                     description=scenario.__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=None, help="comma-separated sizes (default: %s)"
                        % ",".join(map(str, scenario.DEFAULT_SIZES)))
    parser.add_argument("--tiny", action="store_true",
                        help="the tiny sizes the test suite uses")
    parser.add_argument("--in-process", action="store_true",
                        help="run every case in this process (peak RSS is then shared)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        print(json.dumps(run_here(scenario, json.loads(args.case))))
        return 0
    sizes = args.sizes or (scenario.TINY_SIZES if args.tiny else scenario.DEFAULT_SIZES)
    results = []
    for case in scenario.cases(sizes):
        if args.in_process:
            results.append(run_here(scenario, case))
        else:
            results.append(run_in_subprocess(module, case))
    print(json.dumps(report(scenario, sizes, results), indent=1))
    return 0 if not any("error" in r for r in results) else 1


# -- the objects every scenario builds ------------------------------------------

#: The flavor every claim asks for: 1 vCPU, 512 MB, 1 GB.
FLAVOR = dict(name="bench.1c512m1g", vcpus=1, memory_mb=512, root_gb=1)


def make_tracker(url, driver_name="fake", host=HOST, settings=None, **driver_kwargs):
    """(ResourceTracker, driver, store) on ``url`` with a driver loaded by name."""
    from nova_lite import conf
    from nova_lite.compute.resource_tracker import ResourceTracker
    from nova_lite.db import Store
    from nova_lite.virt import loader
    settings = settings or conf.Settings()
    store = Store(url)
    driver = loader.load_driver(driver_name, settings=settings, **driver_kwargs)
    driver.init_host(host)
    return ResourceTracker(host, driver, store=store, settings=settings), driver, store


def make_instances(count, project_id="bench"):
    """``count`` new Instance records of :data:`FLAVOR`."""
    import uuid
    from nova_lite import objects
    flavor = objects.Flavor(**FLAVOR)
    return [objects.Instance(uuid=str(uuid.uuid4()), flavor=flavor, project_id=project_id)
            for _ in range(count)]
