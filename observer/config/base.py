"""The base of every config spec model: strict (unknown keys refused), immutable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo


class Spec(BaseModel):
    """A section of the YAML config. Unknown keys are refused; instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def compiled_pattern(pattern: str, what: str = "pattern") -> str:
    """`pattern` unchanged if it compiles as a Python regular expression, else ValueError naming `what`."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{what} does not compile ({pattern!r}): {e}") from e
    return pattern


SHIPPED = Path(__file__).resolve().parents[1] / "resources"
"""What the package ships beside its code: the example golden sets (`golden_sets/`), the judge's prompts and
rubrics (`evals/`). Defaults point here, by absolute path, so an install runs from any working directory."""

CONFIG_DIR = "config_dir"
"""Validation-context key: the directory of the config file being read (set by `load_config`)."""


def _against_config_dir(value: str, info: ValidationInfo) -> str:
    base = info.context.get(CONFIG_DIR) if isinstance(info.context, dict) else None
    if base is None or not value or Path(value).is_absolute():
        return value
    return str(Path(base) / value)


FilePath = Annotated[str, AfterValidator(_against_config_dir)]
"""A file or directory the config names for the observer to read (golden sets, prompts, rubrics, credentials).
Relative to the config file's directory when the config is read from a file (a ConfigMap mounted at
/etc/observer finds /etc/observer/golden_sets), never to the directory the process happens to start in; given
in code, it is left as it is. State the observer writes (sample store, baselines, embedding cache) is not a
FilePath: it stays relative to the working directory, the data directory (/data in the image)."""


def shipped(*parts: str) -> str:
    """The absolute path of a file the package ships (a default of a FilePath field)."""
    return str(SHIPPED.joinpath(*parts))
