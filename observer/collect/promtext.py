"""Parser of the Prometheus text exposition format (0.0.4) and the OpenMetrics text subset vLLM emits.

Written for the scrape path: one pass over the lines with `str` methods and two compiled regular
expressions, no per-character loop. `bench/scrape.py` compares it with prometheus_client's parser on the
same payload. Any malformed line raises ParseError with its 1-based line number; nothing else escapes.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from typing import NamedTuple

from observer.errors import ParseError, SampleLimitError

Labels = tuple[tuple[str, str], ...]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# name, optional {labels}, value, optional timestamp. Greedy `.*` up to the last `}`: label values may
# contain braces, but nothing after the label set can.
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,|$)')
_ESCAPES = re.compile(r"\\(.)")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset",
                    "gaugehistogram"})
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
}
_SPECIAL_VALUES = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan,
                   "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class Sample(NamedTuple):
    """One sample line: full sample name (e.g. `vllm:x_bucket`), sorted labels, value."""

    name: str
    labels: Labels
    value: float


@dataclass
class Family:
    """A metric family: name as given on # TYPE (or the sample name when untyped), type, help, samples."""

    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[Sample] = field(default_factory=list)


def _key(name: str) -> str:
    # `vllm:x` and `vllm_x` are one family: prometheus_client rewrites ':' to '_' in OpenMetrics sample
    # lines while keeping the ':' on # TYPE (client_python#1177).
    return name.replace(":", "_")


def _unescape(value: str) -> str:
    return _ESCAPES.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _value(text: str, lineno: int) -> float:
    special = _SPECIAL_VALUES.get(text)
    if special is not None:
        return special
    if "_" in text:  # Python's float() accepts "1_000"; the exposition format does not
        raise ParseError(f"invalid sample value {text!r}", line=lineno)
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"invalid sample value {text!r}", line=lineno) from None


_LABEL_CACHE: dict[str, Labels] = {}
_LABEL_CACHE_MAX = 50_000
"""Label sets repeat from scrape to scrape (same series, new values): parse each text once. Bounded:
cleared when full, so a target with churning label values cannot grow it without limit."""


def _labels_cached(text: str, lineno: int) -> Labels:
    labels = _LABEL_CACHE.get(text)
    if labels is None:
        labels = _labels(text, lineno)
        if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
            _LABEL_CACHE.clear()
        _LABEL_CACHE[text] = labels
    return labels


def _labels(text: str, lineno: int) -> Labels:
    if not text.strip():
        return ()
    out: list[tuple[str, str]] = []
    pos, end = 0, len(text)
    while pos < end:
        m = _LABEL.match(text, pos)
        if m is None:
            raise ParseError(f"malformed label set {{{text[:80]}}}", line=lineno)
        value = m.group(2)
        out.append((m.group(1), _unescape(value) if "\\" in value else value))
        pos = m.end()
        if m.group(3) == "" and pos < end:
            raise ParseError(f"malformed label set {{{text[:80]}}}", line=lineno)
    if len({k for k, _ in out}) != len(out):
        raise ParseError("duplicate label name", line=lineno)
    out.sort()
    return tuple(out)


class _Builder:
    """Accumulates families, joining each sample to the family its name belongs to."""

    def __init__(self) -> None:
        self.families: list[Family] = []
        self.by_key: dict[str, Family] = {}
        self.current: Family | None = None

    def family(self, name: str, lineno: int) -> Family:
        if not _METRIC_NAME.fullmatch(name):
            raise ParseError(f"invalid metric name {name!r}", line=lineno)
        key = _key(name)
        fam = self.by_key.get(key)
        if fam is None:
            fam = Family(name=name)
            self.families.append(fam)
            self.by_key[key] = fam
        self.current = fam
        return fam

    def owner(self, sample_name: str) -> Family:
        cur = self.current
        if cur is not None:
            # Fast path: the sample belongs to the family just declared (the usual layout).
            cname = cur.name
            if sample_name == cname or (sample_name.startswith(cname)
                                        and sample_name[len(cname):] in _SUFFIXES.get(cur.type, ())):
                return cur
            ckey = _key(cname)
            key = _key(sample_name)
            if key == ckey or (key.startswith(ckey) and key[len(ckey):] in _SUFFIXES.get(cur.type, ())):
                return cur
        else:
            key = _key(sample_name)
        fam = self.by_key.get(key)
        if fam is not None and fam.type not in ("histogram", "summary", "gaugehistogram"):
            return fam
        for suffix in ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info"):
            if key.endswith(suffix):
                parent = self.by_key.get(key[: -len(suffix)])
                if parent is not None and suffix in _SUFFIXES.get(parent.type, ()):
                    return parent
        if fam is not None:
            return fam
        fam = Family(name=sample_name)
        self.families.append(fam)
        self.by_key[key] = fam
        return fam


def _sample_lines_at_most(text: str) -> int:
    """An upper bound on the sample lines of `text`: its lines minus comment lines and (some) blank ones."""
    return text.count("\n") + 1 - text.count("\n#") - (text[:1] == "#") - text.count("\n\n")


def parse(text: str, *, max_samples: int | None = None) -> list[Family]:
    """Parse an exposition body; raise ParseError naming the first bad line, and SampleLimitError as soon
    as it holds more than `max_samples` samples (parsing stops there: the limit bounds time and memory)."""
    b = _Builder()
    limit = max_samples if max_samples is not None else sys.maxsize
    n = 0
    sample_re = _SAMPLE.fullmatch
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if max_samples is not None and _sample_lines_at_most(text) > limit:
        # Far over the limit: said in milliseconds (str.count runs in C), not after seconds of parsing that
        # hold the GIL against every other target's scrape.
        raise SampleLimitError(f"more than {max_samples} sample lines (scrape.max_samples_per_target)")
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line or line.isspace():
            continue
        if line[0] == "#":
            parts = line.split(None, 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                if len(parts) < 3:
                    raise ParseError(f"# {parts[1]} without a metric name", line=lineno)
                fam = b.family(parts[2], lineno)
                rest = parts[3] if len(parts) > 3 else ""
                if parts[1] == "TYPE":
                    kind = rest.strip()
                    if kind not in _TYPES:
                        raise ParseError(f"unknown metric type {kind!r}", line=lineno)
                    if fam.samples and fam.type != kind:
                        raise ParseError(f"# TYPE for {fam.name} after its samples", line=lineno)
                    fam.type = "untyped" if kind == "unknown" else kind
                else:
                    fam.help = _unescape(rest) if "\\" in rest else rest
            elif len(parts) >= 2 and parts[1] == "EOF":
                break
            continue
        m = sample_re(line)
        if m is None:
            raise ParseError(f"malformed sample line {line[:120]!r}", line=lineno)
        name, labels_text, value_text, ts = m.groups()
        labels = _labels_cached(labels_text, lineno) if labels_text else ()
        value = _value(value_text, lineno)
        if ts is not None:
            _value(ts, lineno)  # validated, then dropped: the observer stamps samples with scrape time
        b.owner(name).samples.append(Sample(name, labels, value))
        n += 1
        if n > limit:
            raise SampleLimitError(f"more than {max_samples} samples (scrape.max_samples_per_target)",
                                   line=lineno)
    return b.families
