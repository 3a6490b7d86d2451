"""Virt drivers: the plugin contract, the loader and the fake hypervisor."""
