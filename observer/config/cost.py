"""Cost and energy per version: GPU prices, the fallback when DCGM is absent, budgets.

Cost is what the bill says: every GPU attributed to a version's pods is paid for every second it is held,
busy or idle. Prices take effect from the moment the observer runs with them; counters already exported
are never rewritten.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from observer.config.base import Spec


class CostSpec(Spec):
    """Prices of GPUs (by DCGM `modelName`) or of replicas, and what a version may cost."""

    enabled: bool = Field(True, description="Export cost and energy per version.")
    gpu_hour_prices: dict[str, float] = Field(
        default_factory=dict,
        description="Price of one GPU-hour by DCGM modelName (e.g. \"NVIDIA H100 80GB HBM3\": 4.1), in your "
                    "currency. A GPU of a model not listed is counted as unpriced (and warned about).")
    replica_hour_price: float | None = Field(
        None, gt=0, description="Price of one replica-hour, used when a version has no DCGM GPUs attributed "
                                "(no DCGM, or CPU serving). null: from gpus_per_replica × the gpu_model's price.")
    gpus_per_replica: int = Field(1, ge=0, le=64, description="GPUs a replica holds when DCGM is absent.")
    gpu_model: str | None = Field(
        None, description="GPU model of the replicas when DCGM is absent (a key of gpu_hour_prices).")
    budget_per_million_tokens: float | None = Field(
        None, gt=0, description="Cost per million generated tokens a version may reach before the cost alert "
                                "tickets. null: only the comparison against stable.")
    regression_ratio: float = Field(
        1.25, gt=1, le=100, description="The cost alert tickets when a version's cost per generated token is "
                                        "this many times the stable version's (same model).")
    window_seconds: float = Field(3600.0, ge=60, description="Window of the exported cost and energy ratios.")
    max_gpu_models: int = Field(8, ge=1, le=64, description="Distinct GPU models tracked (label bound).")

    @model_validator(mode="after")
    def _priced(self) -> CostSpec:
        for model, price in self.gpu_hour_prices.items():
            if not price > 0:
                raise ValueError(f"gpu_hour_prices[{model!r}] must be > 0 (got {price})")
        if self.gpu_model is not None and self.gpu_model not in self.gpu_hour_prices:
            known = ", ".join(repr(m) for m in sorted(self.gpu_hour_prices)) or "none"
            raise ValueError(f"gpu_model {self.gpu_model!r} has no price in gpu_hour_prices (priced: {known}); "
                             "add it, or set replica_hour_price")
        return self

    @property
    def priced(self) -> bool:
        """Whether any price is configured (without one there is usage, but no cost to export)."""
        return bool(self.gpu_hour_prices) or self.replica_hour_price is not None

    def price_per_gpu_second(self, model: str | None) -> float | None:
        """The price of one GPU-second of `model`, or None when it has none."""
        if model is None or model not in self.gpu_hour_prices:
            return None
        return self.gpu_hour_prices[model] / 3600.0

    def price_per_replica_second(self) -> float | None:
        """The price of one replica-second without DCGM: replica_hour_price, or GPUs × the gpu_model's price."""
        if self.replica_hour_price is not None:
            return self.replica_hour_price / 3600.0
        per_gpu = self.price_per_gpu_second(self.gpu_model)
        return None if per_gpu is None else per_gpu * self.gpus_per_replica
