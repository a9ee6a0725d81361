"""Conversation keys: the user's conversation a sample belongs to, kept only as a keyed hash.

The drift tests take a conversation as their independent unit (observer.analyse.drift.units). Sources name it in
their own way — the proxy's configured header or the OpenAI `user` field, mirror ingest's `conversation`, an
OpenTelemetry span's `gen_ai.conversation.id`, LiteLLM's session id — and every one passes through `Keyer`: an
HMAC-SHA256 with the secret the config names, so the store never holds a raw session id, and the same
conversation gets the same key on every replica. Without the secret no key is kept (counted), and the drift
tests use time slices instead.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from observer.config.sampling import ConversationSpec

log = logging.getLogger("observer.sample.conversation")

KEY_HEX = 32
"""Hex digits of a stored key (128 bits: no two conversations of a store collide in practice)."""


@dataclass
class Keyer:
    """Hashes raw conversation keys; counts what it did with each by outcome."""

    secret: bytes | None
    max_chars: int = 256
    counts: Counter[str] = field(default_factory=Counter)
    _warned: bool = field(default=False, init=False)

    @classmethod
    def from_spec(cls, spec: ConversationSpec, counts: Counter[str], environ: Mapping[str, str] | None = None
                  ) -> Keyer:
        """A keyer with the secret from the environment variable `spec` names (none when unset or empty),
        counting into `counts` (SamplingMetrics.conversation_keys)."""
        env = os.environ if environ is None else environ
        raw = env.get(spec.secret_env, "") if spec.secret_env else ""
        return cls(secret=raw.encode() if raw else None, max_chars=spec.max_key_chars, counts=counts)

    def key(self, raw: object) -> str | None:
        """The stored key of a raw conversation key (None: no key given, or none kept, counted)."""
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        text = str(raw).strip()
        if len(text) > self.max_chars:
            self.counts["too_long"] += 1
            return None
        if self.secret is None:
            self.counts["no_secret"] += 1
            if not self._warned:
                self._warned = True
                log.warning("samples carry conversation keys but no conversation secret is set "
                            "(sampling.conversations.secret_env): keys are not kept, and drift tests time "
                            "slices instead of conversations")
            return None
        self.counts["kept"] += 1
        return hmac.new(self.secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:KEY_HEX]
