"""Upstream data the tests validate against (CRDs, published objects), read where it lives: ../shared/reference/
beside the clone, as CI lays it out. Never copied into the project; without it a test that needs it skips,
saying what is missing."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"

ARGO_CRDS = "argo-rollouts-v1.9.1"
ARGO_CRD_RELEASES = (ARGO_CRDS, "argo-rollouts-v1.10.0-rc1")
"""Every Argo Rollouts release the generated templates are checked against: the one whose semantics the game
day emulates, and the newest whose CRDs were fetched."""
PROMETHEUS_RULE_CRD = "prometheus-operator/monitoring.coreos.com_prometheusrules.yaml"


def reference(relative: str) -> Path:
    """The upstream file at ../shared/reference/`relative`; skips the calling test when it is not there."""
    path = SHARED_REFERENCE / relative
    if not path.is_file():
        pytest.skip(f"upstream reference {relative} is not at {SHARED_REFERENCE} (CI has ../shared beside the "
                    f"clone; tests read upstream files there and never a copy)")
    return path


def strict(schema: Any) -> Any:
    """Add additionalProperties: false wherever a schema lists properties and preserves no unknown fields (the
    CRDs themselves never forbid them, so a typo such as `failureLimits` would pass)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields") \
                and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    return schema


@functools.cache
def crd_validator(relative: str, version: str) -> jsonschema.Draft7Validator:
    """A strict validator (`strict`) of `version` of the CRD at ../shared/reference/`relative`; skips the calling
    test when the file is not there."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: Dynamo's CRD is 1.6 MB
    crd = yaml.load(reference(relative).read_text(encoding="utf-8"), Loader=loader)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(strict(schema))
