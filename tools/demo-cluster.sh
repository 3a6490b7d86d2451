#!/usr/bin/env bash
# A walk-through of a two-host nova-lite cluster on one machine (`make run`).
#
# On an SQLite file in its own state directory, with the fake driver:
#   1. the database: `nova-lite db sync` when the schema is not current;
#   2. one compute service per host, `nova-lite compute --host demo-1` and
#      `--host demo-2`, in the background (logs in the state directory),
#      then a wait (with a deadline) until both are up and their nodes
#      recorded;
#   3. `server create --flavor m1.small --count 3 --wait`, `server list
#      --long`, `hypervisor list`;
#   4. `server delete UUID --yes-i-really-mean-it --wait`, `server list`;
#   5. SIGTERM to both services, and a wait for them to stop.
# Every command is printed before it runs (`+ nova-lite ...`).  The last line
# is `demo-cluster: OK: ...`; on any failure the script says what failed,
# shows the end of the services' logs, stops the services and exits non-zero.
#
# Usage: tools/demo-cluster.sh [STATE_DIR]
#   STATE_DIR (or $NOVA_LITE_DEMO_STATE): default ./nova-lite-state/demo-cluster.
#   Each run starts a new cluster there: the database and logs of an earlier
#   walk-through (a directory holding the file .demo-cluster) are removed; a
#   directory holding another database is refused.
# Environment:
#   NOVA_LITE_CMD           the nova-lite command (default .venv/bin/nova-lite;
#                           e.g. "python3 -m nova_lite.cli.main")
#   PYTHON                  a Python 3 to read the commands' JSON (default python3)
#   NOVA_LITE_DEMO_DRIVER   the compute services' driver (default fake)
#   NOVA_LITE_DEMO_TIMEOUT  seconds to wait for the services, and for each
#                           --wait (default 60)
set -euo pipefail
exec </dev/null

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
read -r -a NOVA <<< "${NOVA_LITE_CMD:-$ROOT/.venv/bin/nova-lite}"
PYTHON=${PYTHON:-python3}
DRIVER=${NOVA_LITE_DEMO_DRIVER:-fake}
TIMEOUT=${NOVA_LITE_DEMO_TIMEOUT:-60}
STATE=${1:-${NOVA_LITE_DEMO_STATE:-$ROOT/nova-lite-state/demo-cluster}}
HOSTS=(demo-1 demo-2)
FLAVOR=m1.small
COUNT=3
MARKER=.demo-cluster

declare -A PIDS=()
FAILED_STEP=""

say() { printf '%s\n' "$*"; }
fail() { say "demo-cluster: FAILED: $*" >&2; exit 1; }

# The command as typed: "nova-lite ARGS", arguments with spaces quoted.
shown() {
    local out="nova-lite" arg
    for arg in "$@"; do
        if [[ $arg =~ [[:space:]] ]]; then out+=" \"$arg\""; else out+=" $arg"; fi
    done
    printf '%s' "$out"
}

# Print the command, then run it; a failure stops the walk-through.
run() {
    say "+ $(shown "$@")"
    FAILED_STEP="$(shown "$@")"
    "${NOVA[@]}" "$@"
    FAILED_STEP=""
}

# Print the command, run it, and keep its standard output in $OUT (not shown).
query() {
    say "+ $(shown "$@")"
    FAILED_STEP="$(shown "$@")"
    OUT=$("${NOVA[@]}" "$@")
    FAILED_STEP=""
}

# The same without printing (the wait's polls).
quiet() { "${NOVA[@]}" "$@" 2>/dev/null; }

# Run a check written in Python on JSON read from stdin; it prints what it
# found and exits non-zero when the check fails.
check() { "$PYTHON" -c "$1" "${@:2}"; }

stop_services() {
    local host pid rc status=0
    for host in "${!PIDS[@]}"; do
        pid=${PIDS[$host]}
        kill -TERM "$pid" 2>/dev/null || true
    done
    for host in "${!PIDS[@]}"; do
        pid=${PIDS[$host]}
        rc=0
        wait "$pid" || rc=$?
        unset "PIDS[$host]"
        if [[ $rc -ne 0 ]]; then
            say "compute service of $host (pid $pid) exited with status $rc" >&2
            status=1
        fi
    done
    return "$status"
}

on_exit() {
    local rc=$?
    trap - EXIT
    if [[ $rc -ne 0 ]]; then
        [[ -n $FAILED_STEP ]] && say "demo-cluster: FAILED: $FAILED_STEP (exit status $rc)" >&2
        local host
        for host in "${HOSTS[@]}"; do
            if [[ -s $STATE/$host.log ]]; then
                say "--- last lines of $STATE/$host.log" >&2
                tail -n 15 "$STATE/$host.log" >&2
            fi
        done
    fi
    if [[ ${#PIDS[@]} -gt 0 ]]; then
        say "stopping the compute services (SIGTERM)" >&2
        stop_services || true
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v "${NOVA[0]}" >/dev/null || fail "no nova-lite command ${NOVA[0]} (run tools/bootstrap.sh core, or set NOVA_LITE_CMD)"
command -v "$PYTHON" >/dev/null || fail "no Python $PYTHON to read the commands' JSON (set PYTHON)"
[[ $TIMEOUT =~ ^[0-9]+$ && $TIMEOUT -gt 0 ]] || fail "NOVA_LITE_DEMO_TIMEOUT must be a whole number of seconds above 0, got '$TIMEOUT'"

# A new cluster in a directory of its own.
if [[ -e $STATE/nova-lite.db && ! -e $STATE/$MARKER ]]; then
    fail "$STATE holds a database that is not a walk-through's; choose another directory (NOVA_LITE_DEMO_STATE)"
fi
(umask 077 && mkdir -p "$STATE")
rm -f "$STATE"/nova-lite.db "$STATE"/nova-lite.db-wal "$STATE"/nova-lite.db-shm
for host in "${HOSTS[@]}"; do rm -f "$STATE/$host.log"; done
touch "$STATE/$MARKER"
export NOVA_LITE_STATE_PATH=$STATE

say "A two-host cluster on one machine: the database is $STATE/nova-lite.db"
say "(NOVA_LITE_STATE_PATH=$STATE), the driver is $DRIVER."
say
say "== 1. The database: create the schema (or upgrade it)"
if [[ $(quiet db version -f value -c Current || true) != "yes" ]]; then
    run db sync
fi

say
say "== 2. One compute service per host, each a long-running process"
for host in "${HOSTS[@]}"; do
    say "+ $(shown compute --host "$host" --driver "$DRIVER") > $STATE/$host.log 2>&1 &"
    "${NOVA[@]}" compute --host "$host" --driver "$DRIVER" >"$STATE/$host.log" 2>&1 &
    PIDS[$host]=$!
done

say "Waiting (at most $TIMEOUT s) until 'nova-lite service list -f json' shows both up"
say "and 'nova-lite hypervisor list -f json' shows their nodes ..."
UP_CHECK='
import json, sys
hosts = sys.argv[1:]
services = {s["Host"]: s["State"] for s in json.loads(sys.stdin.readline())}
nodes = {n["Host"] for n in json.loads(sys.stdin.readline())}
sys.exit(0 if all(services.get(h) == "up" and h in nodes for h in hosts) else 1)
'
deadline=$((SECONDS + TIMEOUT))
while true; do
    for host in "${!PIDS[@]}"; do
        if ! kill -0 "${PIDS[$host]}" 2>/dev/null; then
            rc=0
            wait "${PIDS[$host]}" || rc=$?
            unset "PIDS[$host]"
            fail "the compute service of $host exited with status $rc before it was up (log: $STATE/$host.log)"
        fi
    done
    services=$(quiet service list -f json | tr -d '\n' || true)
    nodes=$(quiet hypervisor list -f json | tr -d '\n' || true)
    if [[ -n $services && -n $nodes ]] \
            && printf '%s\n%s\n' "$services" "$nodes" | check "$UP_CHECK" "${HOSTS[@]}"; then
        break
    fi
    if [[ $SECONDS -ge $deadline ]]; then
        fail "the compute services of ${HOSTS[*]} were not all up with their nodes recorded after $TIMEOUT s (logs: $STATE/*.log)"
    fi
    sleep 0.2
done
run service list

say
say "== 3. Three servers: scheduled and claimed here, spawned by their hosts' services"
run server create --flavor "$FLAVOR" --count "$COUNT" --wait --timeout "$TIMEOUT"
query server list -f json
CREATED_CHECK='
import json, sys
count, hosts = int(sys.argv[1]), set(sys.argv[2:])
servers = json.loads(sys.stdin.read())
bad = [s for s in servers if s["Status"] != "active" or s["Task"] is not None
       or s["Host"] not in hosts]
if len(servers) != count or bad:
    sys.exit(f"expected {count} active servers with no task on {sorted(hosts)}, got {servers}")
print(" ".join(s["ID"] for s in servers))
'
SERVERS=$(printf '%s' "$OUT" | check "$CREATED_CHECK" "$COUNT" "${HOSTS[@]}") \
    || fail "the servers are not as 'server create --wait' said"
read -r -a SERVERS <<< "$SERVERS"
say "  checked: ${#SERVERS[@]} servers active, no work left for them"
run server list --long
run hypervisor list -c "Hypervisor Hostname" -c State -c "vCPUs Used" -c "Memory MB Used" -c "Running VMs"

say
VICTIM=${SERVERS[0]}
say "== 4. Delete one: its host's service destroys the guest and frees its resources"
run server delete "$VICTIM" --yes-i-really-mean-it --wait --timeout "$TIMEOUT"
run server list
query server list --all -f json
DELETED_CHECK='
import json, sys
victim, others = sys.argv[1], set(sys.argv[2:])
servers = {s["ID"]: s for s in json.loads(sys.stdin.read())}
if servers.get(victim, {}).get("Status") != "deleted":
    sys.exit(f"server {victim} is not deleted: {servers.get(victim)}")
live = {i for i, s in servers.items() if s["Status"] == "active"}
if live != others:
    sys.exit(f"expected {sorted(others)} active, got {sorted(live)}")
'
printf '%s' "$OUT" | check "$DELETED_CHECK" "$VICTIM" "${SERVERS[@]:1}" \
    || fail "the servers are not as 'server delete --wait' said"
say "  checked: $VICTIM deleted, $((${#SERVERS[@]} - 1)) servers still active"

say
say "== 5. Audit: each host's service compares its own hypervisor, its tracker and the records"
for host in "${HOSTS[@]}"; do
    run audit --host "$host" --timeout "$TIMEOUT"
done

say
say "== 6. Stop the services: SIGTERM, each stops after its current pass"
for host in "${HOSTS[@]}"; do
    say "kill -TERM ${PIDS[$host]}    # nova-lite compute --host $host"
done
stop_services || fail "a compute service did not stop cleanly (logs: $STATE/*.log)"

say
say "demo-cluster: OK: $COUNT servers built active on ${HOSTS[*]}, server $VICTIM deleted, $((${#SERVERS[@]} - 1)) left active (state: $STATE)"
