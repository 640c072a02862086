"""What a run keeps on disk, and keeping it safe.

folders (a workdir created, removed when a failure left it empty),
run_config (config.json and the model's identity), checkpoint (Orbax
checkpoints, best params), integrity (what makes one damaged), resume (where
a run picks up), locks (one writing run at a time) and writers
(metrics.jsonl, TensorBoard).
"""
