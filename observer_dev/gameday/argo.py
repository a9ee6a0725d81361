"""Argo Rollouts' measurement semantics, emulated case by case for the game day and the table tests.

A scripted stand-in for the Argo controller (no cluster runs here). It follows argo-rollouts v1.9.1:

* `utils/evaluate/evaluate.go` `EvalCondition`: the condition is *compiled* with the measured value in
  the environment (`expr.Compile(condition, expr.Env(env), expr.AsBool())`), so a type mismatch anywhere
  in the expression — `result == "pass"` on a bool, `len(result)` on a scalar — is a compile error and the
  measurement is `Error`, even in a branch `&&` would skip. At run time `&&`/`||` short-circuit, and an
  index past the end of the vector is a run-time error (`Error`).
* `EvaluateResult`: failure wins; with both conditions set and neither true the phase is `Inconclusive`;
  with only a success condition, false is `Failed`; with only a failure condition, false is `Successful`.
* `metricproviders/webmetric/webmetric.go` `parseResponse` (v1.9.1, around lines 132–136, and still in
  v1.10.0-rc1): a 2xx body that is not JSON, or an empty body, is `Successful` *without evaluating any
  condition*. Master (PR #4770, commit 07c75035e, unreleased) evaluates the conditions on the body as a
  string instead: pass `master=True`. A JSONPath that finds nothing is `Error`; the value found is passed as
  is (a string, a bool, a number, null or an object — no float/bool coercion since Argo v0.10), and
  `getValue` stores it, `json.Marshal`led, as the measurement's value (`web_value`). A non-2xx answer is
  `Error`.
* An object's fields are read with `result.field` (expr's member access on `map[string]any`: a missing key
  is nil; on a string or a number it does not compile; on nil it fails at run time).
* The Prometheus provider passes a vector as a list of floats (`[]` when empty) and a scalar as a float.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from observer.errors import ObserverError


class Phase(StrEnum):
    """An Argo measurement or analysis-run phase."""

    SUCCESSFUL = "Successful"
    FAILED = "Failed"
    INCONCLUSIVE = "Inconclusive"
    ERROR = "Error"


class ArgoError(ObserverError):
    """The condition does not compile for this value, or fails at run time (Argo: phase Error)."""


# --- the expression subset the rendered templates use ---------------------------------------------

_TOKEN = re.compile(r'\s*(?:(\d+(?:\.\d+)?)|("(?:[^"\\]|\\.)*")|(&&|\|\||==|!=|<=|>=|[<>!()\[\],.-])|([A-Za-z_]\w*))')


@dataclass(frozen=True)
class _Node:
    op: str
    args: tuple[Any, ...] = ()


def _tokens(expr: str) -> list[str]:
    out: list[str] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ArgoError(f"syntax error at {expr[pos:pos + 10]!r}")
        out.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, expr: str) -> None:
        self.toks = _tokens(expr)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise ArgoError(f"syntax error: expected {want or 'a token'}, got {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> _Node:
        node = self.or_()
        if self.peek() is not None:
            raise ArgoError(f"syntax error: unexpected {self.peek()!r}")
        return node

    def or_(self) -> _Node:
        node = self.and_()
        while self.peek() == "||":
            self.take()
            node = _Node("||", (node, self.and_()))
        return node

    def and_(self) -> _Node:
        node = self.unary()
        while self.peek() == "&&":
            self.take()
            node = _Node("&&", (node, self.unary()))
        return node

    def unary(self) -> _Node:
        if self.peek() == "!":
            self.take()
            return _Node("!", (self.unary(),))
        return self.compare()

    def compare(self) -> _Node:
        node = self.primary()
        if self.peek() in ("==", "!=", "<", "<=", ">", ">="):
            op = self.take()
            node = _Node(op, (node, self.primary()))
        return node

    def primary(self) -> _Node:
        tok = self.take()
        if tok == "(":
            node = self.or_()
            self.take(")")
        elif tok == "-":
            node = _Node("neg", (self.primary(),))
        elif tok[0].isdigit():
            node = _Node("num", (float(tok),))
        elif tok.startswith('"'):
            node = _Node("str", (json.loads(tok),))
        elif tok in ("true", "false"):
            node = _Node("bool", (tok == "true",))
        elif tok == "nil":
            node = _Node("nil")
        elif tok in ("len", "isNaN"):
            self.take("(")
            arg = self.or_()
            self.take(")")
            node = _Node(tok, (arg,))
        elif tok == "result":
            node = _Node("result")
        else:
            raise ArgoError(f"unknown name {tok!r}")
        while self.peek() in ("[", "."):
            if self.take() == ".":
                field = self.take()
                if not (field[0].isalpha() or field[0] == "_"):
                    raise ArgoError(f"syntax error: expected a field name after '.', got {field!r}")
                node = _Node("member", (node, field))
                continue
            index = self.or_()
            self.take("]")
            node = _Node("index", (node, index))
        return node


# Static types, as expr infers them from the environment: "any" is an untyped value (JSON null).
_NUMERIC = ("num", "any")


def _type_of(value: Any) -> str:
    if value is None:
        return "any"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "num"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, dict):
        return "map"
    raise ArgoError(f"unsupported result type {type(value).__name__}")


def _check(node: _Node, result_type: str) -> str:
    """The node's static type; ArgoError where expr's compiler would refuse the expression."""
    op, args = node.op, node.args
    if op in ("num", "str", "bool"):
        return {"num": "num", "str": "str", "bool": "bool"}[op]
    if op == "nil":
        return "any"
    if op == "result":
        return result_type
    if op == "neg":
        if _check(args[0], result_type) not in _NUMERIC:
            raise ArgoError("invalid operation: - on a non-number")
        return "num"
    if op == "len":
        if _check(args[0], result_type) not in ("list", "str", "any"):
            raise ArgoError("invalid argument for len")
        return "num"
    if op == "isNaN":
        if _check(args[0], result_type) not in _NUMERIC:
            raise ArgoError("isNaN takes a number")
        return "bool"
    if op == "member":
        base = _check(args[0], result_type)
        if base not in ("map", "any"):
            raise ArgoError(f"type {base} has no field {args[1]}")
        return "any"
    if op == "index":
        base, index = _check(args[0], result_type), _check(args[1], result_type)
        if base not in ("list", "any") or index not in _NUMERIC:
            raise ArgoError(f"cannot index a {base}")
        return "num" if base == "list" else "any"
    if op == "!":
        if _check(args[0], result_type) not in ("bool", "any"):
            raise ArgoError("invalid operation: ! on a non-bool")
        return "bool"
    if op in ("&&", "||"):
        for a in args:
            if _check(a, result_type) not in ("bool", "any"):
                raise ArgoError(f"invalid operation: {op} on a non-bool")
        return "bool"
    left, right = _check(args[0], result_type), _check(args[1], result_type)
    if op in ("==", "!="):
        if "any" not in (left, right) and left != right:
            raise ArgoError(f"invalid operation: {op} (mismatched types {left} and {right})")
        return "bool"
    if left not in _NUMERIC or right not in _NUMERIC:
        raise ArgoError(f"invalid operation: {op} (mismatched types {left} and {right})")
    return "bool"


def _eval(node: _Node, result: Any) -> Any:
    op, args = node.op, node.args
    if op in ("num", "str", "bool"):
        return args[0]
    if op == "nil":
        return None
    if op == "result":
        return result
    if op == "neg":
        return -_eval(args[0], result)
    if op == "len":
        return len(_eval(args[0], result))
    if op == "isNaN":
        x = _eval(args[0], result)
        return isinstance(x, float) and math.isnan(x)
    if op == "member":
        base = _eval(args[0], result)
        if not isinstance(base, dict):
            raise ArgoError(f"cannot fetch {args[1]} from {base!r}")
        return base.get(args[1])
    if op == "index":
        base, index = _eval(args[0], result), _eval(args[1], result)
        if not isinstance(base, list | tuple) or not 0 <= int(index) < len(base):
            raise ArgoError(f"index out of range: {index}")
        return base[int(index)]
    if op == "!":
        return not _eval(args[0], result)
    if op == "&&":
        return bool(_eval(args[0], result)) and bool(_eval(args[1], result))
    if op == "||":
        return bool(_eval(args[0], result)) or bool(_eval(args[1], result))
    left, right = _eval(args[0], result), _eval(args[1], result)
    if op == "==":
        return left == right if None not in (left, right) else left is right
    if op == "!=":
        return left != right if None not in (left, right) else left is not right
    if left is None or right is None:
        raise ArgoError(f"invalid operation: {op} on nil")
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def evaluate_condition(expr: str, result: Any) -> bool:
    """Compile `expr` against `result`'s type, then run it (ArgoError where Argo's would fail)."""
    tree = _Parser(expr).parse()
    if _check(tree, _type_of(result)) not in ("bool", "any"):
        raise ArgoError("expected bool")
    return bool(_eval(tree, result))


def measurement_phase(success: str | None, failure: str | None, result: Any) -> Phase:
    """EvaluateResult: the phase of one measurement whose value is `result`."""
    try:
        succeeded = success is not None and evaluate_condition(success, result)
        failed = failure is not None and evaluate_condition(failure, result)
    except ArgoError:
        return Phase.ERROR
    if success is not None and failure is None:
        failed = not succeeded
    elif success is None and failure is not None:
        succeeded = not failed
    elif success is None and failure is None:
        return Phase.SUCCESSFUL
    if failed:
        return Phase.FAILED
    if not succeeded:
        return Phase.INCONCLUSIVE
    return Phase.SUCCESSFUL


MISSING = object()
"""A JSONPath that found nothing."""


def json_path(body: Any, path: str) -> Any:
    """The value at a `{$.a.b}` JSONPath, or MISSING."""
    key = path.strip().removeprefix("{").removesuffix("}").removeprefix("$").removeprefix(".")
    value = body
    for part in filter(None, key.split(".")):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def web_measurement(success: str | None, failure: str | None, *, status: int, body: bytes, path: str,
                    master: bool = False) -> Phase:
    """The web provider's phase for one HTTP answer (v1.9.1 unless `master`)."""
    if not 200 <= status < 300:
        return Phase.ERROR
    try:
        data = json.loads(body) if body.strip() else MISSING
    except ValueError:
        data = MISSING
    if data is MISSING:  # webmetric.go: not JSON, or empty
        if not master:
            return Phase.SUCCESSFUL
        return measurement_phase(success, failure, body.decode("utf-8", "replace"))
    value = json_path(data, path)
    if value is MISSING:
        return Phase.ERROR
    return measurement_phase(success, failure, value)


def web_value(body: bytes, path: str) -> str:
    """The measurement's value Argo stores for a 2xx JSON answer (`getValue`: the JSONPath's value,
    `json.Marshal`led: object keys sorted, `<`, `>`, `&` escaped); "" where it stores none."""
    try:
        value = json_path(json.loads(body), path)
    except ValueError:
        return ""
    if value is MISSING:
        return ""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def prometheus_value(result: Sequence[Any] | float) -> list[float] | float:
    """The Prometheus provider's value: a vector's sample values as floats, or the scalar."""
    if isinstance(result, int | float):
        return float(result)
    return [float(x) for x in result]


_ORDER = {Phase.SUCCESSFUL: 0, Phase.INCONCLUSIVE: 1, Phase.ERROR: 2, Phase.FAILED: 3}


def run_phase(phases: Iterable[Phase]) -> Phase:
    """An analysis run is only as good as its worst metric."""
    return max(phases, key=_ORDER.__getitem__, default=Phase.SUCCESSFUL)
