"""Test helpers of nova-lite-ironic, importable by other projects' tests.

- :class:`~nova_lite_ironic.testing.ironic_server.IronicServer`: a real,
  standalone Ironic in its own virtualenv;
- :class:`~nova_lite_ironic.testing.fleet.Fleet`: enroll and move nodes;
- :class:`~nova_lite_ironic.sources.fake.FakeBaremetal`: the in-process fake.
"""
