"""Typed configuration: the YAML spec and its loader."""

from observer.config.load import load_config, parse_config
from observer.config.spec import ObserverConfig

__all__ = ["ObserverConfig", "load_config", "parse_config"]
