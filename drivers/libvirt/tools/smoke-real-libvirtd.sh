#!/usr/bin/env bash
# Opt-in smoke test of the libvirt driver against a real libvirtd + QEMU (TCG).
#
# Starts a private libvirtd in session mode (socket, config, state and logs in a
# temp dir; as root it runs as "nobody", so nothing system-wide is touched and
# no libvirt-qemu user or systemd is needed), then, through the driver: reports the host, boots two tiny diskless guests
# (virt_type=qemu, i.e. TCG: no KVM needed), checks that vcpus_used and the
# guest list follow them, destroys them and checks the view again.  On exit it
# stops what it started, by PID: the guests' QEMU processes and the daemon.
#
# Needs: apt-get install libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86
# and the project virtualenv (tools/bootstrap.sh all at the checkout root), whose
# python runs the driver.
# Usage: drivers/libvirt/tools/smoke-real-libvirtd.sh   (PYTHON=... to pick another
# interpreter that has nova-lite, nova-lite-libvirt and libvirt-python)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-$root/.venv/bin/python}
LIBVIRTD=${LIBVIRTD:-$(command -v libvirtd || echo /usr/sbin/libvirtd)}

die() { echo "smoke: $*" >&2; exit 2; }
[ -x "$PYTHON" ] || die "no project virtualenv python at $PYTHON: run tools/bootstrap.sh all \
in $root (or set PYTHON=/path/to/python)"
"$PYTHON" -c 'import nova_lite, nova_lite_libvirt, libvirt' 2>/dev/null \
    || die "$PYTHON cannot import nova_lite, nova_lite_libvirt and libvirt: run \
tools/bootstrap.sh all in $root (or pip install . ./drivers/libvirt into that environment)"
[ -x "$LIBVIRTD" ] || die "no libvirtd: apt-get install libvirt-daemon libvirt-daemon-driver-qemu"
command -v qemu-system-x86_64 >/dev/null || die "no QEMU: apt-get install qemu-system-x86"
echo "smoke: python $PYTHON"

work=$(mktemp -d /tmp/nova-lite-smoke.XXXXXX)
chmod 755 "$work"
mkdir -p "$work/run" "$work/state" "$work/config" "$work/cache" "$work/data" "$work/home"
chmod 700 "$work/run"
run_as=()
if [ "$(id -u)" = 0 ]; then
    # A session daemon run by an unprivileged user: private and self-contained.
    chown nobody: "$work"/{run,state,config,cache,data,home}
    run_as=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
fi
export XDG_RUNTIME_DIR="$work/run" XDG_CONFIG_HOME="$work/config" \
       XDG_CACHE_HOME="$work/cache" XDG_DATA_HOME="$work/data" HOME="$work/home"
daemon_pid=""
# What is running when something fails: "daemon" (starting libvirtd) or "driver"
# (the checks).  libvirtd logs warnings and errors that are harmless in a private
# session daemon (no /dev/kvm, no cgroups, no network helpers, ...): its log is
# shown as the likely cause only when the daemon itself failed to start.
stage=daemon
log_offset=0
# Errors a private session daemon logs on any machine; never the cause of a failure.
HARMLESS='/dev/kvm|dnsmasq|D-Bus|system bus|session bus|udev device for syspath|cgroup'

cleanup() {
    local rc=$?
    # Guests first: libvirtd leaves its QEMU processes running when it stops.
    if [ -f "$work/guest.pids" ]; then
        while read -r pid; do
            [ -n "$pid" ] && kill "$pid" 2>/dev/null && echo "smoke: stopped guest QEMU pid $pid"
        done < "$work/guest.pids"
    fi
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill "$daemon_pid"
        wait "$daemon_pid" 2>/dev/null || true
        echo "smoke: stopped libvirtd pid $daemon_pid"
    fi
    if [ $rc -ne 0 ] && [ -f "$work/libvirtd.log" ]; then
        if [ "$stage" = daemon ]; then
            echo "smoke: libvirtd did not start; its last log lines:" >&2
            tail -n 20 "$work/libvirtd.log" >&2
        else
            # The failure is the driver's (its output above says what); libvirtd's
            # errors logged meanwhile, for reference only.
            errors=$(tail -c +"$((log_offset + 1))" "$work/libvirtd.log" | grep ': error : ' \
                     | grep -v -E "$HARMLESS" | tail -n 10 || true)
            if [ -n "$errors" ]; then
                echo "smoke: for reference, other errors libvirtd logged while the driver ran:" >&2
                echo "$errors" >&2
            fi
        fi
    fi
    echo "smoke: logs and state kept in $work"
    exit $rc
}
trap cleanup EXIT INT TERM

cat > "$work/libvirtd.conf" <<CONF
log_outputs = "3:file:$work/libvirtd.log"
CONF
touch "$work/libvirtd.log" "$work/guest.pids"
[ ${#run_as[@]} -gt 0 ] && chown nobody: "$work/libvirtd.log" "$work/guest.pids"

"${run_as[@]}" "$LIBVIRTD" --config "$work/libvirtd.conf" &
daemon_pid=$!
echo "smoke: started libvirtd pid $daemon_pid (session mode, as $(id -un "${run_as:+nobody}" 2>/dev/null || id -un))"
sock="$work/run/libvirt/libvirt-sock"
for _ in $(seq 100); do
    [ -S "$sock" ] && break
    kill -0 "$daemon_pid" 2>/dev/null || die "libvirtd exited early"
    sleep 0.1
done
[ -S "$sock" ] || die "libvirtd did not open its socket $sock"

stage=driver
log_offset=$(stat -c %s "$work/libvirtd.log")
export SMOKE_URI="qemu:///session?socket=$sock"
export SMOKE_STATE="$work/state" SMOKE_PIDS="$work/guest.pids"
"$PYTHON" - <<'PY'
import glob
import os
import time
import uuid

from nova_lite import conf, objects
from nova_lite.virt import loader

settings = conf.Settings(host="smoke", state_path=os.environ["SMOKE_STATE"],
                         libvirt_connection_uri=os.environ["SMOKE_URI"],
                         sections={"libvirt": {"virt_type": "qemu"}})
driver = loader.load_driver("libvirt", settings=settings)
driver.init_host("smoke")
(node,) = driver.get_available_nodes()


def view(label):
    r = driver.get_available_resource(node)
    print(f"smoke: {label}: node {node} vcpus={r.vcpus} vcpus_used={r.vcpus_used} "
          f"memory_mb={r.memory_mb} memory_mb_used={r.memory_mb_used} local_gb={r.local_gb} "
          f"hypervisor={r.hypervisor_type} {r.hypervisor_version} "
          f"guests={sorted(driver.list_instances())}")
    return r


def check(what, ok):
    if not ok:
        raise SystemExit(f"smoke: FAILED: {what}")
    print(f"smoke: ok: {what}")


before = view("before")
tiny = objects.Flavor(name="smoke.tiny", vcpus=1, memory_mb=64, root_gb=0)
guests = [objects.Instance(uuid=str(uuid.uuid4()), flavor=tiny) for _ in range(2)]
try:
    for inst in guests:
        driver.spawn(inst)
        pattern = os.path.join(os.environ["XDG_RUNTIME_DIR"], "libvirt", "qemu", "**",
                               f"instance-{inst.uuid}.pid")
        for _ in range(50):
            found = glob.glob(pattern, recursive=True)
            if found:
                break
            time.sleep(0.1)
        with open(found[0]) as src, open(os.environ["SMOKE_PIDS"], "a") as dst:
            dst.write(src.read().strip() + "\n")
    during = view("two guests running")
    check("vcpus_used grew by 2", during.vcpus_used == before.vcpus_used + 2)
    check("both guests listed", {g.uuid for g in guests} <= set(driver.list_instances()))
finally:
    for inst in guests:
        driver.destroy(inst)
after = view("after destroy")
check("vcpus_used back", after.vcpus_used == before.vcpus_used)
check("guests gone", not {g.uuid for g in guests} & set(driver.list_instances()))
driver.close()
PY
echo "smoke: PASSED"
