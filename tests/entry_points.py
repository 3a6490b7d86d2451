"""A fixture that installs tiny throwaway distributions with real entry points.

Each distribution is a ``<name>-<version>.dist-info`` directory (METADATA and
entry_points.txt) beside its modules, in a temporary directory prepended to
``sys.path``.  importlib.metadata and stevedore then find them exactly as
they find pip-installed packages.

Caches cleared, at set-up, after each new distribution and at clean-up:

- importlib's path finders (``importlib.invalidate_caches``), which also
  clears importlib.metadata's per-directory lookups;
- stevedore's entry point cache (``stevedore._cache``): an in-process dict
  keyed by ``sys.path`` plus JSON files under ~/.cache/python-entrypoints.
  The fixture swaps in a fresh ``Cache`` whose directory holds a
  ``.disable`` file, so nothing is read from or written to the user's
  cache, and re-creates it whenever a distribution is added;
- ``stevedore.ExtensionManager.ENTRY_POINT_CACHE``, a class-level dict of
  every group ever listed in the process.

Modules imported from the temporary directory are removed from
``sys.modules`` at clean-up.
"""

import importlib
import os
import sys
import textwrap

import fixtures
import stevedore
from stevedore import _cache as stevedore_cache


class ThrowawayDistributions(fixtures.Fixture):
    """Installs distributions for the duration of a test; see the module doc."""

    def _setUp(self):
        self.path = self.useFixture(fixtures.TempDir()).path
        self._cache_dir = self.useFixture(fixtures.TempDir()).path
        with open(os.path.join(self._cache_dir, ".disable"), "w"):
            pass
        self._modules = set()
        sys.path.insert(0, self.path)
        self.addCleanup(self._remove_from_sys_path)
        for name in ("_c", "get_group_all", "get_group_named", "get_single"):
            self.useFixture(fixtures.MonkeyPatch(
                f"stevedore._cache.{name}", getattr(stevedore_cache, name)))
        self.useFixture(fixtures.MonkeyPatch(
            "stevedore.extension.ExtensionManager.ENTRY_POINT_CACHE", {}))
        self.addCleanup(importlib.invalidate_caches)
        self.refresh()

    def _remove_from_sys_path(self):
        while self.path in sys.path:
            sys.path.remove(self.path)
        for module in self._modules:
            sys.modules.pop(module, None)

    def refresh(self):
        """Forget every cached view of the installed entry points."""
        importlib.invalidate_caches()
        cache = stevedore_cache.Cache(cache_dir=self._cache_dir)
        assert cache._disable_caching
        stevedore_cache._c = cache
        stevedore_cache.get_group_all = cache.get_group_all
        stevedore_cache.get_group_named = cache.get_group_named
        stevedore_cache.get_single = cache.get_single
        stevedore.ExtensionManager.ENTRY_POINT_CACHE.clear()

    def add(self, name, version="1.0", entry_points=None, modules=None):
        """Install distribution ``name``.

        ``entry_points``: ``{group: {entry point name: "module:attr"}}``;
        ``modules``: ``{module name: source text}`` written beside it.
        """
        for module, source in (modules or {}).items():
            with open(os.path.join(self.path, module + ".py"), "w") as handle:
                handle.write(textwrap.dedent(source))
            self._modules.add(module)
        dist_info = os.path.join(self.path, f"{name.replace('-', '_')}-{version}.dist-info")
        os.mkdir(dist_info)
        with open(os.path.join(dist_info, "METADATA"), "w") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = []
        for group, eps in (entry_points or {}).items():
            lines.append(f"[{group}]")
            lines.extend(f"{ep} = {target}" for ep, target in eps.items())
            lines.append("")
        with open(os.path.join(dist_info, "entry_points.txt"), "w") as handle:
            handle.write("\n".join(lines))
        self.refresh()
        return dist_info
