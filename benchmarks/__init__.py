"""Speed and memory benchmarks; not installed with the package (README.md)."""
