"""The sampling config section and its wiring checks."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from observer.config import parse_config
from observer.errors import ConfigError, StoreError
from observer.sample.checks import check_versions, proxy_upstream, shared_upstream
from observer.wiring.runtime import Context
from observer.wiring.runtime import resolve_auth_token as auth_token
from observer.wiring.sampling import build

FLEET = """
fleet:
  versions:
    - {name: stable, openai: "http://10.0.0.5:8000/v1"}
    - {name: canary}
"""


def cfg(sampling: str = "", extra: str = "") -> object:
    return parse_config(FLEET + extra + ("sampling:\n" + sampling if sampling else ""), environ={})


def test_defaults_and_per_version_fraction() -> None:
    c = cfg("  fraction: 0.2\n  versions:\n    canary: {fraction: 1.0}\n")
    assert c.sampling.fraction_for("stable") == 0.2  # type: ignore[attr-defined]
    assert c.sampling.fraction_for("canary") == 1.0  # type: ignore[attr-defined]
    assert c.sampling.redaction.enabled and c.sampling.store.retention_days == 30  # type: ignore[attr-defined]


@pytest.mark.parametrize(("sampling", "message"), [
    ("  fraction: 1.5\n", "sampling.fraction"),
    ("  versions:\n    stable: {listen: 'nohost'}\n", "HOST:PORT"),
    ("  reservoir: {max_per_window: 0}\n", "sampling.reservoir.max_per_window"),
    ("  redaction: {patterns: {x: '['}}\n", "not a valid regex"),
    ("  proxy: {listen_port: 1}\n", "unknown key 'listen_port'"),
], ids=["fraction", "listen", "capacity", "regex", "typo"])
def test_invalid_sampling_config_names_the_key(sampling: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg(sampling)


def test_sampling_for_an_unknown_version_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sampling.versions.blue.*not in fleet.versions"):
        check_versions(cfg("  versions:\n    blue: {fraction: 1}\n"))  # type: ignore[arg-type]


def test_upstream_defaults_to_the_openai_root_and_needs_one() -> None:
    c = cfg("  versions:\n    canary: {upstream: 'http://vllm:8000'}\n")
    assert proxy_upstream(c, "stable") == "http://10.0.0.5:8000"  # type: ignore[arg-type]
    assert proxy_upstream(c, "canary") == "http://vllm:8000"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has no openai URL"):
        proxy_upstream(cfg(), "canary")  # type: ignore[arg-type]


def test_environment_token_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    c = cfg(extra="server: {auth_token: from-config}\n")
    monkeypatch.delenv("OBSERVER_AUTH_TOKEN", raising=False)
    assert auth_token(c) == "from-config"  # type: ignore[arg-type]
    monkeypatch.setenv("OBSERVER_AUTH_TOKEN", "from-env")
    assert auth_token(c) == "from-env"  # type: ignore[arg-type]


async def test_build_publishes_the_store_or_fails_clearly(tmp_path: Path) -> None:
    async with httpx.AsyncClient() as http:
        off = Context(config=cfg("  enabled: false\n"), http=http)  # type: ignore[arg-type]
        assert build(off) is None
        ok = Context(config=cfg(f"  store: {{path: '{tmp_path / 'ok.db'}'}}\n"), http=http)  # type: ignore[arg-type]
        component = build(ok)
        assert component is not None and component.store is not None
        await component.start()
        await component.stop()
        bad = tmp_path / "bad.db"
        bad.write_bytes(b"garbage" * 1000)
        ctx = Context(config=cfg(f"  store: {{path: '{bad}'}}\n"), http=http)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="corrupt"):
            build(ctx)


def test_versions_on_the_same_openai_url_share_a_proxy_by_model_name() -> None:
    c = parse_config("""
fleet:
  versions:
    - {name: base, role: other, model: gemma, openai: "http://pool:8000/v1"}
    - {name: lora-v1, role: stable, model: support-lora-v1, openai: "http://pool:8000/v1"}
    - {name: lora-v2, role: canary, model: support-lora-v2, openai: "http://pool:8000/v1"}
    - {name: other, model: llama, openai: "http://elsewhere:8000/v1"}
""", environ={})
    assert shared_upstream(c, "base") == {"support-lora-v1": "lora-v1", "support-lora-v2": "lora-v2"}
    assert shared_upstream(c, "lora-v2") == {"gemma": "base", "support-lora-v1": "lora-v1"}
    assert shared_upstream(c, "other") == {} and shared_upstream(c, "missing") == {}
