"""Which host CPUs serve shared vCPUs (VCPU) and which dedicated ones (PCPU).

Nova's precedence, from the online CPUs libvirt reports (``getCPUMap``):

1. ``vcpu_pin_set`` set (legacy): it alone gives the shared CPUs;
2. else ``[compute] cpu_shared_set``;
3. else, if ``[compute] cpu_dedicated_set`` is set, no shared CPUs;
4. else every online CPU is shared.

Dedicated CPUs are ``[compute] cpu_dedicated_set`` (none when unset).  A
configured CPU that is not online is an error naming the option, the
configured set and the online set.
"""

import attrs

from nova_lite.exception import InvalidConfig
from nova_lite.hardware import format_cpu_spec

from nova_lite_libvirt.config import OPT_DEDICATED, OPT_SHARED, OPT_VCPU_PIN_SET


class CPUSetNotOnline(InvalidConfig):
    """A CPU option names CPUs the host does not have online.

    Attributes: ``option``, ``configured`` and ``online`` (sets of CPU ids),
    ``missing`` (configured but not online).
    """

    def __init__(self, option, configured, online):
        self.configured = frozenset(configured)
        self.online = frozenset(online)
        self.missing = self.configured - self.online
        super().__init__(
            option, format_cpu_spec(self.configured),
            f"CPUs {format_cpu_spec(self.missing)} are not online; "
            f"configured CPUs: {format_cpu_spec(self.configured)}, "
            f"online CPUs: {format_cpu_spec(self.online) or 'none'}")


@attrs.frozen
class CPUSelection:
    """The host CPUs for each kind of guest vCPU (sets of CPU ids).

    ``shared``: CPUs for floating vCPUs (the VCPU inventory counts them);
    ``dedicated``: CPUs for pinned vCPUs (the PCPU inventory);
    ``online``: every CPU libvirt reports online.
    """

    shared: frozenset
    dedicated: frozenset
    online: frozenset


def select_cpus(online, config):
    """Apply ``config``'s CPU options to the ``online`` CPU ids.

    :param online: iterable of online host CPU ids.
    :param config: a :class:`~nova_lite_libvirt.config.LibvirtConfig`.
    :returns: a :class:`CPUSelection`.
    :raises CPUSetNotOnline: if a configured CPU is not online.
    """
    online = frozenset(online)
    if config.vcpu_pin_set:
        shared = _check(OPT_VCPU_PIN_SET, config.vcpu_pin_set, online)
    elif config.cpu_shared_set:
        shared = _check(OPT_SHARED, config.cpu_shared_set, online)
    elif config.cpu_dedicated_set:
        shared = frozenset()
    else:
        shared = online
    dedicated = frozenset()
    if config.cpu_dedicated_set:
        dedicated = _check(OPT_DEDICATED, config.cpu_dedicated_set, online)
    return CPUSelection(shared=shared, dedicated=dedicated, online=online)


def _check(option, configured, online):
    if not configured <= online:
        raise CPUSetNotOnline(option, configured, online)
    return frozenset(configured)


def online_cpus_from_map(cpu_map):
    """Online CPU ids from ``virConnect.getCPUMap()``'s ``(count, flags, online)``."""
    _count, flags, _online = cpu_map
    return frozenset(i for i, up in enumerate(flags) if up)
