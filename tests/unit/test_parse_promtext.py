"""The exposition parser: format details, precise errors, and property-based fuzzing."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from observer.collect.promtext import parse
from observer.errors import ParseError, SampleLimitError


def test_escapes_braces_and_timestamps() -> None:
    fams = parse(
        '# HELP a_total Help with \\\\ and \\n.\n# TYPE a_total counter\n'
        'a_total{x="q\\"uo}te",y="line\\nbreak",z="back\\\\slash",} 1.5e3 1700000000000\n'
    )
    (fam,) = fams
    assert fam.type == "counter" and fam.help == "Help with \\ and \n."
    (s,) = fam.samples
    assert dict(s.labels) == {"x": 'q"uo}te', "y": "line\nbreak", "z": "back\\slash"}
    assert s.value == 1500.0


@pytest.mark.parametrize("text,value", [("NaN", math.nan), ("+Inf", math.inf), ("-Inf", -math.inf),
                                        ("-0.5", -0.5), ("1e-3", 0.001)])
def test_special_values(text: str, value: float) -> None:
    (fam,) = parse(f"m {text}\n")
    got = fam.samples[0].value
    assert (math.isnan(got) and math.isnan(value)) or got == value


def test_histogram_samples_join_their_family_and_crlf_is_tolerated() -> None:
    fams = parse("# TYPE h histogram\r\nh_bucket{le=\"1\"} 1\r\nh_bucket{le=\"+Inf\"} 2\r\nh_count 2\r\nh_sum 3\r\n")
    assert [f.name for f in fams] == ["h"] and len(fams[0].samples) == 4


@pytest.mark.parametrize("line,needle", [
    ("metric{a=\"1\" 2", "malformed"),
    ("metric{a=1} 2", "malformed label set"),
    ("metric{a=\"1\",a=\"2\"} 2", "duplicate label"),
    ("metric 1_000", "invalid sample value"),
    ("metric abc", "invalid sample value"),
    ("metric 1 notatime", "invalid sample value"),
    ("9metric 1", "malformed sample line"),
    ("# TYPE metric flavour", "unknown metric type"),
    ("# TYPE", "without a metric name"),
    ("metric", "malformed sample line"),
])
def test_malformed_lines_name_the_line(line: str, needle: str) -> None:
    with pytest.raises(ParseError) as e:
        parse("ok 1\n# comment\n" + line + "\n")
    assert e.value.line == 3
    assert needle in str(e.value) and "line 3" in str(e.value)


def test_type_after_samples_is_refused() -> None:
    with pytest.raises(ParseError, match="after its samples"):
        parse("m 1\n# TYPE m gauge\n")


def test_eof_stops_parsing() -> None:
    assert [f.name for f in parse("a 1\n# EOF\nnot a valid line at all\n")] == ["a"]


# ---- Fuzzing: any input parses or raises ParseError, nothing else; valid input matches prometheus_client.

@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(alphabet=st.sampled_from(list('abc_:{}=",# \n\\.0123456789+-eInfNa\t\r')), max_size=300))
def test_fuzz_never_crashes(text: str) -> None:
    with contextlib.suppress(ParseError):
        parse(text)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_bytes_never_crash(data: bytes) -> None:
    with contextlib.suppress(ParseError):
        parse(data.decode("utf-8", errors="replace"))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(lambda n: not n.endswith(
    ("_total", "_created", "_bucket", "_count", "_sum", "_info", "_gsum", "_gcount")))
_label_values = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_values = st.floats(allow_nan=False, width=64)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_names, st.lists(st.tuples(st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), _label_values, max_size=3), _values),
    min_size=1, max_size=4), min_size=1, max_size=5))
def test_fuzz_valid_expositions_agree_with_prometheus_client(spec: dict) -> None:  # type: ignore[type-arg]
    lines = []
    for name, samples in spec.items():
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {value!r}")
    text = "\n".join(lines) + "\n"
    ours = {(f.name, s.name, s.labels, s.value) for f in parse(text) for s in f.samples}
    theirs = {(f.name, s.name, tuple(sorted(s.labels.items())), s.value)
              for f in text_string_to_metric_families(text) for s in f.samples}
    assert ours == theirs


def test_a_body_far_over_the_sample_limit_is_refused_before_parsing_and_comments_do_not_count() -> None:
    over = "".join(f'a{{b="{i}"}} 1\n' for i in range(300_000))
    t0 = time.perf_counter()
    with pytest.raises(SampleLimitError, match="more than 1000 sample lines"):
        parse(over, max_samples=1000)
    assert time.perf_counter() - t0 < 0.5  # the line loop takes seconds on this body
    # Comment and blank lines are not samples: 5,000 of them beside 10 samples stay under a limit of 100.
    text = "".join(f"# HELP x{i} help\n\n" for i in range(5_000)) + "".join(f"s{i} 1\n" for i in range(10))
    assert sum(len(f.samples) for f in parse(text, max_samples=100)) == 10
