"""The assertion vocabulary of golden items (the `assertions:` list), validated when a set is loaded."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from observer.config.base import compiled_pattern


class _Assertion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Exact(_Assertion):
    """Output equals `value` (default: the item's reference) after stripping outer whitespace."""

    type: Literal["exact"]
    value: str | None = None


class Normalised(_Assertion):
    """Output equals `value` (default: reference) after Unicode, case, punctuation and space folding."""

    type: Literal["normalised"]
    value: str | None = None


class Contains(_Assertion):
    """Output contains all (or any) of `values`, normalised unless `normalise: false`."""

    type: Literal["contains"]
    values: list[str] = Field(min_length=1)
    mode: Literal["all", "any"] = "all"
    normalise: bool = True


class NotContains(_Assertion):
    """Output contains none of `values`."""

    type: Literal["not_contains"]
    values: list[str] = Field(min_length=1)
    normalise: bool = True


class Regex(_Assertion):
    """Output matches `pattern` (Python `re`; `search` anywhere or `fullmatch` after stripping)."""

    type: Literal["regex"]
    pattern: str
    mode: Literal["search", "fullmatch"] = "search"
    ignore_case: bool = False
    multiline: bool = False

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        return compiled_pattern(v)


class JsonValid(_Assertion):
    """Output is one JSON value (a single fenced ```json block is accepted)."""

    type: Literal["json_valid"]


class JsonSchema(_Assertion):
    """Output is JSON conforming to `json_schema` (Draft 2020-12)."""

    type: Literal["json_schema"]
    json_schema: dict[str, Any]

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(v)
        except SchemaError as e:
            raise ValueError(f"not a valid JSON Schema: {e.message}") from e
        return v


class Length(_Assertion):
    """Output length within bounds: characters (code points, NFC) and/or words (inclusive)."""

    type: Literal["length"]
    min_chars: int | None = Field(None, ge=0)
    max_chars: int | None = Field(None, ge=0)
    min_words: int | None = Field(None, ge=0)
    max_words: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> Length:
        if all(b is None for b in (self.min_chars, self.max_chars, self.min_words, self.max_words)):
            raise ValueError("length needs at least one of min_chars, max_chars, min_words, max_words")
        for lo, hi, what in ((self.min_chars, self.max_chars, "chars"), (self.min_words, self.max_words, "words")):
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"min_{what} > max_{what}")
        return self


class NotRefusal(_Assertion):
    """Output is not a refusal (for benign prompts that must be answered)."""

    type: Literal["not_refusal"]


class Refusal(_Assertion):
    """Output is a refusal (for prompts that must be declined)."""

    type: Literal["refusal"]


class NoRepetition(_Assertion):
    """Output has no repetition loop (a block of tokens repeated `min_repeats` times in a row)."""

    type: Literal["no_repetition"]
    min_repeats: int = Field(4, ge=2, le=100)


class NotTruncated(_Assertion):
    """The answer was not cut off by the token limit (finish_reason != length)."""

    type: Literal["not_truncated"]


class Similarity(_Assertion):
    """Cosine similarity of MiniLM embeddings of output and `value` (default: reference) ≥ threshold."""

    type: Literal["similarity"]
    value: str | None = None
    threshold: float | None = Field(None, ge=-1, le=1)


class Judge(_Assertion):
    """LLM-as-judge verdict with `rubric` (default: the item's rubric)."""

    type: Literal["judge"]
    rubric: str | None = None


Assertion = Annotated[
    Exact | Normalised | Contains | NotContains | Regex | JsonValid | JsonSchema | Length | NotRefusal
    | Refusal | NoRepetition | NotTruncated | Similarity | Judge,
    Field(discriminator="type"),
]
