"""Side-by-side benchmarks: one module per op family, each exposing ``run(suite, progress) -> DataFrame``."""
