"""Run a shipped workload's container the way the image and the kubelet run it, on this machine.

`image_venv` performs the Dockerfile's own install steps (its build-stage COPY list and its RUN line, with the
image's /opt/observer moved into a folder here), so a missing package-data file or console script fails here
as it would fail in the image. `start_container` runs one container of a rendered pod spec from that install:
its args and env, every volume it mounts laid out from the objects that define it (ConfigMaps, the downward
API's labels, empty volumes), an empty working directory where the image has /data, the image's non-root
user, and nothing of the repository beside it.

What differs from a pod, and why: a mount path is a folder here (no mount namespace), so arguments naming a
mount path are rewritten to that folder; ports and listen addresses move to free loopback ports (every pod has
its own network namespace; tests share one); what a cluster injects (the Secrets' values, the service
account's API server) is given by the caller as the Secrets' values and a kubeconfig override.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.prom import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
IMAGE_UID = 10001
IMAGE_PREFIX = "/opt/observer"


def _dockerfile_build_stage() -> tuple[list[str], str]:
    """The build stage's COPY sources and its RUN command (continuation lines joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    stage = text.split("\nFROM ", 2)[1]
    copies = [src for line in stage.splitlines() if line.startswith("COPY ")
              for src in line.split()[1:-1] if not src.startswith("--")]
    [run] = [line[4:] for line in stage.splitlines() if line.startswith("RUN ")]
    return copies, run


def image_venv(workdir: Path, *, extras: str = "") -> Path:
    """The image's /opt/observer, built here by the Dockerfile's own steps; returns its bin folder."""
    copies, run = _dockerfile_build_stage()
    src = workdir / "src"
    src.mkdir(parents=True)
    for name in copies:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    prefix = workdir / "opt-observer"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(EXTRAS=extras, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run(["bash", "-c", run.replace(IMAGE_PREFIX, str(prefix))], cwd=src, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the Dockerfile's install failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return prefix / "bin"


@dataclass
class Running:
    """A started container: its process, where its ports ended up, and what it printed so far."""

    proc: subprocess.Popen[bytes]
    ports: dict[str, int]  # container port name → the loopback port it listens on here
    log: Path
    probes: dict[str, dict[str, Any]]

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def url(self, port_name: str, path: str = "") -> str:
        return f"http://127.0.0.1:{self.ports[port_name]}{path}"


def _labels_file(labels: Mapping[str, str]) -> str:
    """The downward API's `metadata.labels` file: key="value" lines, sorted."""
    return "".join(f'{k}="{v}"\n' for k, v in sorted(labels.items()))


def _lay_out_volumes(pod: Mapping[str, Any], labels: Mapping[str, str], objects: list[dict[str, Any]],
                     root: Path) -> dict[str, Path]:
    """A folder per volume of the pod, filled as the kubelet fills it; volume name → folder."""
    configmaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    out: dict[str, Path] = {}
    for v in pod.get("volumes", []):
        folder = root / "volumes" / v["name"]
        folder.mkdir(parents=True)
        if "configMap" in v:
            name = v["configMap"]["name"]
            # kustomize's generator suffixes the name with its hash; the Deployment names it so already.
            cm = configmaps[name]
            for key, text in cm.get("data", {}).items():
                (folder / key).write_text(text)
        elif "downwardAPI" in v:
            for item in v["downwardAPI"]["items"]:
                assert item["fieldRef"]["fieldPath"] == "metadata.labels", item
                (folder / item["path"]).write_text(_labels_file(labels))
        else:  # emptyDir, a PersistentVolumeClaim: empty, owned by the pod's fsGroup
            os.chown(folder, IMAGE_UID, IMAGE_UID)
        out[v["name"]] = folder
    return out


def _in_urls(text: str, ports: Mapping[int, int]) -> str:
    """Loopback URLs in `text` sent to the ports they moved to."""
    for old, new in ports.items():
        text = re.sub(rf"(https?://(?:127\.0\.0\.1|localhost)):{old}\b", rf"\g<1>:{new}", text)
    return text


def _in_text(text: str, mounts: Mapping[str, Path], ports: Mapping[int, int]) -> str:
    for mount_path, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
        text = re.sub(rf"(?<![\w/.-]){re.escape(mount_path.rstrip('/'))}(?=/)", str(folder), text)
    return _in_urls(text, ports)


def _rewrite(text: str, mounts: Mapping[str, Path], ports: Mapping[int, int]) -> str:
    for mount_path, folder in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if text == mount_path or text.startswith(mount_path.rstrip("/") + "/"):
            text = str(folder) + text[len(mount_path.rstrip("/")):]
            break
    for old, new in ports.items():
        text = re.sub(rf"^(0\.0\.0\.0|127\.0\.0\.1|localhost)?:?{old}$", f"127.0.0.1:{new}", text)
    return _in_urls(text, ports)


@contextmanager
def start_container(bin_dir: Path, pod_owner: Mapping[str, Any], container: str, objects: list[dict[str, Any]],
                    *, secrets: Mapping[tuple[str, str], str], extra_env: Mapping[str, str] | None = None,
                    port_map: Mapping[int, int] | None = None) -> Iterator[Running]:
    """Start `container` of the workload `pod_owner` (a Deployment or Rollout) as the image would; stop it
    (and anything it started) on exit. `port_map` sends a port the container talks to (its upstream) to
    where that service runs here."""
    template = pod_owner["spec"]["template"]
    pod, labels = template["spec"], template["metadata"].get("labels", {})
    [spec] = [c for c in pod["containers"] if c["name"] == container]
    root = Path(tempfile.mkdtemp(prefix="observer-shipped-"))
    os.chmod(root, 0o755)
    try:
        volumes = _lay_out_volumes(pod, labels, objects, root)
        mounts = {m["mountPath"]: volumes[m["name"]] for m in spec.get("volumeMounts", [])}
        ports = {p["containerPort"]: free_port() for p in spec.get("ports", [])}
        names = {p["name"]: ports[p["containerPort"]] for p in spec.get("ports", [])}
        rewrites = {**ports, **dict(port_map or {})}
        for f in (f for v in pod.get("volumes", []) if "configMap" in v for f in volumes[v["name"]].iterdir()):
            # A config naming /data/… names the data volume, and http://127.0.0.1:8000 the upstream here.
            f.write_text(_in_text(f.read_text(), mounts, rewrites))
        env: dict[str, str] = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1",
                               "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "LANG": "C.UTF-8"}
        for e in spec.get("env", []):
            if "value" in e:
                env[e["name"]] = _rewrite(str(e["value"]), mounts, rewrites)
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                env[e["name"]] = secrets[(ref["name"], ref["key"])]
        if args_of(spec)[:1] == ["serve"]:  # its one port, on loopback (the config or the chart says 0.0.0.0:9464)
            [port] = ports.values()
            env.update(OBSERVER__SERVER__HOST="127.0.0.1", OBSERVER__SERVER__PORT=str(port))
        env.update(extra_env or {})
        args = [_rewrite(a, mounts, rewrites) for a in spec.get("args", [])]
        workdir = mounts.get("/data") or root / "workdir"
        workdir.mkdir(exist_ok=True)
        os.chown(workdir, IMAGE_UID, IMAGE_UID)
        log = root / "output.log"
        cmd = ["setpriv", f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups", "--",
               str(bin_dir / "observer"), *args]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        probes = {k: spec[k] for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in spec}
        running = Running(proc=proc, ports=names, log=log, probes=probes)
        try:
            yield running
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def args_of(spec: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in spec.get("args", [])]


def startup_budget(probes: Mapping[str, Mapping[str, Any]]) -> float:
    """Seconds the kubelet allows before it restarts the container: the startup probe's failures × period,
    else the liveness probe's initial delay and failures × period."""
    p = probes.get("startupProbe") or probes.get("livenessProbe") or {}
    return float(p.get("initialDelaySeconds", 0) + p.get("periodSeconds", 10) * p.get("failureThreshold", 3))


def wait_for_probes(running: Running) -> float:
    """Poll the container's liveness and readiness paths until both answer 2xx; the seconds it took. Fails,
    with what the process printed, past the startup budget."""
    budget = startup_budget(running.probes)
    paths = {(p["httpGet"]["port"], p["httpGet"]["path"]) for k, p in running.probes.items()
             if k in ("livenessProbe", "readinessProbe")}
    assert paths, "the container declares no liveness or readiness probe"
    start = time.monotonic()
    last: dict[tuple[str, str], str] = {}
    while time.monotonic() - start < budget:
        if running.proc.poll() is not None:
            raise AssertionError(f"exited {running.proc.returncode} before its probes answered:\n"
                                 f"{running.output()}")
        for port, path in sorted(paths):
            try:
                r = httpx.get(running.url(port, path), timeout=2.0)
                last[(port, path)] = f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as e:
                last[(port, path)] = f"{type(e).__name__}"
        if all(v[0] == "2" for v in last.values()) and len(last) == len(paths):
            return time.monotonic() - start
        time.sleep(0.5)
    command = shlex.join(str(a) for a in running.proc.args) if isinstance(running.proc.args, list) else ""
    raise AssertionError(f"probes {sorted(paths)} did not all answer 2xx within the startup budget {budget:.0f} s "
                         f"(last: {last}); {command}\n{running.output()}")
