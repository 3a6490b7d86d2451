"""The sample configuration file and the configuration reference, generated.

Both come from the :class:`~nova_lite.conf.Option` metadata declared on
each :class:`~nova_lite.conf.Settings` field (a driver's options class
declares its own the same way: its reference is rendered on the driver's
page, never in the core's sample), so a new option appears in
``etc/nova-lite.conf.sample`` (``tools/gen-sample-config``) and in the
documentation (the ``nova-lite-config`` Sphinx directive of
``doc/source/_ext/nova_lite_config.py``) as soon as its field declares it.

Run ``python -m nova_lite.conf_reference`` to print the sample, or
``python -m nova_lite.conf_reference --rst`` for the reference text.
"""

import argparse
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from nova_lite import conf

WIDTH = 79

SAMPLE_HEADER = """\
# nova-lite sample configuration file.
#
# Generated from the options declared in nova_lite.conf by
# tools/gen-sample-config: do not edit by hand.  Every option is shown
# commented out with its default; copy the file to
# /etc/nova-lite/nova-lite.conf and uncomment what you change.  Sections a
# driver owns ([libvirt], [ironic]) are described in each driver's
# documentation.
"""


@attrs.frozen
class OptionDoc:
    """One option as the sample and the reference show it (all text)."""

    field: str
    section: str
    name: str
    help: str
    kind: str
    default: str
    literal_default: bool
    bounds: str
    nova: str


def _kind(field: "attrs.Attribute[Any]", opt: conf.Option, cls: type) -> str:
    if opt.kind:
        return opt.kind
    names = {str: "string", int: "integer", float: "float", tuple: "list"}
    kind = conf.value_type(field.name, cls)
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default(field: "attrs.Attribute[Any]", opt: conf.Option) -> tuple[str, bool]:
    """(text, literal): literal text can be written into a file as it is."""
    if opt.default_text is not None:
        return opt.default_text, False
    default = field.default
    if hasattr(default, "takes_self"):   # pragma: no cover - an attrs.Factory: default_text
        raise ValueError(f"option {opt.name}: computed default needs default_text")
    if default is None:
        return "unset", False
    if isinstance(default, tuple):
        return ", ".join(default), True
    return _number(default), True


def _bounds(field: "attrs.Attribute[Any]", opt: conf.Option, cls: type) -> str:
    parts: list[str] = []
    if opt.file_minimum is not None:
        # What a configuration file may say (code may go lower, down to minimum).
        parts.append(f"at least {_number(opt.file_minimum)}")
    elif opt.minimum is not None:
        word = "above" if opt.exclusive_minimum else "at least"
        parts.append(f"{word} {_number(opt.minimum)}")
    if opt.maximum is not None and not (isinstance(opt.maximum, int)
                                        and opt.maximum >= 2 ** 53):
        parts.append(f"at most {_number(opt.maximum)}")
    if conf.value_type(field.name, cls) is float and opt.minimum is None and opt.kind is None:
        parts.append("finite")
    return ", ".join(parts)


def option_docs(cls: type | None = None) -> list[OptionDoc]:
    """Every option of ``cls`` as :class:`OptionDoc`, in order.

    ``cls`` is :class:`~nova_lite.conf.Settings` (the default: the core's
    options) or a driver's options class (see
    :func:`nova_lite.conf.read_options`).
    """
    cls = conf.Settings if cls is None else cls
    fields = {f.name: f for f in attrs.fields(cls)}
    docs: list[OptionDoc] = []
    for name, opt in conf.options(cls):
        field = fields[name]
        default, literal = _default(field, opt)
        kind = _kind(field, opt, cls)
        if opt.unit:
            kind = f"{kind} ({opt.unit})"
        docs.append(OptionDoc(
            field=name, section=opt.section, name=opt.name, help=opt.help, kind=kind,
            default=default, literal_default=literal, bounds=_bounds(field, opt, cls),
            nova=opt.nova or ""))
    return docs


def _sections(docs: Iterable[OptionDoc]) -> list[tuple[str, list[OptionDoc]]]:
    """Options grouped by section, DEFAULT first, then in declaration order."""
    docs = list(docs)
    order: list[str] = []
    for doc in docs:
        if doc.section not in order:
            order.append(doc.section)
    order.sort(key=lambda s: s != "DEFAULT")
    return [(section, [d for d in docs if d.section == section]) for section in order]


def _comment(text: str, indent: str = "# ") -> str:
    return textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def sample_config(docs: Iterable[OptionDoc] | None = None) -> str:
    """The text of ``etc/nova-lite.conf.sample``: the core's options and
    those of the fake drivers it ships (``[fake]``)."""
    if docs is None:
        from nova_lite.virt.fake import FakeOptions
        docs = option_docs() + option_docs(FakeOptions)
    out = [SAMPLE_HEADER]
    for section, items in _sections(docs):
        out.append(f"[{section}]\n")
        for doc in items:
            out.append(_comment(doc.help))
            facts = f"Type: {doc.kind}.  Default: {doc.default}."
            if doc.bounds:
                facts += f"  Bounds: {doc.bounds}."
            out.append(_comment(facts))
            if doc.literal_default:
                value = f" {doc.default}"
            elif doc.default == "unset":
                value = ""
            else:
                value = f" <{doc.default}>"
            out.append(f"#{doc.name} ={value}\n")
    return "\n".join(out)


def reference_rst(docs: Iterable[OptionDoc] | None = None) -> str:
    """The configuration reference as reStructuredText (one definition list per section).

    ``docs`` default to the core's options; give ``option_docs(cls)`` for a
    driver's.
    """
    docs = option_docs() if docs is None else docs
    out: list[str] = []
    for section, items in _sections(docs):
        out += [f".. rubric:: [{section}]", ""]
        for doc in items:
            out += [f".. _config-{section}-{doc.name}:", ""]
            out += [f"``{doc.name}``"]
            out += ["   " + line for line in textwrap.wrap(doc.help, WIDTH - 3)]
            default = f"``{doc.default}``" if doc.literal_default else doc.default
            facts = [f"Type: {doc.kind}", f"Default: {default}"]
            if doc.bounds:
                facts.append(f"Bounds: {doc.bounds}")
            if doc.nova:
                facts.append(f"Nova: {doc.nova}")
            out += ["", "   " + ".  ".join(facts) + "."]
            out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the sample (default) or the reference (``--rst``); ``--output`` writes it."""
    parser = argparse.ArgumentParser(prog="python -m nova_lite.conf_reference",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rst", action="store_true", help="print the reference text")
    parser.add_argument("--output", metavar="PATH", help="write to PATH instead of stdout")
    args = parser.parse_args(argv)
    text = reference_rst() if args.rst else sample_config()
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
