"""The domain, pure: platforms and their devices, the classification table, the census, probes
and counts, budgets, the cost model, numerics, hotspots, configuration and the tooling scan.
Nothing here imports JAX or pytest (docs/architecture.md).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""
