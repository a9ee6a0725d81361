"""Observed version identity: short hashes of the system prompt and of the sampling parameters of a request.

A version's declared `prompt_template_hash` / `sampling_defaults_hash` (fleet config) say what *should*
serve; these hashes say what the sampled requests actually carried, so "the rollback that forgot the
prompt template" (new weights, old template, or the reverse) is seen without anyone declaring it.

Both are the first 12 hex digits of SHA-256 and never carry text: they are bounded label values.

- template: the text of every `system` and `developer` message, in order, joined with U+001F, plus a
  per-request `chat_template` if one is sent. A request without any: the hash of the empty string
  (`NO_TEMPLATE`). Completions (`/v1/completions`) carry their template inside the prompt: NO_TEMPLATE.
- sampling: canonical JSON (sorted keys, no spaces) of the request's SAMPLING_KEYS that are present and
  not null. Per-request values such as `max_tokens`, `seed`, `user` or `stream` are left out: they differ
  between requests of one build. A request that sets none hashes `{}` (`DEFAULT_SAMPLING`): the server's
  own defaults.

`observer fingerprint` prints both hashes for a system prompt and sampling parameters, so the declared
values in the fleet config can be computed the same way.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

HASH_HEX = 12
SAMPLING_KEYS: tuple[str, ...] = (
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "length_penalty", "stop", "n", "best_of", "logprobs", "top_logprobs",
)
TEMPLATE_ROLES = ("system", "developer")
_SEP = "\x1f"


def short_hash(text: str) -> str:
    """The first HASH_HEX hex digits of SHA-256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_HEX]


NO_TEMPLATE = short_hash("")
DEFAULT_SAMPLING = short_hash("{}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    return ""


def template_hash(system_texts: Sequence[str], chat_template: str | None = None) -> str:
    """Hash of a request's system/developer texts (in order) and its per-request chat template, if any."""
    parts = list(system_texts)
    if chat_template:
        parts.append("chat_template:" + chat_template)
    return short_hash(_SEP.join(parts))


def messages_template_hash(messages: Any, chat_template: Any = None) -> str:
    """template_hash of OpenAI chat `messages` (malformed entries are skipped, never raised on)."""
    texts = [_text(m.get("content")) for m in (messages if isinstance(messages, list) else [])
             if isinstance(m, dict) and m.get("role") in TEMPLATE_ROLES]
    return template_hash(texts, chat_template if isinstance(chat_template, str) else None)


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)  # 1.0 and 1 are the same temperature
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def sampling_hash(params: Mapping[str, Any]) -> str:
    """Hash of the SAMPLING_KEYS present (not null) in `params`; other keys are ignored."""
    kept = {k: _canonical(params[k]) for k in SAMPLING_KEYS if params.get(k) is not None}
    try:
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(sorted(kept.items()))
    return short_hash(text)


def request_fingerprint(request: Mapping[str, Any], *, chat: bool) -> tuple[str, str]:
    """(template hash, sampling hash) of an OpenAI chat or completion request body."""
    template = messages_template_hash(request.get("messages"), request.get("chat_template")) if chat \
        else NO_TEMPLATE
    return template, sampling_hash(request)
