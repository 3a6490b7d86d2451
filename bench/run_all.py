"""Run every benchmark scenario and print ONE JSON object with all their results.

    python -m bench.run_all                 # full sizes (about 20 minutes)
    python -m bench.run_all --tiny          # the test suite's sizes
    python -m bench.run_all --only claims,audit --output results.json

Each scenario runs as ``python -m bench.<name>`` in its own process, which
in turn runs each case in its own process (so peak RSS is per case).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

if __package__ in (None, ""):   # run as a file: python bench/run_all.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

#: Scenario modules, in the order they run.
SCENARIOS = ("claims", "audit", "fleet", "steady_pass", "concurrency", "references", "api",
             "metrics", "paging", "nova_compare", "cluster_work", "fleet_pg")


def run_scenario(name, extra_args=(), timeout=None):
    """The JSON object ``python -m bench.<name>`` printed (or the error)."""
    proc = subprocess.run([sys.executable, "-m", f"bench.{name}", *extra_args],
                          capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"scenario": name, "error": f"exit status {proc.returncode}",
                "stderr": proc.stderr.strip().splitlines()[-20:]}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.run_all",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny sizes of the tests")
    parser.add_argument("--only", help="comma-separated scenarios (default: all)")
    parser.add_argument("--output", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    extra = ["--tiny"] if args.tiny else []
    results = {name: run_scenario(name, extra) for name in names}
    report = {
        "suite": "nova-lite benchmarks",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": common.machine(),
        "scenarios": results,
    }
    text = json.dumps(report, indent=1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    failed = [name for name, r in results.items()
              if "error" in r or any("error" in case for case in r.get("results", ()))]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
