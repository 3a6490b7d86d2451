"""The ``nova-lite`` command, built on cliff.

Every command is an entry point in the ``nova_lite.cli`` group (``driver_list``
becomes ``nova-lite driver list``), so other distributions can add their own.
:func:`nova_lite.cli.main.main` is the console script.
"""
