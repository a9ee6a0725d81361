"""The docs' generated sections: `python -m observer_dev.docsgen` rewrites them, `--check` fails on a stale one.

A section sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->` in a markdown file and
is rendered from the code that the rest of the observer reads (docs/kubernetes.md's table of rollout sources
from observer.config.sources), so a row added there shows in the docs or fails `make test`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from observer.config import sources

ROOT = Path(__file__).resolve().parents[1]
SECTIONS: Mapping[tuple[str, str], Callable[[], str]] = {
    ("docs/kubernetes.md", "sources"): sources.docs_table,
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)",
                      re.S)


def rendered(path: str, name: str, text: str) -> str:
    """`text` with section `name` rewritten; a file without the markers is an error naming them."""
    pattern = _pattern(name)
    if not pattern.search(text):
        raise ValueError(f"{path} has no `<!-- generated: {name} -->` … `<!-- end generated: {name} -->` section")
    body = SECTIONS[(path, name)]()
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, name in SECTIONS:
        file = ROOT / path
        text = file.read_text()
        new = rendered(path, name, text)
        if new != text:
            stale.append(f"{path} ({name})")
            if not check:
                file.write_text(new)
    if stale and check:
        print(f"stale generated docs: {', '.join(stale)}: run `python -m observer_dev.docsgen`", file=sys.stderr)
        return 1
    for s in stale:
        print(f"wrote {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
