"""The observer's error hierarchy. Each error is defined once; HTTP mapping lives in export.errors."""

from __future__ import annotations


class ObserverError(Exception):
    """Base of every error the observer raises on purpose."""


class ConfigError(ObserverError, ValueError):
    """The configuration is invalid; carries the dotted field path and, when known, the YAML line."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None, source: str = "") -> None:
        self.detail = message
        self.path = path
        self.line = line
        self.source = source
        where = source or "config"
        if line is not None:
            where = f"{where}:{line}"
        prefix = f"{where}: {path}: " if path else f"{where}: "
        super().__init__(prefix + message)


class ParseError(ObserverError, ValueError):
    """A metrics exposition could not be parsed; carries the 1-based line number."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class NotFoundError(ObserverError, LookupError):
    """A named thing (a version's report, a baseline) does not exist (yet)."""


class SampleLimitError(ParseError):
    """An exposition has more samples (or models) than a target may bring; parsing stopped there."""


class StoreError(ObserverError):
    """The sample store cannot be opened, migrated or written."""


class JudgeError(ObserverError):
    """An LLM judge call produced no usable verdict (never a pass or a fail)."""

    def __init__(self, message: str, *, reason: str) -> None:
        self.reason = reason
        super().__init__(message)


class BaselineError(ObserverError):
    """A drift baseline is missing, tampered with, or incompatible with the current embedder."""


class MissingDependencyError(ObserverError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"{package} is not installed: install it with `pip install 'observer[{extra}]'`")
