"""The Python example in docs/simulator.md runs (on free ports instead of deploy/observer.yaml's)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.sim import config_yaml, fleet_dict

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


def test_python_examples_in_the_simulator_doc_run(tmp_path: Path, capsys: object) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/simulator.md has no python example"
    data, ports = fleet_dict()
    config = tmp_path / "observer.yaml"
    config.write_text(config_yaml(data))
    for code in blocks:
        assert "deploy/observer.yaml" in code
        exec(compile(code.replace("deploy/observer.yaml", str(config)), str(DOC), "exec"), {})
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert f"http://127.0.0.1:{ports.vllm['canary']}/v1" in out
