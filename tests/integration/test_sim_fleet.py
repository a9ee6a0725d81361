"""The simulated fleet over real HTTP on loopback: vLLM /metrics, the OpenAI API (streaming too),
admin endpoints, the DCGM exporter, the CLI, and a clean start/stop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from observer.collect.dcgm import parse_dcgm
from observer.collect.vllm import parse_vllm
from observer.errors import ConfigError
from observer_dev.promserver import port_free
from observer_dev.sim.answers import AnswerBook, BookItem, normalise
from observer_dev.sim.fleet import FleetHandle, SimError, run_fleet
from tests.support.poll import wait_until
from tests.support.sim import config_yaml, fleet_dict, running_fleet, sim_config

pytestmark = pytest.mark.integration

FAST = {"time_scale": 0.01, "load_rps": 2.0}
QUESTION = "What is the capital of France? Answer with the city name only."


@pytest.fixture(scope="module")
def fleet() -> Iterator[FleetHandle]:
    book = AnswerBook([BookItem(key=normalise(QUESTION), reference="Paris", wrong=("Lyon",))])
    with running_fleet(profiles={"stable": {**FAST, "accuracy": 1.0, "refusal_rate": 0.0},
                                 "canary": {**FAST, "ttft_scale": 1.5, "refusal_rate": 0.0}}, seed=4,
                       book=book) as (handle, _):
        yield handle


def _model(fleet: FleetHandle, version: str) -> object:
    r = httpx.get(fleet.metrics_url(version), timeout=5)
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_vllm(r.text).models[f"sim-{version}"]


def _reasons(fleet: FleetHandle, version: str) -> dict[str, float]:
    return dict(_model(fleet, version).labelled_counters["request_success"])  # type: ignore[attr-defined]


def _chat(fleet: FleetHandle, version: str, client: httpx.Client | None = None, **body: object) -> httpx.Response:
    payload = {"model": f"sim-{version}", "messages": [{"role": "user", "content": QUESTION}], **body}
    return (client or httpx).post(fleet.openai_url(version) + "/chat/completions", json=payload, timeout=10)


def test_built_in_load_moves_the_metrics_without_clients(fleet: FleetHandle) -> None:
    first = sum(_reasons(fleet, "stable").values())
    wait_until(lambda: sum(_reasons(fleet, "stable").values()) > first)


def test_chat_completion_answers_golden_prompts_with_usage(fleet: FleetHandle) -> None:
    r = _chat(fleet, "stable")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "sim-stable"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Paris"}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["completion_tokens"] == 1 and usage["total_tokens"] == usage["prompt_tokens"] + 1
    models = httpx.get(fleet.openai_url("stable") + "/models").json()
    assert [m["id"] for m in models["data"]] == ["sim-stable"]


def test_streaming_chat_is_openai_sse(fleet: FleetHandle) -> None:
    with httpx.stream("POST", fleet.openai_url("canary") + "/chat/completions", timeout=10, json={
            "messages": [{"role": "user", "content": "Explain caching."}], "stream": True,
            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) >= 10
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finals[-1] == "stop" and set(finals[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(text.split())
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_streaming_completion_honours_max_tokens(fleet: FleetHandle) -> None:
    with httpx.stream("POST", fleet.openai_url("canary") + "/completions", timeout=10,
                      json={"prompt": "Write a long essay about queues.", "max_tokens": 3, "stream": True}) as r:
        raw = r.read().decode()
    chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
    assert [c["object"] for c in chunks] == ["text_completion"] * len(chunks)
    assert len([c for c in chunks if c["choices"][0]["text"]]) == 3
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_json_schema_response_format(fleet: FleetHandle) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    r = _chat(fleet, "stable", response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"answer": "Paris"}


def _golden_answers(seed: int) -> list[str]:
    # No built-in load: the engine's seeded draws then depend on the requests alone (deterministic).
    book = AnswerBook([BookItem(key=normalise(QUESTION), reference="Paris", wrong=("Lyon",))])
    profiles = {"stable": "idle", "canary": {"preset": "worse", "load_rps": 0, "time_scale": 0}}
    with running_fleet(profiles=profiles, seed=seed, book=book) as (fleet, _), httpx.Client() as client:
        return [_chat(fleet, "canary", client).json()["choices"][0]["message"]["content"] for _ in range(300)]


def test_worse_preset_lowers_golden_accuracy_and_raises_refusals() -> None:
    answers = _golden_answers(seed=9)
    assert answers == _golden_answers(seed=9)  # seeded: the same answers in the same order
    right = answers.count("Paris") / len(answers)
    refused = sum(a.startswith("I'm sorry") for a in answers) / len(answers)
    assert abs(right - 0.6 * 0.9) < 0.08, right  # accuracy 0.6 of the 90% not refused
    assert abs(refused - 0.10) < 0.05, refused
    assert set(answers) == {"Paris", "Lyon", answers[[a.startswith("I'm") for a in answers].index(True)]}


def test_bad_requests_get_openai_errors_and_are_counted(fleet: FleetHandle) -> None:
    r = httpx.post(fleet.openai_url("stable") + "/chat/completions", json={"messages": "hi"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"
    r = _chat(fleet, "stable", model="other-model")
    assert r.status_code == 404 and "other-model" in r.json()["error"]["message"]
    r = httpx.post(fleet.openai_url("stable") + "/completions", content=b"{not json")
    assert r.status_code == 400
    text = httpx.get(fleet.metrics_url("stable")).text
    assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"}' in text


def test_error_rate_gives_http_500_and_counts_error_finishes(fleet: FleetHandle) -> None:
    before = _reasons(fleet, "canary")["error"]
    fleet.set_profile("canary", error_rate=1.0, load_rps=0.0)
    try:
        r = _chat(fleet, "canary")
        assert r.status_code == 500
        assert r.json()["error"] == {"message": "simulated engine failure (error_rate=1.0)",
                                     "type": "InternalServerError", "param": None, "code": 500}
        assert _reasons(fleet, "canary")["error"] == before + 1
    finally:
        fleet.set_profile("canary", error_rate=0.0, load_rps=2.0)


def test_admin_profile_endpoint_validates_and_applies(fleet: FleetHandle) -> None:
    url = fleet.url("canary") + "/sim/profile"
    r = httpx.put(url, json={"ttft_scale": -1})
    assert r.status_code == 400 and "ttft_scale" in r.json()["error"]["message"]
    r = httpx.put(url, json={"nonsense": 1})
    assert r.status_code == 400 and "unknown profile key 'nonsense'" in r.json()["error"]["message"]
    r = httpx.put(url, json={"preset": "worse"})
    assert r.status_code == 200 and r.json()["profile"]["accuracy"] == 0.6
    assert httpx.get(url).json()["profile"]["load_rps"] == 2.0  # a preset keeps the traffic volume
    assert fleet.profile("canary").refusal_rate == 0.10
    fleet.set_profile("canary", "healthy", **FAST, ttft_scale=1.5, refusal_rate=0.0)


def test_restart_resets_counters(fleet: FleetHandle) -> None:
    fleet.advance("stable", 30)  # about 60 requests at once
    before = _model(fleet, "stable").counters["prompt_tokens"]  # type: ignore[attr-defined]
    r = httpx.post(fleet.url("stable") + "/sim/restart")
    assert r.json()["restarts"] == 1
    after = _model(fleet, "stable").counters["prompt_tokens"]  # type: ignore[attr-defined]
    assert after < before


def test_client_disconnect_mid_stream_counts_an_abort(fleet: FleetHandle) -> None:
    fleet.set_profile("stable", time_scale=1.0, load_rps=0.0)
    try:
        before = _reasons(fleet, "stable")["abort"]
        with httpx.stream("POST", fleet.openai_url("stable") + "/completions", timeout=10,
                          json={"prompt": "Write a long essay about queues.", "stream": True}) as r:
            next(r.iter_lines())
        wait_until(lambda: _reasons(fleet, "stable")["abort"] == before + 1)
    finally:
        fleet.set_profile("stable", **FAST)


def test_dcgm_exporter_joins_pods_and_injects_xid(fleet: FleetHandle) -> None:
    fleet.set_profile("canary", xid=79)
    try:
        gpus = {g.pod: g for g in parse_dcgm(httpx.get(fleet.dcgm_urls()[0]).text).gpus}
        assert set(gpus) == {"sim-stable-0", "sim-canary-0"}
        assert gpus["sim-canary-0"].xid == 79 and gpus["sim-stable-0"].xid == 0
        assert gpus["sim-canary-0"].namespace == "llm-serving"
    finally:
        fleet.set_profile("canary", xid=0)


def test_recent_requests_are_inspectable(fleet: FleetHandle) -> None:
    _chat(fleet, "stable")
    samples = httpx.get(fleet.url("stable") + "/sim/recent", params={"limit": 50}).json()["samples"]
    assert any(s["domain"] == "api" and s["output"] == "Paris" for s in samples)
    assert len(samples) <= 50


def test_start_stop_leaves_no_thread_and_frees_ports() -> None:
    config = sim_config()
    threads = set(threading.enumerate())
    with run_fleet(config, {"stable": "idle", "canary": "idle"}, answer_dir=None) as fleet:
        assert httpx.get(fleet.metrics_url("canary")).status_code == 200
        ports = [int(fleet.url(v).rsplit(":", 1)[1]) for v in fleet.versions]
        assert any(t.name == "observer-sim" for t in threading.enumerate())
    assert set(threading.enumerate()) <= threads
    assert all(port_free(p) for p in ports)


def test_a_taken_port_is_reported_and_nothing_is_left_running() -> None:
    config = sim_config()
    port = int(config.fleet.versions[1].vllm[0].split(":")[2].split("/")[0])
    threads = set(threading.enumerate())
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen(1)
        with pytest.raises(SimError, match=f"could not listen on 127.0.0.1:{port} for canary/0"), \
                run_fleet(config, answer_dir=None):
            pass
    assert set(threading.enumerate()) <= threads


def test_unknown_versions_and_remote_hosts_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown version"), run_fleet(sim_config(), {"blue": "slow"}):
        pass
    data, _ = fleet_dict(("stable",))
    data["fleet"]["versions"][0]["vllm"] = ["http://vllm-stable.llm-serving.svc:8000/metrics"]
    from observer.config import parse_config

    with pytest.raises(ConfigError, match="local addresses only"), \
            run_fleet(parse_config(config_yaml(data), environ={}), answer_dir=None):
        pass


def test_cli_serves_until_the_duration_and_prints_urls(tmp_path: Path) -> None:
    data, ports = fleet_dict()
    path = tmp_path / "observer.yaml"
    path.write_text(config_yaml(data))
    proc = subprocess.run([sys.executable, "-m", "observer", "sim", "--config", str(path), "--profile",
                           "canary=slow", "--duration", "1", "--golden-sets", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"http://127.0.0.1:{ports.vllm['canary']}/metrics" in proc.stdout
    assert "ttft x1.5" in proc.stdout and f"http://127.0.0.1:{ports.dcgm}/metrics" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "observer", "sim", "--config", str(path), "--profile", "canary=zippy",
                          "--duration", "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown simulator preset 'zippy'" in bad.stderr


def test_replicas_split_the_load_and_each_has_a_gpu() -> None:
    from observer.config import parse_config
    from tests.support.prom import free_port

    r0, r1, api, dcgm = (free_port() for _ in range(4))
    text = config_yaml({"fleet": {"versions": [{
        "name": "stable", "vllm": [f"http://127.0.0.1:{r0}/metrics", f"http://localhost:{r1}/vllm/metrics"],
        "openai": f"http://127.0.0.1:{api}/v1", "dcgm": [f"http://127.0.0.1:{dcgm}/dcgm"],
        "pods": [{"namespace": "ns", "pod": "p-0"}, {"namespace": "ns", "pod": "p-1"}]}]}})
    with run_fleet(parse_config(text, environ={}), {"stable": {"load_rps": 20, "time_scale": 0.0}},
                   answer_dir=None) as fleet:
        fleet.advance("stable", 30)
        counts = []
        for url in (f"http://127.0.0.1:{r0}/metrics", f"http://127.0.0.1:{r1}/vllm/metrics"):
            model = parse_vllm(httpx.get(url).text).models["sim-stable"]
            counts.append(sum(model.labelled_counters["request_success"].values()))
        assert all(c > 200 for c in counts) and 0.7 < counts[0] / counts[1] < 1.4
        gpus = parse_dcgm(httpx.get(f"http://127.0.0.1:{dcgm}/dcgm").text).gpus
        assert sorted((g.gpu, g.pod) for g in gpus) == [("0", "p-0"), ("1", "p-1")]
        assert len({g.uuid for g in gpus}) == 2
        r = httpx.post(f"http://127.0.0.1:{api}/v1/completions", json={"prompt": "hello"})
        assert r.status_code == 200 and r.json()["model"] == "sim-stable"
