"""The names of a workdir's files and folders: the one place they are spelled.

    <workdir>/config.json          the run's resolved config (run_config)
    <workdir>/metrics.jsonl        one JSON record per line (writers)
    <workdir>/lock                 one writing run at a time (locks)
    <workdir>/checkpoints/<step>   Orbax checkpoints (checkpoint)
    <workdir>/checkpoints/corrupt/ damaged ones, set aside
    <workdir>/kept_steps.json      the steps train.keep_every kept (kept_steps)
    <workdir>/vocab/               the vocabularies training built (data)
    <workdir>/data_cache/<key>/    the encoded corpus (data.encoding)
    <workdir>/eval_*               the last evaluation (inference)
    <workdir>/tau_sweep.json       a decode.tau sweep (analysis.tau_sweep)
    <workdir>/profile*/            jax.profiler traces (system.profiling)

It lives in `system`, the bottom wing, because `data` writes into the
workdir too (vocab/, data_cache/) and sits below `workdir` in the wings'
order; names alone import nothing, so every wing can read them. Old
workdirs restore only while these names stay as they are.
"""

CONFIG = 'config.json'
METRICS = 'metrics.jsonl'
LOCK = 'lock'
CHECKPOINTS = 'checkpoints'
CORRUPT = 'corrupt'  # under CHECKPOINTS
KEPT_STEPS = 'kept_steps.json'
VOCAB = 'vocab'
DATA_CACHE = 'data_cache'

# An evaluation's files (eval mode): in the workdir, or an ensemble's folder.
EVAL_RESULTS = 'eval_results.json'
EVAL_HYPOTHESES = 'eval_hypotheses.txt'
# The references as scored, line for line with the hypotheses.
EVAL_REFERENCES = 'eval_references.txt'
EVAL_NBEST = 'eval_nbest.txt'
EVAL_ALIGNMENTS = 'eval_alignments.txt'  # decode.alignments='pharaoh'
EVAL_SOFT_ALIGNMENTS = 'eval_alignments.npz'  # decode.alignments='soft'

TAU_SWEEP = 'tau_sweep.json'
PROFILE = 'profile'  # train.profile's trace
PROFILE_DECODE = 'profile_decode'  # decode.profile's trace
