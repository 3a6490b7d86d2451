"""Chaos soak: the reliability suite's chaos processes, longer, proved by the history checker.

``python -m bench.chaos_soak [--processes 4] [--ops 2000] [--stores sqlite-file,postgresql]``
runs ``--processes`` chaos workers (``tests/reliability/chaos.py``: claims,
unshelves, deletes, shelve-offloads, resizes, confirms, reverts, audits that
grow, shrink or move a node) against one store, then replays every logged
operation with ``tests/reliability/history.py``.  Prints one JSON object per
store: operations by kind and outcome, operations per second, and every
violation found (there must be none).  Exits non-zero on any violation.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

from bench import common

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def soak(store_kind, processes, ops):
    """One soak on a fresh store of ``store_kind``; its report (a dict)."""
    from nova_lite.db import Store
    from tests.reliability import chaos, history
    if store_kind == "postgresql":
        reason = common.postgresql_available()
        if reason:
            return {"store": store_kind, "skipped": reason}
    with common.store_url(store_kind) as url, tempfile.TemporaryDirectory() as logs:
        def start(*args):
            return subprocess.Popen([sys.executable, "-m", "tests.reliability.chaos", *args],
                                    cwd=REPO, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        paths = [os.path.join(logs, "setup.log")]
        setup = start("setup", url, paths[0])
        if setup.wait() != 0:
            return {"store": store_kind, "error": setup.stderr.read()[-2000:]}
        began = time.perf_counter()
        workers = []
        for n in range(processes):
            paths.append(os.path.join(logs, f"worker-{n}.log"))
            workers.append(start("work", url, paths[-1], str(n), str(ops)))
        errors = [w.stderr.read()[-2000:] for w in workers if w.wait() != 0]
        elapsed = time.perf_counter() - began
        events = history.read_logs(paths)
        store = Store(url)
        try:
            violations = history.check(events, chaos.records(store))
        finally:
            store.close()
    outcomes = collections.Counter(f"{e['op']}:{e.get('result')}" for e in events)
    return {"store": store_kind, "processes": processes, "ops_per_process": ops,
            "operations": len(events), "ops_per_s": round(len(events) / elapsed, 1),
            "outcomes": dict(sorted(outcomes.items())), "violations": violations[:50],
            "violation_count": len(violations), "worker_errors": errors}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--ops", type=int, default=2000, help="operations per process")
    parser.add_argument("--stores", default="sqlite-file,postgresql")
    args = parser.parse_args(argv)
    reports = [soak(kind, args.processes, args.ops) for kind in args.stores.split(",")]
    print(json.dumps({"scenario": "chaos_soak", "machine": common.machine(),
                      "results": reports}, indent=1))
    bad = any(r.get("violation_count") or r.get("worker_errors") or r.get("error")
              for r in reports)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
