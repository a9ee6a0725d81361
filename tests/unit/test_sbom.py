"""The image's bill of materials (observer_dev/sbom.py) matches requirements.lock, and cannot drift from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observer_dev import sbom


def test_the_committed_bill_matches_the_lock() -> None:
    assert sbom.main(["--check"]) == 0
    bill = json.loads(sbom.OUT.read_text(encoding="utf-8"))
    assert (bill["bomFormat"], bill["specVersion"]) == ("CycloneDX", "1.6")
    locked = sbom.pins()
    for c in bill["components"]:  # every component at the version the lock pins, as a PyPI package URL
        assert locked[sbom.normalize(c["name"])][1] == c["version"]
        assert c["purl"] == f"pkg:pypi/{sbom.normalize(c['name'])}@{c['version']}"
    names = {sbom.normalize(c["name"]) for c in bill["components"]}
    assert {"fastapi", "httpx", "pydantic", "prometheus-client"} <= names
    assert not {"pytest", "ruff", "torch", "cyclonedx-python-lib"} & names  # not in the image
    root = next(d for d in bill["dependencies"] if d["ref"] == "observer")
    assert "pkg:pypi/httpx@" + locked["httpx"][1] in root["dependsOn"]


def test_a_moved_pin_changes_the_bill_and_an_unpinned_requirement_is_named(tmp_path: Path) -> None:
    packages, edges = sbom.closure(sbom.pins())
    same = sbom.bom_json(packages, edges, "0.1.0")
    assert same == sbom.bom_json(packages, edges, "0.1.0")  # reproducible: no clock in it
    moved = [(n, "0.0.1" if sbom.normalize(n) == "httpx" else v) for n, v in packages]
    assert sbom.bom_json(moved, edges, "0.1.0") != same
    lock = tmp_path / "requirements.lock"
    lock.write_text("\n".join(f"{n}=={v}" for k, (n, v) in sbom.pins().items() if k != "httpx") + "\n")
    with pytest.raises(ValueError, match=r"httpx, which requirements\.lock does not pin"):
        sbom.closure(sbom.pins(lock))
