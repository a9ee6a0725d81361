"""The observer's development tooling: the simulated fleet, the game day, the demo and the launchers of
real processes (Prometheus, vLLM) that tests, benchmarks and demos start.

Nothing the service runs imports this package (`observer serve` and `observer proxy` stay free of it,
checked by tests/unit/test_architecture.py); the CLI reaches it only inside the commands that need it
(`observer sim`, `observer gameday`).
"""
