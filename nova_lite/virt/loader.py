"""Finding and loading virt drivers through stevedore.

Drivers register in the ``nova_lite.virt.drivers`` entry point group.
Every lookup goes through stevedore's managers (and so through stevedore's
entry point cache): :class:`stevedore.named.NamedExtensionManager` imports only
the plugins asked for, and its ``on_load_failure_callback`` collects the
ones that fail to import.  A plugin that fails to import, is not a
:class:`~nova_lite.virt.driver.ComputeDriver`, leaves a required method
unimplemented, or speaks no API version this core supports breaks only
itself: :func:`list_drivers` reports it and every other driver still loads.

stevedore's entry points carry no distribution; the distribution named in
errors and in :class:`DriverInfo` is looked up in the installed metadata by
the entry point's name and target.
"""

import importlib.metadata
import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint
from typing import Any, cast

import attrs
import stevedore

from nova_lite import conf
from nova_lite import validators as v
from nova_lite.exception import DriverLoadError
from nova_lite.virt import driver as driver_api

LOG = logging.getLogger(__name__)

#: The entry point group drivers register in.
GROUP = "nova_lite.virt.drivers"

__all__ = ["GROUP", "DriverInfo", "DriverLoadError", "installed_driver_names",
           "installed_driver_options", "list_drivers", "load_driver", "load_driver_class"]


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
    api_version: str | None = None
    capabilities: tuple[str, ...] = ()
    error: str | None = None


def _manager(
        names: Iterable[str], failures: list[tuple[EntryPoint, BaseException]] | None = None,
) -> stevedore.NamedExtensionManager:
    """A NamedExtensionManager over ``names``: imports those plugins, nothing else.

    Import failures are appended to ``failures`` as ``(entry point,
    exception)``; a name nobody registered is not an error here.
    """
    def on_failure(manager: object, entry_point: EntryPoint, exc: BaseException) -> None:
        LOG.debug("Virt driver entry point %s = %s failed to import: %s",
                  entry_point.name, entry_point.value, exc)
        if failures is not None:
            failures.append((entry_point, exc))

    return stevedore.NamedExtensionManager(
        GROUP, names=list(names), invoke_on_load=False,
        on_load_failure_callback=on_failure,
        on_missing_entrypoints_callback=None)


def _entry_points() -> list[EntryPoint]:
    """Every entry point of the group, as stevedore lists it (nothing imported)."""
    return list(_manager(()).list_entry_points())


def _distributions() -> dict[tuple[str, str], list[importlib.metadata.Distribution]]:
    """``{(name, value): [Distribution, ...]}`` for the group, from installed metadata."""
    found: dict[tuple[str, str], list[importlib.metadata.Distribution]] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        if dist is not None:
            found.setdefault((ep.name, ep.value), []).append(dist)
    return found


def _origin(
        ep: EntryPoint, dists: Mapping[tuple[str, str], list[importlib.metadata.Distribution]],
) -> tuple[str, str]:
    """``(distribution name, version)`` that declares ``ep``, or ``("", "")``."""
    candidates = {(d.name, d.version) for d in dists.get((ep.name, ep.value), ())}
    if len(candidates) != 1:
        return "", ""   # unknown, or two distributions declare the very same target
    return candidates.pop()


def _describe(ep: EntryPoint,
              dists: Mapping[tuple[str, str], list[importlib.metadata.Distribution]]) -> str:
    dist_name, version = _origin(ep, dists)
    origin = f" from {dist_name} {version}" if dist_name else ""
    return f"'{ep.name} = {ep.value}'{origin}"


def installed_driver_names() -> list[str]:
    """Names registered in the entry point group (nothing is imported)."""
    return sorted({ep.name for ep in _entry_points()})


def installed_driver_options() -> list[tuple[str, type]]:
    """``[(driver name, options class)]`` for every installed driver declaring options.

    The options class is a driver class's ``options`` attribute (see
    :func:`nova_lite.conf.read_options`).  Every driver is imported; one
    that fails to import, declares no options, or declares something that
    is not an options class is left out (the last logged at WARNING), so it
    breaks only itself: :func:`load_driver` reports it.
    """
    found: list[tuple[str, type]] = []
    failures: list[tuple[EntryPoint, BaseException]] = []
    manager = _manager(installed_driver_names(), failures)
    for ext in manager.extensions:
        declared = getattr(ext.plugin, "options", None)
        if declared is None:
            continue
        try:
            conf.option_sections(declared)
        except TypeError as exc:
            LOG.warning("Virt driver %s = %s: ignoring its options: %s",
                        ext.entry_point.name, ext.entry_point.value, exc)
            continue
        found.append((ext.name, declared))
    return found


def _load_classes(name: str) -> list[tuple[str, object]]:
    """Import every entry point called ``name``: ``[(described ep, class or exception)]``."""
    failures: list[tuple[EntryPoint, BaseException]] = []
    manager = _manager([name], failures)
    dists = _distributions()
    outcomes = [(ext.entry_point, ext.plugin) for ext in manager.extensions] + failures
    return [(_describe(ep, dists), plugin) for ep, plugin in outcomes]


def _check_class(name: str, described: str, plugin: object) -> str:
    """The negotiated API version for ``plugin``; raises DriverLoadError."""
    installed = installed_driver_names()
    if isinstance(plugin, BaseException):
        raise DriverLoadError(name, described,
                              f"import failed: {type(plugin).__name__}: {plugin}", installed)
    if not (isinstance(plugin, type) and issubclass(plugin, driver_api.ComputeDriver)):
        raise DriverLoadError(
            name, described,
            f"{plugin!r} is not a subclass of nova_lite.virt.driver.ComputeDriver", installed)
    missing = driver_api.missing_methods(plugin)
    if missing:
        raise DriverLoadError(
            name, described,
            f"{plugin.__module__}.{plugin.__qualname__} does not implement the required "
            f"method{'s' if len(missing) > 1 else ''} {', '.join(missing)} of "
            f"nova_lite.virt.driver.ComputeDriver", installed, missing=missing)
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


def load_driver_class(name: str) -> tuple[type[driver_api.ComputeDriver], str]:
    """Import the driver class called ``name``; returns (class, api_version).

    Raises :class:`DriverLoadError` if no plugin or more than one has that
    name, or if the one found cannot be used (import error, not a
    ComputeDriver, a required method missing, no common API version,
    capabilities not a record).
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
    version = _check_class(name, described, plugin)
    return cast(type[driver_api.ComputeDriver], plugin), version


def load_driver(name: str, settings: conf.Settings | None = None,
                **kwargs: Any) -> driver_api.ComputeDriver:
    """Load and construct the driver registered as ``name``.

    ``settings`` (a :class:`nova_lite.conf.Settings`, or None for the
    defaults) and any extra keyword arguments go to the driver's
    constructor.  Raises :class:`DriverLoadError` naming the driver, its
    entry point, the cause and the installed drivers; ``settings`` of
    another type raises :class:`~nova_lite.exception.InvalidType` naming it.
    """
    v.check_type(settings, conf.Settings, f"load_driver({name!r}) settings", optional=True)
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


def list_drivers() -> list[DriverInfo]:
    """Every installed driver, loadable or not, as :class:`DriverInfo` records.

    Duplicated names are listed once per plugin, each with an error.
    """
    dists = _distributions()
    infos = []
    for ep in sorted(_entry_points(), key=lambda e: (e.name, e.value)):
        dist_name, version = _origin(ep, dists)
        info = DriverInfo(name=ep.name, entry_point=ep.value, distribution=dist_name,
                          version=version)
        try:
            plugin, api_version = load_driver_class(ep.name)
        except DriverLoadError as exc:
            info = attrs.evolve(info, error=exc.cause)
        else:
            info = attrs.evolve(info, api_version=api_version,
                                capabilities=plugin.capabilities.declared())
        infos.append(info)
    return infos
