"""``FakeLibvirtFixture``: a fake libvirt host for tests, from one HostSpec."""

import sys

import attrs
import fixtures

from nova_lite_libvirt.testing import fakelibvirt
from nova_lite_libvirt.testing.spec import HostSpec

_ABSENT = object()


class FakeLibvirtFixture(fixtures.Fixture):
    """Install the fake ``libvirt`` module and a fake host described by ``spec``.

    :param spec: a :class:`~nova_lite_libvirt.testing.spec.HostSpec`
        (default ``HostSpec()``).
    :param uri: the connection URI this host answers; None (default)
        answers every URI, so a driver with any ``connection_uri`` reaches it.

    While set up, ``import libvirt`` gives
    :mod:`nova_lite_libvirt.testing.fakelibvirt`; the previous module (the
    real one, or none) comes back at cleanup.  ``self.hypervisor`` holds the
    host's state; :meth:`update_spec` changes host facts while guests stay,
    and :meth:`restart_daemon` breaks open connections.
    """

    def __init__(self, spec=None, uri=None):
        super().__init__()
        self._initial_spec = spec if spec is not None else HostSpec()
        self.uri = uri
        self.hypervisor = None

    def _setUp(self):
        previous = sys.modules.get("libvirt", _ABSENT)
        sys.modules["libvirt"] = fakelibvirt
        self.addCleanup(self._restore_module, previous)
        self.hypervisor = fakelibvirt.FakeHypervisor(self._initial_spec)
        fakelibvirt.register(self.uri, self.hypervisor)
        self.addCleanup(fakelibvirt.unregister, self.uri, self.hypervisor)

    @staticmethod
    def _restore_module(previous):
        if previous is _ABSENT:
            sys.modules.pop("libvirt", None)
        else:
            sys.modules["libvirt"] = previous

    @property
    def spec(self):
        """The host's current spec."""
        return self.hypervisor.spec

    def restart_daemon(self):
        """Kill open connections (as a libvirtd restart would); guests stay."""
        self.hypervisor.restart()

    def update_spec(self, **changes):
        """Change host facts (``hostname=``, ``online_cpus=``, ...) in place."""
        self.hypervisor.update_spec(attrs.evolve(self.hypervisor.spec, **changes))
