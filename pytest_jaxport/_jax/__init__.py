"""The only code that imports JAX: tracing, lowering, the StableHLO reader, execution and
profiling, host callbacks, deviceless compilation, the audit's interception, and the adapters
for what differs between JAX releases (docs/architecture.md).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""
