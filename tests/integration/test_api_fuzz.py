"""Schemathesis over every route of the observer's own OpenAPI document, with and without a token.

Issue #21: the fuzzer must find no 5xx and no answer that violates the declared contract (status codes,
content types, bodies). The service runs every area on loopback (sample store on a temporary file, drift
and canary on their own sources); examples per operation are bounded so the run stays short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from observer.config.spec import ObserverConfig
from observer.service import Service

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "fuzz-token"
EXAMPLES = 40
CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("fuzz")
    cfg = ObserverConfig.model_validate({
        "fleet": {"versions": [{"name": "stable", "role": "stable"}, {"name": "canary", "role": "canary"}]},
        "server": {"auth_token": TOKEN},
        "sampling": {"store": {"path": str(tmp / "s.db")}, "engine_spans": {"enabled": True}},
        "quality": {"enabled": False},
        "drift": {"baseline_dir": str(tmp / "baselines")},
    })
    yield Service.build(cfg)


def _schema(service: Service) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_asgi("/openapi.json", service.app)


def _fuzz(op: Any, headers: dict[str, str]) -> list[str]:
    """Up to EXAMPLES generated calls of one operation; every failed check, described."""
    found: list[str] = []

    @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(case=op.as_strategy())
    def run(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        for check in CHECKS:
            if check is not_a_server_error and op.path == "/readyz":
                continue  # readiness answers 503 until the first scrape cycle, by design (declared)
            try:
                case.validate_response(response, checks=[check])
            except (Exception, BaseExceptionGroup) as e:  # collect every finding, keep fuzzing
                kinds = [line.strip("- ") for line in str(e).splitlines() if line.startswith("- ")]
                found.append(f"{op.method.upper()} {op.path} → {response.status_code}: "
                             f"{'; '.join(kinds) or str(e)[:200]}")

    run()
    return found


@pytest.mark.parametrize("token", [None, TOKEN], ids=["anonymous", "with-token"])
def test_no_operation_answers_5xx_or_breaks_its_contract(service: Service, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    operations = [r.ok() for r in _schema(service).get_all_operations()]
    assert len(operations) >= 8, [o.path for o in operations]
    failures = [f for op in operations for f in _fuzz(op, headers)]
    assert not failures, "\n".join(sorted(set(failures))[:30])


def test_the_contract_declares_the_real_answers(service: Service) -> None:
    doc = service.app.openapi()
    ingest = doc["paths"]["/api/v1/samples"]["post"]
    assert "requestBody" in ingest, "POST /api/v1/samples declares no request body"
    for code in ("200", "400", "401", "403", "413", "422", "503"):
        assert code in ingest["responses"], code
    assert "404" in doc["paths"]["/api/v1/drift/{version}"]["get"]["responses"]


def test_fuzzer_catches_a_5xx(service: Service, tmp_path: Path) -> None:
    # The check above must be able to fail: a route that raises is found at once.
    router = APIRouter()

    @router.get("/api/v1/boom")
    def boom(n: int = 0) -> JSONResponse:
        return JSONResponse({"detail": "boom"}, status_code=500)

    service.app.include_router(router)
    try:
        op = _schema(service)["/api/v1/boom"]["GET"]
        case = op.Case(query={"n": 1})
        response = case.call()
        with pytest.raises(BaseExceptionGroup, match=r"found 1 distinct failure"):
            case.validate_response(response, checks=[not_a_server_error])
    finally:
        service.app.router.routes = [r for r in service.app.router.routes if getattr(r, "path", "") != "/api/v1/boom"]
        service.app.openapi_schema = None
