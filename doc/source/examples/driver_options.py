"""nova-lite-acme: a driver that declares the options of its [acme] section.

In the operator's configuration file::

    [DEFAULT]
    compute_driver = acme

    [acme]
    endpoint = https://acme.example.org
    poll_interval = 30
"""

import attrs

from nova_lite import conf
from nova_lite.virt import fake


@attrs.frozen
class AcmeOptions:
    """The [acme] section: one attrs field per option, declared with conf.option."""

    endpoint: str = attrs.field(
        default="http://localhost:8080", validator=conf.string_option,
        metadata=conf.option("acme", "endpoint", "URL of the Acme API."))
    poll_interval: int = attrs.field(
        default=60, validator=conf.int_option(1, 3600),
        metadata=conf.option("acme", "poll_interval", "Time between two polls of the API.",
                             minimum=1, maximum=3600, unit="seconds"))


class AcmeDriver(fake.FakeDriver):
    """A fake host whose options come from [acme]."""

    options = AcmeOptions                         # declared: checked by load_settings

    def __init__(self, settings=None):
        super().__init__(settings=settings)
        self.acme = conf.driver_options(self.settings, AcmeDriver)   # an AcmeOptions
