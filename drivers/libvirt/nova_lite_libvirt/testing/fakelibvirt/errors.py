"""``libvirtError`` with the real class's shape: ``err`` tuple and getters."""

from nova_lite_libvirt.testing.fakelibvirt import constants as c


class libvirtError(Exception):  # noqa: N801  (libvirt-python's name)
    """A libvirt failure.

    Real libvirt-python builds ``err`` from the C library's last error; the
    fake takes the same fields as keywords.  ``err`` is ``(code, domain,
    message, level, str1, str2, str3, int1, int2)``, None without a code.
    """

    def __init__(self, defmsg, error_code=None, error_domain=c.VIR_FROM_QEMU):
        super().__init__(defmsg)
        self.err = None if error_code is None else (
            error_code, error_domain, defmsg, c.VIR_ERR_ERROR, defmsg, None, None, -1, -1)

    def _field(self, index):
        return None if self.err is None else self.err[index]

    def get_error_code(self):
        return self._field(0)

    def get_error_domain(self):
        return self._field(1)

    def get_error_message(self):
        return self._field(2)

    def get_error_level(self):
        return self._field(3)

    def get_str1(self):
        return self._field(4)

    def get_str2(self):
        return self._field(5)

    def get_str3(self):
        return self._field(6)

    def get_int1(self):
        return self._field(7)

    def get_int2(self):
        return self._field(8)


def make_error(code, message, domain=c.VIR_FROM_QEMU):
    """A :class:`libvirtError` with ``code`` (e.g. ``VIR_ERR_NO_DOMAIN``)."""
    return libvirtError(message, error_code=code, error_domain=domain)
