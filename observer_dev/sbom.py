"""The observer image's software bill of materials: CycloneDX 1.6 JSON at deploy/sbom.cdx.json, generated from
requirements.lock and checked against it (`make render-check`, so CI fails on a lock that moved without it).

The image installs the observer with the lock as a constraint file and no extras (deploy/Dockerfile), so the
bill lists what that install resolves to: the observer's own requirements, followed through each installed
distribution's metadata with its environment markers evaluated (Python 3.11 on Linux, as the image's base), each
at the version the lock pins. Dev tools and the `analysis` extra (torch) are not in the image and not in the bill.
The output is reproducible: no timestamp, and a serial number derived from the pins themselves.

    python -m observer_dev.sbom            # write deploy/sbom.cdx.json
    python -m observer_dev.sbom --check    # exit 1 when it differs from what the lock gives
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
OUT = ROOT / "deploy" / "sbom.cdx.json"
NAMESPACE = uuid.UUID("6f3c1d2e-8a4b-4c5d-9e0f-1a2b3c4d5e6f")
"""uuid5 namespace of the serial number (any fixed UUID: the number only has to change with the pins)."""


def normalize(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path = LOCK) -> dict[str, tuple[str, str]]:
    """normalised name → (name as locked, version) of every `name==version` line."""
    out = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and name and not name.startswith("#"):
            out[normalize(name)] = (name, version)
    return out


def closure(locked: Mapping[str, tuple[str, str]], root: str = "observer"
            ) -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    """(name, version) of what installing `root` without extras pulls in, by the installed distributions'
    requirements, and each one's own requirements (normalised names; `root` too); ValueError naming a
    requirement the lock does not pin."""
    seen: set[str] = set()
    edges: dict[str, set[str]] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        needs = edges.setdefault(normalize(name), set())
        for text in importlib.metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = normalize(req.name)
            if key not in locked:
                raise ValueError(f"{name} requires {req.name}, which requirements.lock does not pin")
            needs.add(key)
            if key not in seen:
                seen.add(key)
                todo.append(req.name)
    return sorted((locked[k] for k in seen), key=lambda p: normalize(p[0])), edges


def bom_json(packages: list[tuple[str, str]], edges: Mapping[str, set[str]], version: str) -> str:
    """The bill as CycloneDX 1.6 JSON, with the dependency graph, the same for the same pins."""
    by_key = {}
    for name, ver in packages:
        purl = PackageURL(type="pypi", name=normalize(name), version=ver)
        by_key[normalize(name)] = Component(type=ComponentType.LIBRARY, name=name, version=ver, purl=purl,
                                            bom_ref=purl.to_string())
    serial = uuid.uuid5(NAMESPACE, "\n".join(f"{n}=={v}" for n, v in packages) + f"\nobserver=={version}")
    root = Component(type=ComponentType.APPLICATION, name="observer", version=version, bom_ref="observer")
    bom = Bom(components=by_key.values(), serial_number=serial, metadata=BomMetaData(component=root))
    bom.metadata.timestamp = None  # type: ignore[assignment]  # reproducible: the pins date it, not the clock
    for key, needs in edges.items():
        parent = root if key == "observer" else by_key[key]
        bom.register_dependency(parent, [by_key[k] for k in sorted(needs)])
    text = JsonV1Dot6(bom).output_as_string(indent=1)
    return json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with deploy/sbom.cdx.json instead of writing it")
    args = ap.parse_args(argv)
    packages, edges = closure(pins())
    text = bom_json(packages, edges, importlib.metadata.version("observer"))
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"error: {OUT.relative_to(ROOT)} does not match requirements.lock: run "
                  f"`python -m observer_dev.sbom` and commit it", file=sys.stderr)
            return 1
        print(f"ok: {OUT.relative_to(ROOT)} matches requirements.lock ({len(packages)} packages)")
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
