"""The report as data, pure: test records and their schema, the ledger, the suite audit's
section, merging CI legs, baselines and diffs, saved outputs (docs/architecture.md).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""
