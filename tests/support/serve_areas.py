"""`python -m tests.support.serve_areas CONFIG [AREA ...]`: an observer Service with only some areas, in its
own process, on config.server's port — what the durability tests kill with SIGKILL and the benchmarks load.

`spawn(config, areas)` starts it (stdout and stderr discarded unless asked for) and returns the process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def _serve(config_path: str, areas: Sequence[str]) -> None:
    import uvicorn

    from observer.config import load_config
    from observer.service import Service

    config = load_config(config_path)
    service = Service.build(config, areas=list(areas) or None)  # type: ignore[arg-type]
    await service.start()
    server = uvicorn.Server(uvicorn.Config(service.app, host="127.0.0.1", port=config.server.port,
                                           log_level="warning", lifespan="off", access_log=False))
    try:
        await server.serve()
    finally:
        await service.stop()


def spawn(config: Path, areas: Sequence[str] = ("sample",), *, stderr: int | None = subprocess.DEVNULL,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the observer of `config` with `areas` in a child process."""
    return subprocess.Popen([sys.executable, "-m", "tests.support.serve_areas", str(config), *areas], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=stderr)


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2:]))
