"""A simulator for demos and tests: simulated vLLM pods (metrics + OpenAI API) and DCGM exporters
whose behaviour follows per-version profiles. It serves no model. Entry points: `observer sim`,
`observer_dev.sim.fleet.run_fleet`. See docs/simulator.md."""
