"""Every rollout primitive discovered through the scripted Kubernetes API by a running `observer serve`
(tests/support/primitive_discovery.py): versions, roles and the canary's weight equal what the objects say at
the 25 % step and after promotion, with no version listed by hand."""

from __future__ import annotations

import pytest

from tests.support import primitive_discovery

pytestmark = pytest.mark.integration


def test_each_primitive_names_its_versions_roles_and_weight_through_the_api() -> None:
    out = primitive_discovery.run(deadline_s=20.0)
    assert all(out.discovered.values()), {"discovered": out.discovered, "got": out.got, "want": out.want}
