"""Looking at runs: tables, plots, attention maps and sweeps.

runs (workdirs as rows), plots, attention_maps (translations with their
attention), sweep_runs (grids and sweep files, run one after another) and
tau_sweep (flexible attention's tau). The notebooks call these.
"""
