#!/usr/bin/env bash
# Install what nova-lite needs into ./.venv (and, for "all", system packages
# and the real-Ironic virtualenv).  Idempotent: a second run is quick.
#   tools/bootstrap.sh core   - the core package (enough for `make run`)
#   tools/bootstrap.sh all    - everything the whole test suite needs
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-core}
PYTHON=${PYTHON:-python3}
VENV=${NOVA_LITE_VENV:-.venv}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "$what" = all ]; then
    # libvirt-python builds from source against libvirt-dev; the overview
    # page's browser test drives Debian's headless Chromium through chromedriver;
    # tests/test_pgbouncer.py runs its own PgBouncer (the package's service
    # itself is not needed).
    need=()
    for pkg in libvirt-dev pkg-config gcc python3-dev chromium chromium-driver pgbouncer; do
        # "install ok installed" only: a removed package keeps a dpkg entry.
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        echo "bootstrap: installing Debian packages: ${need[*]}"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "bootstrap: creating $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
pip_install() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@"; }

if [ "$what" = core ]; then
    pip_install -e .
    exit 0
fi

pip_install -e ".[test]"
for d in drivers/*/; do
    [ -f "$d/setup.cfg" ] || continue
    if [ -f "$d/requirements-test.txt" ]; then
        pip_install -e "$d" -r "$d/requirements-test.txt"
    else
        pip_install -e "$d"
    fi
done
[ -f doc/requirements.txt ] && pip_install -r doc/requirements.txt
# The real Ironic runs from its own virtualenv, apart from ours.
if [ -x drivers/ironic/tools/ironic-venv.sh ]; then
    drivers/ironic/tools/ironic-venv.sh
fi
# OpenStack Nova, in its own virtualenv too, for bench.nova_compare.
tools/nova-venv.sh
echo "bootstrap: done"
