#!/usr/bin/env bash
# Build the three distributions (nova-lite, nova-lite-libvirt,
# nova-lite-ironic) as a packager would, and check what comes out:
#
#   1. `python -m build` (sdist, then the wheel built from that sdist) of
#      each into a temporary directory;
#   2. `twine check --strict` on every sdist and wheel;
#   3. each sdist unpacked and its own tests run from the unpacked tree with
#      stestr, in a throwaway virtualenv holding the built wheels (the
#      drivers' tests import nova_lite from the core's wheel, not from this
#      checkout).  Every test module of each sdist must import (`stestr
#      list`); a quick selection of the core's tests runs, and every test of
#      each driver (those needing a real libvirtd or Ironic skip here).
#      CHECK_DISTS_FULL=1 runs the core's whole suite too.
#
# The throwaway virtualenv takes the third-party dependencies from the
# project's virtualenv (NOVA_LITE_VENV, default .venv, made by
# `tools/bootstrap.sh all`) through a .pth file, so nothing is downloaded.
# Ends with "N passed, N failed" (one per check) and exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${NOVA_LITE_VENV:-$ROOT/.venv}
PY=$VENV/bin/python
work=$(mktemp -d "${TMPDIR:-/tmp}/nova-lite-dists.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0; failed=0
# A driver's tests that need a real component skip without it here: the
# full suites (tools/run-tests.sh) are where components are required.
unset NOVA_LITE_REQUIRE_ALL NOVA_LITE_REQUIRE
# ... and no real Ironic is started (its tests skip at once).
export NOVA_LITE_IRONIC_VENV=$work/no-ironic-venv NOVA_LITE_IRONIC_INSTALL=0

check() {   # description command...
    local what=$1; shift
    local log="$work/log.$((passed + failed))" start=$SECONDS
    if "$@" >"$log" 2>&1; then
        echo "ok      $what ($((SECONDS - start)) s)"; passed=$((passed + 1))
    else
        echo "FAILED  $what ($((SECONDS - start)) s)"; sed 's/^/    /' "$log" | tail -n 40
        failed=$((failed + 1))
    fi
}

DISTS=("nova_lite:." "nova_lite_libvirt:drivers/libvirt" "nova_lite_ironic:drivers/ironic")
mkdir -p "$work/dist"
for spec in "${DISTS[@]}"; do
    check "build ${spec#*:}" "$PY" -m build --outdir "$work/dist" "$ROOT/${spec#*:}"
done
check "twine check --strict" "$PY" -m twine check --strict "$work"/dist/*

for spec in "${DISTS[@]}"; do
    name=${spec%%:*}
    sdist=$(ls "$work"/dist/"$name"-*.tar.gz 2>/dev/null | head -n 1)
    [ -n "$sdist" ] || continue
    check "$name: sdist has LICENSE, .stestr.conf and tests" \
        sh -c "tar tzf '$sdist' | grep -q '/LICENSE\$' && tar tzf '$sdist' | grep -q '/.stestr.conf\$' \
               && tar tzf '$sdist' | grep -Eq '/tests/(base|__init__)\.py\$'"
    tar xzf "$sdist" -C "$work"
done

# The throwaway virtualenv: the built wheels, without dependencies; the
# dependencies come from the project's virtualenv, after the wheels.
"$PY" -m venv --without-pip "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/project-deps.pth"
check "install the wheels" "$VENV/bin/pip" --python "$work/venv/bin/python" install -q \
    --no-deps --no-index "$work"/dist/*.whl
TPY=$work/venv/bin/python
check "nova_lite imported from the wheel" sh -c "cd '$work' && '$TPY' -c '
import nova_lite
assert nova_lite.__file__.startswith(\"$site\"), nova_lite.__file__'"

QUICK_CORE="tests.test_conf tests.test_conf_reference tests.test_objects tests.test_accounting
tests.test_resources tests.test_numa tests.test_node_resources
tests.test_reports tests.test_loader tests.test_doc_examples"

run_tests() {   # dir [test ids...]
    local dir=$1; shift
    ( cd "$dir" && rm -rf .stestr && "$TPY" -m stestr init >/dev/null \
      && "$TPY" -m stestr list >/dev/null && "$TPY" -m stestr run "$@" )
}
for spec in "${DISTS[@]}"; do
    name=${spec%%:*}
    tree=$(ls -d "$work"/"$name"-*/ 2>/dev/null | head -n 1)
    if [ -z "$tree" ]; then
        echo "FAILED  $name: no unpacked sdist"; failed=$((failed + 1)); continue
    fi
    if [ "$name" = nova_lite ] && [ "${CHECK_DISTS_FULL:-0}" != 1 ]; then
        # shellcheck disable=SC2086
        check "$name: tests from the unpacked sdist (quick selection)" run_tests "$tree" $QUICK_CORE
    else
        check "$name: tests from the unpacked sdist" run_tests "$tree"
    fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
