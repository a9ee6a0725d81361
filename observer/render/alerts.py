"""`observer render alerts`: Prometheus rule file, its promtool tests, and the PrometheusRule CR.

A pure function of the config (style rule 4); observer.render.writer writes the files.
"""

from __future__ import annotations

from dataclasses import replace

from observer.config.spec import ObserverConfig
from observer.render.cost_rules import cost_group
from observer.render.dashboard_rules import dashboard_group
from observer.render.health_rules import leading_group, self_health_group
from observer.render.hygiene_rules import hygiene_group
from observer.render.objectives import Alerting, build_alerting
from observer.render.prometheusrule import prometheus_rule
from observer.render.promtool_tests import promtool_tests
from observer.render.rulemodel import Alert, Group, groups_data
from observer.render.slo_rules import slo_groups
from observer.render.yamltext import dump_yaml

RULES_FILE = "alerts/observer-rules.yaml"
TESTS_FILE = "alerts/observer-rules.test.yaml"
PROMETHEUS_RULE_FILE = "deploy/prometheusrule.yaml"


def rule_groups(config: ObserverConfig) -> list[Group]:
    """Every rule group the config asks for, in file order (dashboards read alert names from here): the
    dashboards' recorded rates, then the SLO, health, hygiene and cost groups."""
    dashboards = [dashboard_group(config)] if config.dashboards.enabled else []
    return dashboards + (_groups(build_alerting(config)) if config.slo.enabled else [])


def _groups(a: Alerting) -> list[Group]:
    groups = [*slo_groups(a), leading_group(a), self_health_group(a), hygiene_group(a), cost_group(a)]
    if not a.alert_labels and not a.alert_severity:
        return groups
    severity = dict(a.alert_severity)

    def routed(r: Alert) -> Alert:
        return replace(r, owner=(*a.alert_labels, *r.owner), severity=severity.get(r.name, r.severity))

    return [Group(g.name, tuple(routed(r) if isinstance(r, Alert) else r for r in g.rules)) for g in groups]


def render(config: ObserverConfig) -> dict[str, str]:
    """Rule file, promtool tests and PrometheusRule for `config` (path relative to the repo root → text)."""
    groups = rule_groups(config)
    if not groups:
        return {}
    a = build_alerting(config)
    rules = dump_yaml({"groups": groups_data(groups, a.runbook_base_url)})
    files = {RULES_FILE: rules, PROMETHEUS_RULE_FILE: dump_yaml(prometheus_rule(groups, a))}
    suites = promtool_tests(groups, rule_file=RULES_FILE.rsplit("/", 1)[1], base_url=a.runbook_base_url)
    for i, suite in enumerate(suites.values()):
        files[TESTS_FILE if i == 0 else TESTS_FILE.replace(".test.", f".test-{i + 1}.")] = dump_yaml(suite)
    return files

