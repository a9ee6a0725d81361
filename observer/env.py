"""Every environment variable the observer reads, named in one place. Nothing reads them at import time."""

from __future__ import annotations

CONFIG_PATH = "OBSERVER_CONFIG"
"""Path of the YAML config when --config is not given."""

OVERRIDE_PREFIX = "OBSERVER__"
"""Config overrides: OBSERVER__SCRAPE__INTERVAL_SECONDS=10 sets scrape.interval_seconds (YAML-parsed value)."""

AUTH_TOKEN = "OBSERVER_AUTH_TOKEN"
"""Bearer token for ingest and admin endpoints; overrides server.auth_token."""

JUDGE_API_KEY = "OBSERVER_JUDGE_API_KEY"
"""API key sent to the LLM-as-judge endpoint."""

HF_OFFLINE = "HF_HUB_OFFLINE"
"""Set to 1 by the observer before loading any embedding model: nothing is ever fetched from a hub."""
