"""What a report shows, pure: the view model built once from a report, and its terminal text,
Markdown and HTML renderings (docs/architecture.md).

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""
