"""Where the nodes come from: sources behind one small interface.

A source lists the whole fleet (:meth:`NodeSource.list_nodes`), fetches one
node (:meth:`NodeSource.get_node`) and, for the lifecycle, deploys an
instance on a node and tears it down.  Two ship, registered in the
``nova_lite_ironic.sources`` entry point group:

- ``api``: the OpenStack Ironic REST API through openstacksdk
  (:class:`~nova_lite_ironic.sources.api.ApiSource`);
- ``inventory``: a static YAML or JSON file
  (:class:`~nova_lite_ironic.sources.inventory.InventorySource`).

:class:`~nova_lite_ironic.sources.fake.FakeBaremetal` is an in-process fake
of the openstacksdk baremetal proxy calls; the inventory source and the
unit tests run on it.

A third-party source registers a :class:`NodeSource` subclass in the same
group; it needs a ``from_config(config)`` classmethod taking the driver's
:class:`~nova_lite_ironic.config.IronicConfig`.
"""

from nova_lite_ironic.sources.base import NodeSource  # noqa: F401
