"""nova-lite: a plugin-based virt-driver framework and resource tracker."""

__version__ = "0.1.0"
