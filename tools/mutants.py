#!/usr/bin/env python3
"""Break each guard of the claim path and of heal on purpose and show that the tests fail.

``python tools/mutants.py [--list] [--all-guards] [--tests ID ...] [--jobs N]
[--timeout SECONDS] [NAME ...]``: for each mutant, copy the tree to a
temporary directory, apply the mutant (a textual change that must match
exactly once), run the tests that guard it from the copy, and report
whether they failed, as they must.  Exits 0 only if every mutant was
caught ("killed"); the last line reads ``N passed, N failed`` (a passed
mutant check is a killed mutant).

Each mutant runs against its own guards (:data:`GUARDS`): the test modules,
classes or tests written to catch it, with the chaos history wherever it
catches it too.  ``--all-guards`` runs every mutant against every module of
:data:`GUARD_TESTS` instead (``make mutants``); ``--tests`` against the
test ids given.

A mutant's tests run in one process (``tools/guard_run.py``; ids as
``python -m unittest`` takes them), in the order named, and stop at the
first failure, so a killed mutant costs the tests up to the first that
catches it.  Two mutants run at a time (``--jobs``), each in its own copy
(the PostgreSQL tests make databases of their own); each mutant's line
gives its wall time, copy included.

A mutant counts as killed only if at least one test failed or errored
(:func:`judge`).  A run that proves nothing about the guards is a broken
one: the mutated file does not compile, the mutated module or a guard
module does not import, a guard id names no test, no test ran, or the test
process ended (or was ended after ``--timeout`` seconds) before its report
did with no test failed.  A broken run is reported as ``SURVIVED: NAME (...) in N s by ...;
broken, which proves nothing: WHY`` followed by the run's output, and
counts as failed.  So does a run whose tests all passed or all skipped
(PostgreSQL absent, say): ``SURVIVED: ...; survived: ...``.

The copy imports its own ``nova_lite`` (the copy comes first on
``sys.path``); the installed entry points name the same modules, so the
fake drivers load from the copy too.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Runs a mutant's tests in its copy of the tree, stopping at the first failure.
GUARD_RUN = os.path.join(ROOT, "tools", "guard_run.py")

#: Every test module that guards the claim path (``--all-guards``).
GUARD_TESTS = ("tests.reliability.test_history", "tests.test_claim_races",
               "tests.test_store", "tests.test_claim_concurrency", "tests.test_claim_usage",
               "tests.test_claim_statements", "tests.test_claim_checked", "tests.test_holds",
               "tests.test_heal", "tests.test_build_records")

MUTANTS = {
    "cas-ignored": (
        "the claim writes what it decided before the transaction, whatever the generation",
        "nova_lite/db/store.py",
        "    if plans is not None and generation == node.generation + 1:\n",
        "    if plans is not None:\n"),
    "one-statement-cas-ignored": (
        "PostgreSQL's one-statement claim writes whatever generation the node is at",
        "nova_lite/db/claim_writes.py",
        "    swapped = lock.c.generation == expected\n",
        "    swapped = lock.c.generation.is_not(None)\n"),
    "database-check-ignores-since": (
        "PostgreSQL admits a stale plan on the usage row without asking whether the "
        "inventories, owner or reported flag changed after the plan's record",
        "nova_lite/db/claim_writes.py",
        "        sa.bindparam(\"plain\", type_=sa.Boolean), T_USAGE.c.since <= expected,\n",
        "        sa.bindparam(\"plain\", type_=sa.Boolean),\n"),
    "database-check-ignores-room": (
        "PostgreSQL admits a stale plan on the usage row whatever the usage now",
        "nova_lite/db/claim_writes.py",
        "        *[T_USAGE.c[col] + amount[col] <= sa.bindparam(f\"most_{col}\", "
        "type_=sa.BigInteger)\n          for _, col in rows.STD_COLUMNS])\n",
        "        )\n"),
    "usage-check-on-the-snapshot": (
        "PostgreSQL checks the usage row as the statement's snapshot had it, so a claim "
        "that waited on the node never finds it current",
        "nova_lite/db/claim_writes.py",
        "        where=sa.or_(recorded, sa.and_(T_USAGE.c.generation == held, sa.or_(\n",
        "        where=sa.or_(recorded, sa.and_((lambda snap: sa.select(snap.c.generation).where("
        "snap.c.node_uuid == sa.bindparam(\"node\")).scalar_subquery())(T_USAGE.alias(\"snap\"))"
        " == held, sa.or_(\n"),
    "extras-keep-since": (
        "a claim that places NUMA cells, PCI devices or other classes leaves the usage "
        "row vouching for records older than it",
        "nova_lite/db/claim_writes.py",
        "            totals[\"since\"] = generation\n",
        "            pass\n"),
    "no-inventory-reread": (
        "a stale claim re-reads usage only, deciding on the inventories and owner it had",
        "nova_lite/db/store.py",
        "    fresh, usage = rows.load_node_locked(conn, node.uuid, found)\n",
        "    reread, usage = rows.load_node_locked(conn, node.uuid, found)\n"
        "    fresh = attrs.evolve(node, usage=reread.usage,\n"
        "                         numa_placements=reread.numa_placements,\n"
        "                         pci_in_use=reread.pci_in_use)\n"),
    "reread-before-the-bump": (
        "PostgreSQL's locked re-read is sent ahead of the bump, so it reads the node "
        "as it was before the lock's wait",
        "nova_lite/db/claim_writes.py",
        "    bumped, found = conn.execute_together([\n"
        "        (_BUMP, {\"node\": node_uuid}), "
        "(rows.NODE_USAGE_INVENTORIES_BUMPED, {\"node\": node_uuid})])\n",
        "    found, bumped = conn.execute_together([\n"
        "        (rows.NODE_USAGE_INVENTORIES_BUMPED, {\"node\": node_uuid}), "
        "(_BUMP, {\"node\": node_uuid})])\n"),
    "usage-row-of-older-generation": (
        "a claim that lost its race trusts a usage row recorded before a release or audit",
        "nova_lite/db/rows.py",
        "T_USAGE.c.generation == usage_at)",
        "T_USAGE.c.generation <= usage_at)"),
    "move-check-outside": (
        "a move's checks run in transactions of their own before the claim",
        "nova_lite/db/claim_writes.py",
        "        if request.migration is not None:\n"
        "            _guard_move(conn, request.migration)\n",
        "        if request.migration is not None:\n"
        "            pass   # checked before the transaction (see the tracker)\n"),
    "no-ownership-check": (
        "a claim on a node of another host, or no longer reported, is admitted",
        "nova_lite/model/decide.py",
        "    problems = owner_problems(node, host)\n",
        "    problems = []\n"),
    "heal-no-consumer-recheck": (
        "heal removes an allocation on what the finder read, without judging the "
        "consumer's own record again in its transaction",
        "nova_lite/db/heal_writes.py",
        "            _check_still_stale(conn, consumer_uuid, node_uuid)\n",
        "            pass\n"),
    "holds-rule-offloaded-placed": (
        "the Python rule takes a shelve-offloaded instance placed by an unshelve's claim "
        "for holding nothing (the SQL of the periodic pass still counts it)",
        "nova_lite/holds.py",
        "    return bool(placed) or task_state in UNSHELVE_TASK_STATES\n",
        "    return task_state in UNSHELVE_TASK_STATES\n"),
    "heal-moves-of-live-services": (
        "a move older than migration_stuck_age is finished by heal though both of its "
        "compute services are up",
        "nova_lite/leaks.py",
        "    if not down and not named:\n",
        "    if False:\n"),
    "task-taken-twice": (
        "a host's worker takes a task another worker runs under a live lease",
        "nova_lite/db/task_writes.py",
        "           sa.and_(T_TASK.c.state == _RUNNING, "
        "T_TASK.c.lease_until < sa.bindparam(\"now\"))),\n",
        "           T_TASK.c.state == _RUNNING),\n"),
    "outcome-by-any-worker": (
        "a worker records the outcome of a task another worker took over",
        "nova_lite/db/task_writes.py",
        "    T_TASK.c.taken_by == sa.bindparam(\"worker\"),\n"
        "    T_TASK.c.state == _RUNNING).values(\n",
        "    T_TASK.c.state == _RUNNING).values(\n"),
    "instance-change-without-outcome": (
        "an outcome's instance change is applied though the task's outcome was not "
        "recorded (the task is another worker's now)",
        "nova_lite/db/task_writes.py",
        "        _FINISHED_HERE).values(\n",
        "        ).values(\n"),
    "retaken-build-spawns-again": (
        "a build taken again after its worker died spawns a second guest",
        "nova_lite/compute/work_handlers.py",
        "    if guests is None or inst.uuid not in guests:\n",
        "    if True:\n"),
    "traits-ignored": (
        "the scheduler offers nodes whatever traits a flavor requires or forbids",
        "nova_lite/scheduler/filters.py",
        "        reason = spec.traits.reason(node.traits)\n",
        "        reason = None\n"),
    "compute-node-entry-wins": (
        "a provider.yaml $COMPUTE_NODE entry applies even to a node another entry names",
        "nova_lite/provider_config.py",
        "        return by_name or by_uuid or self.every_node\n",
        "        return self.every_node or by_name or by_uuid\n"),
    "child-room-ignored": (
        "a claim lands a child provider's class on a child whatever room it has left",
        "nova_lite/model/nested.py",
        "            if amount <= free and free > best_free "
        "and inv.unit_problem(amount) is None:\n",
        "            if free > best_free and inv.unit_problem(amount) is None:\n"),
    "child-generation-kept": (
        "a claim or a release on a child provider leaves the child's generation as it was",
        "nova_lite/db/providers.py",
        "    generation=T_RP.c.generation + sa.literal_column(\"1\"), "
        "updated_at=sa.bindparam(\"now\"))\n",
        "    generation=T_RP.c.generation, updated_at=sa.bindparam(\"now\"))\n"),
    "pci-lands-off-the-picked-device": (
        "a PCI claim lands its units on the providers of the lowest-address devices, not "
        "on those of the devices PciStats picked",
        "nova_lite/model/decide.py",
        "    for name, per in sorted(pci_providers.pci_amounts(tree, addresses).items()):\n",
        "    for name, per in sorted(pci_providers.pci_amounts(\n"
        "            tree, sorted(tree.holder)[:len(addresses)]).items()):\n"),
    "pci-rebuild-off-the-devices": (
        "the audit rebuilds a lost allocation without the units on its devices' providers",
        "nova_lite/db/providers.py",
        "    if tree is not None and alloc.pci_devices:\n",
        "    if tree is None and alloc.pci_devices:\n"),
    "pci-class-asked-directly": (
        "the scheduler offers a host for resources:<CLASS> of a PCI device provider, which "
        "the claim refuses",
        "nova_lite/scheduler/filters.py",
        "            short.extend(direct)\n",
        "            pass\n"),
    "steady-pass-skips-change": (
        "the periodic pass takes a node whose inventories changed for a steady one and "
        "writes nothing",
        "nova_lite/db/pass_records.py",
        "            if wanted != self.inventories.get(row.uuid, {}):\n",
        "            if False:\n"),
    "steady-pass-writes": (
        "the periodic pass opens its writing transaction (locking the host's node rows) "
        "when nothing changed",
        "nova_lite/db/pass_records.py",
        "            return f\"{len(missing)} consumer(s) without their allocation\"\n"
        "        return None\n",
        "            return f\"{len(missing)} consumer(s) without their allocation\"\n"
        "        return \"always\"\n"),
    "pass-reads-no-down-service": (
        "a service's pass reads its own service and its moves' ends but not the services "
        "that look down: no live peer records a down host's findings",
        "nova_lite/db/pass_records.py",
        "            columns.where(binary, services_sql.heartbeat_before(\n"
        "                sa.bindparam(\"deadline\", type_=sa.Float))))\n",
        "            columns.where(sa.false()))\n"),
    "down-services-bounded-on-one-side": (
        "the services read as down are found by updated_floor < deadline alone: a prepared "
        "statement's generic plan reads the whole services table on every pass",
        "nova_lite/db/services.py",
        "    return sa.and_(T_SVC.c.updated_floor >= 0, T_SVC.c.updated_floor < deadline,\n",
        "    return sa.and_(T_SVC.c.updated_floor < deadline,\n"),
    "down-services-by-floor-alone": (
        "the services read as down are those whose heartbeat's floor is before the deadline, "
        "without the heartbeat itself: a service that beat just after the deadline reads down",
        "nova_lite/db/services.py",
        "                   T_SVC.c.updated_at < deadline)\n",
        "                   sa.true())\n"),
    "heartbeat-floor-is-the-heartbeat": (
        "updated_floor on PostgreSQL is the heartbeat itself: every heartbeat changes an "
        "indexed column and is never a HOT update",
        "nova_lite/db/alembic/versions/0013_services_heartbeat_floor.py",
        "                   f\"GENERATED ALWAYS AS (floor(updated_at / {_GRAIN_S}) * "
        "{_GRAIN_S}) STORED\")\n",
        "                   \"GENERATED ALWAYS AS (updated_at) STORED\")\n"),
    "builds-server-cpu-in-seconds": (
        "the builds benchmark reports the server's CPU per build in seconds under a "
        "name that says milliseconds",
        "bench/builds.py",
        "    server_ms = 1000 * used[\"postgres_cpu_s\"] / total \\\n",
        "    server_ms = used[\"postgres_cpu_s\"] / total \\\n"),
    "autovacuum-stand-in-ignores-thresholds": (
        "the fleet benchmark's autovacuum stand-in analyzes every table each round, "
        "not only those autovacuum would",
        "bench/fleet_pg.py",
        "                analyze = changed > s[\"autovacuum_analyze_threshold\"] + \\\n",
        "                analyze = changed >= 0 or changed > s[\"autovacuum_analyze_threshold\"]"
        " + \\\n"),
    "pass-names-instances-by-a-function-of-host": (
        "a pass names its instances by a function of their host, which the (host, node) "
        "index does not answer: every pass reads all of instances",
        "nova_lite/db/pass_records.py",
        "        sa.select(T_INST.c.uuid).where(T_INST.c.host == host),\n",
        "        sa.select(T_INST.c.uuid).where(sa.func.lower(T_INST.c.host) == host),\n"),
    "server-advice-not-logged": (
        "a process starting on a server with autovacuum off says nothing of it",
        "nova_lite/db/server_checks.py",
        "        log.warning(\"Database server of %s: %s\", who, advice)\n",
        "        log.debug(\"Database server of %s: %s\", who, advice)\n"),
    "serve-commands-give-no-server-advice": (
        "api serve and metrics serve start on a server with autovacuum off and say nothing "
        "of it (only a compute service does)",
        "nova_lite/cli/serving.py",
        "        server_checks.log_server_advice(store, f\"nova-lite {self.what}\", LOG)\n",
        ""),
    "serve-prints-before-handling-sigterm": (
        "api serve and metrics serve print where they listen before they handle SIGTERM: "
        "a reader that stops them at once kills them (exit status -15)",
        "nova_lite/cli/serving.py",
        "    if threading.current_thread() is threading.main_thread():\n"
        "        for sig in (signal.SIGTERM, signal.SIGINT):\n"
        "            previous[sig] = signal.signal(sig, stop)\n"
        "    host, port = server.effective_host, server.effective_port\n"
        "    try:\n"
        "        stdout.write(f\"nova-lite {what} on http://{host}:{port}/ (SIGTERM or Ctrl-C "
        "to stop)\\n\")\n"
        "        stdout.flush()\n",
        "    host, port = server.effective_host, server.effective_port\n"
        "    stdout.write(f\"nova-lite {what} on http://{host}:{port}/ (SIGTERM or Ctrl-C "
        "to stop)\\n\")\n"
        "    stdout.flush()\n"
        "    if threading.current_thread() is threading.main_thread():\n"
        "        for sig in (signal.SIGTERM, signal.SIGINT):\n"
        "            previous[sig] = signal.signal(sig, stop)\n"
        "    try:\n"),
    "moves-in-progress-by-bound-statuses": (
        "the moves in progress are named by bound statuses: no statement can use the "
        "partial indexes of those moves, and each lookup probes the indexes of every move "
        "ever made ten times",
        "nova_lite/db/holds_sql.py",
        "    return table.c.status.in_(models.in_progress_statuses())\n",
        "    return table.c.status.in_(constants(models.MIGRATION_IN_PROGRESS))\n"),
    "in-progress-index-statuses-drift": (
        "revision 0014's partial indexes name a status fewer than the statements do: "
        "no statement can use them",
        "nova_lite/db/alembic/versions/0014_migrations_in_progress_indexes.py",
        "                \"pre-migrating\", \"preparing\", \"queued\", \"reverting\", "
        "\"running\")\n",
        "                \"pre-migrating\", \"preparing\", \"reverting\", \"running\")\n"),
    "server-advice-ignores-track-counts": (
        "the server's advice judges autovacuum alone: with track_counts off autovacuum "
        "does nothing, unsaid",
        "nova_lite/db/server_checks.py",
        "        if settings.get(name) == \"off\":\n",
        "        if name == \"autovacuum\" and settings.get(name) == \"off\":\n"),
    "pass-names-instances-by-an-or": (
        "a pass names its instances by host or node in one condition: a whole read of the "
        "(host, node) index, which grows with the fleet",
        "nova_lite/db/pass_records.py",
        "        sa.select(T_INST.c.uuid).where(T_INST.c.host == host),\n",
        "        sa.select(T_INST.c.uuid).where(sa.or_(T_INST.c.host == host, "
        "T_INST.c.node == host)),\n"),
    "autovacuum-stand-in-round-failure-unreported": (
        "a failed round of the fleet benchmark's autovacuum stand-in ends its thread "
        "unreported: the fleet's figures then ran on stale statistics, unsaid",
        "bench/fleet_pg.py",
        "        except Exception as exc:   # noqa: BLE001 - reported; the fleet's figures "
        "need it\n",
        "        except ZeroDivisionError as exc:\n"),
    "pass-reads-no-move-end": (
        "a service's pass reads its own service and those down but not the other end of "
        "its moves: a live peer at the other end looks as if it had no service",
        "nova_lite/db/pass_records.py",
        "                sa.select(ends.c.source_compute).where(ends.c.uuid.in_(moves)),\n"
        "                sa.select(ends.c.dest_compute).where(ends.c.uuid.in_(moves))))),\n",
        "                sa.select(ends.c.source_compute).where(sa.false())))),\n"),
    "snapshot-reads-no-move-end": (
        "a host's records snapshot reads its own service but not the other end of its "
        "moves: a live peer at the other end looks as if it had no service",
        "nova_lite/db/snapshot.py",
        "        named = ({host} | {r.source_compute for r in mig_rows.values()}\n"
        "                 | {r.dest_compute for r in mig_rows.values()}) - {None}\n",
        "        named = {host}\n"),
    "change-mark-after-running-writers": (
        "a PostgreSQL reader asks next time from the newest transaction id of its snapshot "
        "(xmax) instead of the oldest still running (xmin): a change committed after a "
        "later one is never seen",
        "nova_lite/db/queries.py",
        "PG_MARK_SQL = \"pg_snapshot_xmin(pg_current_snapshot())::text::bigint\"\n",
        "PG_MARK_SQL = \"pg_snapshot_xmax(pg_current_snapshot())::text::bigint\"\n"),
    "culprits-skip-over-capacity": (
        "the culprits of a node (the leak search's and node explain's) leave out every "
        "class held beyond its capacity",
        "nova_lite/explain.py",
        "        if used <= capacity:\n            continue\n",
        "        if True:\n            continue\n"),
    "culprits-skip-children": (
        "the culprits of a node leave out its child providers held beyond their capacity",
        "nova_lite/explain.py",
        "    for child in sorted(report.providers if report is not None else (), "
        "key=lambda c: c.name):\n",
        "    for child in ():\n"),
    "down-hosts-all-in-one-pass": (
        "a live service's pass takes on the findings of every host that is down at "
        "once, however many",
        "nova_lite/compute/manager.py",
        "            down = down_hosts_share(down, self.host, self.settings.down_hosts_per_pass)\n",
        "            down = list(down)\n"),
    "look-answers-only-when-changed": (
        "a view's look joins the mark to the changed rows with an inner join: when "
        "nothing changed it gets no mark back",
        "nova_lite/db/look.py",
        "        look.outerjoin(changed, sa.true()))\n",
        "        look.join(changed, sa.true()))\n"),
    "service-tombstones-ignored": (
        "a view's look drops the tombstones of deleted services: a deleted service "
        "stays in the scheduler's view",
        "nova_lite/db/look.py",
        "        elif kind == \"x\":\n            gone.add(host)\n",
        "        elif False:\n            gone.add(host)\n"),
    "usage-only-whatever-description": (
        "a view reads a changed node for its usage alone even when the node's description "
        "changed since: a new inventory or report is never seen",
        "nova_lite/db/node_changes.py",
        "        return version.described_seq < self._full_mark \\\n"
        "            or self._described.get(version.uuid) == version.described_seq\n",
        "        return True\n"),
    "renew-ignores-described": (
        "a look renews a node's usage under the description a view holds even when the "
        "node was described again after the view read it",
        "nova_lite/db/node_changes.py",
        "            if record is not None and self._holds_description(version) \\\n",
        "            if record is not None \\\n"),
    "inventory-delete-keeps-described": (
        "PostgreSQL's trigger leaves described_seq where it was when a node's inventory "
        "row is deleted",
        "nova_lite/db/alembic/versions/0012_node_described_seq.py",
        "    _pg_inventory_trigger(\"DELETE\", \"OLD TABLE AS old_rows\", \"old\"),\n",
        ""),
    "host-change-keeps-described": (
        "the triggers take a node's host for no part of its description: a node that "
        "moves to another host keeps its described_seq",
        "nova_lite/db/alembic/versions/0012_node_described_seq.py",
        "_DESCRIPTION = (\"resources\", \"host\", \"nodename\", \"reported\", \"last_error\")\n",
        "_DESCRIPTION = (\"resources\", \"nodename\", \"reported\", \"last_error\")\n"),
    "heartbeats-never-reread": (
        "the scheduler never reads a service row again for its heartbeat: a dead service "
        "keeps looking up",
        "nova_lite/scheduler/host_manager.py",
        "                due.append(host)\n",
        "                pass\n"),
    "trusted-report-keeps-placeholder-uuid": (
        "a node's report read by kind keeps the kind's placeholder uuid",
        "nova_lite/db/trusted.py",
        "                return _with_identity(kind, hostname, uuid)\n",
        "                return _with_identity(kind, hostname, kind.uuid)\n"),
    "trusted-report-hostname-anywhere": (
        "a report whose node name appears elsewhere too is read by kind",
        "nova_lite/db/trusted.py",
        "        if text.count(quoted_uuid) == 1 and text.count(quoted_host) == 1:\n",
        "        if text.count(quoted_uuid) == 1 and text.count(quoted_host) >= 1:\n"),
    "trusted-usage-not-read-only": (
        "a node record read in bulk holds its usage as a plain dict",
        "nova_lite/db/trusted.py",
        "        else types.MappingProxyType(inventories) if inventories else _NO_AMOUNTS,\n"
        "        usage=types.MappingProxyType(usage) if usage else _NO_AMOUNTS,\n",
        "        else types.MappingProxyType(inventories) if inventories else _NO_AMOUNTS,\n"
        "        usage=usage,\n"),
    "host-state-free-negative": (
        "the scheduler's free figures go negative on a node over capacity",
        "nova_lite/scheduler/host_state.py",
        "    return max(0, inv.capacity - usage.get(rc, 0))\n",
        "    return inv.capacity - usage.get(rc, 0)\n"),
    "index-bulk-unsorted": (
        "states put in the host index at once are appended to its orders unsorted",
        "nova_lite/scheduler/sorted_rows.py",
        "        merged.extend(added)\n        merged.sort()\n",
        "        merged.extend(added)\n"),
    "index-split-loses-max": (
        "a block of the host index's orders that splits keeps the greatest entry of the "
        "whole block as its own, so later entries land in the wrong block",
        "nova_lite/scheduler/sorted_rows.py",
        "        self._maxes[i] = block[-1]\n        self._maxes.insert(i + 1, tail[-1])\n",
        "        self._maxes.insert(i + 1, tail[-1])\n"),
    "full-read-collector-left-off": (
        "a view's full read leaves Python's cyclic garbage collector paused",
        "nova_lite/heap.py",
        "    finally:\n        gc.enable()\n",
        "    finally:\n        pass\n"),
    "full-read-freezes-small": (
        "a full read of a small fleet freezes the heap too",
        "nova_lite/heap.py",
        "    if held >= FREEZE_RECORDS:\n",
        "    if True:\n"),
    "index-stale-positions": (
        "the host index's orders keep the block positions of before a change",
        "nova_lite/scheduler/sorted_rows.py",
        "    def _changed(self) -> None:\n        self._starts = None\n",
        "    def _changed(self) -> None:\n"),
    "index-search-right-by-left-block": (
        "the host index's own search for the end of a range stops at the first block "
        "that holds the value, not after the last one",
        "nova_lite/scheduler/sorted_rows.py",
        "        b = bisect.bisect_right(maxes, value, key=key)\n",
        "        b = bisect.bisect_left(maxes, value, key=key)\n"),
    "task-row-columns-out-of-order": (
        "a task read back from its row takes its finish time for its start time",
        "nova_lite/db/task_writes.py",
        '                 "started_at", "finished_at")\n',
        '                 "finished_at", "started_at")\n'),
    "totals-memo-ignores-usage": (
        "cluster totals take a node's figures from another node of its kind, usage and all",
        "nova_lite/cluster.py",
        "        if node.usage:\n            return node_figures(node)\n",
        "        if False:\n            return node_figures(node)\n"),
    "metrics-memo-ignores-usage": (
        "per-host metrics take a node's figures from another node of its kind, usage and all",
        "nova_lite/node_metrics.py",
        "        if node.usage:\n            return list(node_values(node))\n",
        "        if False:\n            return list(node_values(node))\n"),
    "build-task-own-transaction": (
        "a build records its tasks in a transaction of their own, after its claims committed",
        "nova_lite/compute/api.py",
        "                build_work if index == last else None)\n",
        "                None)\n"),
    "build-claim-reads-the-node": (
        "a build's claim reads the node again instead of deciding on the scheduler's record",
        "nova_lite/compute/api.py",
        "                                tasks=tasks, seen=selection.node)\n",
        "                                tasks=tasks, seen=None)\n"),
    "view-rereads-its-own-claim": (
        "the scheduler's view does not take the node as its claim left it",
        "nova_lite/compute/api.py",
        "            manager.saw(made.node)\n",
        "            made.node\n"),
    "missing-counts-other-nodes": (
        "a node's explanation counts the host's instances on its other nodes as held "
        "nowhere",
        "nova_lite/explain.py",
        "            if i.node == node.nodename and i.host == node.host and i.uuid not in held]\n",
        "            if i.uuid not in held]\n"),
    "heartbeat-in-a-transaction": (
        "the heartbeat is sent between BEGIN and COMMIT: three round trips, not one",
        "nova_lite/db/store.py",
        "        return self.db.write_alone(\n",
        "        return self.db.write_direct(\n"),
    "pass-scans-every-node": (
        "a pass picks its node rows with host = :host OR a correlated EXISTS over the "
        "migrations, which no index answers: every node row of the fleet, every pass",
        "nova_lite/db/pass_records.py",
        "    nodes = _nodes_statement(T_NODES.c.uuid.in_(scoped_uuids))\n",
        "    nodes = _nodes_statement(sa.or_(T_NODES.c.host == host, sa.exists().where(\n"
        "        T_MIG.c.dest_node == T_NODES.c.nodename, T_MIG.c.dest_compute == host)))\n"),
    "held-connection-never-pinged": (
        "a direct transaction's connection idle for long is used without a ping",
        "nova_lite/db/held.py",
        "            if not self._postgresql or time.monotonic() - since < self._idle_ping_s():\n",
        "            if True:\n"),
    "lost-connection-put-back": (
        "a connection lost in the middle of a direct transaction is kept for the next",
        "nova_lite/db/engine.py",
        "                cursor.close()\n            if self._rolled_back(dbapi, cursor, exc):\n",
        "                cursor.close()\n            if self._rolled_back(dbapi, cursor, exc) "
        "or True:\n"),
    "held-connections-outlive-dispose": (
        "connections held for direct transactions are used after the engine's dispose()",
        "nova_lite/db/held.py",
        "        if self._engine.pool is not self._pool:\n",
        "        if False:\n"),
    "pass-read-one-statement-at-a-time": (
        "a service's pass sends its six reads one after another: seven round trips, "
        "not one",
        "nova_lite/db/pass_records.py",
        "    found = conn.execute_together([",
        "    found = (lambda pairs: [conn.execute(*pair) for pair in pairs])(["),
    "pass-read-two-snapshots": (
        "a service's pass reads in READ COMMITTED: its statements may see different "
        "moments",
        "nova_lite/db/engine.py",
        "_PG_SNAPSHOT_BEGIN = \"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY\"\n",
        "_PG_SNAPSHOT_BEGIN = \"BEGIN READ ONLY\"\n"),
    "snapshot-settings-left-on-connection": (
        "a held connection stays in the autocommit mode of a snapshot read or a claim "
        "sent alone: the writes after it run each statement as a transaction of its own",
        "nova_lite/db/engine.py",
        "            if dbapi.autocommit is not autocommit:\n",
        "            if dbapi.autocommit is not autocommit and autocommit:\n"),
    "direct-transactions-unseen": (
        "DatabaseCost does not see the direct transactions (claims, a pass's read, the "
        "heartbeat)",
        "nova_lite/testing/db_cost.py",
        "        direct.observe(self.engine, self)\n",
        ""),
    "driver-worker-calls-on-after-timeout": (
        "a driver call's worker abandoned on a timeout goes on calling the rest once the "
        "hung call returns: the nodes after it are called twice",
        "nova_lite/compute/driver_calls.py",
        "            if self.abandoned:\n                return\n",
        ""),
    "driver-workers-survive-fork": (
        "a forked child takes its parent's idle driver-call workers, whose threads it "
        "does not have: its driver calls never run",
        "nova_lite/compute/driver_calls.py",
        "    os.register_at_fork(after_in_child=_Worker.forget_all)\n",
        "    pass\n"),
    "audit-entry-kept-when-report-changes": (
        "a node's audit entry is kept from the last audit although its driver reports "
        "other resources",
        "nova_lite/compute/resource_tracker.py",
        "                last[0] == report:\n",
        "                True:\n"),
    "write-begin-answered-alone": (
        "a direct write's statements sent together wait for psycopg's BEGIN to be "
        "answered first: a claim with several tasks is three round trips, not two",
        "nova_lite/db/direct.py",
        "        if self.opening and self.begin_explicitly is not None:\n",
        "        if False:\n"),
    "change-reads-in-a-transaction": (
        "the change readers' looks run in a transaction: BEGIN and COMMIT cost two more "
        "round trips on every scheduler, API and metrics request",
        "nova_lite/db/engine.py",
        "            if mode == _EACH and self._setup is None:\n",
        "            if False:\n"),
    "session-jit-on": (
        "the store's own sessions start with JIT on: a statement whose statistics lag "
        "may be compiled, tens of milliseconds of the server's",
        "nova_lite/db/engine.py",
        "        options.append(f\"-c lock_timeout={lock_timeout_ms(busy_timeout_s)} "
        "-c jit=off \"\n",
        "        options.append(f\"-c lock_timeout={lock_timeout_ms(busy_timeout_s)} \"\n"),
    "pooled-node-reads-keep-jit": (
        "behind a pooler a read of nodes again whole keeps the server's JIT setting",
        "nova_lite/db/rows.py",
        "    if postgres and not session_has_settings(conn):\n",
        "    if postgres and session_has_settings(conn):\n"),
    "read-each-autocommit-behind-a-pooler": (
        "behind a pooler a read of statements alone runs in autocommit: its SET LOCAL "
        "lock bound is lost",
        "nova_lite/db/engine.py",
        "                elif each_alone and self.dialect == \"postgresql\" "
        "and self._setup is None:\n",
        "                elif each_alone and self.dialect == \"postgresql\":\n"),
    "look-calls-a-deprecated-api": (
        "a look asks SQLAlchemy for typed tuples (Result.tuples, deprecated in 2.1): each "
        "call pays a warning's work",
        "nova_lite/db/look.py",
        "            conn.execute(statement, params).all():\n",
        "            conn.execute(statement, params).tuples().all():\n"),
    "look-ignores-extras": (
        "a look renews a changed node from its sums though its allocations hold more than "
        "the standard classes: the view loses their NUMA cells, devices and other classes",
        "nova_lite/db/look.py",
        "                                   bool(extras))\n",
        "                                   False)\n"),
    "look-through-sqlalchemy": (
        "a change look runs through SQLAlchemy's Connection and result machinery, on every "
        "scheduler, API and metrics request",
        "nova_lite/db/node_changes.py",
        "            look = self.store.db.read_each_direct(\"change look\", lambda conn: "
        "look_since(\n",
        "            look = self.store.db.read_each(\"change look\", lambda conn: "
        "look_since(\n"),
    "look-autocommit-behind-a-pooler": (
        "behind a pooler a change look runs in autocommit: its SET LOCAL lock bound is lost",
        "nova_lite/db/engine.py",
        "            if mode == _EACH and self._setup is None:\n",
        "            if mode == _EACH:\n"),
    "recorded-work-notifies-no-host": (
        "recording a task notifies nobody: a listening host takes it at its next poll",
        "nova_lite/db/task_writes.py",
        "    returned = (*T_TASK.c, _notify(T_TASK.c.host).label(\"notified\")) if notify "
        "else T_TASK.c\n",
        "    returned = T_TASK.c\n"),
    "read-only-store-autocommit-writes": (
        "a read-only store's sessions do not default to read-only transactions: a statement "
        "it sends in autocommit mode could write",
        "nova_lite/db/engine.py",
        "            options.append(\"-c default_transaction_read_only=on\")\n",
        "            pass\n"),
    "driver-calls-start-a-thread-each": (
        "every map of driver calls starts a thread of its own",
        "nova_lite/compute/driver_calls.py",
        "            _Worker.take().runs.put(run)\n",
        "            _Worker().runs.put(run)\n"),
    "build-claim-with-task-in-a-transaction": (
        "a build's claim with its one task runs in a transaction (BEGIN, the statements, "
        "COMMIT), not as the one statement alone",
        "nova_lite/db/store.py",
        "        if one and plans is not None and len(tasks) <= 1:\n",
        "        if one and plans is not None and len(tasks) < 1:\n"),
    "one-statement-task-without-its-claim": (
        "the one statement of a build's claim records the task whether or not it writes "
        "the claim",
        "nova_lite/db/task_writes.py",
        "                    for column, name in zip(_INSERTED, names)]).select_from(source)\n",
        "                    for column, name in zip(_INSERTED, names)])\n"),
    "client-check-off": (
        "a PostgreSQL session never looks for its client while a statement runs, so a "
        "claim whose client died while it waited for a lock commits once the lock is free",
        "nova_lite/db/engine.py",
        "CLIENT_CHECK_MS = 1000\n",
        "CLIENT_CHECK_MS = 0\n"),
    "one-statement-bumps-what-it-does-not-admit": (
        "PostgreSQL's one-statement claim moves the node on, and writes the claim, when "
        "it admits neither by the compare-and-swap nor by the usage row",
        "nova_lite/db/claim_writes.py",
        "        T_NODES.c.uuid == node, sa.exists(sa.select(ok.c.generation))).values(\n",
        "        T_NODES.c.uuid == node).values(\n"),
    "plain-claim-without-cas": (
        "PostgreSQL's claim without the usage row writes a plan decided on a stale record "
        "whatever the node's generation",
        "nova_lite/db/claim_writes.py",
        "        T_NODES.c.uuid == node, T_NODES.c.generation == sa.bindparam(\"expected\", "
        "type_=sa.Integer),\n",
        "        T_NODES.c.uuid == node,\n"),
    "plain-claim-never": (
        "a PostgreSQL store's claims on a node it alone writes keep recording the usage row",
        "nova_lite/db/store.py",
        "        plain = not sqlite and len(tasks) <= 1 and alone\n",
        "        plain = False\n"),
    "swap-streak-kept-after-a-lost-race": (
        "a store whose claim on a node lost its race still takes itself for the node's only "
        "writer: its next claims there leave out the usage row",
        "nova_lite/db/swap_streaks.py",
        "self.after) if swapped else 0\n",
        "self.after) if swapped else streaks.get(node_uuid, self._unkept)\n"),
    "swap-streaks-unbounded": (
        "a store keeps a compare-and-swap streak for every node it ever claimed on",
        "nova_lite/db/swap_streaks.py",
        "        if node_uuid not in streaks and len(streaks) >= self.most_nodes:\n",
        "        if False:\n"),
    "plain-claim-presumed": (
        "a PostgreSQL store presumes it alone writes a node it has not claimed on, and leaves "
        "the usage row out of its first claims there",
        "nova_lite/db/store.py",
        "            presumed_alone=sqlite, most_nodes=MOST_SWAP_COUNTS)\n",
        "            presumed_alone=True, most_nodes=MOST_SWAP_COUNTS)\n"),
    "plain-claim-after-a-refusal": (
        "a PostgreSQL store whose claim without the usage row was refused on fresh records "
        "leaves the row out of its next claim there too",
        "nova_lite/db/store.py",
        "            if not sqlite:\n"
        "                # On PostgreSQL a claim that needs these steps is taken for a\n"
        "                # sign of another writer (a stale record, say): this one\n"
        "                # records the usage row, and so do the next ones until a\n"
        "                # streak of swaps again.\n"
        "                self._streaks.count(node.uuid, swapped=False)\n",
        "            if not sqlite:\n                pass\n"),
    "direct-statements-on-psycopg-cursor": (
        "the direct statements run on psycopg's own cursor, which parses them on every run",
        "nova_lite/db/direct.py",
        "    if raw is not None:\n        return cast(DBAPICursor, raw(dbapi_connection))\n",
        "    if False:\n        return cast(DBAPICursor, raw(dbapi_connection))\n"),
    "amounts-only-units-ignored": (
        "a request of amounts alone is admitted on its bounds without the inventory's "
        "min_unit, max_unit and step_size",
        "nova_lite/model/decide.py",
        "    if all(n <= 0 or (rc in inventories and inventories[rc].unit_problem(n) is None)\n",
        "    if all(n <= 0 or rc in inventories\n"),
    "amounts-only-bound-exclusive": (
        "a request of amounts alone may not reach its bound, only stay below it",
        "nova_lite/model/decide.py",
        "        if n > 0 and usage.get(rc, 0) + n > bounds[rc]:\n",
        "        if n > 0 and usage.get(rc, 0) + n >= bounds[rc]:\n"),
    "replaced-unchecked": (
        "a copy of a record takes its changed fields without their validators",
        "nova_lite/validators.py",
        "    if checked:\n        lines.append(\"    if not _disabled():\")\n",
        "    if checked:\n        lines.append(\"    if False:\")\n"),
    "replaced-copies-unbounded": (
        "the functions that copy records are kept for every kind of change ever made",
        "nova_lite/validators.py",
        "        if len(_REPLACERS) >= _MOST_REPLACERS:\n            _REPLACERS.clear()\n",
        ""),
    "amounts-allocation-of-the-consumer": (
        "a move of amounts alone records its migration as the allocation's instance",
        "nova_lite/model/decide.py",
        '     "instance_uuid": "instance_uuid", "node_uuid": "node_uuid", '
        '"resources": "resources",\n',
        '     "instance_uuid": "consumer_uuid", "node_uuid": "node_uuid", '
        '"resources": "resources",\n'),
    "lean-insert-drops-values": (
        "a claim's INSERT leaves out the columns plain rows hold NULL in, whatever the "
        "row holds there",
        "nova_lite/db/claim_writes.py",
        "        return self.lean if self._nullable(values) == self._nulls else self.full\n",
        "        return self.lean\n"),
    "lean-insert-never": (
        "a claim's INSERT binds every column, the NULLs of a plain row too",
        "nova_lite/db/claim_writes.py",
        "        return self.lean if self._nullable(values) == self._nulls else self.full\n",
        "        return self.full\n"),
    "plain-bounds-kept-across-inventories": (
        "a request's cached bounds outlive the node inventories they were worked out on",
        "nova_lite/model/decide.py",
        "        key = (id(inventories), id(requested), children)\n"
        "        hit = _PLAIN_BOUNDS.get(key)\n"
        "        if hit is not None and hit[0] is inventories and hit[1] is requested:\n",
        "        key = (0, id(requested), children)\n"
        "        hit = _PLAIN_BOUNDS.get(key)\n"
        "        if hit is not None and hit[1] is requested:\n"),
    "sqlite-direct-failure-not-rolled-back": (
        "a SQLite direct transaction that fails gives its connection back without a rollback",
        "nova_lite/db/engine.py",
        "exc:\n            cursor.close()\n            if self._rolled_back(dbapi, cursor, exc):\n",
        "exc:\n            cursor.close()\n            if True:\n"),
    "failed-postgresql-cursor-kept": (
        "a PostgreSQL direct transaction that fails leaves its cursor kept for the next",
        "nova_lite/db/engine.py",
        "            if keep:\n                self._held.drop_cursor(proxy)\n            else:\n"
        "                cursor.close()\n",
        "            cursor.close()\n"),
    "read-cursor-kept": (
        "a PostgreSQL read keeps its connection's cursor, and the cursor its last result",
        "nova_lite/db/engine.py",
        "        keep = mode in (_WRITE, _ALONE)\n",
        "        keep = True\n"),
    "cursor-made-for-every-transaction": (
        "a held connection makes a new cursor for every direct transaction",
        "nova_lite/db/held.py",
        "            cursor = proxy.info[_CURSOR] = make()",
        "            return make()"),
    "usage-row-on-every-sqlite-swap": (
        "on SQLite every compare-and-swap records the usage row, raced or not",
        "nova_lite/db/store.py",
        "        usage_row = not alone\n",
        "        usage_row = True\n"),
    "sqlite-plain-cas-ignored": (
        "SQLite's plain claim writes the rows it decided before the transaction, whatever "
        "the generation",
        "nova_lite/db/store.py",
        "    if generation != node.generation + 1:\n        after, written = _decide_locked(",
        "    if False:\n        after, written = _decide_locked("),
    "plain-rows-over-a-known-instance": (
        "SQLite's plain claim of an instance recorded already writes its allocation "
        "without the guard of a known instance",
        "nova_lite/db/claim_writes.py",
        "ser.flavor_to_json(instance.flavor), now, now)).rowcount:\n        return False\n",
        "ser.flavor_to_json(instance.flavor), now, now)).rowcount:\n        pass\n"),
    "plain-rows-drop-the-zone": (
        "a claim of an instance in a zone is taken for a plain one, and its zone is not "
        "recorded",
        "nova_lite/db/claim_writes.py",
        "            and instance.availability_zone is None)\n",
        "            )\n"),
    "placed-names-never-checked": (
        "a placed instance's host and node names are never checked",
        "nova_lite/model/decide.py",
        "    if place in _CHECKED_PLACES:\n",
        "    if True:\n"),
    "node-after-amounts-unsummed": (
        "the node after a claim holds the claim's amounts in place of its usage plus them",
        "nova_lite/model/usage.py",
        "        total = amounts.get(rc, 0) + sign * n\n",
        "        total = sign * n\n"),
    "instance-row-drops-the-zone": (
        "an instance's row as a tuple records its task state in place of its zone",
        "nova_lite/db/rows.py",
        "            now, now, inst.availability_zone)\n",
        "            now, now, inst.task_state)\n"),
    "plain-claim-values-by-name-only": (
        "PostgreSQL's plain claim always builds its values as a dict by name, though the "
        "statement takes its row as it is",
        "nova_lite/db/store.py",
        "        result = conn.execute_row(statement, names, row) if conn.takes_row(statement, "
        "names) \\\n",
        "        result = conn.execute_row(statement, names, row) if False \\\n"),
    "plain-claim-leaves-change-seq-to-the-trigger": (
        "PostgreSQL's plain claim leaves the node's change sequence to its trigger",
        "nova_lite/db/claim_writes.py",
        "        unknown).values(generation=T_NODES.c.generation + one, change_seq=_CHANGE_SEQ)"
        ".returning(\n",
        "        unknown).values(generation=T_NODES.c.generation + one).returning(\n"),
    "single-claim-leaves-change-seq-to-the-trigger": (
        "PostgreSQL's one statement on the usage row leaves the node's change sequence to "
        "its trigger",
        "nova_lite/db/claim_writes.py",
        "        generation=T_NODES.c.generation + one, change_seq=_CHANGE_SEQ).returning(\n",
        "        generation=T_NODES.c.generation + one).returning(\n"),
    "change-seq-trigger-overrides-the-statement": (
        "the node's change-sequence trigger fires whatever the statement set",
        "nova_lite/db/alembic/versions/0015_claims_set_change_seq.py",
        "    op.execute(_create(f\"{_MOVED} AND OLD.change_seq IS NOT DISTINCT FROM "
        "NEW.change_seq\"))\n",
        "    op.execute(_create(_MOVED))\n"),
    "checkpoints-never-woken": (
        "a commit never wakes the thread that checkpoints the SQLite log",
        "nova_lite/db/wal_checkpoints.py",
        "        if not running.wake.is_set():\n            running.wake.set()\n",
        ""),
    "checkpoint-backstop-unset": (
        "the writers of a SQLite file keep checkpointing at SQLite's 1,000 pages beside "
        "the thread",
        "nova_lite/db/engine.py",
        "            event.listen(self.engine, \"connect\", _backstop_checkpoints)\n",
        ""),
    "checkpoint-thread-outlives-store": (
        "disposing of a SQLite Database leaves its checkpoints' thread running",
        "nova_lite/db/engine.py",
        "        if self.checkpointer is not None:\n            self.checkpointer.stop()\n",
        ""),
    "forked-checkpointer-keeps-parent-thread": (
        "a forked child takes its parent's checkpoints thread for its own",
        "nova_lite/db/wal_checkpoints.py",
        "        checkpointer._running = None\n",
        ""),
    "checkpoint-failure-logged-every-time": (
        "every failed checkpoint logs a WARNING, not only the first of a run",
        "nova_lite/db/wal_checkpoints.py",
        "            if not self._failing:\n",
        "            if True:\n"),
}

_HISTORY = "tests.reliability.test_history"
_HOLDS, _HEAL = "tests.test_holds.TestHoldTableSQLite", "tests.test_heal.TestHealSQLite"
_WORK = "tests.test_work.TestWorkSQLite"
_BUILDS = "tests.test_build_records"
_PLAIN = "tests.test_claim_statements.TestPlainClaim"
_CLAIMS_SET_CHANGE_SEQ = ("tests.test_change_seq.TestChangeSeqOnPostgreSQL.test_the_claims_one_"
                          "statement_moves_the_change_seq_without_the_trigger")
_CHECKED, _RACES, _USAGE = ("tests.test_claim_checked", "tests.test_claim_races",
                            "tests.test_claim_usage")

#: The tests run against each mutant by default: each list holds a test
#: that catches the mutant every time, not only a chaos run that may.
GUARDS = {
    "amounts-only-units-ignored": ("tests.test_decide",),
    "amounts-only-bound-exclusive": ("tests.test_decide",),
    "replaced-unchecked": ("tests.test_validators",),
    "replaced-copies-unbounded": ("tests.test_validators",),
    "checkpoints-never-woken": ("tests.test_wal_checkpoints",),
    "checkpoint-backstop-unset": ("tests.test_wal_checkpoints",),
    "checkpoint-thread-outlives-store": ("tests.test_wal_checkpoints",),
    "forked-checkpointer-keeps-parent-thread": ("tests.test_wal_checkpoints",),
    "checkpoint-failure-logged-every-time": ("tests.test_wal_checkpoints",),
    "amounts-allocation-of-the-consumer": ("tests.test_decide",),
    "lean-insert-drops-values": ("tests.test_claim_statements", "tests.test_claims"),
    "lean-insert-never": ("tests.test_claim_statements",),
    "plain-bounds-kept-across-inventories": ("tests.test_decide",),
    "sqlite-direct-failure-not-rolled-back": ("tests.test_build_records",),
    "failed-postgresql-cursor-kept": (
        "tests.test_held.TestHeldConnectionsPostgreSQL.test_a_connection_keeps_its_cursor_"
        "until_a_write_on_it_fails",),
    "read-cursor-kept": (
        "tests.test_held.TestHeldConnectionsPostgreSQL.test_a_read_closes_its_cursor",),
    "cursor-made-for-every-transaction": (
        "tests.test_held.TestHeldConnectionsPostgreSQL.test_a_connection_keeps_its_cursor_"
        "until_a_write_on_it_fails",),
    "usage-row-on-every-sqlite-swap": ("tests.test_claim_usage.TestUsageRowsSQLite",),
    "sqlite-plain-cas-ignored": ("tests.test_claim_statements.TestPlainRowsSQLite",),
    "plain-rows-over-a-known-instance": ("tests.test_claim_statements.TestPlainRowsSQLite",),
    "plain-rows-drop-the-zone": ("tests.test_claim_statements.TestPlainRowsSQLite",
                                 "tests.test_claim_statements.TestLeanInsertsSQLite"),
    "placed-names-never-checked": ("tests.test_decide",),
    "node-after-amounts-unsummed": ("tests.test_decide",),
    "instance-row-drops-the-zone": ("tests.test_rows",),
    "plain-claim-leaves-change-seq-to-the-trigger": (_CLAIMS_SET_CHANGE_SEQ,),
    "single-claim-leaves-change-seq-to-the-trigger": (_CLAIMS_SET_CHANGE_SEQ,),
    "change-seq-trigger-overrides-the-statement": (_CLAIMS_SET_CHANGE_SEQ,),
    "plain-claim-values-by-name-only": (
        "tests.test_claim_statements.TestPlainClaim.test_its_values_go_as_a_row_or_by_name_"
        "and_write_the_general_steps_rows",),
    "build-claim-with-task-in-a-transaction": (
        "tests.test_claim_statements.TestOneStatementClaim.test_a_claim_with_one_task_is_"
        "one_round_trip",),
    "one-statement-task-without-its-claim": (
        "tests.test_claim_statements.TestOneStatementClaim.test_a_task_is_recorded_once_with_"
        "a_known_instance_claimed_by_the_transaction",),
    "one-statement-bumps-what-it-does-not-admit": (_CHECKED,),
    "plain-claim-without-cas": (_PLAIN,),
    "plain-claim-never": (_PLAIN,),
    "swap-streak-kept-after-a-lost-race": (_PLAIN, "tests.test_claim_usage.TestUsageRowsSQLite",
                                           "tests.test_swap_streaks"),
    "swap-streaks-unbounded": ("tests.test_swap_streaks",),
    "plain-claim-presumed": (_PLAIN, "tests.test_claim_usage.TestUsageRowsPostgreSQL"),
    "plain-claim-after-a-refusal": (_PLAIN,),
    "client-check-off": (
        "tests.reliability.test_faults.TestSigkillPostgreSQL.test_killed_inside_the_claim_"
        "statement",),
    "direct-statements-on-psycopg-cursor": (
        "tests.test_claim_statements.TestOneStatementClaim.test_a_claim_and_its_one_task_are_"
        "one_statement",),
    "cas-ignored": (_HISTORY, _RACES, _USAGE),
    "one-statement-cas-ignored": (_CHECKED,),
    "database-check-ignores-since": (_CHECKED,),
    "database-check-ignores-room": (_CHECKED, _USAGE),
    "usage-check-on-the-snapshot": (_CHECKED,),
    "extras-keep-since": (_CHECKED,),
    "no-inventory-reread": (_HISTORY, _RACES, _CHECKED),
    "reread-before-the-bump": (_USAGE,),
    "usage-row-of-older-generation": (_USAGE,),
    "move-check-outside": (_RACES,),
    "no-ownership-check": (_HISTORY, _RACES),
    "heal-no-consumer-recheck": (_HOLDS,),
    "holds-rule-offloaded-placed": (_HOLDS, _HEAL),
    "heal-moves-of-live-services": (_HEAL,),
    "task-taken-twice": (_WORK,),
    "outcome-by-any-worker": (_WORK,),
    "instance-change-without-outcome": (_WORK,),
    "retaken-build-spawns-again": (_WORK,),
    "traits-ignored": ("tests.test_traits.TraitScheduling",
                       "tests.test_traits.TraitSchedulingPostgreSQL"),
    "compute-node-entry-wins": ("tests.test_provider_config.ApplyTests",
                                "tests.test_provider_config.TrackerTests"),
    "child-room-ignored": ("tests.test_providers.TestProviderClaimsSQLite",
                           "tests.test_providers.TestConcurrentProviderClaimsPostgreSQL",
                           f"{_HISTORY}.TestChaosSQLite"),
    "child-generation-kept": ("tests.test_providers.TestProviderClaimsPostgreSQL",
                              "tests.test_providers.TestProviderClaimsSQLite",
                              f"{_HISTORY}.TestChaosPostgreSQL"),
    "pci-lands-off-the-picked-device": ("tests.test_pci_providers.TestPciProviderClaimsSQLite",
                                        f"{_HISTORY}.TestChaosSQLite"),
    "pci-rebuild-off-the-devices": ("tests.test_pci_providers.TestPciProviderClaimsSQLite",),
    "pci-class-asked-directly": ("tests.test_pci_providers.TestPciProviderClaimsSQLite",),
    "steady-pass-skips-change": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "steady-pass-writes": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "pass-reads-no-down-service": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "down-services-bounded-on-one-side": (
        "tests.test_steady_pass.TestSteadyPassPostgreSQL.test_every_statement_of_a_pass_reads_"
        "services_through_indexes_in_a_generic_plan",),
    "down-services-by-floor-alone": (
        "tests.test_services.TestServicesOnSQLite.test_the_down_rule_in_sql_is_the_heartbeat_"
        "not_its_floor",
        "tests.test_services.TestServicesOnPostgreSQL.test_the_down_rule_in_sql_is_the_heartbeat_"
        "not_its_floor"),
    "heartbeat-floor-is-the-heartbeat": (
        "tests.test_services.TestServicesOnPostgreSQL.test_a_heartbeat_within_its_grain_is_a_"
        "hot_update",),
    "builds-server-cpu-in-seconds": (
        "tests.test_bench.TestScenarios.test_builds_on_postgresql",),
    "autovacuum-stand-in-ignores-thresholds": (
        "tests.test_bench.TestScenarios.test_the_autovacuum_stand_in_analyzes_and_vacuums_by_"
        "autovacuum_s_rules",),
    "pass-names-instances-by-a-function-of-host": (
        "tests.test_steady_pass.TestSteadyPassPostgreSQL.test_every_statement_of_a_pass_reads_"
        "the_host_s_records_through_indexes",),
    "server-advice-not-logged": (
        "tests.test_server_checks.TestServerAdviceOnPostgreSQL.test_a_compute_service_logs_"
        "the_advice_when_it_starts",),
    "serve-commands-give-no-server-advice": (
        "tests.test_server_checks.TestServerAdviceOnPostgreSQL.test_the_api_and_metrics_"
        "servers_log_the_advice_when_they_start",),
    "serve-prints-before-handling-sigterm": ("tests.test_cli_serving",),
    "look-calls-a-deprecated-api": (
        "tests.test_change_seq.TestChangeSeqOnSQLite.test_a_steady_look_reads_nothing_and_"
        "deletions_are_seen",),
    "look-ignores-extras": (
        "tests.test_change_seq.TestChangeSeqOnSQLite.test_described_seq_moves_with_the_"
        "description_alone",),
    "recorded-work-notifies-no-host": (
        "tests.test_work.TestWorkPostgreSQL.test_work_is_notified_on_its_hosts_own_"
        "channel",),
    "look-autocommit-behind-a-pooler": (
        "tests.test_pgbouncer.TestPooledDatabase.test_a_read_of_statements_alone_is_a_"
        "transaction_here_and_reads_nodes_without_jit",),
    "read-only-store-autocommit-writes": (
        "tests.test_store.TestPostgreSQLStore.test_a_read_only_store_reads_each_statement_"
        "alone_and_writes_none",),
    "look-through-sqlalchemy": (
        "tests.test_change_seq.TestChangeSeqOnSQLite.test_a_look_runs_on_the_drivers_cursor_"
        "and_reads_nothing_more_when_steady",),
    "write-begin-answered-alone": (
        "tests.test_claim_statements.TestOneStatementClaim.test_a_claim_with_its_tasks_begins_"
        "in_the_round_trip_of_its_statements",),
    "change-reads-in-a-transaction": (
        "tests.test_change_seq.TestChangeSeqOnPostgreSQL.test_a_look_is_one_round_trip_a_"
        "claims_renewal_included",),
    "session-jit-on": (
        "tests.test_store.TestPostgreSQLStore.test_the_stores_sessions_run_with_jit_off_and_a_"
        "read_each_in_autocommit",),
    "pooled-node-reads-keep-jit": (
        "tests.test_pgbouncer.TestPooledDatabase.test_a_read_of_statements_alone_is_a_"
        "transaction_here_and_reads_nodes_without_jit",),
    "read-each-autocommit-behind-a-pooler": (
        "tests.test_pgbouncer.TestPooledDatabase.test_a_read_of_statements_alone_is_a_"
        "transaction_here_and_reads_nodes_without_jit",),
    "moves-in-progress-by-bound-statuses": (
        "tests.test_steady_pass.TestSteadyPassSQLite.test_a_pass_finds_the_moves_in_progress_"
        "by_their_own_indexes",
        "tests.test_steady_pass.TestSteadyPassPostgreSQL.test_every_statement_of_a_pass_reads_"
        "the_host_s_records_through_indexes"),
    "in-progress-index-statuses-drift": (
        "tests.test_migrations.TestSQLiteMigrations.test_the_partial_indexes_hold_the_moves_"
        "the_statements_name",),
    "server-advice-ignores-track-counts": ("tests.test_server_checks",),
    "pass-names-instances-by-an-or": (
        "tests.test_steady_pass.TestSteadyPassPostgreSQL.test_every_statement_of_a_pass_reads_"
        "the_host_s_records_through_indexes",),
    "autovacuum-stand-in-round-failure-unreported": (
        "tests.test_bench.TestScenarios.test_a_failed_round_of_the_autovacuum_stand_in_is_"
        "reported",),
    "pass-reads-no-move-end": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "snapshot-reads-no-move-end": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "change-mark-after-running-writers": ("tests.test_change_seq.TestChangeSeqOnPostgreSQL",),
    "culprits-skip-over-capacity": ("tests.test_explain.TestExplainSQLite",),
    "culprits-skip-children": ("tests.test_providers",),
    "down-hosts-all-in-one-pass": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "look-answers-only-when-changed": ("tests.test_change_seq.TestChangeSeqOnSQLite",),
    "service-tombstones-ignored": ("tests.test_change_seq.TestChangeSeqOnSQLite",
                                   "tests.test_change_seq.TestChangeSeqOnPostgreSQL"),
    "usage-only-whatever-description": ("tests.test_change_seq.TestChangeSeqOnSQLite",),
    "renew-ignores-described": ("tests.test_change_seq.TestChangeSeqOnSQLite",),
    "inventory-delete-keeps-described": ("tests.test_change_seq.TestChangeSeqOnPostgreSQL",),
    "host-change-keeps-described": ("tests.test_change_seq.TestChangeSeqOnSQLite",),
    "heartbeats-never-reread": (
        "tests.test_scheduler.SchedulerTests.test_a_view_notices_a_service_dying_and_never_"
        "a_live_one",),
    "trusted-report-keeps-placeholder-uuid": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "trusted-report-hostname-anywhere": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "trusted-usage-not-read-only": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "host-state-free-negative": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "index-bulk-unsorted": ("tests.test_host_index.HostIndexTests",),
    "index-split-loses-max": ("tests.test_host_index.HostIndexTests", "tests.test_sorted_rows"),
    "index-stale-positions": ("tests.test_host_index.HostIndexTests", "tests.test_sorted_rows"),
    "index-search-right-by-left-block": ("tests.test_sorted_rows",),
    "task-row-columns-out-of-order": ("tests.test_work.TestTaskRows",),
    "full-read-collector-left-off": ("tests.test_heap",),
    "full-read-freezes-small": ("tests.test_heap",),
    "totals-memo-ignores-usage": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "metrics-memo-ignores-usage": ("tests.test_node_records.TestSQLiteNodeRecords",),
    "build-task-own-transaction": (_BUILDS,),
    "build-claim-reads-the-node": (_BUILDS,),
    "view-rereads-its-own-claim": (_BUILDS,),
    "missing-counts-other-nodes": ("tests.test_explain",),
    "heartbeat-in-a-transaction": ("tests.test_steady_pass.TestHeartbeatPostgreSQL",),
    "pass-scans-every-node": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "held-connection-never-pinged": ("tests.test_held",),
    "lost-connection-put-back": ("tests.test_held",),
    "held-connections-outlive-dispose": ("tests.test_held",),
    "pass-read-one-statement-at-a-time": ("tests.test_steady_pass.TestSteadyPassPostgreSQL",),
    "pass-read-two-snapshots": ("tests.test_steady_pass.TestSteadyPassPostgreSQL",),
    "snapshot-settings-left-on-connection": ("tests.test_held",),
    "direct-transactions-unseen": ("tests.test_steady_pass.TestSteadyPassSQLite",),
    "driver-worker-calls-on-after-timeout": ("tests.test_driver_calls",),
    "driver-calls-start-a-thread-each": ("tests.test_driver_calls",),
    "audit-entry-kept-when-report-changes": (
        "tests.test_resource_tracker.TestAuditPersistsOnlyOnChange",),
    "driver-workers-survive-fork": ("tests.test_driver_calls",),
}

#: A second change some mutants need, to stay a faithful copy of the old code.
SECOND = {
    "build-task-own-transaction": (
        "nova_lite/compute/api.py",
        "        ordered = [claimed[i.uuid] for i in instances]\n",
        "        ordered = [claimed[i.uuid] for i in instances]\n"
        "        tasks = tuple(store.tasks.record(build_work([], '', '')))\n"),
    "move-check-outside": (
        "nova_lite/compute/resource_tracker.py",
        "        migration = self._new_migration(instance, flavor, nodename, kind)\n",
        "        stored = self.store.get_instance(instance.uuid)\n"
        "        if not stored.holds_resources:\n"
        "            raise InvalidInput(f'Instance {instance.uuid} is {stored.vm_state}')\n"
        "        if self.store.list_migrations(instance.uuid, in_progress_only=True):\n"
        "            raise InvalidInput(f'Instance {instance.uuid} is moving already')\n"
        "        migration = self._new_migration(instance, flavor, nodename, kind)\n"),
}


def _replace(tree, path, old, new):
    full = os.path.join(tree, path)
    with open(full) as f:
        text = f.read()
    if text.count(old) != 1:
        raise SystemExit(f"mutant does not apply: {path} has {text.count(old)} copies of "
                         f"{old!r}")
    with open(full, "w") as f:
        f.write(text.replace(old, new))


def _copy(dest):
    ignore = shutil.ignore_patterns(".git", ".venv*", ".stestr", "*.pyc", "__pycache__",
                                    "doc", "nova-lite-state", "*.egg-info")
    shutil.copytree(ROOT, dest, ignore=ignore, dirs_exist_ok=True)


def _names_a_module(tree, test_id):
    """True if ``test_id`` is a test module of ``tree``, or a class or test in one."""
    parts = test_id.split(".")
    return any(os.path.exists(os.path.join(tree, *parts[:i]) + ".py")
               for i in range(1, len(parts) + 1))


def _module_of(tree, path):
    """The module ``path`` (relative to ``tree``) is, or None if it is not one.

    A module only if every directory above it is a package (has an
    ``__init__.py``), so that ``importlib.import_module`` finds it.
    """
    parts = path[:-len(".py")].split("/") if path.endswith(".py") else None
    if not parts or not all(os.path.exists(os.path.join(tree, *parts[:i], "__init__.py"))
                            for i in range(1, len(parts))):
        return None
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: What a mutant's guard run comes to (:func:`judge`): ``kind`` is
#: ``killed``, ``broken`` or ``survived``; ``failing`` the tests that failed
#: or errored; ``note`` says why a mutant was not killed.
Verdict = collections.namedtuple("Verdict", "kind failing note")

#: Outcomes of a test that count against it (``tools/guard_run.py``).
_FAILING = ("failure", "error", "unexpected_success")


def judge(events, exit_note="ended"):
    """The :data:`Verdict` of a guard run from the events ``tools/guard_run.py`` wrote.

    Killed only if at least one test failed or errored.  Broken (which
    proves nothing about the guards, and so is no kill) if anything did not
    load: a guard module or the mutated module did not import, or a guard
    id names no test; broken too if no test ran, or if the test process
    ended (``exit_note`` says how) before the end of its report with no
    test failed.  Survived otherwise: every test passed or skipped.
    """
    loads = [e["load_error"] for e in events if "load_error" in e]
    if loads:
        return Verdict("broken", [], f"did not load: {', '.join(loads)}")
    failing = sorted({e["test"] for e in events if e.get("outcome") in _FAILING})
    if failing:
        return Verdict("killed", failing, "")
    done = [e["done"] for e in events if "done" in e]
    if not done:
        ended = {e["test"] for e in events if "outcome" in e}
        running = [e["start"] for e in events if "start" in e and e["start"] not in ended]
        return Verdict("broken", [], f"the test process {exit_note} before the end of its "
                       f"report" + (f", in {running[-1]}" if running else ""))
    if not done[0]:
        return Verdict("broken", [], "no test ran")
    skipped = sum(1 for e in events if e.get("outcome") == "skip")
    if skipped == done[0]:
        return Verdict("survived", [], f"every one of the {skipped} tests skipped")
    return Verdict("survived", [], f"{done[0]} tests passed or skipped ({skipped} skipped)")


#: Running guard processes (their process groups), ended on an interrupt.
_RUNNING = set()


def _end_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_guards(tree, tests, imports=(), timeout=None):
    """Run ``tests`` from ``tree`` with ``tools/guard_run.py``: ``(verdict, output)``.

    The tests run in one process, in the order named, and stop at the
    first failure; each of ``imports`` is imported first.  Whatever the
    process left running is ended with it.
    """
    with tempfile.TemporaryDirectory(prefix="guard-run-") as scratch:
        report, output = (os.path.join(scratch, n) for n in ("report", "output"))
        command = [sys.executable, GUARD_RUN, report,
                   *(f"--import={m}" for m in imports), *tests]
        with open(output, "w") as out:
            proc = subprocess.Popen(command, cwd=tree, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, PYTHONPATH=tree))
        _RUNNING.add(proc.pid)
        try:
            proc.wait(timeout=timeout)
            exit_note = f"exited with {proc.returncode}"
        except subprocess.TimeoutExpired:
            exit_note = f"was ended after {timeout} s"
        finally:
            _end_group(proc.pid)
            proc.wait()
            _RUNNING.discard(proc.pid)
        events = []
        if os.path.exists(report):
            with open(report) as f:
                # A line cut short by the process's end is no event.
                events = [json.loads(line) for line in f if line.endswith("\n")]
        with open(output, errors="replace") as f:
            return judge(events, exit_note), f.read()


def _check_applies(name, tree=ROOT, tests=()):
    """Stop the run if ``name``'s changes do not match exactly once in ``tree``,
    or if one of ``tests`` names no test module there."""
    _, path, old, _ = MUTANTS[name]
    changes = [(path, old)] + ([SECOND[name][:2]] if name in SECOND else [])
    for file, text in changes:
        with open(os.path.join(tree, file)) as f:
            found = f.read().count(text)
        if found != 1:
            raise SystemExit(f"mutant {name} does not apply: {file} has {found} copies of "
                             f"{text!r}")
    missing = [t for t in tests if not _names_a_module(tree, t)]
    if missing:
        raise SystemExit(f"mutant {name}: no test module for {', '.join(missing)}")


def run_mutant(name, tests, timeout=None):
    """Run mutant ``name`` against ``tests``: ``(killed, text to print)``."""
    description, path, old, new = MUTANTS[name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as tree:
        _copy(tree)
        _replace(tree, path, old, new)
        if name in SECOND:
            _replace(tree, *SECOND[name])
        missing = [t for t in tests if not _names_a_module(tree, t)]
        if missing:
            raise SystemExit(f"mutant {name}: no test module for {', '.join(missing)}")
        paths = [path] + ([SECOND[name][0]] if name in SECOND else [])
        broken = []
        for mutated in paths:
            if mutated.endswith(".py"):
                with open(os.path.join(tree, mutated)) as f:
                    try:
                        compile(f.read(), mutated, "exec")
                    except SyntaxError:
                        broken.append(traceback.format_exc(limit=0))
        if broken:
            verdict = Verdict("broken", [], "the mutated file does not compile")
            output = "".join(broken)
        else:
            imports = [m for m in (_module_of(tree, p) for p in paths) if m]
            verdict, output = run_guards(tree, tests, imports, timeout)
    seconds = time.monotonic() - started
    lines = []
    if verdict.kind == "killed":
        lines.append(f"killed: {name} ({description}) in {seconds:.0f} s by "
                     f"{', '.join(tests)}; failing tests:")
        lines += [f"    {test}" for test in verdict.failing[:8]]
    else:
        what = "broken, which proves nothing" if verdict.kind == "broken" else "survived"
        lines.append(f"SURVIVED: {name} ({description}) in {seconds:.0f} s by "
                     f"{', '.join(tests)}; {what}: {verdict.note}")
        lines.append(output[-5000:])
    return verdict.kind == "killed", "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--all-guards", action="store_true",
                        help="run every mutant against every module of GUARD_TESTS, "
                             "not only its own guards")
    parser.add_argument("--tests", nargs="+",
                        help="test modules, classes or tests to run against each mutant "
                             "instead")
    parser.add_argument("--jobs", type=int, default=2,
                        help="mutants run at a time (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds a mutant's tests may take before they are ended and "
                             "the mutant counts as broken (default: %(default)s)")
    args = parser.parse_args(argv)
    if set(GUARDS) != set(MUTANTS):
        parser.error(f"mutants without guards or guards without a mutant: "
                     f"{', '.join(sorted(set(GUARDS) ^ set(MUTANTS)))}")
    if args.list:
        for name, (description, path, _, _) in MUTANTS.items():
            print(f"{name}: {description} ({path}); guards: {', '.join(GUARDS[name])}")
        return 0
    names = args.names or list(MUTANTS)
    unknown = set(names) - set(MUTANTS)
    if unknown:
        parser.error(f"unknown mutants: {', '.join(sorted(unknown))}; see --list")

    def tests_of(name):
        if args.tests:
            return args.tests
        return list(GUARD_TESTS) if args.all_guards else list(GUARDS[name])
    for name in names:
        _check_applies(name, ROOT, tests_of(name))
    started = time.monotonic()
    killed = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = [pool.submit(run_mutant, name, tests_of(name), args.timeout) for name in names]
        try:
            for run in concurrent.futures.as_completed(runs):
                caught, text = run.result()
                killed += caught
                print(text, flush=True)
        except BaseException:
            for run in runs:
                run.cancel()
            for pid in list(_RUNNING):
                _end_group(pid)
            raise
    print(f"mutants: {len(names)} run in {time.monotonic() - started:.0f} s, "
          f"{max(1, args.jobs)} at a time")
    print(f"{killed} passed, {len(names) - killed} failed")
    return 0 if killed == len(names) else 1


if __name__ == "__main__":
    sys.exit(main())
