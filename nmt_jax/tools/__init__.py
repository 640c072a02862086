"""Tools around runs: benchmarks, sweeps, run tables, plots, attention maps.

Their command lines are nmt_jax/bench.py and nmt_jax/sweep.py; the notebooks
call runs.py, plots.py and attention_maps.py.
"""
