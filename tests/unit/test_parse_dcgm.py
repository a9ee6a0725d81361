"""DCGM-exporter records from the exporter's line format (tests/fixtures/dcgm/)."""

from __future__ import annotations

from pathlib import Path

from observer.collect.dcgm import parse_dcgm

FIXTURE = (Path(__file__).parent.parent / "fixtures" / "dcgm"
           / "SYNTHETIC_dcgm-exporter_4.x_template_H100_k8s_Hostname.prom")


def test_fixture_gpus_with_kubernetes_labels() -> None:
    gpus = parse_dcgm(FIXTURE.read_text()).gpus
    assert [g.gpu for g in gpus] == ["0", "1"]
    stable = gpus[0]
    assert stable.pod == "vllm-llama3-8b-stable-7d9f8b6c5-x2k4q" and stable.namespace == "llm-serving"
    assert stable.hostname == "gpu-node-07" and stable.uuid.startswith("GPU-3f2a")
    assert stable.gpu_util_percent == 97.0 and stable.power_w == 547.701905
    assert stable.fb_used_mib == 75568.0 and stable.fb_free_mib == 5512.0 and stable.xid == 0.0


def test_missing_kubernetes_labels_and_renamed_hostname_give_none_or_new_name() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-x",hostname="n1",modelName="H200"} 61\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",hostname="n1",exported_pod="p",exported_namespace="ns"} 79\n'
    )
    (g,) = parse_dcgm(text).gpus
    assert g.hostname == "n1" and g.temperature_c == 61 and g.xid == 79
    assert g.pod == "p" and g.namespace == "ns"  # relabelled by a Prometheus not honouring labels
    assert g.power_w is None and g.gpu_util_percent is None
