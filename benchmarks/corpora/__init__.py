"""The programs the benchmarks measure: model functions, the fidelity and chip corpora, and the
generated suites written from them (``README.md``)."""
