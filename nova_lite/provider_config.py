"""provider.yaml: custom inventories and traits an operator adds to compute nodes.

Nova's provider configuration files, schema version 1.x, read the way Nova
reads them.  Every ``*.yaml`` file of ``[compute] provider_config_location``
is read and validated once, when the compute service starts (and whenever
a :class:`~nova_lite.compute.resource_tracker.ResourceTracker` is built
from settings); any problem stops it with a
:class:`~nova_lite.exception.ProviderConfigError` naming the file, the
place in the document and what is wrong.  A directory that does not exist
is logged and ignored.

A file lists providers, each identified by ``name`` (a node's name) or
``uuid`` (a node's uuid, or ``$COMPUTE_NODE``: every node of the service
that no entry names explicitly), with ``inventories.additional`` (custom
resource classes, as :class:`~nova_lite.resources.Inventory` records) and
``traits.additional`` (``CUSTOM_*`` traits).  At each audit the entry of a
node adds them to what its driver reports (:meth:`ProviderConfigs.apply`);
a class the driver reports too is refused there, naming the node.  Only
custom classes and custom traits may be added, as in Nova.

A file is read and checked against the schema (:data:`SCHEMA`, JSON Schema
2020-12, Nova's format) by :mod:`nova_lite.provider_yaml`; this module
checks what a schema cannot say and applies the entries.  nova-lite also
bounds the amounts as Placement does and refuses a class given twice for
one provider, a reserved amount above the total, and ``max_unit`` below
``min_unit``.
"""

import glob
import logging
import os
from collections.abc import Mapping
from typing import Any

import attrs

from nova_lite.exception import InvalidInput, ProviderConfigError
from nova_lite.objects import NodeResources
from nova_lite.providers import NODE_CLASSES, child_uuid
from nova_lite.provider_yaml import (  # noqa: F401 - public names here too
    COMPUTE_NODE, MAX_AMOUNT, SCHEMA, SCHEMA_VERSIONS, Document, read_document)
from nova_lite.resources import STANDARD_CLASSES, Inventory
from nova_lite.traits import STANDARD_TRAITS, trait_problem

LOG = logging.getLogger(__name__)

#: The files read in the directory.
FILE_PATTERN = "*.yaml"


@attrs.frozen
class ProviderEntry:
    """One provider of a provider.yaml file, validated.

    ``source``: the file; ``index``: its place in ``providers``; ``line``:
    where it starts (1-based, None if unknown); ``by``: ``"name"`` or
    ``"uuid"``; ``identifier``: the name, the uuid (lower case) or
    :data:`COMPUTE_NODE`; ``inventories``: ``{custom class: Inventory}``
    to add; ``traits``: the custom traits to add.
    """

    source: str
    index: int
    by: str
    identifier: str
    inventories: Mapping[str, Inventory] = attrs.field(factory=dict)
    traits: frozenset[str] = frozenset()
    line: int | None = None

    @property
    def label(self) -> str:
        """``providers[i] (name 'n1')``: the entry in a message."""
        return f"providers[{self.index}] ({self.by} {self.identifier!r})"

    @property
    def where(self) -> str:
        """The file and the entry, with its line."""
        line = f" line {self.line}" if self.line is not None else ""
        return f"{self.source}{line} {self.label}"


@attrs.frozen
class ProviderConfigs:
    """Every provider entry of a directory, by what identifies it.

    Built by :func:`load_provider_configs`; empty (false) when no file
    gives anything.  ``names``: ``{node name: entry}``; ``uuids``:
    ``{node uuid (lower case): entry}``; ``every_node``: the
    ``$COMPUTE_NODE`` entry, if any.
    """

    location: str | None = None
    names: Mapping[str, ProviderEntry] = attrs.field(factory=dict)
    uuids: Mapping[str, ProviderEntry] = attrs.field(factory=dict)
    every_node: ProviderEntry | None = None

    def __bool__(self) -> bool:
        return bool(self.names or self.uuids or self.every_node)

    def entries(self) -> list[ProviderEntry]:
        """Every entry, in file order."""
        found = list(self.names.values()) + list(self.uuids.values())
        if self.every_node is not None:
            found.append(self.every_node)
        return sorted(found, key=lambda e: (e.source, e.index))

    def entry_for(self, nodename: str, node_uuid: str | None) -> ProviderEntry | None:
        """The entry that applies to a node, or None.

        An entry naming the node (by name or uuid) wins over the
        ``$COMPUTE_NODE`` one.  Raises ProviderConfigError if one entry
        names it by name and another by uuid (as Nova refuses it).
        """
        by_name = self.names.get(nodename)
        by_uuid = self.uuids.get(node_uuid.lower()) if node_uuid else None
        if by_name is not None and by_uuid is not None and by_name is not by_uuid:
            raise ProviderConfigError(by_uuid.source, [
                f"{by_uuid.label} names node {nodename!r}, which {by_name.where} names "
                "too; a node may be configured by one entry only"])
        return by_name or by_uuid or self.every_node

    def apply(self, nodename: str, node_uuid: str | None, report: NodeResources,
              inventories: Mapping[str, Inventory]
              ) -> tuple[NodeResources, Mapping[str, Inventory]]:
        """``(report, inventories)`` of a node with its entry's additions.

        ``report``'s traits gain the entry's traits; ``inventories`` (the
        node's, from its report and the settings) gain its classes.  No
        I/O: the files were read when this was built.

        :param nodename: the node's name.
        :param node_uuid: its uuid, if known (reported or recorded).
        :param report: the driver's report of it.
        :param inventories: ``{rc: Inventory}`` built from the report.
        :returns: the report and inventories to record.
        :raises nova_lite.exception.ProviderConfigError: if the entry gives
            a class the driver reports for the node, or two entries name it.
        """
        entry = self.entry_for(nodename, node_uuid)
        if entry is None:
            return report, inventories
        if entry.inventories:
            clash = sorted(entry.inventories.keys() & inventories.keys())
            if clash:
                raise ProviderConfigError(entry.source, [
                    f"{entry.label} adds resource class {', '.join(clash)} to node "
                    f"{nodename!r}, whose driver reports it; a provider.yaml may only add "
                    "classes the driver does not report"])
            inventories = {**inventories, **entry.inventories}
        if not entry.traits <= report.traits:
            report = attrs.evolve(report, traits=report.traits | entry.traits)
        return report, inventories

    def child_entry(self, node_uuid: str | None, name: str) -> ProviderEntry | None:
        """The entry naming child provider ``name`` of a node (by name, or by its
        uuid when the node's is known), or None; ``$COMPUTE_NODE`` never applies
        to a child."""
        by_name = self.names.get(name)
        by_uuid = self.uuids.get(child_uuid(node_uuid, name)) if node_uuid else None
        if by_name is not None and by_uuid is not None and by_name is not by_uuid:
            raise ProviderConfigError(by_uuid.source, [
                f"{by_uuid.label} names child provider {name!r}, which {by_name.where} "
                "names too; a provider may be configured by one entry only"])
        return by_name or by_uuid

    def apply_to_children(self, nodename: str, node_uuid: str | None,
                          report: NodeResources) -> NodeResources:
        """``report`` with each child provider an entry names given the entry's
        traits and classes (as Nova lets provider.yaml name a GPU's provider).

        :raises nova_lite.exception.ProviderConfigError: if an entry gives a
            child a class the driver reports for it, or one of the node's
            own classes.
        """
        if not report.providers:
            return report
        children = []
        changed = False
        for child in report.providers:
            entry = self.child_entry(node_uuid, child.name)
            if entry is None:
                children.append(child)
                continue
            clash = sorted(entry.inventories.keys() & child.inventories.keys())
            own = sorted(entry.inventories.keys() & NODE_CLASSES)
            if clash or own:
                raise ProviderConfigError(entry.source, [
                    f"{entry.label} adds resource class {', '.join(clash or own)} to child "
                    f"provider {child.name!r} of node {nodename!r}, "
                    + ("whose driver reports it" if clash else "a class of the node itself")
                    + "; a provider.yaml may only add classes the driver does not report"])
            children.append(attrs.evolve(child, traits=child.traits | entry.traits,
                                         inventories={**child.inventories,
                                                      **entry.inventories}))
            changed = True
        return attrs.evolve(report, providers=children) if changed else report

    def unmatched(self, nodes: Mapping[str, str | None],
                  children: Mapping[str, str | None] | None = None) -> list[ProviderEntry]:
        """The entries naming none of ``nodes`` (``{nodename: uuid or None}``) nor
        of ``children`` (``{child provider name: its uuid or None}``)."""
        providers = {**nodes, **(children or {})}
        uuids = {u.lower() for u in providers.values() if u}
        return [e for e in self.entries() if e.identifier != COMPUTE_NODE
                and e.identifier not in (uuids if e.by == "uuid" else providers)]


#: No provider.yaml at all.
NO_PROVIDER_CONFIGS = ProviderConfigs()


def load_provider_configs(location: str) -> ProviderConfigs:
    """Read and validate every ``*.yaml`` file of directory ``location``.

    Files are read in name order.  A directory that does not exist gives
    no entries (logged at INFO, as Nova does); one that cannot be listed
    is an error.  Entries that add nothing are logged and left out.

    :param location: the directory (``[compute] provider_config_location``).
    :returns: the entries, by what identifies them.
    :raises nova_lite.exception.ProviderConfigError: naming the file, the
        place in it and the problem: unreadable or malformed YAML, an
        unknown schema major version, a schema violation, a standard
        resource class or trait, a provider identified twice (in one file
        or two).
    """
    if not os.path.exists(location):
        LOG.info("Provider config directory %s does not exist: no provider.yaml "
                 "applies to this service's nodes", location)
        return ProviderConfigs(location=location)
    try:
        os.listdir(location)
    except OSError as exc:
        raise ProviderConfigError(location, [
            f"the directory cannot be read: {exc.strerror or exc}"]) from None
    paths = sorted(glob.glob(os.path.join(glob.escape(location), FILE_PATTERN)))
    if not paths:
        LOG.info("No provider config files (%s) in %s", FILE_PATTERN, location)
        return ProviderConfigs(location=location)
    names: dict[str, ProviderEntry] = {}
    uuids: dict[str, ProviderEntry] = {}
    every_node: ProviderEntry | None = None
    for path in paths:
        for entry in load_file(path):
            if entry.identifier == COMPUTE_NODE:
                earlier = every_node
            else:
                earlier = (names if entry.by == "name" else uuids).get(entry.identifier)
            if earlier is not None:
                raise ProviderConfigError(path, [
                    f"{entry.label}{'' if entry.line is None else f' (line {entry.line})'}: "
                    "the provider is already configured "
                    f"by {earlier.where}; each provider may be configured once across "
                    "all files"])
            if entry.identifier == COMPUTE_NODE:
                every_node = entry
            else:
                (names if entry.by == "name" else uuids)[entry.identifier] = entry
    configs = ProviderConfigs(location=location, names=names, uuids=uuids,
                              every_node=every_node)
    LOG.info("Read %d provider config file(s) from %s: %d provider entr%s", len(paths),
             location, len(configs.entries()), "y" if len(configs.entries()) == 1 else "ies")
    return configs


def load_file(path: str) -> list[ProviderEntry]:
    """The entries of one provider.yaml file that add something, in order.

    :raises nova_lite.exception.ProviderConfigError: see
        :func:`load_provider_configs`.
    """
    document = read_document(path)
    problems: list[str] = []
    entries: list[ProviderEntry] = []
    for index, provider in enumerate(document.data.get("providers") or ()):
        entry = _entry(document, index, provider, problems)
        if entry is None:
            continue
        if not entry.inventories and not entry.traits:
            LOG.warning("Provider config file %s: %s adds no inventory and no trait; it is "
                        "ignored", path, entry.label)
            continue
        entries.append(entry)
    if problems:
        raise ProviderConfigError(path, problems)
    return entries


def _entry(document: Document, index: int, provider: Mapping[str, Any],
           problems: list[str]) -> ProviderEntry | None:
    """The checked entry of ``providers[index]`` (None if it has problems,
    each appended to ``problems``)."""
    here: list[str | int] = ["providers", index]
    before = len(problems)
    ident = provider["identification"]
    by = "name" if "name" in ident else "uuid"
    identifier = ident[by]
    if by == "uuid" and identifier != COMPUTE_NODE:
        identifier = identifier.lower()
    inventories: dict[str, Inventory] = {}
    first: dict[str, str] = {}
    for i, item in enumerate((provider.get("inventories") or {}).get("additional") or ()):
        for rc, fields in item.items():
            at = here + ["inventories", "additional", i, rc]
            problem = _class_problem(rc)
            if problem is None and rc in first:
                problem = f"{rc} is given twice for this provider (first at {first[rc]})"
            if problem is None:
                problem = _inventory_problem(fields)
            if problem is not None:
                problems.append(f"{document.place(at)}: {problem}")
                continue
            first[rc] = document.place(at)
            inventories[rc] = _inventory(fields)
    traits: set[str] = set()
    for i, trait in enumerate((provider.get("traits") or {}).get("additional") or ()):
        problem = _trait_problem(trait)
        if problem is not None:
            at = here + ["traits", "additional", i]
            problems.append(f"{document.place(at)}: {problem}")
        traits.add(trait)
    if len(problems) > before:
        return None
    return ProviderEntry(source=document.path, index=index, by=by, identifier=identifier,
                         inventories=inventories, traits=frozenset(traits),
                         line=document.line(here))


def _class_problem(rc: str) -> str | None:
    if rc in STANDARD_CLASSES:
        return (f"{rc} is a standard resource class: only custom classes (CUSTOM_*) may "
                "be added")
    if not rc.startswith("CUSTOM_") or rc == "CUSTOM_":
        return f"{rc} is not a custom resource class (CUSTOM_ followed by a name)"
    return None


def _trait_problem(trait: str) -> str | None:
    if trait in STANDARD_TRAITS:
        return f"{trait} is a standard trait: only custom traits (CUSTOM_*) may be added"
    return trait_problem(trait)


def _inventory_problem(fields: Mapping[str, Any]) -> str | None:
    try:
        _inventory(fields)
    except InvalidInput as exc:
        return str(exc)
    return None


def _inventory(fields: Mapping[str, Any]) -> Inventory:
    """An Inventory of the fields of a validated record; Placement's defaults for
    those left out (max_unit left out: up to the whole capacity)."""
    values = {k: int(fields[k]) for k in ("total", "reserved", "min_unit", "max_unit",
                                          "step_size") if k in fields}
    if "allocation_ratio" in fields:
        values["allocation_ratio"] = fields["allocation_ratio"]
    return Inventory(**values)


__all__ = ["COMPUTE_NODE", "SCHEMA", "SCHEMA_VERSIONS", "MAX_AMOUNT", "FILE_PATTERN",
           "ProviderEntry", "ProviderConfigs", "NO_PROVIDER_CONFIGS", "load_provider_configs",
           "load_file"]
