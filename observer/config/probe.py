"""The synthetic probe: one judge-free request per version through the route users call."""

from __future__ import annotations

import string

from pydantic import Field, field_validator, model_validator

from observer.config.base import Spec

TEMPLATE_FIELDS = ("version", "role", "model", "group")
"""The fields a probe URL or header template may name."""


def _check_template(value: str, what: str) -> str:
    names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
    unknown = sorted(names - set(TEMPLATE_FIELDS))
    if unknown:
        raise ValueError(f"{what} {value!r} names {', '.join(unknown)}; a template may name "
                         f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}")
    return value


class ProbeSpec(Spec):
    """A streamed chat request of `max_tokens` per version every `interval_seconds`, through `url` (the gateway
    users call, not the pod): its time to first token and its status codes are series, so the path in front of
    the engine (DNS, ingress, gateway, router) is measured even when no user is sending."""

    enabled: bool = Field(False, description="Send the probe (off by default).")
    url: str | None = Field(
        None, description="OpenAI base URL (…/v1) the probe calls, a template over {version}, {role}, {model}, "
                          "{group} (e.g. https://llm.example.com/v1). Default: the version's own `openai` URL.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Headers of every probe request, values templated like `url`: how the gateway is told which "
                    "version to route to (e.g. {x-canary: \"{role}\"} for an Argo setHeaderRoute or an HTTPRoute "
                    "header match), and its credentials.")
    interval_seconds: float = Field(30.0, ge=1, le=3600, description="Seconds between two probes of a version.")
    timeout_seconds: float = Field(10.0, gt=0, le=120, description="A probe with no complete answer by then counts "
                                                                   "as code 504.")
    prompt: str = Field("Reply with the word OK.", min_length=1, max_length=2000,
                        description="The user turn of the probe (no judge reads the answer).")
    max_tokens: int = Field(1, ge=1, le=64, description="Tokens the probe asks for: one is enough for a TTFT.")
    versions: list[str] = Field(default_factory=list, description="Versions probed (names or roles); empty: every "
                                                                  "version not retired.")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_template(v, "probe.url")

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            _check_template(value, f"probe.headers.{key}")
        return v

    @model_validator(mode="after")
    def _timeout(self) -> ProbeSpec:
        if self.timeout_seconds > self.interval_seconds:
            raise ValueError("probe.timeout_seconds must not exceed probe.interval_seconds")
        return self
