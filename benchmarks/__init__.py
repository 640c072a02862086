"""Speed and memory benchmarks; not installed (benchmarks/README.md)."""
