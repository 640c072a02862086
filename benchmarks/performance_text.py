"""The prose of docs/performance.md: what was run and what each figure is."""

HEADER = """# Performance

How fast nmt_jax trains and decodes against OpenNMT-py 3.5.1 (PyTorch) on the
same model and data, and what each speed lever is worth alone. Written by
`python -m benchmarks.performance` from the runs of one command:

```
export PEER_VENV=/tmp/peer_onmt PEER_SCRIPTS=DIR PEER_WORK=/tmp/onmt_work
bash benchmarks/peer_setup.sh   # once: OpenNMT-py, the copy data, its configs
bash benchmarks/performance.sh /tmp/perf --output=docs/performance.md
```

On a GPU machine the same commands with `PLATFORM=gpu` (a CUDA build of
JAX, and of torch in `PEER_VENV`: `SYSTEM_TORCH=1 bash benchmarks/peer_setup.sh`
where the machine has one, or `TORCH=...`) time both toolkits there
(OpenNMT-py with `-gpu_ranks 0` / `-gpu 0`, cuDNN's LSTM); the page then
takes both runs: `python -m benchmarks.performance /tmp/perf
/tmp/perf_gpu`.

The JSON files behind this page are kept in `benchmarks/runs/cpu/`,
`benchmarks/runs/gpu/` (H100) and `benchmarks/runs/gpu_h200/`
(`python -m benchmarks.performance benchmarks/runs/cpu
benchmarks/runs/gpu benchmarks/runs/gpu_h200` writes the page again;
a `notes.md` beside a directory's files is shown under its heading); one part
can be measured again into a copy of them with `PARTS=...` (e.g.
`PARTS="startup page"`), and single runs with `ONLY="name ..."`.

The model is Britz et al.'s copy-task model: 2-layer bidirectional LSTM
encoder (2 x 128 units), 2-layer LSTM decoder (256), general attention, input
feeding, embeddings 256, batch 128 sentences, 20 symbols, lengths uniform in
1..L (`configs/global_general.py:copyL --config.model.bidirectional=all
--config.model.bridge=copy`: 2,316,312 parameters; OpenNMT-py's `brnn` with
`global_attention general`: 2,320,408). OpenNMT-py runs unmodified, timed
from outside by two wrappers around `onmt_train` and `onmt_translate`
(`PEER_SCRIPTS`: `train_bench.py`, `translate_bench.py`; `PEER_WORK`: the copy
data and configs they read, made by their `gen_copy_data.py` and
`make_config.py`, then `onmt_build_vocab`, all run by
`benchmarks/peer_setup.sh`). OpenNMT-py 3.5.1 declares
`torch<2.3`; it trains and translates with torch 2.13 (CPU build) installed
first and OpenNMT-py with `--no-deps` plus its import-time dependencies
(`configargparse pyyaml six sacrebleu "pyonmttok>=1.37,<2" spacy
pyahocorasick rapidfuzz fasttext-wheel`), and `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`
to load its own checkpoints.

How to read the figures: every run is pinned to one core (`taskset`) and the
two toolkits alternate, so load from other processes on a shared machine
reaches both alike. Rates are per second of the process's own CPU time (all
its threads) next to wall-clock rates; a ratio above 1 means nmt_jax is
faster. Ratios are per pair of consecutive runs, shown as the median
[min - max] over pairs. Training counts non-padding target tokens (EOS
included) in steady state; nmt_jax's compile time is reported apart.
Decoding is the 1,000 validation sentences in batches of 64 sentences
(beam search: 640 hypotheses): OpenNMT-py with `-batch_size 64 -batch_type
sents -min_length 250` (EOS blocked, every hypothesis runs to the longest
source of its batch + 5), nmt_jax with `bench decode --sentences_per_batch=64`
(`decode.batch_size` counts hypotheses) and random weights whose EOS is held
back until each sentence's reference length (a perfect copy model's length),
in length-sorted batches.

The aims: on a GPU, training at least as fast as OpenNMT-py with cuDNN,
beam-10 decoding at least 1.5x, memory attention at least 1.5x global at
L = 200; on a CPU, training at least 1.25x OpenNMT-py, greedy decoding at
least 2x and beam 10 at least 1.5x (ratios per CPU second).
"""


# Training rows of a toolkit table: (file prefix, figure). The files are
# prefix + train_L{L}_t{threads}_r{r}.json and peer_ + the same.
TRAINING_FIGURES = (
    ('', 'training, target tok/s'),
    (
        'best_',
        (
            'training, target tok/s, two opt-in levers: 16 fitted buckets and'
            ' glibc keeping freed memory'
        ),
    ),
)

# Levers set per process (training at L = 50 in separate processes,
# alternating): (files with the lever on, files with it off, what it is,
# whose files: 'bench' or 'peer').
PROCESS_LEVERS = (
    (
        'lever_keep_memory_on_r{r}.json',
        'lever_keep_memory_off_r{r}.json',
        "glibc's malloc keeping freed memory (`NMT_JAX_KEEP_FREED_MEMORY=1`)",
        'bench',
    ),
    (
        'lever_tcmalloc_on_r{r}.json',
        'lever_tcmalloc_off_r{r}.json',
        'tcmalloc instead of glibc (`LD_PRELOAD`)',
        'bench',
    ),
    (
        'peer_lever_tcmalloc_on_r{r}.json',
        'peer_lever_tcmalloc_off_r{r}.json',
        'OpenNMT-py: tcmalloc instead of glibc (`LD_PRELOAD`)',
        'peer',
    ),
)

# bench train|decode --compare files of each lever: (name, what it is).
LEVERS = (
    (
        'lever_fitted16.json',
        (
            '16 fitted training buckets (`data.bucketing=fitted`, '
            '`data.num_buckets=16`) vs 4 even'
        ),
    ),
    (
        'lever_fitted8.json',
        (
            '8 fitted training buckets (`data.bucketing=fitted`, '
            '`data.num_buckets=8`) vs 4 even'
        ),
    ),
    (
        'lever_gate_table.json',
        'embedding-to-gates table in decoding (`decode.gate_table=on` vs off)',
    ),
    (
        'lever_model_gate_table.json',
        (
            "the encoder's layer-0 input gates from a per-word table in"
            ' decoding (`model.gate_table=auto`, the default, vs off)'
        ),
    ),
    (
        'lever_model_gate_table_train.json',
        (
            'the same table in training, both without dropout'
            ' (`model.dropout=0`; `model.gate_table=auto` vs off): the input'
            ' gates of both LSTMs from a table'
        ),
    ),
    (
        'lever_explicit_weight_grads.json',
        (
            'weight gradients as a GEMM on an explicit transpose '
            '(`model.explicit_weight_grads`, on by default) vs off'
        ),
    ),
    (
        'lever_hoist_weight_grads.json',
        (
            "the decoder's per-step kernel gradients as one GEMM after its"
            ' backward loop (`model.hoist_weight_grads`, on by default) vs'
            ' off'
        ),
    ),
    (
        'lever_dropout_rng.json',
        (
            'dropout masks from Philox (`train.dropout_rng=philox2x32`) vs'
            ' threefry2x32, the default'
        ),
    ),
    (
        'lever_bfloat16.json',
        'bfloat16 compute (`model.dtype=bfloat16`) vs float32',
    ),
    (
        'lever_scan_unroll2.json',
        (
            'training loops unrolled, 2 steps per iteration '
            '(`model.scan_unroll=2`) vs 1'
        ),
    ),
    (
        'lever_decode_unroll4.json',
        'search loops unrolled, 4 steps per iteration (`decode.unroll=4`) vs 1',
    ),
    (
        'lever_project_query_L100.json',
        (
            'general attention from the query side where a sentence has one'
            ' query (`model.project_query`, on by default) vs off, decoding'
            ' at L = 100 (beam search keeps the keys either way)'
        ),
    ),
    (
        'lever_project_query_train.json',
        'the same in training (`model.project_query`) vs off',
    ),
    (
        'lever_beam_sentences64.json',
        (
            'beam search in batches of 64 sentences'
            ' (`decode.batch_size=640` hypotheses) vs 6 (64 hypotheses)'
        ),
    ),
)


# The same for levers that only a GPU can show (left out of a CPU's table).
GPU_LEVERS = (
    (
        'lever_cuda_graphs_train.json',
        (
            'training loops as CUDA graphs (`compiler_options='
            '--xla_gpu_enable_command_buffer=...,CONDITIONAL,WHILE`) vs'
            " XLA's default command buffers"
        ),
    ),
    (
        'lever_cuda_graphs_train_no_loops.json',
        (
            'training kernels as CUDA graphs without the loops'
            " (`...=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN`) vs XLA's default"
        ),
    ),
    (
        'lever_cuda_graphs_decode.json',
        (
            'search loops as CUDA graphs (the same option, the default of'
            ' `decode.compiler_options` since 2026-11-27) vs none'
        ),
    ),
)

STARTUP_FILE = 'startup_L50.json'

STARTUP = """\
`bench startup` runs the command lines a user runs, each a new process timed
from its start (imports included), first with an empty persistent
compilation cache, then again with the cache the first run filled: a
training run of {steps} steps in a new workdir (the first step compiles one
length bucket's training step; by step {steps} it has met all four), then
`--mode=translate` of one sentence from that workdir. A training run ends
after validation and the final evaluation of the 1,000 validation sentences
(beam 10), which decode the whole set: that part is mostly decoding, not
compilation. All cores, not pinned (XLA:CPU compiles one program on all of
them); median [min - max] over repetitions, each with new caches."""

STARTUP_PEER = """\
OpenNMT-py, for scale: {seconds} s from after `import torch` to the start
of its first training step (its training wrapper's `first_step_start_after_s`
in the one-thread L = 50 runs above: vocabularies, data and model built, no
compilation, so no warm start either)."""

STARTUP_ROWS = (
    ('imports_s', 'seconds to start Python and import nmt_jax (the floor)'),
    ('train_first_step_s', 'training: seconds to the first step'),
    ('train_last_step_s', 'training: seconds to the last step'),
    ('train_total_s', 'training: seconds to the end (evaluation included)'),
    ('train_cpu_s', 'training: CPU seconds of the process'),
    (
        'train_cache_files_added',
        'training: files added to the cache (at most, of any repetition)',
    ),
    ('translate_first_line_s', 'translate: seconds to the first translation'),
    ('translate_cpu_s', 'translate: CPU seconds of the process'),
    (
        'translate_cache_files_added',
        'translate: files added to the cache (at most, of any repetition)',
    ),
)


NO_ACCELERATOR = """## GPU and TPU

Not measured: no accelerator was available for these runs. The same command
runs there with `PLATFORM=gpu` (`bench` reports the platform, device kind and
count, dtype and peak device memory in every JSON file).
"""

MEMORY = """
## Memory of a training step at the WMT size

XLA's memory plan (`bench train_memory`): memory K = 64, 512 units, 16k words
per side, batch 128, L = 50; `train.loss_chunk` computes the softmax and loss
a few target positions at a time. With the state donated, as training does,
XLA writes the new state over the old; peak = temp + arguments + outputs -
the outputs written over donated arguments.

| loss_chunk | state donated | temp MB | arguments MB | peak MB | one [B, T, V] logits MB |
|---|---|---:|---:|---:|---:|"""


def decode_batching(result) -> str:
  """A `bench decode --compare` file's batches and day, as words.

  Files from before `bench decode --sentences_per_batch` lack the field:
  their beam search decoded `decode.batch_size` hypotheses per batch.
  """

  def sentences(side):
    modes = [m for m in result[side].values() if isinstance(m, dict)]
    counts = {m.get('sentences_per_batch') for m in modes}
    return counts.pop() if len(counts) == 1 else None

  this, other = sentences('this'), sentences('other')
  day = result.get('date', 'undated')
  if this is None or other is None:
    return f'beam search in batches of `decode.batch_size` hypotheses ({day})'
  if this != other:
    return f'{this} vs {other} sentences per batch ({day})'
  return f'{this} sentences per batch in every mode ({day})'


# Before the decoder-step op counts of an attention comparison.
SEARCH_OPS = (
    'Ops one search step runs (the search loop of the longest batch, after'
    " XLA's fusion; on a GPU each is a kernel launch)"
)

# The toolkit table's head: rates per CPU second first, or wall-clock first
# (an accelerator).
TABLE_HEAD = {
    'cpu': (
        '| figure | L | nmt_jax, per CPU s | OpenNMT-py, per CPU s '
        '| ratio per CPU s | ratio wall | notes |\n'
        '|---|---:|---:|---:|---:|---:|---|'
    ),
    'wall': (
        '| figure | L | nmt_jax, per s | OpenNMT-py, per s '
        '| ratio wall | ratio per host CPU s | notes |\n'
        '|---|---:|---:|---:|---:|---:|---|'
    ),
}
