"""Turn ``bench.run_all`` JSON into a table (Markdown or reStructuredText).

    python -m bench.run_all --output now.json
    python -m bench.summary now.json                       # Markdown
    python -m bench.summary now.json --baseline before.json --format rst

First a line naming the machine and its reference speed (see
:func:`bench.common.reference_speed`; the baseline's too, with
``--baseline``), then one row per figure: the scenario and size, the store,
the figure now (and before), its target and the case's peak RSS.
"""

import argparse
import json
import sys

#: Performance goals by row key (see :func:`rows`).
TARGETS = {
    ("claims", 1000, "memory"): ">= 20,000/s",
    ("claims", 1000, "sqlite-file"): ">= 2,000/s",
    ("audit", 5000, "memory"): "<= 25 ms",
    ("audit", 5000, "sqlite-file"): "<= 25 ms",
    ("fleet steady", 5000, "fake.multinode"): "<= 500 ms",
    ("fleet steady", 50000, "fake.multinode"): "linear (<= 5,000 ms)",
    ("fleet peak RSS", 50000, "fake.multinode"): "<= 1,024 MiB",
    ("api cluster", 10000, "sqlite-file"): "<= 50 ms (median)",
    ("metrics scrape", 10000, "sqlite-file"): "<= 1,000 ms (median)",
    **{("hypervisors page", 100000, store): "<= 100 ms (median)"
       for store in ("sqlite-file", "postgresql")},
    **{("metrics scrape per host", 100000, store): "<= 2,000 ms (median)"
       for store in ("sqlite-file", "postgresql")},
    **{("claim on a child", 1000, store): "<= 1.5 times a plain claim (median)"
       for store in ("sqlite-file", "postgresql")},
    ("scheduler vgpu", 10000, "sqlite-file"): "<= 2 times the plain flavor (median)",
    **{("steady pass statements", nodes, store): "<= 6 in 1 transaction"
       for nodes in (1, 100) for store in ("sqlite-file", "postgresql")},
    ("fleet_pg pgbench ratio", 100000, "ironic"): ">= 0.9 of pgbench alone",
    ("fleet_pg pgbench ratio", 10000, "libvirt"): ">= 0.5 of pgbench alone",
    ("references", 1000, "sqlite-file"): ">= 0.6 of its own rows in plain sqlite3",
    ("references", 1000, "postgresql-1"): ">= 0.9 of pgbench -c 1",
    ("references", 1000, "postgresql-4"): ">= 0.8 of pgbench -c 4",
    ("references", 1000, "postgresql-shared"): ">= 0.8 of 1 process",
    ("cluster build to active", 10000, "listen"): "<= 100 ms (median)",
    ("cluster builds", 10000, 1): ">= 500/s",
    ("cluster builds", 10000, 10): ">= 500/s",
    ("cluster delete to freed", 10000, "listen"): "<= 200 ms (median)",
    **{(f"nova {kind}", size, mode): target
       for kind, size in (("claims", 1000), ("audit", 5000), ("fleet", 500))
       for mode, target in (("sqlite", ">= 20 times"), ("nodb", "> 1 time"))},
}


def _fmt(value, unit):
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:,.1f} times faster"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "MiB":
        return f"{value:,.0f} MiB"
    if unit == "times":
        return f"{value:,.2f} times"
    if unit == "ratio":
        return f"{value:,.2f}"
    if unit == "statements":
        return f"{value:,.0f} statements"
    return f"{value:,.1f} ms" if value < 100 else f"{value:,.0f} ms"


def rows(report):
    """``{key: (label, size, where, value, unit, peak RSS)}`` from a run_all report."""
    out = {}
    scenarios = report.get("scenarios", {})
    for r in scenarios.get("claims", {}).get("results", ()):
        if "claims_per_s" in r:
            out[("claims", r["claims"], r["store"])] = (
                "Claims, one process", f"{r['claims']:,} claims", r["store"],
                r["claims_per_s"], "/s", r.get("peak_rss_mib"))
        if "child_over_root_p50" in r:
            out[("claim on a child", r["claims"], r["store"])] = (
                "Claim on a child provider (8 GPUs), over a plain claim",
                f"{r['claims']:,} claims", r["store"], r["child_over_root_p50"], "times",
                r.get("peak_rss_mib"))
    for r in scenarios.get("scheduler", {}).get("results", ()):
        if "vgpu_ratio" in r:
            out[("scheduler vgpu", r["hosts"], r["store"])] = (
                "Scheduler, 2 traits + VGPU=1 (8 GPUs per node), over the plain flavor",
                f"{r['hosts']:,} hosts", r["store"], r["vgpu_ratio"], "times",
                r.get("peak_rss_mib"))
    for r in scenarios.get("steady_pass", {}).get("results", ()):
        if "statements" in r:
            out[("steady pass statements", r["nodes"], r["store"])] = (
                f"Steady pass, statements ({r['transactions']} transaction(s))",
                f"{r['nodes']:,} nodes", r["store"], r["statements"], "statements",
                r.get("peak_rss_mib"))
    for r in scenarios.get("audit", {}).get("results", ()):
        if "audit" in r:
            out[("audit", r["instances"], r["store"])] = (
                "Audit, one node", f"{r['instances']:,} instances", r["store"],
                r["audit"]["median_ms"], "ms", r.get("peak_rss_mib"))
    for r in scenarios.get("fleet", {}).get("results", ()):
        if "steady_pass" not in r:
            continue
        size, where = f"{r['nodes']:,} nodes", r["driver"]
        out[("fleet first", r["nodes"], r["driver"])] = (
            "Fleet, first pass", size, where, r["first_pass"]["median_ms"], "ms",
            r.get("peak_rss_mib"))
        out[("fleet steady", r["nodes"], r["driver"])] = (
            "Fleet, steady pass", size, where, r["steady_pass"]["median_ms"], "ms",
            r.get("peak_rss_mib"))
        out[("fleet peak RSS", r["nodes"], r["driver"])] = (
            "Fleet, peak RSS", size, where, r.get("peak_rss_mib"), "MiB", None)
    for r in scenarios.get("concurrency", {}).get("results", ()):
        if "claims_per_s" in r:
            out[("concurrency", r["layout"], r["store"])] = (
                f"Claims, {r['processes']} processes", r["layout"], r["store"],
                r["claims_per_s"], "/s", r.get("worker_peak_rss_mib"))
    for r in scenarios.get("api", {}).get("results", ()):
        if "steady" in r:
            out[("api cluster", r["nodes"], r["store"])] = (
                "API /v1/cluster, steady", f"{r['nodes']:,} nodes", r["store"],
                r["steady"]["median_ms"], "ms", r.get("peak_rss_mib"))
            out[("api cluster cold", r["nodes"], r["store"])] = (
                "API /v1/cluster, after a change", f"{r['nodes']:,} nodes", r["store"],
                r["after_change_ms"], "ms", r.get("peak_rss_mib"))
    for r in scenarios.get("metrics", {}).get("results", ()):
        if "scrape" in r:
            out[("metrics scrape", r["nodes"], r["store"])] = (
                "Metrics scrape, steady", f"{r['nodes']:,} nodes", r["store"],
                r["scrape"]["median_ms"], "ms", r.get("peak_rss_mib"))
            if "after_change_ms" in r:
                out[("metrics scrape changed", r["nodes"], r["store"])] = (
                    "Metrics scrape, after a change", f"{r['nodes']:,} nodes", r["store"],
                    r["after_change_ms"], "ms", r.get("peak_rss_mib"))
    for r in scenarios.get("paging", {}).get("results", ()):
        if "api" in r:
            out[("hypervisors page", r["nodes"], r["store"])] = (
                "API /v1/hypervisors, a page of 1,000, steady", f"{r['nodes']:,} nodes",
                r["store"], r["api"]["middle_page"]["median_ms"], "ms", r.get("peak_rss_mib"))
            out[("metrics scrape per host", r["nodes"], r["store"])] = (
                "Metrics scrape per host, steady", f"{r['nodes']:,} nodes", r["store"],
                r["metrics"]["scrape"]["median_ms"], "ms", r.get("peak_rss_mib"))
    for r in scenarios.get("references", {}).get("results", ()):
        ratio = r.get("own_rows_ratio", r.get("ratio"))
        if ratio is not None:
            out[("references", r["claims"], r["case"])] = (
                "Claims over their reference", f"{r['claims']:,} claims", r["case"], ratio,
                "ratio", r.get("peak_rss_mib"))
    for r in scenarios.get("fleet_pg", {}).get("results", ()):
        if "pgbench_ratio" in r:
            size = f"{r['nodes']:,} nodes, {r['services']:,} services"
            out[("fleet_pg pgbench ratio", r["nodes"], r["layout"])] = (
                "pgbench beside a steady fleet, over pgbench alone", size,
                f"postgresql, {r['layout']}", r["pgbench_ratio"], "ratio",
                r.get("peak_rss_mib"))
            out[("fleet_pg xacts", r["nodes"], r["layout"])] = (
                "Steady fleet, server transactions", size, f"postgresql, {r['layout']}",
                r["fleet_xacts_per_s"], "/s", r.get("peak_rss_mib"))
    out.update(_cluster_rows(scenarios.get("cluster_work", {}).get("results", ())))
    labels = {"claims": ("claims", "Claims beside Nova"),
              "audit": ("instances", "Audit beside Nova"),
              "fleet": ("nodes", "Fleet pass beside Nova")}
    for r in scenarios.get("nova_compare", {}).get("results", ()):
        if "times_nova_sqlite" not in r:
            continue
        unit_name, label = labels[r["kind"]]
        for mode, where in (("sqlite", "Nova on sqlite-file"), ("nodb", "Nova, no database")):
            out[(f"nova {r['kind']}", r["size"], mode)] = (
                label, f"{r['size']:,} {unit_name}", where, r[f"times_nova_{mode}"], "x",
                r.get("peak_rss_mib"))
    return out


def _cluster_rows(results):
    """The rows of ``bench.cluster_work``: builds and deletes done by the hosts."""
    out = {}
    for r in results:
        if "nodes" not in r:
            continue
        size = f"{r['nodes']:,} nodes, {r['hosts']} hosts"
        mode = "listen" if r.get("listen", True) else "poll"
        woken = ("postgresql, LISTEN" if mode == "listen" else
                 f"postgresql, polling {r.get('work_poll_interval', 1.0):g} s")
        rss = r.get("peak_rss_mib")
        if "median_ms" in r.get("latency", {}):
            out[("cluster build to active", r["nodes"], mode)] = (
                "Build to active, one at a time", size, woken, r["latency"]["median_ms"],
                "ms", rss)
            out[("cluster build to active p95", r["nodes"], mode)] = (
                "Build to active, p95", size, woken, r["latency"]["p95_ms"], "ms", rss)
        if "builds_per_s" in r.get("throughput", {}):
            batch = r.get("batch", 1)
            out[("cluster builds", r["nodes"], batch)] = (
                f"Builds to active, {r['operators']} operators", size,
                f"postgresql, batches of {batch}", r["throughput"]["builds_per_s"], "/s", rss)
        if "median_ms" in r.get("delete", {}):
            out[("cluster delete to freed", r["nodes"], mode)] = (
                "Delete to capacity freed", size, woken, r["delete"]["median_ms"], "ms", rss)
    return out


def table(report, baseline=None):
    """Header and rows (lists of strings)."""
    now, before = rows(report), rows(baseline) if baseline else None
    header = ["Scenario", "Size", "Store / driver"]
    header += ["Before", "Now"] if before is not None else ["Result"]
    header += ["Target", "Peak RSS"]
    lines = []
    for key, (label, size, where, value, unit, rss) in now.items():
        line = [label, size, where]
        if before is not None:
            old = before.get(key)
            line.append(_fmt(old[3], unit) if old else "-")
        line += [_fmt(value, unit), TARGETS.get(key, ""),
                 _fmt(rss, "MiB") if rss is not None else ""]
        lines.append(line)
    return header, lines


def machine_line(report, label="Machine"):
    """One line: CPUs, Python, SQLite and the reference speed of ``report``'s machine."""
    info = report.get("machine", {})
    ref = info.get("reference_us")
    speed = (f"; reference python {ref['python']:,.0f} us, sqlite {ref['sqlite']:,.0f} us"
             if ref else "; no reference speed recorded")
    return (f"{label} ({report.get('date', 'undated')}): {info.get('cpu_count')} x "
            f"{info.get('cpu_model')}, {info.get('implementation', 'Python')} "
            f"{info.get('python')}, SQLite {info.get('sqlite')}{speed}")


def markdown(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out)


def rst(header, lines):
    widths = [max(len(x) for x in col) for col in zip(header, *lines)]
    rule = " ".join("=" * w for w in widths)

    def fmt(line):
        return " ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip()
    return "\n".join([rule, fmt(header), rule, *[fmt(line) for line in lines], rule])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.summary",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("report", help="JSON written by python -m bench.run_all --output")
    parser.add_argument("--baseline", help="an older report to put beside it")
    parser.add_argument("--format", choices=("markdown", "rst"), default="markdown")
    args = parser.parse_args(argv)
    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    baseline = None
    if args.baseline:
        with open(args.baseline, encoding="utf-8") as f:
            baseline = json.load(f)
    header, lines = table(report, baseline)
    print(machine_line(report, "Now" if baseline else "Machine"))
    if baseline:
        print(machine_line(baseline, "Before"))
    print()
    print((markdown if args.format == "markdown" else rst)(header, lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
