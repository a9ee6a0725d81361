"""The Helm chart's generated parts (deploy/helm/observer): its values schema, whose `config` is the observer's
own config model, and the artefacts the chart installs from `files/` — the PrometheusRule, the dashboards and
the Argo templates, rendered from the same config as deploy/. Pure: config in, {path: text} out.

The chart's templates are hand-written and small; everything that follows from the config is generated here,
so the chart cannot drift from `observer render` (`--check` covers these files too).
"""

from __future__ import annotations

import json
from typing import Any

from observer.config.sources import SOURCES
from observer.config.spec import ObserverConfig
from observer.render import alerts, argo
from observer.render.yamltext import dump_yaml

CHART = "deploy/helm/observer"
MODES = ("central", "single", "sidecar")


def _strip_defaults(node: Any) -> Any:
    """The model's JSON schema without `default`s: some name files where the package was installed, which
    differ from machine to machine and say nothing a values file needs validated."""
    if isinstance(node, dict):
        return {k: _strip_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [_strip_defaults(v) for v in node]
    return node


def _obj(properties: dict[str, Any], *, required: tuple[str, ...] = (), description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _bool(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_SECRET = _obj({"existingSecret": _str("Secret name (created outside the chart)."),
                "key": _str("Key in the Secret.", minLength=1)}, required=("existingSecret", "key"))


def values_schema() -> dict[str, Any]:
    """values.schema.json: unknown keys, wrong types and impossible combinations fail `helm lint` and
    `helm template` with the key path; `config` is validated as the observer validates its config file."""
    config = _strip_defaults(ObserverConfig.model_json_schema())
    defs = config.pop("$defs", {})
    config["description"] = "The observer's config (observer.yaml), as `observer check-config` reads it."
    resources = {"type": "object"}
    properties: dict[str, Any] = {
        "mode": {"enum": list(MODES), "description": "central: Deployment of `replicas` sharing PostgreSQL; "
                                                    "single: one replica on SQLite; sidecar: a vLLM Deployment "
                                                    "with the sampling proxy beside vLLM."},
        "nameOverride": _str("Replaces the chart name in object names."),
        "fullnameOverride": _str("Replaces the release-derived name of every object."),
        "image": _obj({"repository": _str("Image repository.", minLength=1),
                       "tag": _str("Image tag; empty: the chart's appVersion."),
                       "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}}, required=("repository",)),
        "logFormat": {"enum": ["json", "text"], "description": "The observer's and the proxy's log lines: json (one "
                                                               "object per line, with trace ids) or text."},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10,
                     "description": "central: replicas sharing the store (one leads); single is always 1."},
        "auth": _SECRET | {"description": "The bearer token of the private routes (ingest, admin, the report's "
                                          "private route): a Secret key, never a value."},
        "postgres": _SECRET | {"description": "central: the sample store's URL (postgresql://…) from a Secret."},
        "conversations": _obj({"existingSecret": _str("Secret holding the HMAC key of conversation keys (empty: "
                                                      "none; drift then tests time slices)."),
                               "key": _str("Key in the Secret.", minLength=1)},
                              description="The conversation-key secret (OBSERVER_CONVERSATION_SECRET) of the "
                                          "observer and the sidecars alike, so one conversation gets one key "
                                          "everywhere (docs/sampling.md, \"Conversation keys\")."),
        "persistence": _obj({"enabled": _bool("A PersistentVolumeClaim at /data (baselines; SQLite in single "
                                              "mode); off: an emptyDir."),
                             "size": _str("Requested size.", minLength=1),
                             "accessModes": {"type": "array", "items": {"enum": ["ReadWriteOnce", "ReadWriteMany",
                                                                                 "ReadWriteOncePod"]},
                                             "description": "Empty: ReadWriteMany (central), ReadWriteOnce (single)."},
                             "storageClassName": _str("Empty: the cluster's default class.")}),
        "resources": resources,
        "podSecurityContext": {"type": "object"},
        "nodeSelector": _LABELS,
        "tolerations": {"type": "array"},
        "affinity": {"type": "object"},
        "service": _obj({"port": {"type": "integer", "minimum": 1, "maximum": 65535}}),
        "serviceAccount": _obj({"create": _bool("Create the ServiceAccount."),
                                "name": _str("Its name; empty: the release's full name.")}),
        "rbac": _obj({"create": _bool("Read-only Roles for each discovery source the config enables: pods "
                                      "(and Rollouts, autoscalers) where the models run, pods where "
                                      "dcgm-exporter runs.")}),
        "serviceMonitor": _obj({"enabled": _bool("A ServiceMonitor for the observer's /metrics."),
                                "interval": _str("Scrape interval.", pattern="^[0-9]+(ms|s|m|h)$"),
                                "labels": _LABELS}),
        "prometheusRule": _obj({"enabled": _bool("The generated burn-rate and health rules."),
                                "labels": _LABELS}),
        "dashboards": _obj({"enabled": _bool("The generated dashboards as ConfigMaps for Grafana's sidecar."),
                            "namespace": _str("Where Grafana's sidecar looks; empty: the release namespace."),
                            "labels": _LABELS, "folder": _str("Grafana folder (the sidecar's annotation).")}),
        "argo": _obj({"enabled": _bool("The generated Argo Rollouts analysis templates."),
                      "cluster": _bool("ClusterAnalysisTemplates instead of namespaced AnalysisTemplates."),
                      "namespace": _str("Namespace of the Rollouts (namespaced templates).", minLength=1)}),
        "sidecar": _obj({
            "upstream": _str("vLLM's address inside the pod, e.g. http://127.0.0.1:8000 (required in sidecar "
                             "mode)."),
            "version": _str("The version the pods serve (the `version` label of their samples)."),
            "role": {"enum": ["stable", "canary", "other"], "description": "The version's role."},
            "listenPort": {"type": "integer", "minimum": 1, "maximum": 65535},
            "replicas": {"type": "integer", "minimum": 1},
            "vllm": _obj({"image": _str("vLLM image.", minLength=1),
                          "servedModelName": _str("--served-model-name.", minLength=1),
                          "modelClaim": _str("A ReadOnlyMany claim holding one directory per revision.",
                                             minLength=1),
                          "modelRevision": _str("The directory of the pinned revision under the claim.",
                                                minLength=1),
                          "gpus": {"type": "integer", "minimum": 1},
                          "startupSeconds": {"type": "integer", "minimum": 60},
                          "drainSeconds": {"type": "integer", "minimum": 0},
                          "resources": resources,
                          "nodeSelector": _LABELS | {"description": "GPU nodes (default: GPU feature discovery's "
                                                                    "nvidia.com/gpu.present)."},
                          "tolerations": {"type": "array", "description": "Default: the nvidia.com/gpu taint."},
                          "spreadAcrossNodes": _bool("A soft topology spread of the pods across nodes."),
                          "maxUnavailable": {"type": ["integer", "string", "null"], "pattern": "^[0-9]+%$",
                                             "description": "The PodDisruptionBudget's maxUnavailable (a count "
                                                            "or a percentage); null: no budget."}}),
            "config": {"$ref": "#/$defs/ObserverConfig",
                       "description": "The sampling proxy's own config (sidecar mode)."}}),
        "config": {"$ref": "#/$defs/ObserverConfig"},
    }
    schema: dict[str, Any] = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "observer chart values",
        "type": "object",
        "additionalProperties": False,
        "required": ["mode", "image", "auth", "config"],
        "properties": properties,
        "allOf": [
            {"if": {"properties": {"mode": {"const": "sidecar"}}},
             "then": {"required": ["sidecar"],
                      "properties": {"sidecar": {"required": ["upstream", "version"],
                                                 "properties": {"upstream": {"minLength": 1,
                                                                             "pattern": "^https?://"},
                                                                "version": {"minLength": 1}}}}}},
            {"if": {"properties": {"mode": {"const": "central"}}},
             "then": {"required": ["postgres"],
                      "properties": {"postgres": {"properties": {"existingSecret": {"minLength": 1}}}}}},
        ],
        "$defs": {**defs, "ObserverConfig": config},
    }
    return schema


def sources_rbac() -> dict[str, Any]:
    """files/sources.yaml: each rollout source's read rules, in the rows' order, for templates/rbac.yaml to
    grant exactly what the config's models are read from (observer.config.sources), and the rules actor mode
    adds for a model whose `primitive.act` is set."""
    return {"order": [s.key for s in SOURCES], "rules": {s.key: s.rules() for s in SOURCES},
            "acts": {s.key: s.act_rules() for s in SOURCES if s.acts}}


def chart_files(config: ObserverConfig) -> dict[str, str]:
    """What the chart installs from `files/`: the PrometheusRule's groups, one JSON file per dashboard, and
    the Argo templates (namespaced; the chart turns them into cluster-scoped ones on request)."""
    out: dict[str, str] = {}
    rule = alerts.render(config).get(alerts.PROMETHEUS_RULE_FILE)
    if rule is not None:
        out[f"{CHART}/files/prometheusrule.yaml"] = rule
    if config.dashboards.enabled:
        from observer.render import dashboards  # the `render` extra

        prefix = config.dashboards.output_dir.rstrip("/") + "/"
        for path, text in dashboards.render(config).items():
            if path.startswith(prefix) and path.endswith(".json"):
                out[f"{CHART}/files/dashboards/{path[len(prefix):]}"] = text
    if config.canary.enabled:
        for template in argo.templates(config, cluster=False):
            out[f"{CHART}/files/argo/{template['metadata']['name']}.yaml"] = dump_yaml(template)
    return out


def render(config: ObserverConfig) -> dict[str, str]:
    """The chart's generated files for `config`."""
    files = chart_files(config)
    files[f"{CHART}/files/sources.yaml"] = dump_yaml(sources_rbac())
    files[f"{CHART}/values.schema.json"] = json.dumps(values_schema(), indent=2, sort_keys=True)
    return files
