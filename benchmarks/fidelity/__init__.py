"""How right the plugin's predictions are without the hardware: lowered against compiled
counts, the runtime share's estimate against the profiler, TPU layouts against the compiler
(``README.md``)."""
