"""Checks the relative links of README.md and docs/*.md: every linked file exists and every #anchor is a
heading of the linked Markdown file (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
Exits 1 naming each broken link. Run by tests/run.sh."""
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


def main() -> int:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    problems = [p for doc in docs for p in broken(doc)]
    for p in problems:
        print(f"broken link: {p}", file=sys.stderr)
    print(f"check_links: {len(docs)} documents, {len(problems)} broken link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
