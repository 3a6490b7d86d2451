"""nova-lite-ironic: a bare-metal virt driver for nova-lite.

One compute service manages many bare-metal nodes; each node is a whole
physical server and an instance consumes it whole.  Nodes come from a
:mod:`source <nova_lite_ironic.sources>`: the OpenStack Ironic REST API or a
static inventory file.  The driver is registered as the ``ironic`` entry
point of ``nova_lite.virt.drivers``.
"""

__version__ = "0.1.0"
