"""The benchmarks run at tiny sizes here, so their code cannot rot.

No figure is asserted: timings belong to ``bench/`` (``make bench``), never
to the test suite.  What is checked is that every scenario runs, counts
what it did, and prints the JSON it promises.
"""

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import types

import fixtures
import testtools

from bench import api, audit, builds, claims, cluster_checks, cluster_work, cold_load, common, \
    concurrency, fleet, fleet_pg, nova_compare, paging, references, run_all, scheduler, \
    steady_pass, summary
from bench import metrics as metrics_bench
from nova_lite.testing import components, databases

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = (claims, audit, fleet, steady_pass, concurrency, references, api, metrics_bench,
             paging, nova_compare, cluster_work, fleet_pg, cold_load)


def _command(*args):
    proc = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


class TestCommon(testtools.TestCase):

    def test_machine_names_the_cpus_and_python(self):
        info = common.machine()
        self.assertEqual(os.cpu_count(), info["cpu_count"])
        self.assertEqual(sys.version.split()[0], info["python"])
        self.assertGreater(info["reference_us"]["python"], 0)
        self.assertGreater(info["reference_us"]["sqlite"], 0)

    def test_timings_summarise_wall_and_cpu(self):
        summary = common.timings([(0.003, 0.002), (0.001, 0.001), (0.002, 0.002)])
        self.assertEqual({"runs": 3, "min_ms": 1.0, "median_ms": 2.0, "max_ms": 3.0,
                          "cpu_median_ms": 2.0}, summary)

    def test_measure_returns_the_result(self):
        (wall, cpu), result = common.measure(sum, [1, 2])
        self.assertEqual(3, result)
        self.assertGreaterEqual(wall, 0)
        self.assertGreaterEqual(cpu, 0)

    def test_peak_rss(self):
        self.assertGreater(common.peak_rss_mib(), 1)

    def test_every_scenario_has_json_cases_and_targets(self):
        for scenario in SCENARIOS:
            cases = scenario.cases(scenario.TINY_SIZES)
            self.assertTrue(cases, scenario.NAME)
            json.dumps(cases)
            json.dumps(scenario.TARGETS)


class TestPostgreSQLStores(testtools.TestCase):

    def test_each_case_gets_a_new_database_and_its_fake_guests_go_with_it(self):
        # A case that reused a name would find the guests an earlier case's
        # fake hosts left under the default state_path.
        from nova_lite import conf
        from nova_lite.virt.fake_guests import guests_directory
        databases.use_postgresql(self)
        self.useFixture(fixtures.MonkeyPatch("bench.common.PG_ADMIN_URL",
                                             components.postgresql_url()))
        seen = []
        for _ in range(2):
            with common.store_url("postgresql") as url:
                directory = guests_directory(types.SimpleNamespace(url=url), conf.Settings())
                os.makedirs(directory)
                seen.append(url)
            self.assertFalse(os.path.exists(directory))
        self.assertNotEqual(seen[0], seen[1])


class TestScenarios(testtools.TestCase):
    """Each scenario's cases, run in this process at tiny sizes."""

    def run_case(self, scenario, **case):
        figures = common.run_here(scenario, case)
        self.assertNotIn("error", figures)
        self.assertGreater(figures["peak_rss_mib"], 0)
        json.dumps(figures)
        return figures

    def use_postgresql(self):
        databases.use_postgresql(self)
        self.useFixture(fixtures.MonkeyPatch("bench.common.PG_ADMIN_URL",
                                             components.postgresql_url()))

    def test_claims_in_memory_and_on_a_sqlite_file(self):
        for store in ("memory", "sqlite-file"):
            figures = self.run_case(claims, store=store, claims=5)
            self.assertEqual(5, figures["vcpus_used_after"])
            self.assertIn("p99", figures["latency_ms"])
            self.assertGreater(figures["claims_per_s"], 0)
            self.assertGreater(figures["store_only_per_s"], 0)
            self.assertGreater(figures["store_share_of_time"], 0)

    def test_claims_on_postgresql(self):
        self.use_postgresql()
        figures = self.run_case(claims, store="postgresql", claims=3)
        self.assertEqual(3, figures["vcpus_used_after"])

    def test_audit(self):
        figures = self.run_case(audit, store="sqlite-file", instances=4, repeat=2)
        self.assertEqual(["bench-host"], figures["audited"])
        self.assertEqual(4, figures["vcpus_used"])
        self.assertEqual(2, figures["audit"]["runs"])

    def test_fleet_of_fake_nodes(self):
        figures = self.run_case(fleet, store="sqlite-file", nodes=3, driver="fake.multinode",
                                repeat=2)
        self.assertEqual(3, figures["audited"])
        self.assertEqual(0, figures["failed"])
        self.assertEqual(2, figures["steady_pass"]["runs"])

    def test_steady_pass_on_a_sqlite_file(self):
        figures = self.run_case(steady_pass, store="sqlite-file", nodes=2, repeat=2)
        self.assertEqual((1, 0, 0, 0), (figures["transactions"], figures["rows_written"],
                                        figures["xids"], figures["row_locks"]))
        self.assertLessEqual(figures["statements"], 6)
        self.assertEqual((1, 1), (figures["heartbeat_transactions"],
                                  figures["heartbeat_statements"]))
        self.assertNotIn("wal_bytes_min", figures)

    def test_cold_load_of_a_cloned_fleet(self):
        self.use_postgresql()
        self.useFixture(fixtures.MonkeyPatch("bench.cold_load.BASE", 100))
        figures = self.run_case(cold_load, store="postgresql", nodes=200)
        readers = figures["readers"]
        self.assertEqual(set(cold_load.ROLES), set(readers))
        for role, found in readers.items():
            self.assertNotIn("error", found, role)
            self.assertGreater(found["peak_rss_mib"], found["base_rss_mib"] / 2, role)
            self.assertGreater(found["cold_cpu_ms"], 0, role)
        # the copy's nodes are whole nodes: counted, and with their hosts' services
        self.assertEqual(200, readers["api"]["nodes"])
        self.assertGreater(readers["metrics"]["bytes"], 0)
        self.assertTrue(readers["scheduler"]["picked"].startswith("host-"))

    def test_steady_pass_on_postgresql(self):
        self.use_postgresql()
        figures = self.run_case(steady_pass, store="postgresql", nodes=2, repeat=2)
        self.assertEqual((1, 0), (figures["transactions"], figures["xids"]))
        self.assertEqual(1, figures["heartbeat_xids"])
        # Server-wide: the other tests' writes count too, so only its presence.
        self.assertGreaterEqual(figures["wal_bytes_min"], 0)

    def test_fleet_of_ironic_nodes(self):
        if importlib.util.find_spec("nova_lite_ironic") is None:
            self.skipTest("nova-lite-ironic is not installed")
        figures = self.run_case(fleet, store="sqlite-file", nodes=3, driver="ironic",
                                repeat=1)
        self.assertEqual(3, figures["audited"])
        self.assertEqual(0, figures["failed"])

    def test_api_cluster_totals_over_http(self):
        figures = self.run_case(api, store="sqlite-file", nodes=3, repeat=2)
        self.assertEqual((3, 1), (figures["nodes"], figures["hosts"]))
        self.assertEqual(2, figures["steady"]["runs"])
        self.assertEqual(figures["vcpus_used"] + 1, figures["vcpus_used_after_change"])

    def test_metrics_scrape_over_http(self):
        figures = self.run_case(metrics_bench, store="sqlite-file", nodes=3, repeat=2)
        self.assertEqual(3, figures["nodes"])
        self.assertEqual(9, figures["capacity_samples"])
        self.assertEqual(2, figures["scrape"]["runs"])
        self.assertGreater(figures["after_change_ms"], 0)

    def test_hypervisors_page_and_per_host_scrape_over_http(self):
        figures = self.run_case(paging, store="sqlite-file", nodes=3, repeat=2)
        self.assertEqual((3, False, 1), (figures["api"]["page_rows"],
                                         figures["api"]["next_link"],
                                         figures["api"]["middle_rows"]))
        self.assertEqual(2, figures["api"]["first_page"]["runs"])
        # 3 nodes: per node under the default [metrics] per_node_series.
        self.assertEqual((1, 0), (figures["metrics"]["per_node_series"],
                                  figures["metrics"]["hosts"]))
        self.assertEqual(2, figures["metrics"]["scrape"]["runs"])

    def test_summary_rows_of_the_web_scenarios(self):
        report = {"scenarios": {
            "api": {"results": [{"store": "sqlite-file", "nodes": 10000, "after_change_ms": 9,
                                 "steady": {"median_ms": 3.0}}]},
            "metrics": {"results": [{"store": "sqlite-file", "nodes": 10000,
                                     "scrape": {"median_ms": 500.0}}]},
            "paging": {"results": [{"store": "postgresql", "nodes": 100000,
                                    "api": {"middle_page": {"median_ms": 94.2}},
                                    "metrics": {"scrape": {"median_ms": 403.5}}}]}}}
        header, lines = summary.table(report)
        self.assertIn(["API /v1/cluster, steady", "10,000 nodes", "sqlite-file", "3.0 ms",
                       "<= 50 ms (median)", ""], lines)
        self.assertIn(["Metrics scrape, steady", "10,000 nodes", "sqlite-file", "500 ms",
                       "<= 1,000 ms (median)", ""], lines)
        self.assertIn(["API /v1/hypervisors, a page of 1,000, steady", "100,000 nodes",
                       "postgresql", "94.2 ms", "<= 100 ms (median)", ""], lines)
        self.assertIn(["Metrics scrape per host, steady", "100,000 nodes", "postgresql",
                       "404 ms", "<= 2,000 ms (median)", ""], lines)

    def test_summary_rows_beside_nova(self):
        report = {"scenarios": {"nova_compare": {"results": [
            {"kind": "claims", "size": 1000, "times_nova_sqlite": 371.4,
             "times_nova_nodb": 14.9},
            {"kind": "fleet", "size": 500, "skipped": "no Nova virtualenv"}]}}}
        header, lines = summary.table(report)
        self.assertEqual([["Claims beside Nova", "1,000 claims", "Nova on sqlite-file",
                           "371.4 times faster", ">= 20 times", ""],
                          ["Claims beside Nova", "1,000 claims", "Nova, no database",
                           "14.9 times faster", "> 1 time", ""]], lines)

    def test_concurrency_on_a_sqlite_file(self):
        for layout in concurrency.LAYOUTS:
            figures = self.run_case(concurrency, store="sqlite-file", layout=layout,
                                    processes=2, claims=2)
            self.assertEqual(4, figures["total_claims"])
            self.assertEqual(4, figures["vcpus_used_after"])

    def test_nova_beside_nova_lite(self):
        # Nova's own ResourceTracker, from its virtualenv, on the same
        # scenarios; each side counts what it did, so a side that silently
        # did nothing cannot pass for a fast one.
        components.require(self, "nova", nova_compare.nova_problem())
        sizes = {}
        for case in nova_compare.cases(nova_compare.TINY_SIZES):
            figures = self.run_case(nova_compare, **case)
            sizes[case["kind"]] = case["size"]
            self.assertEqual("34.0.0", figures["nova"])
            for mode in nova_compare.MODES:
                self.assertGreater(figures[f"nova_{mode}"], 0)
                self.assertGreater(figures[f"times_nova_{mode}"], 0)
                # vCPUs used after the claims or the audit; nodes tracked.
                self.assertEqual(case["size"], figures[f"nova_{mode}_counted"])
        self.assertEqual({"claims": 4, "audit": 20, "fleet": 2}, sizes)

    def test_nova_side_refuses_an_unknown_scenario(self):
        components.require(self, "nova", nova_compare.nova_problem())
        exc = self.assertRaises(RuntimeError, nova_compare.run_nova, "nope", 1, "nodb")
        self.assertIn("unknown scenario 'nope'", str(exc))

    def test_builds_on_postgresql(self):
        # The asking side alone: every build scheduled, claimed and its task
        # recorded for its host, which no service takes.
        self.use_postgresql()
        figures = self.run_case(builds, store="postgresql", nodes=4, processes=2, builds=2)
        self.assertEqual(4, figures["total_builds"])
        self.assertEqual((4, 4, 4), (figures["stored_instances"], figures["stored_allocations"],
                                     figures["waiting_build_tasks"]))
        if cluster_checks.postgres_cpu_s() > 0:   # the server's processes are seen here
            # Over the timed window, a build's statements cost the server far
            # more than 50 us (an idle server's background work, far less).
            self.assertGreater(figures["server_cpu_ms_per_build"], 0.05)
            self.assertAlmostEqual(
                1000 * os.cpu_count() / (figures["worker_cpu_ms_per_build"]
                                         + figures["server_cpu_ms_per_build"]),
                figures["cpu_ceiling_builds_per_s"], delta=0.5)

    def test_cluster_work_done_by_service_processes(self):
        # Two compute service processes woken by LISTEN/NOTIFY: builds one at
        # a time, two operator processes building at once, deletes; each
        # phase checks the records and what each host's driver runs.
        self.use_postgresql()
        figures = self.run_case(cluster_work, store="postgresql", nodes=4, hosts=2,
                                listen=True, warmup=1, latency_builds=2, operators=2,
                                builds=3, batch=2, deletes=2)
        self.assertEqual((4, 2), (figures["nodes_recorded"], figures["latency"]["runs"]))
        self.assertEqual({"active": 3, "deleted": 0, "allocations": 3, "tasks": {"done": 3},
                          "problems": []},
                         {k: v for k, v in figures["latency"]["check"].items() if k != "guests"})
        work = figures["latency"]["work"]
        self.assertEqual(3, work["tasks"])
        self.assertGreaterEqual(work["wakes"], 1)
        for step in ("take", "spawn", "finish"):
            self.assertEqual(1.0, work["steps"][step]["calls_per_task"], step)
        self.assertGreater(work["round_trips_per_task"], 0)
        built = figures["throughput"]
        self.assertEqual(6, built["builds"])
        self.assertGreater(built["builds_per_s"], 0)
        self.assertEqual(6, sum(built["per_host"].values()))
        done = figures["delete"]
        self.assertEqual(2, done["runs"])
        self.assertEqual(1.0, done["work"]["steps"]["destroy"]["calls_per_task"])
        self.assertEqual({"active": 7, "deleted": 2, "allocations": 7, "tasks": {"done": 11},
                          "problems": []},
                         {k: v for k, v in done["check"].items() if k != "guests"})
        self.assertEqual(7, sum(done["check"]["guests"].values()))

    def test_cluster_work_polling_only(self):
        self.use_postgresql()
        figures = self.run_case(cluster_work, store="postgresql", nodes=2, hosts=2,
                                listen=False, work_poll_interval=0.1, think_s=0.1,
                                warmup=0, latency_builds=1, deletes=1)
        self.assertEqual([], figures["delete"]["check"]["problems"])
        for phase in ("latency", "delete"):
            work = figures[phase]["work"]
            self.assertEqual(0, work["wakes"], phase)   # never woken: it polled
            self.assertGreater(work["steps"]["poll"]["calls_per_task"], 0, phase)

    def test_scheduler_with_required_traits(self):
        # Ten nodes, only the first with the two traits: every pick is it,
        # or the case fails (it checks the node it was given).
        figures = self.run_case(scheduler, store="sqlite-file", nodes=10, repeat=3,
                                traits="one_in_ten")
        self.assertEqual(3, figures["traits_steady"]["runs"])
        self.assertGreater(figures["traits_ratio"], 0)

    def test_summary_rows_of_cluster_work(self):
        report = {"scenarios": {"cluster_work": {"results": [
            {"nodes": 10000, "hosts": 4, "listen": True, "latency": {
                "median_ms": 42.0, "p95_ms": 80.0}, "delete": {"median_ms": 20.0}},
            {"nodes": 10000, "hosts": 4, "listen": False, "work_poll_interval": 1.0,
             "latency": {"median_ms": 520.0, "p95_ms": 980.0}},
            {"nodes": 10000, "hosts": 4, "listen": True, "operators": 4, "batch": 10,
             "throughput": {"builds_per_s": 612.4}},
            {"skipped": "no PostgreSQL"}]}}}
        header, lines = summary.table(report)
        size = "10,000 nodes, 4 hosts"
        self.assertEqual([
            ["Build to active, one at a time", size, "postgresql, LISTEN", "42.0 ms",
             "<= 100 ms (median)", ""],
            ["Build to active, p95", size, "postgresql, LISTEN", "80.0 ms", "", ""],
            ["Delete to capacity freed", size, "postgresql, LISTEN", "20.0 ms",
             "<= 200 ms (median)", ""],
            ["Build to active, one at a time", size, "postgresql, polling 1 s", "520 ms", "",
             ""],
            ["Build to active, p95", size, "postgresql, polling 1 s", "980 ms", "", ""],
            ["Builds to active, 4 operators", size, "postgresql, batches of 10", "612/s",
             ">= 500/s", ""]], lines)

    def test_fleet_on_postgresql_beside_pgbench(self):
        # Four one-node services, their passes every second and beats every
        # 0.4 s: the windows of two seconds each see them run.
        self.use_postgresql()
        if not shutil.which("pgbench"):
            self.skipTest("pgbench is not installed")
        case, = [c for c in fleet_pg.cases(fleet_pg.TINY_SIZES) if c["layout"] == "libvirt"]
        self.assertEqual((4, 4, 1), (case["nodes"], case["services"], case["per_service"]))
        figures = self.run_case(fleet_pg, **case)
        self.assertEqual((0, 4, 4), (figures["load_failed_nodes"], figures["compute_nodes"],
                                     figures["services_recorded"]))
        round_, = figures["rounds"]
        for window in ("fleet_alone", "fleet_with_pgbench"):
            fleet = round_[window]["fleet"]
            self.assertEqual(0, fleet["errors"], window)
            self.assertGreater(fleet["passes_done"], 0, window)
            self.assertGreater(fleet["beats_done"], 0, window)
            # Timed from the last beat as the service's thread times it, a
            # beat is skipped at most once a pass (the pass beat first).
            self.assertLessEqual(fleet["beats_skipped_after_a_pass"],
                                 fleet["passes_done"] + 4, window)
            self.assertGreater(fleet["simulator_cpu_cores"], 0, window)
            # A pass is its beat and at least its read; a beat is one.
            self.assertGreaterEqual(fleet["transactions"],
                                    2 * fleet["passes_done"] + fleet["beats_done"], window)
        self.assertNotIn("fleet", round_["pgbench_alone"])
        self.assertGreater(figures["fleet_xacts_per_s"], 0)
        self.assertGreater(figures["pgbench_alone_tps"], 0)
        self.assertGreater(figures["pgbench_with_fleet_tps"], 0)
        self.assertEqual(round(figures["pgbench_with_fleet_tps"]
                               / figures["pgbench_alone_tps"], 3), figures["pgbench_ratio"])

    def test_the_autovacuum_stand_in_analyzes_and_vacuums_by_autovacuum_s_rules(self):
        self.use_postgresql()
        url = self.useFixture(databases.PostgreSQLDatabase()).url
        import sqlalchemy as sa
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        self.addCleanup(engine.dispose)
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE churn (id int PRIMARY KEY, n int)")
            conn.exec_driver_sql("CREATE TABLE calm (id int PRIMARY KEY)")
            conn.exec_driver_sql("INSERT INTO churn SELECT g, 0 FROM generate_series(1, 2000) g")
            conn.exec_driver_sql("INSERT INTO calm VALUES (1)")
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE churn SET n = n + 1")
        stand_in = fleet_pg._AutovacuumStandIn(url)
        self.addCleanup(stand_in.stop)
        self.assertEqual(60, stand_in.settings["autovacuum_naptime"])

        def stats():
            with engine.connect() as conn:
                return {r[0]: r[1:] for r in conn.exec_driver_sql(
                    "SELECT relname, n_mod_since_analyze, n_dead_tup, last_analyze, "
                    "last_vacuum FROM pg_stat_user_tables")}

        # The statistics reach the shared counters a moment after the commit.
        deadline = time.monotonic() + 30
        while not (stats()["churn"][0] == 4000 and stats()["churn"][1] > 50):
            self.assertLess(time.monotonic(), deadline, stats())
            time.sleep(0.05)   # poll interval; the condition decides
        stand_in.once()
        churn, calm = stats()["churn"], stats()["calm"]
        self.assertEqual((0, 0), churn[:2])           # 4,000 changes, dead rows: both
        self.assertIsNotNone(churn[2])
        self.assertIsNotNone(churn[3])
        self.assertEqual((None, None), calm[2:])      # 1 row: under both thresholds
        self.assertEqual({"stand_in": True, "analyzed": 1, "vacuumed": 1},
                         {k: v for k, v in stand_in.report().items() if k != "busy_s"})

    def test_a_failed_round_of_the_autovacuum_stand_in_is_reported(self):
        self.use_postgresql()
        database = self.useFixture(databases.PostgreSQLDatabase())
        import sqlalchemy as sa
        engine = sa.create_engine(database.url, poolclass=sa.NullPool)
        with engine.begin() as conn:
            # A name to quote: the stand-in's statements must name it right.
            conn.exec_driver_sql('CREATE TABLE "we""ird" (id int PRIMARY KEY)')
            conn.exec_driver_sql('INSERT INTO "we""ird" SELECT generate_series(1, 200)')
        engine.dispose()
        stand_in = fleet_pg._AutovacuumStandIn(database.url)
        self.addCleanup(stand_in.stop)
        deadline = time.monotonic() + 30
        while stand_in.analyzed == 0:   # the statistics reach the counters a moment later
            self.assertLess(time.monotonic(), deadline, stand_in.report())
            self.assertTrue(stand_in.round(), stand_in.report())
            time.sleep(0.05)   # poll interval; the condition decides
        self.assertNotIn("errors", stand_in.report())
        database._drop()   # the database goes away under the stand-in
        self.assertFalse(stand_in.round())
        report = stand_in.report()
        self.assertEqual(1, report["errors"])
        self.assertIn(database.name, report["last_error"])

    def test_fleet_schedule_spreads_the_services_and_counts_what_is_late(self):
        schedule = fleet_pg._Schedule([0, 2], total=4, pass_interval=60, beat_interval=10,
                                      start=100.0)
        pass_, beat = fleet_pg._Schedule.PASS, fleet_pg._Schedule.BEAT
        # Service 0 at the start; service 2 half an interval on.
        self.assertEqual([(100.0, pass_, 0), (100.0, beat, 0), (105.0, beat, 1),
                          (130.0, pass_, 1)], sorted(schedule.heap))
        self.assertEqual({pass_: 1, beat: 2}, schedule.late(105.0))
        self.assertEqual((100.0, pass_, 0), schedule.pop())
        self.assertEqual({pass_: 0, beat: 2}, schedule.late(105.0))
        schedule.push(160.0, pass_, 0)
        self.assertEqual((100.0, beat, 0), schedule.pop())
        schedule.push(110.0, beat, 0)
        self.assertEqual({pass_: 0, beat: 1}, schedule.late(105.0))
        schedule.shift(5.0)
        self.assertEqual({pass_: 0, beat: 0}, schedule.late(105.0))
        self.assertEqual([(110.0, beat, 1), (115.0, beat, 0), (135.0, pass_, 1),
                          (165.0, pass_, 0)], sorted(schedule.heap))

    def test_fleet_cases_leave_out_what_two_cores_cannot_run(self):
        cases = fleet_pg.cases([10000, 100000])
        self.assertEqual([("ironic", 10000, 100), ("libvirt", 10000, 10000),
                          ("ironic", 100000, 1000)],
                         [(c["layout"], c["nodes"], c["services"]) for c in cases])
        self.assertEqual({60}, {c["window_s"] for c in cases})

    def test_pgbench_runs_prepared_at_a_scale_of_its_clients(self):
        connection = ["-h", "db", "bench"]
        self.assertEqual(["pgbench", "-i", "-q", "-s", "4", "-h", "db", "bench"],
                         references.pgbench_init_command("pgbench", 4, connection))
        self.assertEqual(["pgbench", "-i", "-q", "-s", "1", "-h", "db", "bench"],
                         references.pgbench_init_command("pgbench", 0, connection))
        self.assertEqual(["pgbench", "-c", "4", "-j", "4", "-T", "10", "-M", "prepared",
                          "-h", "db", "bench"],
                         references.pgbench_command("pgbench", 4, 10, connection))

    def test_summary_rows_of_the_fleet_and_the_references(self):
        report = {"scenarios": {
            "references": {"results": [
                {"case": "sqlite-file", "claims": 1000, "ratio": 0.4, "own_rows_ratio": 0.62},
                {"case": "postgresql-1", "claims": 1000, "ratio": 0.91},
                {"case": "postgresql-4", "claims": 1000, "skipped": "no pgbench"}]},
            "fleet_pg": {"results": [
                {"layout": "ironic", "nodes": 100000, "services": 1000,
                 "pgbench_ratio": 0.93, "fleet_xacts_per_s": 117.0}]}}}
        header, lines = summary.table(report)
        fleet = "100,000 nodes, 1,000 services"
        self.assertEqual([
            ["Claims over their reference", "1,000 claims", "sqlite-file", "0.62",
             ">= 0.6 of its own rows in plain sqlite3", ""],
            ["Claims over their reference", "1,000 claims", "postgresql-1", "0.91",
             ">= 0.9 of pgbench -c 1", ""],
            ["pgbench beside a steady fleet, over pgbench alone", fleet,
             "postgresql, ironic", "0.93", ">= 0.9 of pgbench alone", ""],
            ["Steady fleet, server transactions", fleet, "postgresql, ironic", "117/s", "",
             ""]], lines)

    def test_summary_rows_of_child_providers_and_the_steady_pass(self):
        report = {"scenarios": {
            "claims": {"results": [{"store": "postgresql", "claims": 1000, "vgpu": True,
                                    "child_over_root_p50": 1.31}]},
            "scheduler": {"results": [{"store": "sqlite-file", "hosts": 10000,
                                       "vgpu_ratio": 0.89, "steady_median_ms": 20.0}]},
            "steady_pass": {"results": [{"store": "sqlite-file", "nodes": 100,
                                         "transactions": 1, "statements": 6}]}}}
        header, lines = summary.table(report)
        self.assertEqual([
            ["Claim on a child provider (8 GPUs), over a plain claim", "1,000 claims",
             "postgresql", "1.31 times", "<= 1.5 times a plain claim (median)", ""],
            ["Scheduler, 2 traits + VGPU=1 (8 GPUs per node), over the plain flavor",
             "10,000 hosts", "sqlite-file", "0.89 times", "<= 2 times the plain flavor (median)",
             ""],
            ["Steady pass, statements (1 transaction(s))", "100 nodes", "sqlite-file",
             "6 statements", "<= 6 in 1 transaction", ""]], lines)

    def test_concurrency_on_postgresql(self):
        self.use_postgresql()
        figures = self.run_case(concurrency, store="postgresql", layout="shared-node",
                                processes=2, claims=2)
        self.assertEqual(4, figures["vcpus_used_after"])


class TestCommands(testtools.TestCase):
    """The commands print one JSON object, each case run in its own process."""

    def assert_medians_compared(self, result, ours, theirs, reference="reference_per_s",
                                ratio="ratio"):
        """``result``'s rounds ``ours`` and ``theirs`` ran :data:`references.ROUNDS`
        times each, and its rate, ``reference`` and ``ratio`` are their medians'."""
        rounds = result["rounds"]
        self.assertEqual([references.ROUNDS] * 2, [len(rounds[ours]), len(rounds[theirs])])
        self.assertEqual(statistics.median(rounds[ours]), result["claims_per_s"])
        self.assertEqual(statistics.median(rounds[theirs]), result[reference])
        self.assertEqual(round(result["claims_per_s"] / result[reference], 3), result[ratio])

    def test_references_on_a_sqlite_file(self):
        result = references.run_case({"case": "sqlite-file", "claims": 3})
        self.assertGreater(result["reference_per_s"], 0)
        self.assertEqual(round(result["claims_per_s"] / result["reference_per_s"], 3),
                         result["ratio"])
        for key in ("own_rows_per_s", "own_rows_untriggered_per_s",
                    "own_rows_without_nulls_per_s", "own_rows_checkpoints_elsewhere_per_s"):
            self.assertGreater(result[key], 0, key)
        self.assert_medians_compared(result, "claims", "own_rows", reference="own_rows_per_s",
                                     ratio="own_rows_ratio")

    def test_references_on_postgresql(self):
        databases.use_postgresql(self)
        result = references.run_case({"case": "postgresql-shared", "claims": 3})
        self.assert_medians_compared(result, "shared", "single")

    def test_references_against_pgbench(self):
        databases.use_postgresql(self)
        if not shutil.which("pgbench"):
            self.skipTest("pgbench is not installed")
        result = references.run_case({"case": "postgresql-1", "claims": 3})
        self.assertIn("-M prepared", result["reference"])
        self.assertGreater(result["reference_per_s"], 0)
        self.assert_medians_compared(result, "claims", "reference")
        self.assertEqual(round(result["claims_per_s"] / result["claims_per_cpu_s"], 3),
                         result["client_cpu_share"])

    def test_a_scenario_command(self):
        status, out, err = _command("bench.audit", "--tiny")
        self.assertEqual(0, status, err)
        report = json.loads(out)
        self.assertEqual("audit", report["scenario"])
        self.assertEqual(os.cpu_count(), report["machine"]["cpu_count"])
        self.assertEqual(len(audit.cases(audit.TINY_SIZES)), len(report["results"]))
        for result in report["results"]:
            self.assertNotIn("error", result)
            self.assertIn("peak_rss_mib", result)

    def test_run_all(self):
        status, out, err = _command("bench.run_all", "--tiny", "--only", "claims")
        self.assertEqual(0, status, err)
        report = json.loads(out)
        self.assertEqual(["claims"], list(report["scenarios"]))
        self.assertEqual("claims", report["scenarios"]["claims"]["scenario"])

    def test_run_all_refuses_an_unknown_scenario(self):
        status, _, err = _command("bench.run_all", "--only", "nope")
        self.assertEqual(2, status)
        self.assertIn("nope", err)
        self.assertEqual(("claims", "audit", "fleet", "steady_pass", "concurrency",
                          "references", "api", "metrics", "paging", "nova_compare",
                          "cluster_work", "fleet_pg"),
                         run_all.SCENARIOS)

    def test_summary_of_a_run(self):
        out = self.useFixture(fixtures.TempDir()).join("run.json")
        status, _, err = _command("bench.run_all", "--tiny", "--only", "audit", "--output", out)
        self.assertEqual(0, status, err)
        status, table, err = _command("bench.summary", out, "--baseline", out)
        self.assertEqual(0, status, err)
        self.assertIn("| Audit, one node | 3 instances | memory |", table)
        self.assertRegex(table, r"Now \(\d{4}-\d\d-\d\d.*\): \d+ x .*reference python [\d,]+ us")
        self.assertIn("\nBefore (", table)
        status, table, err = _command("bench.summary", out, "--format", "rst")
        self.assertEqual(0, status, err)
        self.assertIn("Audit, one node", table)
        with open(out, encoding="utf-8") as f:
            header, lines = summary.table(json.load(f))
        self.assertEqual(len(audit.cases(audit.TINY_SIZES)), len(lines))

    def test_profile(self):
        status, out, err = _command("bench.profiler", "claims",
                                    '{"store": "memory", "claims": 2}', "--limit", "5")
        self.assertEqual(0, status, err)
        self.assertEqual(2, json.loads(out.splitlines()[0])["vcpus_used_after"])
        self.assertIn("function calls", out)
