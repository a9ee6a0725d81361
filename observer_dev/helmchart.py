"""The Helm chart (deploy/helm/observer) rendered by Helm's own engine, and the kustomize tree generated from it.

Helm runs in-process through `helm-python-sdk` (Helm v4's Go library, `libhelm_c.so`, from PyPI): no `helm`
binary, no cluster, no network. The chart is the one source of the central install's workload objects;
deploy/k8s/central holds them rendered from the chart's `central` profile with Helm's bookkeeping labels and
the config checksum taken off (kustomize's configMapGenerator names the config by its hash instead), so the
two installs cannot drift:

    python -m observer_dev.helmchart kustomize            # write deploy/k8s/central/*.yaml
    python -m observer_dev.helmchart kustomize --check    # exit 1 naming the files that differ
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "observer"
PROFILES = CHART / "ci"
RELEASE = "observer"
NAMESPACE = "observability"
KUSTOMIZE = ROOT / "deploy" / "k8s" / "central"

HELM_ONLY_LABELS = ("app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart")
CHECKSUM = "checksum/config"

# deploy/k8s/central/<file> ← the chart's objects of these kinds (the config comes from configMapGenerator).
KUSTOMIZE_FILES: dict[str, tuple[str, ...]] = {
    "serviceaccount.yaml": ("ServiceAccount",),
    "rbac.yaml": ("Role", "RoleBinding"),
    "pvc.yaml": ("PersistentVolumeClaim",),
    "deployment.yaml": ("Deployment",),
    "service.yaml": ("Service",),
    "servicemonitor.yaml": ("ServiceMonitor",),
}


def profile(name: str) -> dict[str, Any]:
    """The values of the documented profile `name` (ci/<name>-values.yaml)."""
    data: dict[str, Any] = yaml.safe_load((PROFILES / f"{name}-values.yaml").read_text()) or {}
    return data


def profiles() -> list[str]:
    return sorted(p.name.removesuffix("-values.yaml") for p in PROFILES.glob("*-values.yaml"))


def render(values: Mapping[str, Any] | None = None, *, chart: Path = CHART, release: str = RELEASE,
           namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Every object `helm template` gives for `values` (schema-checked by Helm; HelmValuesError names the key)."""
    import helm_python as helm

    with helm.Chart.load(chart) as c:
        out = c.render(values=dict(values or {}), name=release, namespace=namespace, is_install=True)
    return [doc for path, text in sorted(out.items()) if path.endswith((".yaml", ".yml"))
            for doc in yaml.safe_load_all(text) if doc]


def lint(values: Mapping[str, Any] | None = None, *, chart: Path = CHART) -> dict[str, Any]:
    import helm_python as helm

    result: dict[str, Any] = helm.lint(chart, dict(values or {}))
    return result


def _plain(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as kustomize keeps it: Helm's bookkeeping labels and the config checksum off."""
    def drop(meta: dict[str, Any]) -> None:
        for key in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(key, None)
        annotations = meta.get("annotations", {})
        annotations.pop(CHECKSUM, None)
        if "annotations" in meta and not annotations:
            del meta["annotations"]

    drop(obj["metadata"])
    template = obj.get("spec", {}).get("template")
    if isinstance(template, dict):
        drop(template["metadata"])
    return obj


def kustomize_files() -> dict[str, str]:
    """deploy/k8s/central's generated files, from the chart's central profile."""
    objs = [_plain(o) for o in render(profile("central"))]
    out: dict[str, str] = {}
    for name, kinds in KUSTOMIZE_FILES.items():
        chosen = [o for o in objs if o["kind"] in kinds]
        header = ("# generated from deploy/helm/observer (profile ci/central-values.yaml) by "
                  "`python -m observer_dev.helmchart kustomize` — do not edit\n")
        out[name] = header + "---\n".join(yaml.safe_dump(o, sort_keys=False, width=120) for o in chosen)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m observer_dev.helmchart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["kustomize"])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs")
    args = parser.parse_args(argv)
    differ = []
    for name, text in kustomize_files().items():
        path = KUSTOMIZE / name
        if path.exists() and path.read_text() == text:
            continue
        differ.append(name)
        if not args.check:
            path.write_text(text)
    if args.check and differ:
        print(f"differs from the chart: {', '.join(differ)}: run `python -m observer_dev.helmchart kustomize`",
              file=sys.stderr)
        return 1
    print(f"ok: deploy/k8s/central agrees with the chart ({len(KUSTOMIZE_FILES)} files)" if args.check
          else f"{len(differ)} written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
