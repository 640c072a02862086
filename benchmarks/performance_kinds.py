"""The attention comparisons of docs/performance.md: each run and its words.

`benchmarks/performance.sh` writes these `bench decode --compare` files;
`benchmarks.performance` shows one table per file it finds.
"""

# bench decode --compare files: (name, title, what was run).
KINDS = (
    (
        'kinds_L200.json',
        'memory K = 64 against global general attention, L = 200',
        (
            'Decoding 256 copy-task sentences of up to 200 tokens (random'
            ' weights, each hypothesis as long as its reference), alternating'
            ' in one process. In beam search both read one cache row per'
            ' sentence for its K hypotheses (`GROUPED_CACHE`).'
        ),
    ),
    (
        'kinds_flexible_L150.json',
        'flexible attention (tau = 1.2) against global general, L = 150',
        (
            'Decoding 256 copy-task sentences of up to 150 tokens (random'
            " weights, each hypothesis as long as its reference). Flexible's"
            ' pruned path scores only the positions its window keeps; with'
            ' random weights the focus barely moves: the cost of the machinery'
            ' at a narrow window. Its strength network g(t) reads W_g^i i_t'
            ' from a per-word table (`decode.gate_table`), so it runs one'
            ' [B, H] x [H, H] product per step. In beam search both read one'
            ' cache row per sentence for its K hypotheses (`GROUPED_CACHE`);'
            ' flexible gathers one window per sentence, the union of its'
            " hypotheses' kept intervals. Each kind runs its own config:"
            " flexible is Shu & Nakayama's decoder (query h_{t-1}, whose"
            ' context also feeds the LSTM, so layer 0 reads 1,024 inputs'
            ' instead of 768; concat score, one more [B, H] x [H, H] product'
            " per step), global general is Luong's (query h_t): the rows"
            " compare the two configs' decoding, not the attention kinds"
            ' alone.'
        ),
    ),
    (
        'kinds_L200_long.json',
        (
            'memory K = 64 against global general attention, sources of 190-200'
            ' tokens'
        ),
        (
            'As above (L = 200), with every copy-task sentence 190 to 200'
            ' tokens long instead of 1 to 200 (`data.min_length=190`): the'
            ' source length the comparison is about, not its average.'
        ),
    ),
    (
        'kinds_none_L200_long.json',
        (
            'no attention against global general attention, sources of 190-200'
            ' tokens'
        ),
        (
            'As above (190-200 tokens), with no attention at all: the same'
            ' encoder and LSTM decoder without a context, so also without'
            " input feeding and Luong's attentional layer W_c (layer 0 reads"
            ' 512 inputs instead of 768). The floor under every kind: no'
            ' attention kind with input feeding can be faster than this'
            ' against global.'
        ),
    ),
    (
        'kinds_flexible_L150_long.json',
        (
            'flexible attention (tau = 1.2) against global general, sources of'
            ' 140-150 tokens'
        ),
        (
            'As above (L = 150), with every copy-task sentence 140 to 150'
            ' tokens long (`data.min_length=140`).'
        ),
    ),
    (
        'kinds_flexible_L150_same_decoder.json',
        (
            'flexible attention (tau = 1.2) against global concat attention in'
            " flexible's decoder, sources of 140-150 tokens"
        ),
        (
            'As above (140-150 tokens), with global attention in the same'
            ' decoder as flexible (query h_{t-1}, concat score:'
            ' `--compare.model.query=previous'
            ' --compare.model.attention.score=concat`): the two attention'
            ' kinds alone.'
        ),
    ),
    (
        'kinds_flexible_L150_rnnsearch_long.json',
        (
            "flexible attention (tau = 1.2) in Shu & Nakayama's base model"
            ' against global general, sources of 140-150 tokens'
        ),
        (
            'As above (140-150 tokens), with flexible in the whole RNNsearch'
            ' base model the paper builds on (`configs/flexible.py:rnnsearch`:'
            ' the context and the previous word feed the LSTM, no input'
            " feeding, so layer 0 reads 768 inputs as Luong's decoder does):"
            " Shu & Nakayama's model against Luong's, each as published."
        ),
    ),
    (
        'kinds_flexible_L150_rnnsearch_same_model.json',
        (
            'flexible attention (tau = 1.2) against global concat attention in'
            " Shu & Nakayama's base model, sources of 140-150 tokens"
        ),
        (
            'As above, with global attention in the same RNNsearch model'
            ' (`--compare.model.query=previous'
            ' --compare.model.attention.score=concat'
            ' --compare.model.input_feeding=false`): the comparison of the'
            " paper's decoding-time table, flexible against its own baseline."
        ),
    ),
)

# Runs that only a GPU makes (benchmarks/performance.sh, PLATFORM=gpu).
GPU_KINDS = (
    (
        'kinds_L200_long_cuda_graphs.json',
        (
            'memory K = 64 against global general attention, sources of 190-200'
            ' tokens, both as CUDA graphs'
        ),
        (
            'Memory against global at 190-200 tokens as in its table above,'
            ' with both decoders compiled with'
            ' `compiler_options=--xla_gpu_enable_command_buffer=...,CONDITIONAL,WHILE`'
            ' (GPU only): the search loop runs on the device, not launched'
            ' kernel by kernel from the host.'
        ),
    ),
    (
        'kinds_L200_long_batch512.json',
        (
            'memory K = 64 against global general attention, sources of 190-200'
            ' tokens, 512 sentences per batch'
        ),
        (
            'Memory against global at 190-200 tokens as in its table above,'
            ' decoding 1,000 sentences in batches of 512 instead of 64: more'
            " work per search step, so attention's share of a step grows where"
            ' a step is bound by its kernel launches.'
        ),
    ),
    (
        'kinds_L200_long_batch512_cuda_graphs.json',
        (
            'memory K = 64 against global, 190-200 tokens, 512 sentences per'
            ' batch, both as CUDA graphs'
        ),
        'The two runs above together: 512 sentences per batch, CUDA graphs.',
    ),
    (
        'kinds_flexible_L150_long_cuda_graphs.json',
        (
            'flexible (tau = 1.2) against global general, 140-150 tokens, both'
            ' as CUDA graphs'
        ),
        "As flexible's table above, both decoders as CUDA graphs.",
    ),
    (
        'kinds_flexible_L150_long_batch512_cuda_graphs.json',
        (
            'flexible (tau = 1.2) against global general, 140-150 tokens, 512'
            ' sentences per batch, both as CUDA graphs'
        ),
        (
            "As flexible's table above, decoding 1,000 sentences in batches"
            ' of 512, both decoders as CUDA graphs.'
        ),
    ),
    (
        'kinds_flexible_L150_rnnsearch_same_model_cuda_graphs.json',
        (
            "flexible (tau = 1.2) against global concat in Shu & Nakayama's"
            ' base model, 140-150 tokens, both as CUDA graphs'
        ),
        (
            'As the RNNsearch table above (the same model, global concat'
            ' attention), both decoders as CUDA graphs.'
        ),
    ),
)
