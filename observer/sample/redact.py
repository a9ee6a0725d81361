"""Redaction of personal data and secrets before storage: typed placeholders like `<EMAIL>`, counted by kind.

Patterns are tuned against false positives (ordinary numbers, versions, dates, times): a card number
must pass the Luhn check, an IP address must parse, a phone number needs a phone-like shape.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from observer.config.sampling import BUILTIN_REDACTIONS

Check = Callable[[str], bool]


def luhn_ok(digits: str) -> bool:
    """True when the digit string passes the Luhn checksum (payment card numbers do)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _card(match: str) -> bool:
    digits = re.sub(r"[ -]", "", match)
    return 13 <= len(digits) <= 19 and luhn_ok(digits)


def _ip(match: str) -> bool:
    try:
        ipaddress.ip_address(match)
    except ValueError:
        return False
    return True


def _ipv6(match: str) -> bool:
    # Fewer than three groups ("::2" in a slice, "12::30") is far more often something else, and
    # loopback / link-local shorthands identify nobody.
    groups = [g for g in re.split(r":+", match) if g]
    return (len(groups) >= 3 or "." in match) and _ip(match)


@dataclass(frozen=True)
class Rule:
    """One redaction kind: a pattern, an optional validator of each match, and its placeholder."""

    kind: str
    pattern: re.Pattern[str]
    check: Check | None = None
    hint: str | None = None  # the text cannot match unless it contains this (a cheap pre-filter)

    @property
    def placeholder(self) -> str:
        return f"<{self.kind.upper()}>"


_HEX = r"[0-9A-Fa-f]"
BUILTIN_RULES: Mapping[str, Rule] = {
    "api_key": Rule("api_key", re.compile(
        r"(?<![\w-])(?:"
        r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic
        r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
        r"|gh[pousr]_[A-Za-z0-9]{36,}"  # GitHub
        r"|github_pat_[A-Za-z0-9_]{40,}"
        r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
        r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
        r"|AIza[0-9A-Za-z_-]{35}"  # Google
        r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
        r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
        r")(?![\w-])")),
    "bearer_token": Rule("bearer_token", re.compile(
        r"(?<=\bBearer )[A-Za-z0-9\-._~+/]{16,}=*", re.IGNORECASE), hint=None),
    "email": Rule("email", re.compile(
        r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
        r"[A-Za-z]{2,24}(?![\w-])"), hint="@"),
    "ipv6": Rule("ipv6", re.compile(
        rf"(?<![\w:.])(?:{_HEX}{{0,4}}:){{2,7}}(?:{_HEX}{{1,4}}|(?:\d{{1,3}}\.){{3}}\d{{1,3}})?(?![\w:.])"),
        check=_ipv6, hint=":"),
    "ipv4": Rule("ipv4", re.compile(
        r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
        r"(?![\w]|\.\d)"), check=_ip, hint="."),
    "card": Rule("card", re.compile(r"(?<![\w.-])\d(?:[ -]?\d){12,18}(?![\w-]|\.\d)"), check=_card),
    "phone": Rule("phone", re.compile(
        r"(?<![\w+.-])(?:"
        r"\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,4}(?:[ .-]?\d{2,4}){1,4}"  # +44 20 7946 0958
        r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}"  # (555) 123-4567
        r"|\d{3}[.-]\d{3}[.-]\d{4}"  # 555-123-4567, 555.123.4567
        r"|\d{3} \d{3} \d{4}"  # 555 123 4567
        r")(?![\w-]|\.\d)"), check=lambda m: 7 <= sum(c.isdigit() for c in m) <= 15),
}


@dataclass(frozen=True)
class Redaction:
    """Redacted text and how many matches of each kind were replaced."""

    text: str
    counts: Mapping[str, int]


class Redactor:
    """Applies the configured rules in order; placeholders contain no digits, so later rules skip them."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.kinds = tuple(r.kind for r in self.rules)

    @classmethod
    def build(cls, *, kinds: Sequence[str] = BUILTIN_REDACTIONS, patterns: Mapping[str, str] | None = None
              ) -> Redactor:
        """A redactor with the named built-in kinds (in built-in order), then the user patterns."""
        rules = [BUILTIN_RULES[k] for k in BUILTIN_REDACTIONS if k in kinds]
        rules.extend(Rule(name, re.compile(rx)) for name, rx in (patterns or {}).items())
        return cls(rules)

    def redact(self, text: str) -> Redaction:
        """Replace every match with its typed placeholder."""
        counts: Counter[str] = Counter()
        for rule in self.rules:
            if rule.hint is not None and rule.hint not in text:
                continue
            text = rule.pattern.sub(_replacer(rule, counts), text)
        return Redaction(text, counts)


def _replacer(rule: Rule, counts: Counter[str]) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        found = m.group(0)
        if rule.check is not None and not rule.check(found):
            return found
        counts[rule.kind] += 1
        return rule.placeholder

    return replace
