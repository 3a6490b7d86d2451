"""A pure-Python stand-in for the ``libvirt`` module (libvirt-python).

``FakeLibvirtFixture`` installs this package as ``sys.modules["libvirt"]``
and registers a :class:`~.hypervisor.FakeHypervisor` built from a
``HostSpec``; code that imports ``libvirt`` then talks to it.  Only the
calls nova-lite's driver and tests use exist, each with libvirt-python's
return shapes, units, constants and ``libvirtError``.
"""

from nova_lite_libvirt.testing.fakelibvirt.constants import *  # noqa: F401,F403
from nova_lite_libvirt.testing.fakelibvirt.connection import (  # noqa: F401
    FAKE_LIBRARY_VERSION, getVersion, open, openAuth, openReadOnly, registerErrorHandler,
    virConnect, virNodeDevice)
from nova_lite_libvirt.testing.fakelibvirt.domain import virDomain  # noqa: F401
from nova_lite_libvirt.testing.fakelibvirt.errors import libvirtError, make_error  # noqa: F401
from nova_lite_libvirt.testing.fakelibvirt.hypervisor import (  # noqa: F401
    FakeHypervisor, register, unregister)

#: Marks this module as the fake (real libvirt-python has no such name).
IS_FAKE = True
