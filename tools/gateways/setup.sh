#!/usr/bin/env bash
# The LiteLLM proxy, a gateway users run in front of vLLM, in its own virtualenv under an ignored cache
# folder: the LiteLLM callback's tests and bench/gateways.py start it as a real process. Idempotent: a
# second run with the same pin takes a second. Called by `make setup` (and so by `make test`).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HOME_DIR="${OBSERVER_LITELLM_HOME:-$ROOT/.cache/litellm}"
PY="${PY:-python3}"
# 1.106.12: the newest whose `proxy` extra installs from PyPI alone (later ones need litellm-proxy-extras
# builds that are not published there).
PIN="litellm[proxy]==1.106.12"
STAMP="$HOME_DIR/READY"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$PIN" ]]; then
  echo "LiteLLM ready in $HOME_DIR"
  exit 0
fi
mkdir -p "$HOME_DIR"
rm -f "$STAMP"
t0=$(date +%s)
[[ -x "$HOME_DIR/venv/bin/python" ]] || "$PY" -m venv "$HOME_DIR/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$HOME_DIR/venv/bin/python" -m pip install -q "$PIN"
echo "$PIN" > "$STAMP"
echo "LiteLLM installed in $HOME_DIR in $(( $(date +%s) - t0 )) s"
