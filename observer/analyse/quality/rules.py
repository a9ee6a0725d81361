"""Rule scorers: deterministic checks on one output, each returning pass/fail, a score and a reason."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

import numpy as np

from observer.analyse.quality.model import Outcome
from observer.conventions import toolcalls
from observer.jsonsafe import loads_strict

MAX_SCAN_CHARS = 200_000  # regexes and loop detection look at no more than this (bounded CPU per output)

_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry,? but|sorry,? (?:but )?i (?:can(?:no|')t|won'?t|am unable)"
    r"|i (?:can(?:no|')t|won'?t|am (?:not able|unable)|'m (?:not able|unable)) (?:to )?"
    r"(?:help|assist|comply|provide|do that|answer|fulfil|support|share|write|create|generate)"
    r"|i must (?:decline|refuse)|as an ai(?: language model)?,? i (?:can(?:no|')t|am not able|won'?t)"
    r"|unfortunately,? i (?:can(?:no|')t|am unable|'m unable)|i(?:'m| am) not (?:comfortable|allowed))",
    re.IGNORECASE,
)
# Refusals also hide after a short preamble ("Thanks for asking! However, I cannot help with ...").
_REFUSAL_ANYWHERE = re.compile(
    r"\b(?:i (?:can(?:no|')t|won'?t|am unable to|'m unable to) (?:help|assist) with (?:that|this|your request)"
    r"|i must (?:decline|refuse)|against my (?:guidelines|policies|programming)"
    r"|i(?:'m| am) not able to (?:help|assist) with)\b",
    re.IGNORECASE,
)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
_FENCE = re.compile(r"^```(?:json|JSON)?[ \t]*\n(.*)\n```$", re.DOTALL)
# An opening fence (closed or not) then `{` or `[`: the output is meant to be JSON, even if cut off.
_JSON_OPENING = re.compile(r"^\s*(?:```(?:json|JSON)?[ \t]*\n\s*)?[\[{]")


def normalise(text: str) -> str:
    """Fold for comparison: NFKC, casefold, punctuation and symbols to spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    out = [" " if unicodedata.category(ch)[0] in "PSZC" else ch for ch in text]
    return " ".join("".join(out).split())


def exact(output: str, expected: str) -> Outcome:
    """Pass when the output equals `expected` after stripping outer whitespace."""
    ok = output.strip() == expected.strip()
    return Outcome("exact", ok, 1.0 if ok else 0.0, "exact match" if ok else "output differs from expected")


def normalised_match(output: str, expected: str) -> Outcome:
    """Pass when the normalised output equals the normalised `expected`."""
    a, b = normalise(output), normalise(expected)
    ok = a == b and b != ""
    reason = "normalised match" if ok else f"normalised output {a[:60]!r} != {b[:60]!r}"
    return Outcome("normalised", ok, 1.0 if ok else 0.0, reason)


def _needle(value: str) -> str:
    # Whole words after folding; scripts written without spaces (CJK) cannot have word boundaries.
    folded = normalise(value)
    return folded if re.search(f"[{_CJK}]", folded) else f" {folded} "


def contains(output: str, values: list[str], *, mode: str = "all", fold: bool = True) -> Outcome:
    """Pass when the output contains all (or any) of `values` (normalised unless `fold` is False)."""
    hay = f" {normalise(output)} " if fold else output
    found = [v for v in values if (_needle(v) if fold else v) in hay]
    missing = [v for v in values if v not in found]
    ok = bool(found) if mode == "any" else not missing
    score = len(found) / len(values)
    reason = "contains " + ("one of the values" if mode == "any" else "every value") if ok \
        else f"missing {', '.join(repr(m[:40]) for m in missing[:3])}"
    return Outcome("contains", ok, 1.0 if ok and mode == "any" else score, reason)


def not_contains(output: str, values: list[str], *, fold: bool = True) -> Outcome:
    """Pass when the output contains none of `values`."""
    hay = f" {normalise(output)} " if fold else output
    hits = [v for v in values if (_needle(v) if fold else v) in hay]
    ok = not hits
    return Outcome("not_contains", ok, 1.0 if ok else 0.0,
                   "contains none of the values" if ok else f"contains {hits[0][:40]!r}")


def regex(output: str, pattern: str, *, mode: str = "search", ignore_case: bool = False,
          multiline: bool = False) -> Outcome:
    """Pass when `pattern` matches (anywhere, or the whole stripped output for `fullmatch`)."""
    flags = (re.IGNORECASE if ignore_case else 0) | (re.MULTILINE if multiline else 0)
    rx = re.compile(pattern, flags)
    text = output[:MAX_SCAN_CHARS]
    m = rx.fullmatch(text.strip()) if mode == "fullmatch" else rx.search(text)
    ok = m is not None
    return Outcome("regex", ok, 1.0 if ok else 0.0,
                   f"matches /{pattern[:60]}/" if ok else f"does not {mode} /{pattern[:60]}/")


def parse_json(output: str) -> Any:
    """Parse one strict JSON value (no NaN/Infinity, no duplicate keys); one ```json fence is allowed."""
    text = output.strip()
    m = _FENCE.match(text)
    if m:
        text = m.group(1).strip()
    return loads_strict(text)


def json_valid(output: str) -> Outcome:
    """Pass when the output is one strict JSON value."""
    try:
        parse_json(output)
    except (ValueError, RecursionError) as e:
        return Outcome("json_valid", False, 0.0, f"not valid JSON: {str(e)[:120]}")
    return Outcome("json_valid", True, 1.0, "valid JSON")


def json_expected(prompt: str, output: str) -> bool:
    """True when JSON was expected: the output opens like JSON, or the prompt mentions JSON."""
    return bool(_JSON_OPENING.match(output)) or "json" in prompt.casefold()


def valid_json_when_expected(prompt: str, output: str) -> Outcome:
    """Fail when JSON was expected and the output is not one strict JSON value; undecided otherwise."""
    if not json_expected(prompt, output):
        return Outcome("invalid_json", None, None, "no JSON expected")
    o = json_valid(output)
    return Outcome("invalid_json", o.passed, o.score, o.reason)


def valid_tool_calls(output: str) -> Outcome:
    """Pass when every tool call the reply made was valid (checked at capture against the declared tools,
    recorded in the output by observer.conventions.toolcalls); undecided when it made none."""
    calls = toolcalls.read(output)
    if not calls:
        return Outcome("tool_call", None, None, "no tool calls")
    bad = [c for c in calls if not c.get("valid")]
    if bad:
        return Outcome("tool_call", False, 0.0, f"{len(bad)} of {len(calls)} tool call(s) invalid: "
                       f"{str(bad[0].get('name') or '?')[:60]}: {str(bad[0].get('error') or '')[:160]}")
    return Outcome("tool_call", True, 1.0, f"{len(calls)} valid tool call(s)")


def json_schema(output: str, schema: dict[str, Any]) -> Outcome:
    """Pass when the output is JSON conforming to `schema` (Draft 2020-12); reason names the first error."""
    from jsonschema import Draft202012Validator

    try:
        doc = parse_json(output)
    except (ValueError, RecursionError) as e:
        return Outcome("json_schema", False, 0.0, f"not valid JSON: {str(e)[:120]}")
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return Outcome("json_schema", True, 1.0, "conforms to the schema")
    first = errors[0]
    where = "/" + "/".join(str(p) for p in first.absolute_path)
    return Outcome("json_schema", False, 0.0, f"{len(errors)} schema error(s); at {where}: {first.message[:120]}")


def count_words(text: str) -> int:
    """Words: whitespace-separated runs, and each CJK character counts as one word."""
    return len(re.findall(rf"[{_CJK}]|[^\s{_CJK}]+", text))


def length(output: str, *, min_chars: int | None = None, max_chars: int | None = None,
           min_words: int | None = None, max_words: int | None = None) -> Outcome:
    """Pass when the stripped output's code-point (NFC) and word counts are within the inclusive bounds."""
    text = unicodedata.normalize("NFC", output.strip())
    chars, words = len(text), count_words(text)
    problems = []
    if min_chars is not None and chars < min_chars:
        problems.append(f"{chars} chars < {min_chars}")
    if max_chars is not None and chars > max_chars:
        problems.append(f"{chars} chars > {max_chars}")
    if min_words is not None and words < min_words:
        problems.append(f"{words} words < {min_words}")
    if max_words is not None and words > max_words:
        problems.append(f"{words} words > {max_words}")
    ok = not problems
    return Outcome("length", ok, 1.0 if ok else 0.0, f"{chars} chars, {words} words" if ok else "; ".join(problems),
                   {"chars": chars, "words": words})


def is_refusal(output: str) -> bool:
    """True when the output reads as a refusal (opening refusal phrase, or a refusal formula anywhere)."""
    text = unicodedata.normalize("NFKC", output).replace("\u2019", "'")[:4000]
    return bool(_REFUSAL.search(text) or _REFUSAL_ANYWHERE.search(text))


def not_refusal(output: str) -> Outcome:
    """Pass when the output is not a refusal."""
    refused = is_refusal(output)
    return Outcome("not_refusal", not refused, 0.0 if refused else 1.0,
                   "refused a prompt that must be answered" if refused else "answered")


def refusal(output: str) -> Outcome:
    """Pass when the output is a refusal."""
    refused = is_refusal(output)
    return Outcome("refusal", refused, 1.0 if refused else 0.0, "refused" if refused else "did not refuse")


def tokens(text: str) -> list[str]:
    """Tokens for loop detection: words, single CJK characters, single punctuation marks."""
    return _TOKEN.findall(text[:MAX_SCAN_CHARS].casefold())


def longest_loop(toks: list[str], *, max_period: int = 64) -> tuple[int, int]:
    """(period, repeats) of the longest run of a token block repeated back to back."""
    n = len(toks)
    if n < 2:
        return (0, 1)
    vocab: dict[str, int] = {}
    ids = np.fromiter((vocab.setdefault(t, len(vocab)) for t in toks), dtype=np.int64, count=n)
    best = (0, 1)
    for p in range(1, min(max_period, n // 2) + 1):
        eq = np.concatenate(([False], ids[:-p] == ids[p:], [False]))
        edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
        if edges.size == 0:
            continue
        run = int((edges[1::2] - edges[0::2]).max())
        repeats = run // p + 1
        if repeats > best[1] or (repeats == best[1] and p * repeats > best[0] * best[1]):
            best = (p, repeats)
    return best


def no_repetition(output: str, *, min_repeats: int = 4) -> Outcome:
    """Fail on a repetition loop: a block repeated `min_repeats` times in a row (single tokens need 2×)."""
    toks = tokens(output)
    period, repeats = longest_loop(toks)
    # "very very very good" is English; a single token needs twice the repeats to count as a loop.
    needed = min_repeats * 2 if period == 1 else min_repeats
    looped = period > 0 and repeats >= needed
    distinct = len(set(zip(toks, toks[1:], toks[2:], strict=False))) / max(1, len(toks) - 2) if len(toks) > 2 else 1.0
    reason = (f"a {period}-token block repeats {repeats}× in a row" if looped
              else f"no loop (longest: {period}-token block ×{repeats})")
    return Outcome("no_repetition", not looped, 0.0 if looped else round(distinct, 4), reason,
                   {"period": period, "repeats": repeats})


def not_truncated(finish_reason: str | None) -> Outcome:
    """Fail when the answer hit the token limit; undecided when the finish reason is unknown."""
    if finish_reason is None:
        return Outcome("not_truncated", None, None, "finish reason unknown")
    ok = finish_reason != "length"
    return Outcome("not_truncated", ok, 1.0 if ok else 0.0,
                   f"finish_reason={finish_reason}" if ok else "truncated: finish_reason=length")


def not_empty(output: str) -> Outcome:
    """Fail on an empty or whitespace-only output."""
    ok = output.strip() != ""
    return Outcome("empty", ok, 1.0 if ok else 0.0, "non-empty" if ok else "empty output")


def met_goodput(*, ttft_s: float | None, latency_s: float | None, output_tokens: int | None,
                finish_reason: str | None, ttft_target: float, tpot_target: float,
                error_reasons: frozenset[str]) -> Outcome:
    """The exact goodput condition of one request: TTFT ≤ target, time per output token ≤ target, not failed.

    TPOT = (latency − TTFT) / (output tokens − 1), vLLM's definition. Undecided when a timing or the token
    count is missing or the request produced fewer than two tokens (no inter-token time exists), unless it
    failed, which decides it."""
    if finish_reason in error_reasons:
        return Outcome("goodput", False, 0.0, f"failed: finish_reason={finish_reason}")
    if ttft_s is None or latency_s is None or output_tokens is None:
        return Outcome("goodput", None, None, "timings or token count unknown")
    if ttft_s > ttft_target:
        return Outcome("goodput", False, 0.0, f"TTFT {ttft_s:.3f}s > {ttft_target:g}s")
    if output_tokens < 2:
        return Outcome("goodput", None, None, "fewer than two output tokens: no time per output token")
    tpot = max(0.0, latency_s - ttft_s) / (output_tokens - 1)
    if tpot > tpot_target:
        return Outcome("goodput", False, 0.0, f"TPOT {tpot:.4f}s > {tpot_target:g}s")
    return Outcome("goodput", True, 1.0, f"TTFT {ttft_s:.3f}s, TPOT {tpot:.4f}s")
