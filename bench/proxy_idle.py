"""What an idle `observer proxy` costs: CPU a second with no traffic, against nginx beside it.

    .venv/bin/python -m bench.proxy_idle               # ~40 s
    .venv/bin/python -m bench.proxy_idle --seconds 60

Both run in front of the constant-delay upstream (tests/support/constant_upstream.py), get a few requests to
open their connections and fill a sampling window, then nothing for `--seconds`: the CPU each process spent
in that time (the kernel's per-process CPU clock), per second. The last line is JSON:
`observer_idle_cpu_ms_per_s`, `nginx_idle_cpu_ms_per_s`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import httpx

from tests.support import gateways as gw

ROOT = Path(__file__).resolve().parents[1]

WINDOW_SECONDS = 10.0  # sampling.reservoir.window_seconds's default, which `observer proxy` runs with here
BODY = {"model": "stable", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="idle time measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with gw.constant_upstream(workdir) as up, gw.observer_proxy(workdir, up.url) as proxy, \
                gw.nginx(workdir, up.url) as nginx:
            for url in (proxy.url, nginx.url):
                for _ in range(20):
                    httpx.post(url + "/v1/chat/completions", json=BODY, timeout=10).raise_for_status()
            time.sleep(WINDOW_SECONDS + 2.0)  # the sampling window closes and is written: nothing is left to do
            c0 = {"observer": proxy.cpu_seconds(), "nginx": nginx.cpu_seconds()}
            time.sleep(args.seconds)
            c1 = {"observer": proxy.cpu_seconds(), "nginx": nginx.cpu_seconds()}
    per_s = {name: round((c1[name] - c0[name]) * 1000.0 / args.seconds, 4) for name in c0}
    print(f"idle CPU over {args.seconds:g} s: observer proxy {per_s['observer']} ms/s, nginx {per_s['nginx']} ms/s")
    print(json.dumps({"observer_idle_cpu_ms_per_s": per_s["observer"], "nginx_idle_cpu_ms_per_s": per_s["nginx"],
                      "seconds": args.seconds}))


if __name__ == "__main__":
    main()
