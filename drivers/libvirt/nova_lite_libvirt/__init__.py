"""nova-lite-libvirt: the libvirt virt driver for nova-lite.

The driver is :class:`nova_lite_libvirt.driver.LibvirtDriver`, registered as
the ``libvirt`` entry point of ``nova_lite.virt.drivers``.  Importing this
package never imports libvirt-python: the C binding is loaded lazily, in
:mod:`nova_lite_libvirt.libvirt_api` only, when a connection is opened.

Test helpers (a pure-Python fake libvirt module, ``FakeLibvirtFixture`` and
the ``HostSpec`` that drives both it and libvirt's ``test:///`` driver) live
in :mod:`nova_lite_libvirt.testing`.
"""

__version__ = "0.1.0"
