"""The one place that imports libvirt-python.

Everything else asks :func:`import_libvirt` for the module, so that:

- the package imports, and its fake-backed tests run, without the C library;
- ``FakeLibvirtFixture`` can stand the pure-Python fake in for the real
  module by putting it in ``sys.modules["libvirt"]``: the lookup below goes
  through the import system every time, so it finds whichever is installed.
"""

import importlib
import logging

from nova_lite.exception import NovaLiteError

LOG = logging.getLogger(__name__)

INSTALL_HINT = (
    "install it with 'pip install libvirt-python' (it builds from source and needs "
    "the libvirt development headers and pkg-config: on Debian/Ubuntu "
    "'apt-get install libvirt-dev pkg-config')")


class LibvirtUnavailable(NovaLiteError, ImportError):
    """libvirt-python cannot be imported; the message says how to install it."""


def import_libvirt():
    """Return the ``libvirt`` module (real, or the fake a fixture installed).

    :raises LibvirtUnavailable: if libvirt-python is not installed or its C
        library fails to load; the message carries the cause and the fix.
    """
    try:
        return importlib.import_module("libvirt")
    except ImportError as exc:
        raise LibvirtUnavailable(
            f"the libvirt driver needs libvirt-python, which cannot be imported "
            f"({exc}); {INSTALL_HINT}") from exc


def silence_default_error_handler(libvirt):
    """Stop libvirt printing every error on stderr (errors still raise).

    libvirt's default handler writes each error to stderr before
    ``libvirtError`` is raised; the driver reports errors itself.
    """
    libvirt.registerErrorHandler(_ignore_error, None)


def _ignore_error(_ctx, _err):
    return None
