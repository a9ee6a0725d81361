"""DCGM-exporter-format `/metrics` for simulated GPUs whose readings follow their engine's load.

Written by hand, not with prometheus_client, because dcgm-exporter keeps its own label order
(gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, container, namespace,
pod) and prints integer fields without a decimal point (tests/fixtures/dcgm/SYNTHETIC_*.prom).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from observer_dev.sim.engine import EngineSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MODEL_NAME = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "570.172.08"
FB_TOTAL_MIB = 81559
FB_RESERVED_MIB = 559
GPU_MEMORY_UTILIZATION = 0.92  # vLLM preallocates this share of the framebuffer at start
BATCH_FOR_FULL_UTIL = 24.0  # running requests that keep the GPU fully busy

FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second."),
)
"""(field, type, HELP) in dcgm-exporter's default-counters order."""

EXTRA_FIELDS: tuple[tuple[str, str, str], ...] = (
    # Not in the exporter's default counters CSV (commented out there): the simulator exports them last, as an
    # exporter whose counters file enables the ECC and violation fields would (docs/scraping.md).
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns)."),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons (bitmask of NVML reasons)."),
)
RATIO_FIELDS = frozenset({"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                          "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"})
"""Fields the exporter prints with six decimals; every other field is an integer."""


@dataclass(frozen=True)
class GpuIdentity:
    """The labels of one simulated GPU; namespace/pod None outside Kubernetes mode."""

    index: int
    uuid: str
    hostname: str
    namespace: str | None = None
    pod: str | None = None

    @classmethod
    def make(cls, index: int, *, key: str, hostname: str = "sim-node-0", namespace: str | None = None,
             pod: str | None = None) -> GpuIdentity:
        """A stable identity: the UUID is derived from `key` (e.g. version/replica)."""
        h = hashlib.sha256(key.encode()).hexdigest()
        uuid = f"GPU-{h[:8]}-{h[8:12]}-4{h[13:16]}-{h[16:20]}-{h[20:32]}"
        return cls(index=index, uuid=uuid, hostname=hostname, namespace=namespace, pod=pod)

    def labels(self) -> str:
        bus = f"00000000:{0x18 + 0x12 * self.index:02X}:00.0"
        parts = [f'gpu="{self.index}"', f'UUID="{self.uuid}"', f'pci_bus_id="{bus}"',
                 f'device="nvidia{self.index}"', f'modelName="{MODEL_NAME}"', f'Hostname="{self.hostname}"',
                 f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"']
        if self.pod is not None:
            parts += ['container="vllm"', f'namespace="{self.namespace or "default"}"', f'pod="{self.pod}"']
        return ",".join(parts)


class SimGpu:
    """One GPU bound to one engine: readings are a function of the engine's running requests."""

    def __init__(self, identity: GpuIdentity, snapshot: Callable[[], EngineSnapshot],
                 clock: Callable[[], float] = time.time) -> None:
        self.identity = identity
        self._snapshot = snapshot
        self.clock = clock
        self._lock = threading.Lock()
        self._energy_mj = 9.0e10
        self._thermal_ns = 0.0
        self._last = clock()
        self._tokens: float | None = None

    def readings(self) -> dict[str, float]:
        """Every field's current value."""
        s = self._snapshot()
        running = s.gauges.get("num_requests_running", 0.0)
        busy = min(1.0, running / BATCH_FOR_FULL_UTIL)
        util = round(100 * (0.15 + 0.85 * busy)) if running > 0 else 0
        power = s.profile.gpu_idle_watts + 6.3 * util
        tokens = s.counters.get("prompt_tokens", 0.0) + s.counters.get("generation_tokens", 0.0)
        with self._lock:
            now = self.clock()
            dt = max(0.0, now - self._last)
            joules = s.profile.gpu_joules_per_token
            if joules is None:
                self._energy_mj += power * dt * 1000.0
            else:  # idle power plus a fixed energy per token (split over the replica's GPUs)
                done = max(0.0, tokens - self._tokens) if self._tokens is not None else 0.0
                spent = s.profile.gpu_idle_watts * dt + joules * done / s.profile.gpus_per_replica
                self._energy_mj += spent * 1000.0
                power = spent / dt if dt > 0 else s.profile.gpu_idle_watts
            self._tokens = tokens
            self._thermal_ns += s.profile.gpu_thermal_throttle * dt * 1e9
            self._last = now
            energy = self._energy_mj
            thermal = self._thermal_ns
        fb_used = round(GPU_MEMORY_UTILIZATION * FB_TOTAL_MIB)
        gr = util / 100 * 0.95
        hot = s.profile.gpu_thermal_throttle
        return {
            "DCGM_FI_DEV_SM_CLOCK": 1980 if util else 345, "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_MEMORY_TEMP": round(30 + 0.2 * util), "DCGM_FI_DEV_GPU_TEMP": round(34 + 0.35 * util),
            "DCGM_FI_DEV_POWER_USAGE": power, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": round(energy),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0, "DCGM_FI_DEV_GPU_UTIL": util,
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.5), "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": s.profile.xid,
            "DCGM_FI_DEV_FB_FREE": FB_TOTAL_MIB - fb_used - FB_RESERVED_MIB, "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_RESERVED": FB_RESERVED_MIB, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
            "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": s.profile.gpu_ecc_dbe,
            "DCGM_FI_DEV_POWER_VIOLATION": 0, "DCGM_FI_DEV_THERMAL_VIOLATION": round(thermal),
            # NVML: 0x1 idle; 0x20 software thermal slowdown (while the profile throttles), 0x40 hardware
            # thermal slowdown as well from half the time on.
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (0 if util else 0x1) | (0x20 if hot > 0 else 0)
            | (0x40 if hot >= 0.5 else 0),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gr, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": gr * 0.55,
            "DCGM_FI_PROF_DRAM_ACTIVE": gr * 0.7,
            "DCGM_FI_PROF_PCIE_TX_BYTES": round(2.0e7 + 6.0e8 * busy),
            "DCGM_FI_PROF_PCIE_RX_BYTES": round(2.0e7 + 6.0e8 * busy),
        }


def render(gpus: Sequence[SimGpu]) -> bytes:
    """The exporter's text: per field HELP, TYPE, then one line per GPU."""
    readings = [(g.identity.labels(), g.readings()) for g in gpus]
    out: list[str] = []
    for name, kind, help_text in (*FIELDS, *EXTRA_FIELDS):
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        for labels, values in readings:
            v = values[name]
            text = f"{v:.6f}" if name in RATIO_FIELDS else str(round(v))
            out.append(f"{name}{{{labels}}} {text}\n")
    return "".join(out).encode()
