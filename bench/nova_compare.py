"""Nova: nova-lite beside OpenStack Nova's own ResourceTracker, same scenarios.

Size ``N`` (default 1,000) gives three cases, each on one host with the
fake driver's default node (1000 vCPU, 800,000 MB, 600,000 GB):

- ``claims``: ``N`` claims of 1 vCPU / 512 MB / 1 GB, one after another,
  onto one node (claims per second);
- ``audit``: the steady audit of one node holding ``5 N`` instances (the
  median of 5, in ms);
- ``fleet``: a steady pass over ``N / 2`` nodes (the median of 5, in ms).

nova-lite runs on a SQLite file (:mod:`bench.claims`, :mod:`bench.audit`,
:mod:`bench.fleet`); Nova 34 runs ``bench/nova_side.py`` in its own
virtualenv (``tools/nova-venv.sh``) twice: on a SQLite file of its own
(``nova_sqlite``) and with no database at all (``nova_nodb``: every
object call that would reach one answered in memory).  Placement is out
of both sides.  ``times_nova_sqlite`` and ``times_nova_nodb`` are how many
times faster nova-lite is.  Goals: at least 20 times Nova on SQLite, and
ahead of Nova with no database (more than 1).
"""

import json
import os
import subprocess
import sys

from bench import audit, claims, common, fleet

NAME = "nova_compare"
DEFAULT_SIZES = [1000]
TINY_SIZES = [4]
KINDS = ("claims", "audit", "fleet")
MODES = ("sqlite", "nodb")
TARGETS = {"times_nova_sqlite": ">= 20", "times_nova_nodb": "> 1"}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOVA_SIDE = os.path.join(REPO, "bench", "nova_side.py")
VENV_ENV = "NOVA_LITE_NOVA_VENV"
#: Nova's figure of each kind, and whether more of it is faster.
FIGURES = {"claims": ("claims_per_s", True), "audit": ("audit_ms", False),
           "fleet": ("steady_pass_ms", False)}


def cases(sizes):
    return [{"kind": kind, "size": _size(kind, n)} for n in sizes for kind in KINDS]


def _size(kind, n):
    return {"claims": n, "audit": 5 * n, "fleet": max(1, n // 2)}[kind]


def nova_python():
    """The Nova virtualenv's interpreter, or None (see ``tools/nova-venv.sh``)."""
    venv = os.environ.get(VENV_ENV) or os.path.join(REPO, ".venv-nova")
    python = os.path.join(venv, "bin", "python")
    return python if os.access(python, os.X_OK) else None


def nova_problem():
    """Why Nova's side cannot run here (None if it can)."""
    if nova_python() is None:
        return f"no Nova virtualenv (set ${VENV_ENV} or run tools/nova-venv.sh)"
    return None


def run_nova(kind, size, mode, repeat=5):
    """Nova's figures for one case: the JSON ``bench/nova_side.py`` printed."""
    case = {"scenario": kind, "size": size, "mode": mode, "repeat": repeat}
    # -P: bench/ (this directory, with its nova_compare, common, api ...) is
    # not put on Nova's sys.path.
    proc = subprocess.run([nova_python(), "-P", "-W", "ignore", NOVA_SIDE, json.dumps(case)],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"Nova's side of {case} failed (exit {proc.returncode}): "
                           + "\n".join(proc.stderr.strip().splitlines()[-15:]))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_nova_lite(kind, size, repeat=5):
    """nova-lite's figure for one case, on a SQLite file."""
    if kind == "claims":
        return claims.run_case({"store": "sqlite-file", "claims": size})["claims_per_s"]
    if kind == "audit":
        figures = audit.run_case({"store": "sqlite-file", "instances": size, "repeat": repeat})
        return figures["audit"]["median_ms"]
    figures = fleet.run_case({"store": "sqlite-file", "nodes": size,
                              "driver": "fake.multinode", "repeat": repeat})
    return figures["steady_pass"]["median_ms"]


def run_case(case):
    problem = nova_problem()
    if problem:
        return {"skipped": problem}
    kind, size = case["kind"], case["size"]
    repeat = case.get("repeat", 5 if size > 10 else 2)
    key, more_is_faster = FIGURES[kind]
    ours = run_nova_lite(kind, size, repeat)
    result = {"figure": key, "nova_lite": ours}
    for mode in MODES:
        theirs = run_nova(kind, size, mode, repeat)
        result["nova"] = theirs["nova"]
        result[f"nova_{mode}"] = theirs[key]
        result[f"nova_{mode}_counted"] = theirs["counted"]
        times = ours / theirs[key] if more_is_faster else theirs[key] / ours
        result[f"times_nova_{mode}"] = round(times, 1)
    return result


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
