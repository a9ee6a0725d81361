"""Upstream data the tests validate against (CRDs, published objects), read where it lives: ../shared/reference/
beside the clone, as CI lays it out. Never copied into the project; without it a test that needs it skips,
saying what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"

ARGO_CRDS = "argo-rollouts-v1.9.1"
PROMETHEUS_RULE_CRD = "prometheus-operator/monitoring.coreos.com_prometheusrules.yaml"


def reference(relative: str) -> Path:
    """The upstream file at ../shared/reference/`relative`; skips the calling test when it is not there."""
    path = SHARED_REFERENCE / relative
    if not path.is_file():
        pytest.skip(f"upstream reference {relative} is not at {SHARED_REFERENCE} (CI has ../shared beside the "
                    f"clone; tests read upstream files there and never a copy)")
    return path
