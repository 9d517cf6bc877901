"""Checks the relative links of README.md and docs/*.md: every linked file exists and every #anchor is a
heading of the linked Markdown file (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
Also checks that the README's table of the stacks tested names the versions the requirements files pin.
Exits 1 naming each broken link or stale version. Run by tests/run.sh."""
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(anchor(line.lstrip("#")))
    return found


def broken(doc: Path) -> list[str]:
    out = []
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        linked = (doc.parent / file).resolve() if file else doc
        if not linked.exists():
            out.append(f"{doc.relative_to(REPO)}: {target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            out.append(f"{doc.relative_to(REPO)}: {target}: no heading #{fragment}")
    return out


# The README's table of the stacks tested: each row names these packages at the versions its requirements
# file pins (row label, requirements file, [(name in the README, package as pinned)]).
STACKS = [
    ("today's: Python 3.13", "tests/interop/requirements-current.txt",
     [("zarr-python", "zarr"), ("icechunk", "icechunk"), ("numcodecs", "numcodecs"), ("tensorstore", "tensorstore"),
      ("xarray", "xarray"), ("VirtualiZarr", "virtualizarr"), ("numpy", "numpy")]),
    ("last year's readers: Python 3.11", "tests/interop/requirements.txt",
     [("zarr-python", "zarr"), ("icechunk", "icechunk"), ("numcodecs", "numcodecs"), ("tensorstore", "tensorstore"),
      ("xarray", "xarray"), ("numpy", "numpy")]),
    ("last year's readers: Python 3.11", "tests/interop/requirements-zarr2.txt", [("zarr-python", "zarr")]),
]


def pins(requirements: Path) -> dict[str, str]:
    found = {}
    for line in requirements.read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            found[name.split("[")[0].strip().lower()] = version.strip()
    return found


def stale_versions(readme: Path) -> list[str]:
    rows = {line.split("|")[1].strip(): line for line in readme.read_text().splitlines() if line.startswith("| ")}
    out = []
    for label, requirements, packages in STACKS:
        row = rows.get(label)
        if row is None:
            out.append(f"README.md: no row {label!r} in the table of the stacks tested")
            continue
        pinned = pins(REPO / requirements)
        for name, package in packages:
            want = f"{name} {pinned.get(package, '(not pinned)')}"
            if not re.search(re.escape(want) + r"(?![\w.])", row):
                out.append(f"README.md: the row {label!r} should name {want} ({requirements})")
    return out


def main() -> int:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    stale = stale_versions(REPO / "README.md")
    for p in stale:
        print(f"stack versions: {p}", file=sys.stderr)
    problems = [p for doc in docs for p in broken(doc)]
    for p in problems:
        print(f"broken link: {p}", file=sys.stderr)
    print(f"check_links: {len(docs)} documents, {len(problems)} broken link(s), {len(stale)} stale stack version(s)")
    return 1 if problems or stale else 0


if __name__ == "__main__":
    sys.exit(main())
