"""Profile one benchmark case with cProfile (a tool for optimising, not a scenario).

    python -m bench.profiler claims '{"store": "memory", "claims": 1000}'
    python -m bench.profiler fleet '{"store": "sqlite-file", "nodes": 5000, \\
        "driver": "fake.multinode", "repeat": 3}' --sort cumulative --limit 60

Prints the case's figures, then the profile's top functions.  Profiling
slows everything down: read the proportions, not the times.
"""

import argparse
import cProfile
import importlib
import json
import pstats
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.profiler",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="claims, audit, fleet or concurrency")
    parser.add_argument("case", help="the case as JSON (see the scenario's cases())")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (default tottime)")
    parser.add_argument("--limit", type=int, default=40, help="rows to print (default 40)")
    parser.add_argument("--output", help="also save the raw profile to this file")
    args = parser.parse_args(argv)
    scenario = importlib.import_module(f"bench.{args.scenario}")
    profiler = cProfile.Profile()
    figures = profiler.runcall(scenario.run_case, json.loads(args.case))
    print(json.dumps(figures))
    if args.output:
        profiler.dump_stats(args.output)
    pstats.Stats(profiler, stream=sys.stdout).sort_stats(args.sort).print_stats(args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
