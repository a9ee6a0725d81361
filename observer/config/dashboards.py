"""Generated Grafana dashboards. Owned by that area; the root config includes it."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from observer.config.base import Spec

_UID = re.compile(r"^[A-Za-z0-9_-]{1,30}$")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")
_NAME = r"[a-z0-9A-Z]([a-z0-9A-Z._-]{0,61}[a-z0-9A-Z])?"
_LABEL_KEY = re.compile(rf"^({_NAME}/)?{_NAME}$")


class DashboardsSpec(Spec):
    """Generated Grafana dashboards."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    datasource_name: str = Field(
        "Prometheus", min_length=1,
        description="Name of the Prometheus datasource selected by default in the `datasource` variable.",
    )
    datasource_uid: str | None = Field(
        None, description="Uid of that datasource, when known; default: Grafana resolves it by name.",
    )
    datasource_regex: str = Field(
        "", description="Regex restricting which Prometheus datasources the `datasource` variable offers.",
    )
    uid_prefix: str = Field("observer-", description="Prefix of every dashboard uid (uid ≤ 40 characters).")
    title_prefix: str = Field("Observer / ", description="Prefix of every dashboard title.")
    tags: list[str] = Field(default_factory=lambda: ["observer", "llm"], min_length=1,
                            description="Tags on every dashboard; the first one links the dashboards together.")
    refresh: str = Field("30s", description="Auto-refresh interval (a Grafana duration such as 30s, 1m).")
    time_from: str = Field("now-3h", description="Default start of the time range.")
    folder: str = Field("Observer", min_length=1, description="Grafana folder the sidecar files them into.")
    output_dir: str = Field("dashboards", description="Where the dashboard JSON files are written (repo-relative).")
    configmap_dir: str = Field("deploy/grafana", description="Where the provisioning ConfigMaps are written.")
    configmap_namespace: str = Field("monitoring", description="Namespace of the dashboard ConfigMaps.")
    configmap_labels: dict[str, str] = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="Labels the Grafana sidecar selects ConfigMaps by (kube-prometheus-stack: grafana_dashboard).",
    )
    folder_annotation: str = Field(
        "grafana_folder", description="Annotation key carrying `folder` (the sidecar's folderAnnotation).",
    )

    @field_validator("uid_prefix")
    @classmethod
    def _uid_prefix(cls, v: str) -> str:
        if v and not _UID.match(v):
            raise ValueError(f"uid_prefix {v!r} must match {_UID.pattern} (Grafana uids are short, URL-safe)")
        return v

    @field_validator("refresh")
    @classmethod
    def _refresh(cls, v: str) -> str:
        if v and not _DURATION.match(v):
            raise ValueError(f"refresh {v!r} is not a Grafana duration such as 30s or 1m (empty: no refresh)")
        return v

    @field_validator("configmap_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_KEY.match(key):
                raise ValueError(f"configmap label key {key!r} is not a valid Kubernetes label key")
        return v
