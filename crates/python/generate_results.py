"""Generates python/zshard/_results.py, the classes the functions of ``zshard`` return, from the schema
of the Rust result types (``results.schema.json`` beside this script), so that a class has the fields,
types and descriptions of the document the library returns for it.

    python crates/python/generate_results.py           # rewrites python/zshard/_results.py
    python crates/python/generate_results.py --check   # fails when _results.py differs (tests/python runs it)

The schema is derived from the Rust types (schemars, through their serde attributes) and kept by
``crates/convert/tests/result_schema.rs``, which fails when a type changed and the kept schema was not
written again (``ZSHARD_WRITE_SCHEMA=1`` writes it). A field added to a Rust result type: write the
schema, run this script, and the field is an attribute of its Python class (or name it in ``omit``
below: tests/python/test_typed.py fails on a document key that is no field).

``CLASSES`` below says which Rust type each class is made from, and what Python shows differently: the
fields it leaves out or adds, the few it types its own way (a ``(index, count)`` tuple for the worker,
arrays by path), defaults and order where the class had them before the schema. What the documents do
not define (``Progress``, the ``ok``, ``total`` and ``stale`` properties) is hand-written in
``_results_base.py``.
"""

import json
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = HERE / "results.schema.json"
TARGET = HERE / "python" / "zshard" / "_results.py"


def cls(py, rust, doc=None, *, only=None, omit=(), order=None, types=None, docs=None, extra=(), defaults=None, base=None):
    """A class ``py`` made from the Rust type ``rust``: its fields are the type's (``only`` those, less
    ``omit``, in ``order`` when given), ``types`` gives some their own ``(annotation, expression of
    doc)``, ``extra`` adds ``(name, annotation, expression, description, field arguments)``,
    ``docs`` gives some their own description, ``defaults`` gives fields a default (a number: every field, those the type gains too), ``base`` is a hand-written class of ``_results_base.py``
    it subclasses; ``doc`` replaces the Rust type's description (which names Rust and the command, not
    the Python function)."""
    return dict(py=py, rust=rust, doc=doc, only=only, omit=set(omit), order=order, types=types or {}, docs=docs or {},
                extra=list(extra), defaults={} if defaults is None else defaults, base=base)


SKIPPED = ("list[tuple[str, str]]", '_skipped(doc.get("skipped_arrays"))')
DATA_TYPE = ("str | dict[str, Any]", 'doc["data_type"]')
DOCUMENT = ("document", "dict[str, Any]", "doc", "The whole document.", "repr=False")

CLASSES = [
    cls("Counts", "Counts", "Shard, chunk and byte counts of one array or of all of them.", defaults=0),
    cls("Update", "Update", """What a run over a finished conversion brought up to date (``Report.update``): the source
        changed since, and only the shards made from what changed were written again.""",
        defaults=0),
    cls("Report", "Report", "What :func:`zshard.convert` did: the same document as the command's ``--report`` (in ``document``).",
        # The run's other details (options, version, host, times, throughput) are in `document`.
        only=["status", "source", "destination", "worker", "duration_seconds", "totals", "arrays", "skipped_arrays", "update"],
        types={
            "worker": ("tuple[int, int]", '(doc["worker"]["index"], doc["worker"]["count"])',
                       "``(index, count)`` of the share converted (``(0, 1)``: every shard)."),
            "arrays": ("dict[str, Counts]", '{a["path"]: Counts._from_dict(a) for a in doc["arrays"]}',
                       "Counts per array, by path in the hierarchy."),
            "skipped_arrays": SKIPPED,
        },
        extra=[("document", "dict[str, Any]", "doc", "The whole report document (options, version, host, times, throughput, ...).", "repr=False")]),
    cls("VerifyResult", "Verified", "What :func:`zshard.verify` found.", base="_VerifyResult",
        types={"skipped_arrays": SKIPPED}, defaults={"skipped_arrays": list, "warnings": list}),
    cls("Finalized", "Finalized", "What :func:`zshard.finalize` wrote."),
    cls("PyramidLevel", "PyramidPlace"),
    cls("PlannedArray", "ArrayPlan", "One array of a :class:`Plan`.",
        order=["path", "name", "shape", "data_type", "fill_value", "source_chunk_shape", "source_chunk_grid", "source_shard_shape",
               "source_chunks", "source_codecs", "dimension_names", "pyramid", "made_from"],
        types={
            "data_type": DATA_TYPE,
            "fill_value": ("Any", 'doc["fill_value"]'),
            "source_chunk_grid": ("dict[str, Any] | None", 'doc.get("source_chunk_grid")'),
            "made_from": ("dict[str, str] | None", 'doc.get("made_from")'),
        }),
    cls("PlanTotals", "PlanTotals", "The sums of a :class:`Plan` over its arrays."),
    cls("Plan", "PlanDocument", "What :func:`zshard.plan` found a conversion would do (``zshard plan --json``; the document in ``document``).",
        # Not offered as attributes (yet): in `document`.
        omit=["update", "icechunk_output"],
        order=["source", "destination", "threads", "io_threads", "memory_limit", "memory_limit_source", "part_bytes", "arrays",
               "groups", "warnings", "skipped_arrays", "totals", "icechunk_chunks"],
        types={
            "part_bytes": ("int | None", 'doc.get("part_bytes")'),
            "skipped_arrays": SKIPPED,
            "icechunk_chunks": ("dict[str, int] | None", 'doc.get("icechunk_chunks")'),
        },
        extra=[("document", "dict[str, Any]", "doc", "The whole plan document.", "repr=False")]),
    cls("PlanCost", "Cost", """The requests and bytes a whole conversion would take from storage: a cost estimate a migration
        can be budgeted with (``zshard plan --json``'s ``cost``)."""),
    cls("PlanRequests", "Requests", base="_PlanRequests"),
    cls("PlanStateRequests", "StateRequests"),
    cls("PlanPrices", "Prices", "Request prices an estimate is made with, in US dollars per 1,000 requests."),
    cls("PlanAssumptions", "Assumptions", "What a :class:`PlanEstimate` assumes."),
    cls("PlanEstimate", "Estimate", """How long a job's storage traffic would take and what its requests would cost: an estimate
        from the stated :class:`PlanAssumptions`, not a measurement (``zshard plan --json``'s ``estimate``)."""),
    cls("ListedArray", "ListedArray", "One array of a :class:`Listing`.", types={"data_type": DATA_TYPE}),
    cls("Listing", "Listing", "What :func:`zshard.ls` found in a source (``zshard ls --json``).", types={"skipped_arrays": SKIPPED}),
    cls("ArrayStatus", "ArrayStatus", "One array of a conversion's recorded plan, as :func:`zshard.status` sees it."),
    cls("StatusTotals", "Totals", "The totals of a status over every array."),
    cls("LeaseStatus", "LeaseStatus"),
    cls("WorkerStatus", "WorkerStatus", """One worker of a partitioned conversion (``"w0of1"`` is an unpartitioned run).""",
        base="_WorkerStatus"),
    cls("Rate", "Rate"),
    cls("UpdateStatus", "UpdateStatus", """The progress of an update in progress (``Status.update``): a run over a finished conversion
        whose source changed, writing only the shards made from what changed."""),
    cls("Status", "Status", """How far a conversion into a destination has come, from the destination alone (``zshard status
        --json``).""",
        # Said of a destination that holds no conversion; the command prints it.
        omit=["note"], defaults={"update": None},
        docs={"finished": """Nothing moves on by itself: complete (or never started), or every shard recorded done and no
              worker live (what is left is :func:`zshard.finalize`)."""}),
]

#: Helpers of _results_base.py the generated module uses or re-exports.
BASE = ["Progress", "_PlanRequests", "_VerifyResult", "_WorkerStatus", "_skipped"]


def rst(text):
    """A Rust doc comment's markdown as reStructuredText, on one line: code in double backticks,
    intra-doc links by their text, ``null`` as ``None``."""
    text = re.sub(r"\[`([^`]+)`\]\([^)]*\)", r"`\1`", text)
    text = re.sub(r"\[`([^`]+)`\]", r"`\1`", text)
    text = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", text)
    text = text.replace("``null``", "``None``")
    # A Rust item the reader of Python cannot follow.
    text = re.sub(r" \(see ``\w+::\w+``\)", "", text)
    # A flag of the command as the Python keyword it is.
    text = re.sub(r"``--([a-z-]+) ([^`]+)``", lambda m: f'``{m[1].replace("-", "_")}="{m[2]}"``', text)
    text = re.sub(r"``--([a-z-]+)``", lambda m: f'``{m[1].replace("-", "_")}=``', text)
    return " ".join(text.split())


def wrap(text, indent):
    return textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


class Generator:
    def __init__(self, schema):
        self.defs = schema["$defs"]
        self.names = {c["rust"]: c["py"] for c in CLASSES}

    def ref(self, node):
        return node["$ref"].rsplit("/", 1)[1]

    def annotation(self, node):
        """The Python type of a schema node."""
        if node is True or node == {}:
            return "Any"
        if "$ref" in node:
            name = self.ref(node)
            if name in self.names:
                return self.names[name]
            target = self.defs[name]
            if "enum" in target or "oneOf" in target or target.get("type") == "string":
                return "str"
            sys.exit(f"{SCHEMA}: {name} has no class in CLASSES")
        if "anyOf" in node:
            parts = [self.annotation(n) for n in node["anyOf"] if n.get("type") != "null"]
            nullable = any(n.get("type") == "null" for n in node["anyOf"])
            return " | ".join(parts + (["None"] if nullable else []))
        kind = node.get("type")
        if isinstance(kind, list):
            parts = [self.annotation({**node, "type": k}) for k in kind if k != "null"]
            return " | ".join(parts + (["None"] if "null" in kind else []))
        if kind == "array":
            return f"list[{self.annotation(node.get('items', True))}]"
        if kind == "object":
            return "dict[str, Any]"
        return {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}[kind]

    def values(self, node):
        """The values a field of a string enum takes, said after its description."""
        target = self.defs[self.ref(node)] if "$ref" in node else {}
        consts = [f'``"{n["const"]}"``' for n in target.get("oneOf", []) if "const" in n]
        consts += [f'``"{v}"``' for v in target.get("enum", [])]
        return f" One of {', '.join(consts[:-1])} or {consts[-1]}." if len(consts) > 1 else ""

    def parse(self, node, value):
        """The expression that makes a field's Python value of ``value`` (the document's)."""
        if node is True or node == {}:
            return value
        if "$ref" in node and self.ref(node) in self.names:
            return f"{self.names[self.ref(node)]}._from_dict({value})"
        if "anyOf" in node:
            inner = [n for n in node["anyOf"] if n.get("type") != "null"]
            if len(inner) == 1:
                made = self.parse(inner[0], "x")
                if made.endswith("._from_dict(x)"):
                    return f"_optional({made[:-3]}, {value})"
                if made != "x":
                    return f"_optional(lambda x: {made}, {value})"
            return value
        if node.get("type") == "array":
            made = self.parse(node.get("items", True), "x")
            if made != "x":
                return f"[{made} for x in {value}]"
        return value

    def fields(self, c):
        """``(name, annotation, expression, description, field arguments)`` of each field of class ``c``."""
        schema = self.defs[c["rust"]]
        props = schema["properties"]
        required = set(schema.get("required", []))
        names = [n for n in (c["only"] or props) if n not in c["omit"]]
        if c["order"]:
            names = c["order"] + [n for n in names if n not in c["order"]]
        out = []
        for name in names:
            node = props[name]
            if name in required:
                value = f'doc["{name}"]'
            elif "default" in node:
                value = f'doc.get("{name}", {node["default"]!r})'
            else:
                value = f'doc.get("{name}")'
            doc = rst(node.get("description", ""))
            if name in c["types"]:
                ann, expr, *own = c["types"][name]
                doc = own[0] if own else doc
            else:
                ann, expr = self.annotation(node), self.parse(node, value)
                doc += self.values(node)
            doc = " ".join(c["docs"].get(name, doc).split())
            default = c["defaults"] if isinstance(c["defaults"], int) else c["defaults"].get(name, ...)
            args = "" if default is ... else "default_factory=list" if default is list else f"default={default!r}"
            out.append((name, ann, expr, doc, args))
        out += c["extra"]
        # A dataclass field without a default cannot follow one with a default (a field the Rust type
        # gains after those of a class with defaults): say so rather than write a class that fails.
        defaulted = None
        for name, *_, args in out:
            if args.startswith("default"):
                defaulted = defaulted or name
            elif defaulted:
                sys.exit(f"{c['py']}: {name} has no default but follows {defaulted}, which has one: give it one in CLASSES")
        return out

    def klass(self, c):
        fields = self.fields(c)
        summary = c["doc"] or rst(self.defs[c["rust"]].get("description", ""))
        base = f"({c['base']})" if c["base"] else ""
        out = ["@dataclass(frozen=True)", f"class {c['py']}{base}:"]
        doc = wrap(" ".join(summary.split()), "    ")
        doc[0] = '    """' + doc[0][4:]
        doc += ["", "    Attributes", "    ----------"]
        for name, ann, _, text, _ in fields:
            doc.append(f"    {name} : {ann}")
            doc += wrap(text, "        ")
        out += doc + ['    """', ""]
        for name, ann, _, _, args in fields:
            if args.startswith("default="):
                out.append(f"    {name}: {ann} = {args[len('default='):]}")
            else:
                out.append(f"    {name}: {ann}" + (f" = field({args})" if args else ""))
        out += ["", "    @classmethod", f"    def _from_dict(cls, doc: dict[str, Any]) -> {c['py']}:", "        return cls("]
        out += [f"            {name}={expr}," for name, _, expr, _, _ in fields]
        out += ["        )", "", ""]
        return out

    def module(self):
        out = [
            '"""What the functions of ``zshard`` return: frozen dataclasses built from the library\'s documents (dicts',
            "the extension makes from the library's result types). Generated by ``crates/python/generate_results.py``",
            "from the schema of the Rust result types (``crates/python/results.schema.json``): do not edit; the",
            'hand-written rest is in ``_results_base.py``."""',
            "",
            "from __future__ import annotations",
            "",
            "from collections.abc import Callable",
            "from dataclasses import dataclass, field",
            "from typing import Any, TypeVar",
            "",
            "from ._results_base import (",
        ]
        out += [f"    {name} as {name}," if not name.startswith("_") else f"    {name}," for name in BASE]
        out += [")", "", '_T = TypeVar("_T")', "", "",
                "def _optional(parse: Callable[[Any], _T], value: Any) -> _T | None:",
                '    """``parse(value)``, or ``None`` for ``None``."""',
                "    return None if value is None else parse(value)", "", ""]
        for c in CLASSES:
            out += self.klass(c)
        return "\n".join(out).rstrip("\n") + "\n"


def main():
    text = Generator(json.loads(SCHEMA.read_text())).module()
    if sys.argv[1:] == ["--check"]:
        if TARGET.read_text() != text:
            sys.exit(f"{TARGET} is not what {Path(__file__).name} generates from {SCHEMA.name}: run it")
    else:
        TARGET.write_text(text)


if __name__ == "__main__":
    main()
