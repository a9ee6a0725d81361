"""Where the sidecar proxy's version comes from in a Rollout's pod: a label of the pod, read from the
downward API's `labels` file, and re-read, because Argo relabels pods at promotion and the kubelet rewrites
the file (an environment variable would keep the old value)."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from observer.config.fleet import VERSION_NAME
from observer.conventions.labels import POD_ROLE_LABEL
from observer.errors import ConfigError
from observer.sample.proxy import ProxyApp

log = logging.getLogger("observer.proxy")
_LINE = re.compile(r'^([^=\s]+)="((?:[^"\\]|\\.)*)"$')
ROLE_LABEL = POD_ROLE_LABEL


def parse_labels(text: str) -> dict[str, str]:
    """The kubelet's downward-API labels file: one `key="value"` per line, value with Go-escaped quotes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
    return out


@dataclass
class VersionFile:
    """Where the proxy's version comes from in a Rollout's pod: a label of the pod, via the downward API."""

    path: Path
    label: str = "rollouts-pod-template-hash"
    prefix: str = ""
    refresh_seconds: float = 5.0

    def read(self) -> tuple[str, str | None]:
        """(version, role); ConfigError naming the file and the label when it cannot be read."""
        try:
            labels = parse_labels(self.path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read the pod's labels from {self.path}: {e.strerror} (mount the "
                              "downward API: volumes[].downwardAPI.items[].fieldRef.fieldPath: "
                              "metadata.labels)") from e
        value = labels.get(self.label)
        if not value:
            raise ConfigError(f"the pod has no label {self.label!r} in {self.path} (labels: "
                              f"{', '.join(sorted(labels)) or 'none'})")
        version = f"{self.prefix}{value}"
        if not VERSION_NAME.match(version):
            raise ConfigError(f"label {self.label}={value!r} does not make a valid version name "
                              f"({VERSION_NAME.pattern})")
        return version, labels.get(ROLE_LABEL)

    async def follow(self, app: ProxyApp, role: str | None) -> None:
        """Re-read every `refresh_seconds`; a changed version applies to the next request's sample."""
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                version, new_role = self.read()
            except ConfigError as e:
                log.warning("keeping version %s: %s", app.version, e)
                continue
            if version != app.version or new_role != role:
                log.info("pod labels changed: version %s → %s, role %s → %s", app.version, version, role,
                         new_role)
                app.version, role = version, new_role
