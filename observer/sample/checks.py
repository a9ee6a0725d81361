"""The sampling section's one validation (what `observer check-config` reports and the sampling build calls):
per-version overrides name fleet versions, and every in-process proxy has an upstream to forward to."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.sample.podlabels import VersionFile
from observer.sample.proxy import default_upstream

log = logging.getLogger("observer.proxy")


def check_versions(config: ObserverConfig) -> None:
    """Refuse sampling overrides for versions the fleet does not define."""
    fleet = {v.name for v in config.fleet.versions}
    for name in config.sampling.versions:
        if name not in fleet:
            raise ConfigError(f"version {name!r} is not in fleet.versions ({sorted(fleet)})",
                              path=f"sampling.versions.{name}")


def proxy_upstream(config: ObserverConfig, version: str) -> str:
    """Where the proxy of `version` forwards: the override, else the version's OpenAI server root."""
    override = config.sampling.versions.get(version)
    if override is not None and override.upstream:
        return override.upstream
    try:
        upstream = default_upstream(config.fleet.version(version).openai)
    except KeyError as e:
        raise ConfigError(f"unknown version {version!r}", path="fleet.versions") from e
    if upstream is None:
        raise ConfigError(f"version {version!r} has no openai URL: set it or sampling.versions.{version}.upstream",
                          path=f"sampling.versions.{version}.upstream")
    return upstream


def shared_upstream(config: ObserverConfig, version: str) -> dict[str, str]:
    """The other versions served at `version`'s OpenAI URL under their own model names (LoRA adapters on the
    same pods), by model name: its proxy gives their requests to them."""
    own = next((v for v in config.fleet.versions if v.name == version), None)
    if own is None or own.openai is None:
        return {}
    return {v.model: v.name for v in config.fleet.versions
            if v.name != version and v.model and v.openai == own.openai and v.model != own.model}


def validate(config: ObserverConfig) -> None:
    """Refuse what building the sampling area would refuse; nothing when sampling is off."""
    if not config.sampling.enabled:
        return
    check_versions(config)
    for name, override in config.sampling.versions.items():
        if override.listen:
            proxy_upstream(config, name)


@dataclass(frozen=True)
class ProxyTarget:
    """What one sidecar proxy serves: its version, where it listens, where it forwards."""

    version: str
    role: str | None  # read from the pod's labels with --version-from
    host: str
    port: str
    upstream: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def proxy_target(config: ObserverConfig, *, version: str | None, version_file: VersionFile | None,
                 listen: str | None, upstream: str | None) -> ProxyTarget:
    """Resolve `observer proxy`'s version (given, or read from the pod's labels), listen address and upstream;
    ConfigError naming the option or key that is missing or wrong."""
    check_versions(config)
    spec = config.sampling
    names = [v.name for v in config.fleet.versions]
    role: str | None = None
    if version_file is not None and version is None:
        version, role = version_file.read()
        log.info("version %s (role %s) from the pod's labels in %s", version, role, version_file.path)
        if upstream is None and version not in names:
            raise ConfigError("--version-from needs --upstream (the vLLM server in this pod, e.g. "
                              "http://127.0.0.1:8000)")
    elif version is None or version_file is not None:
        raise ConfigError("pass exactly one of --version and --version-from")
    elif version not in names:
        raise ConfigError(f"unknown version {version!r}; configured: {names}", path="fleet.versions")
    override = spec.versions.get(version)
    address = listen or (override.listen if override is not None and override.listen else spec.proxy.listen)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listen address {address!r} must be HOST:PORT", path="sampling.proxy.listen")
    return ProxyTarget(version=version, role=role, host=host, port=port,
                       upstream=upstream or proxy_upstream(config, version))
