"""Finding and loading virt drivers through stevedore entry points.

Drivers register in the ``nova_lite.virt.drivers`` group.  A plugin that
fails to import, is not a :class:`ComputeDriver`, or speaks no API version
this core supports breaks only itself: :func:`list_drivers` reports it and
every other driver still loads.
"""

import importlib.metadata
import logging

import attrs
import stevedore

from nova_lite.exception import NovaLiteError
from nova_lite.virt import driver as driver_api

LOG = logging.getLogger(__name__)

GROUP = "nova_lite.virt.drivers"


class DriverLoadError(NovaLiteError):
    """A driver could not be loaded.

    Attributes: ``name`` (asked for), ``entry_point`` (text, or None),
    ``cause`` (text), ``installed`` (driver names found in the group).
    """

    def __init__(self, name, entry_point, cause, installed):
        self.name = name
        self.entry_point = entry_point
        self.cause = cause
        self.installed = sorted(set(installed))
        where = f" (entry point {entry_point})" if entry_point else ""
        super().__init__(
            f"Cannot load virt driver {name!r}{where}: {cause}. Installed drivers: "
            f"{', '.join(self.installed) or 'none'}")


@attrs.frozen
class DriverInfo:
    """One installed driver as :func:`list_drivers` sees it.

    ``api_version`` is the negotiated version (None if it failed to load);
    ``error`` is the load error text, or None when it loads.
    """

    name: str
    entry_point: str
    distribution: str
    version: str
    api_version: str = None
    capabilities: tuple = ()
    error: str = None


def _entry_points():
    return list(importlib.metadata.entry_points(group=GROUP))


def _describe(ep):
    dist = getattr(ep, "dist", None)
    origin = f" from {dist.name} {dist.version}" if dist is not None else ""
    return f"'{ep.name} = {ep.value}'{origin}"


def installed_driver_names():
    """Names registered in the entry point group (nothing is imported)."""
    return sorted({ep.name for ep in _entry_points()})


def _load_classes(name):
    """Import every entry point called ``name``: [(ep text, class or exception)]."""
    failures = []
    manager = stevedore.NamedExtensionManager(
        GROUP, names=[name], invoke_on_load=False,
        on_load_failure_callback=lambda mgr, ep, exc: failures.append((ep, exc)),
        warn_on_missing_entrypoint=False)
    loaded = [(ext.entry_point, ext.plugin) for ext in manager.extensions]
    by_value = {(ep.name, ep.value): ep for ep in _entry_points()}
    results = []
    for ep, outcome in loaded + failures:
        described = _describe(by_value.get((ep.name, ep.value), ep))
        results.append((described, outcome))
    return results


def _check_class(name, described, plugin):
    """The negotiated API version for ``plugin``; raises DriverLoadError."""
    installed = installed_driver_names()
    if isinstance(plugin, BaseException):
        raise DriverLoadError(name, described,
                              f"import failed: {type(plugin).__name__}: {plugin}", installed)
    if not (isinstance(plugin, type) and issubclass(plugin, driver_api.ComputeDriver)):
        raise DriverLoadError(
            name, described,
            f"{plugin!r} is not a subclass of nova_lite.virt.driver.ComputeDriver", installed)
    declared = getattr(plugin, "api_versions", None)
    try:
        version = driver_api.negotiate_api_version(declared)
    except ValueError as exc:
        raise DriverLoadError(name, described, str(exc), installed) from None
    if version is None:
        raise DriverLoadError(
            name, described,
            f"driver API versions {driver_api.describe_versions(declared)} are not "
            f"supported by this core, which supports "
            f"{driver_api.describe_versions(driver_api.SUPPORTED_API_VERSIONS)}", installed)
    caps = getattr(plugin, "capabilities", None)
    if not isinstance(caps, driver_api.Capabilities):
        raise DriverLoadError(
            name, described,
            f"capabilities must be a nova_lite.virt.driver.Capabilities record, got {caps!r}",
            installed)
    return version


def load_driver_class(name):
    """Import the driver class called ``name``; returns (class, api_version).

    Raises :class:`DriverLoadError` if no plugin or more than one has that
    name, or if the one found cannot be used.
    """
    if not isinstance(name, str) or not name:
        raise DriverLoadError(str(name), None, "driver name must be a non-empty string",
                              installed_driver_names())
    candidates = _load_classes(name)
    if not candidates:
        raise DriverLoadError(name, None, "no driver of that name is installed",
                              installed_driver_names())
    if len(candidates) > 1:
        raise DriverLoadError(
            name, None,
            "more than one plugin has this name, refusing to pick one: "
            + "; ".join(described for described, _ in candidates),
            installed_driver_names())
    described, plugin = candidates[0]
    return plugin, _check_class(name, described, plugin)


def load_driver(name, settings=None, **kwargs):
    """Load and construct the driver registered as ``name``.

    ``settings`` (a :class:`nova_lite.conf.Settings`) and any extra keyword
    arguments go to the driver's constructor.  Raises
    :class:`DriverLoadError` naming the driver, its entry point, the cause
    and the installed drivers.
    """
    plugin, version = load_driver_class(name)
    try:
        instance = plugin(settings=settings, **kwargs)
    except Exception as exc:
        raise DriverLoadError(
            name, _load_classes(name)[0][0],
            f"constructor failed: {type(exc).__name__}: {exc}",
            installed_driver_names()) from exc
    instance.api_version = version
    return instance


def list_drivers():
    """Every installed driver, loadable or not, as :class:`DriverInfo` records.

    Duplicated names are listed once per plugin, each with an error.
    """
    infos = []
    for ep in sorted(_entry_points(), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        info = DriverInfo(
            name=ep.name, entry_point=ep.value,
            distribution=dist.name if dist is not None else "",
            version=dist.version if dist is not None else "")
        try:
            plugin, version = load_driver_class(ep.name)
        except DriverLoadError as exc:
            info = attrs.evolve(info, error=exc.cause)
        else:
            info = attrs.evolve(info, api_version=version,
                                capabilities=plugin.capabilities.declared())
        infos.append(info)
    return infos
