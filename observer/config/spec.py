"""The root of the YAML config: one typed model, the single source of truth every component reads."""

from __future__ import annotations

from pydantic import Field

from observer.config.base import Spec
from observer.config.canary import CanarySpec
from observer.config.cost import CostSpec
from observer.config.dashboards import DashboardsSpec
from observer.config.discovery import DiscoverySpec
from observer.config.drift import DriftSpec
from observer.config.fleet import FleetSpec, ScrapeSpec, ServerSpec, TelemetrySpec
from observer.config.probe import ProbeSpec
from observer.config.quality import QualitySpec
from observer.config.sampling import SamplingSpec
from observer.config.slo import SLOSpec


class ObserverConfig(Spec):
    """The whole observer configuration (YAML root)."""

    fleet: FleetSpec = Field(default_factory=FleetSpec, description="Versions and their endpoints.")
    discovery: DiscoverySpec = Field(default_factory=DiscoverySpec, description="Target discovery (Kubernetes).")
    scrape: ScrapeSpec = Field(default_factory=ScrapeSpec, description="Scraping and signal window.")
    probe: ProbeSpec = Field(default_factory=ProbeSpec, description="A synthetic request per version through the "
                                                                    "route users call.")
    server: ServerSpec = Field(default_factory=ServerSpec, description="The observer's HTTP server.")
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec, description="Own traces.")
    sampling: SamplingSpec = Field(default_factory=SamplingSpec, description="Live output sampling.")
    quality: QualitySpec = Field(default_factory=QualitySpec, description="Quality scoring.")
    drift: DriftSpec = Field(default_factory=DriftSpec, description="Embedding drift.")
    canary: CanarySpec = Field(default_factory=CanarySpec, description="Canary analysis.")
    slo: SLOSpec = Field(default_factory=SLOSpec, description="SLOs and alerts.")
    dashboards: DashboardsSpec = Field(default_factory=DashboardsSpec, description="Dashboards.")
    cost: CostSpec = Field(default_factory=CostSpec, description="Cost and energy per version.")
