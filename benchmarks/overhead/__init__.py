"""What the plugin costs: suites with and without it, a check stage by stage, the report,
the compiled levels, the emulation and the audit on real suites (``README.md``)."""
