"""Load the YAML config: line-aware errors, environment overrides, strict validation."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from observer import env
from observer.config.base import CONFIG_DIR
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError

LinePath = tuple[str | int, ...]


def _construct(node: yaml.Node, path: LinePath, lines: dict[LinePath, int]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            if key in out:
                raise ConfigError(f"duplicate key {key!r}", path=".".join(map(str, (*path, key))),
                                  line=key_node.start_mark.line + 1)
            out[str(key)] = _construct(value_node, (*path, str(key)), lines)
            lines[(*path, str(key))] = key_node.start_mark.line + 1  # errors point at the key
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*path, i), lines) for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def _apply_overrides(data: dict[str, Any], environ: Mapping[str, str]) -> list[str]:
    applied: list[str] = []
    for name, raw in sorted(environ.items()):
        if not name.startswith(env.OVERRIDE_PREFIX):
            continue
        keys = [k.lower() for k in name[len(env.OVERRIDE_PREFIX):].split("__") if k]
        if not keys:
            continue
        node: dict[str, Any] = data
        for key in keys[:-1]:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"environment override {name} descends into a non-mapping",
                                  path=".".join(keys), source="environment")
            node = child
        node[keys[-1]] = yaml.safe_load(raw) if raw != "" else None
        applied.append(name)
    return applied


def compose_yaml(text: str, *, source: str) -> tuple[Any, dict[LinePath, int]]:
    """Parse YAML into plain data plus the line of every key and item (by path); ConfigError on invalid
    YAML or a duplicate key. Shared by every YAML file the observer reads (config, golden sets)."""
    lines: dict[LinePath, int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", source=source,
                          line=None if mark is None else mark.line + 1) from e
    try:
        return ({} if root is None else _construct(root, (), lines)), lines
    except ConfigError as e:
        raise ConfigError(e.detail, path=e.path, line=e.line, source=source) from None


def parse_config(text: str, *, source: str = "config", environ: Mapping[str, str] | None = None,
                 config_dir: Path | None = None) -> ObserverConfig:
    """Validate YAML text into an ObserverConfig; errors name the key path and the line. Relative paths in it
    are resolved against `config_dir` (the config file's directory) when given."""
    data, lines = compose_yaml(text, source=source)
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping", source=source, line=1)
    overridden = _apply_overrides(data, os.environ if environ is None else environ)
    try:
        context = {CONFIG_DIR: config_dir} if config_dir is not None else None
        return ObserverConfig.model_validate(data, context=context)
    except ValidationError as e:
        err = e.errors()[0]
        loc: LinePath = tuple(err["loc"])
        # Pydantic appends model names for unions; keep the longest prefix that has a line.
        line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
        path = ".".join(str(p) for p in loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {str(loc[-1])!r}"
        more = f" (and {len(e.errors()) - 1} more error(s))" if len(e.errors()) > 1 else ""
        hint = f"; environment overrides applied: {', '.join(overridden)}" if overridden else ""
        raise ConfigError(msg + more + hint, path=path, line=line, source=source) from e


def load_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> ObserverConfig:
    """Read and validate the config file at `path`; relative paths in it are resolved against its directory."""
    # Not resolve(): a ConfigMap's file is a link into a hidden timestamped folder, and the paths beside it
    # (another ConfigMap mounted under /etc/observer) are where the link is, not where it points.
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"could not read config file: {e.strerror}", source=str(p)) from e
    return parse_config(text, source=str(p), environ=environ, config_dir=p.absolute().parent)
