"""Canary analysis: stats → judge → sources (own scrapes | Prometheus) → service, gauges, verdict API, inventory."""
