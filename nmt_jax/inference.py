"""The eval, translate and score modes: one workdir or an ensemble of several.

Each takes the workdirs to decode with (`--workdir=A` or `--workdir=A,B`):
one uses that workdir's best checkpoint (by validation BLEU), several decode
as an ensemble (scorers.Ensemble) in one compiled loop.
"""

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import jax
import numpy as np

from nmt_jax.config import validation
from nmt_jax.data import dataset
from nmt_jax.data import segmentation
from nmt_jax.decoding import evaluation
from nmt_jax.decoding import outputs
from nmt_jax.decoding import restore
from nmt_jax.system import profiling
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import ConfigError
from nmt_jax.system.errors import UserError
from nmt_jax.workdir import folders
from nmt_jax.workdir import locks
from nmt_jax.workdir import writers


def _texts(config, task, decoded, split, k_best: int):
  """Per sentence, its hypotheses' (text, score, alignment text or None).

  The first `k_best` of each n-best list; unk replacement applied, then
  data.segmentation undone.
  """
  reverse, rows = config.data.reverse_source, []
  for index, nbest in enumerate(decoded.nbest):
    row = []
    for k, hypothesis in enumerate(nbest[:k_best]):
      text, alignment = task.target_vocab.decode(hypothesis.ids), None
      if hypothesis.alignment is not None:
        positions = decoded.positions(split, index, k, reverse)
        if config.decode.replace_unk:  # a word vocabulary: one id per word
          text = ' '.join(
              outputs.replace_unk(
                  hypothesis.ids,
                  [task.target_vocab.tokens[i] for i in hypothesis.ids],
                  positions,
                  split.source_text[index].split(),
              )
          )
        if config.decode.alignments == 'pharaoh':
          alignment = outputs.pharaoh(positions)
      text = segmentation.desegment(config.data.segmentation, text)
      row.append((text, hypothesis.score, alignment))
    rows.append(row)
  return rows


def _nbest_size(decode) -> int:
  """Hypotheses per sentence in the n-best output (0: none): decode.nbest;
  sampling with several samples and no decode.nbest: all of them."""
  if decode.method == 'sample' and not decode.nbest and decode.num_samples > 1:
    return decode.num_samples
  return decode.nbest


def _decode(config, evaluator, params, split, profile_dir=None):
  """Decodes with the method and alignments the config asks for.

  -> (decoded, rows).
  """
  aligned = bool(config.decode.alignments or config.decode.replace_unk)
  decoded = evaluator.decode(
      params,
      split,
      config.decode.beam_size,
      alignments=aligned,
      profile_dir=profile_dir,
      attention_weights=config.decode.alignments == 'soft',
      method=config.decode.method,
  )
  rows = _texts(
      config, evaluator.task, decoded, split, max(1, _nbest_size(config.decode))
  )
  decoded.texts = [row[0][0] for row in rows]
  return decoded, rows


def evaluate(
    config, paths: Sequence[str], output: Optional[str] = None
) -> Dict[str, Any]:
  """Decodes the test split (else validation) and scores it.

  One workdir: its best checkpoint; results go into it (eval_results.json,
  eval_hypotheses.txt, eval_references.txt, an 'eval' record in
  metrics.jsonl). With decode.step = N, that checkpoint, and the files go into
  <workdir>/eval_step_<N>/ (the record into metrics.jsonl). An ensemble
  writes into the folder `output`. With decode.nbest / decode.alignments,
  eval_nbest.txt / eval_alignments.txt (pharaoh) or eval_alignments.npz
  (soft) too. With decode.method=sample the hypotheses are the first
  samples, and eval_nbest.txt lists the samples (all of them without
  decode.nbest, when there are several).
  """
  return evaluate_resolved(validation.resolve(config), paths, output)


def evaluate_resolved(
    config, paths: Sequence[str], output: Optional[str] = None
) -> Dict[str, Any]:
  """`evaluate` of a config resolved already (training's, by its start)."""
  if (
      len(paths) == 1
      and output
      and (os.path.abspath(output) != os.path.abspath(paths[0]))
  ):
    # It wrote there, and read the workdir without its lock.
    raise ConfigError(
        f"--output={output}: one workdir's evaluation goes into that workdir;"
        " drop --output (it is the folder of an ensemble's results)"
    )
  if len(paths) > 1 and not output:
    raise ConfigError(
        'an ensemble evaluation writes its results into a folder of its own;'
        ' add --output=DIR'
    )
  if len(paths) > 1 and (
      os.path.abspath(output) in {os.path.abspath(p) for p in paths}
      or os.path.exists(os.path.join(output, workdir_files.CONFIG))
  ):
    raise ConfigError(
        f'--output={output} is a training workdir: the ensemble results would'
        ' replace its own; give the ensemble a folder of its own'
    )
  held = output or paths[0]
  target = held
  if len(paths) == 1 and config.decode.step is not None:
    target = os.path.join(held, f'eval_step_{config.decode.step}')
  created = folders.prepare(target)  # writable: fail now, not after decoding
  try:
    # Locked before restoring: a restore sets damaged checkpoints aside, which
    # must not happen under a run that is writing there.
    with locks.locked(held):
      result, rows, step = _evaluate_locked(config, paths, target)
  except BaseException:
    if created:
      folders.remove_if_empty(target, created)  # nothing left by a failure
    raise
  logging.info(
      'evaluation of %s (%s): BLEU %.2f | chrF %.2f | RIBES %.4f | '
      'avg window %.1f | %.2f ms/sentence',
      f'step {step}' if len(paths) == 1 else f'the ensemble of {len(paths)}',
      'first samples'
      if config.decode.method == 'sample'
      else f'beam {config.decode.beam_size}',
      result['bleu'],
      result['chrf'],
      result['ribes'],
      result['avg_window'],
      result['decode_ms_per_sentence'],
  )
  logging.info('sacreBLEU signature: %s', result['bleu_signature'])
  return result


def _evaluate_locked(config, paths: Sequence[str], target: str):
  """evaluate()'s work once `target` is locked -> (result, rows, step)."""
  task, scorer, mesh, params, checkpoint_steps = restore.restore_scorer(
      config, paths
  )
  evaluator = evaluation.Evaluator(config, scorer, task, mesh)
  split = task.test_or_eval
  profile_dir = None
  if config.decode.profile:
    profile_dir = profiling.profile_dir(target, workdir_files.PROFILE_DECODE)
    profiling.check_folder(profile_dir, 'decode.profile')
  decoded, rows = _decode(config, evaluator, params, split, profile_dir)
  result = evaluator.metrics(params, split, decoded, config.decode.beam_size)
  if config.decode.method == 'sample':  # the metrics of the first samples
    del result['beam_size']
    result['decode_method'] = 'sample'
    for name in ('num_samples', 'temperature', 'top_k', 'top_p', 'sample_seed'):
      result[name] = config.decode[name]
  result['eval_split'] = 'test' if task.test is not None else 'validation'
  step = checkpoint_steps[0]
  if len(paths) > 1:
    result['ensemble'] = list(paths)
    result['checkpoint_steps'] = checkpoint_steps
  else:
    result['checkpoint_step'] = step
  if jax.process_index() == 0:
    record_in = paths[0] if len(paths) == 1 else None
    soft = None
    if config.decode.alignments == 'soft':
      soft = _soft_alignments(config, decoded, range(len(split)))
    references = evaluator.references(split, len(rows))
    _write_eval(config, target, result, rows, references, record_in, soft)
  return result, rows, step


def _soft_alignments(config, decoded, keys) -> Dict[str, np.ndarray]:
  """{str(key): [T + 1, S] float32} of each sentence's best hypothesis.

  `keys`: one per decoded sentence (its 0-based input line).
  """
  reverse = config.data.reverse_source
  return {
      str(key): decoded.attention(index, reverse)
      for index, key in enumerate(keys)
  }


def _write_eval(
    config,
    target: str,
    result,
    rows,
    references,
    record_in: Optional[str],
    soft=None,
):
  """The evaluation's files in `target`; its record in `record_in`'s metrics.

  eval_references.txt holds the references line for line with
  eval_hypotheses.txt, as scored (detokenized), for external scorers and
  paired tests between runs. `soft`: the soft alignments by name
  (decode.alignments='soft').
  """
  writers.write_json(os.path.join(target, workdir_files.EVAL_RESULTS), result)
  writers.write_text(
      os.path.join(target, workdir_files.EVAL_HYPOTHESES),
      ''.join(row[0][0] + '\n' for row in rows),
  )
  writers.write_text(
      os.path.join(target, workdir_files.EVAL_REFERENCES),
      ''.join(reference + '\n' for reference in references),
  )
  nbest = os.path.join(target, workdir_files.EVAL_NBEST)
  alignments = os.path.join(target, workdir_files.EVAL_ALIGNMENTS)
  soft_alignments = os.path.join(target, workdir_files.EVAL_SOFT_ALIGNMENTS)
  # An earlier evaluation's files would no longer match these hypotheses.
  for path, wanted in (
      (nbest, _nbest_size(config.decode)),
      (alignments, config.decode.alignments == 'pharaoh'),
      (soft_alignments, soft is not None),
  ):
    if not wanted and os.path.exists(path):
      os.remove(path)
  if _nbest_size(config.decode):
    writers.write_text(
        nbest, ''.join(_nbest_lines(i, row) for i, row in enumerate(rows))
    )
  if config.decode.alignments == 'pharaoh':
    writers.write_text(alignments, ''.join(row[0][2] + '\n' for row in rows))
  if soft is not None:
    writers.write_npz(soft_alignments, soft)
  if record_in:
    writer = writers.MetricWriter(record_in)
    writer.write(result['checkpoint_step'], 'eval', evaluation.scalars(result))
    writer.close()


def _nbest_lines(index: int, row) -> str:
  return ''.join(
      outputs.nbest_line(index, text, score, alignment) + '\n'
      for text, score, alignment in row
  )


def _numbered(lines: Sequence[str]) -> List[Tuple[int, str]]:
  """(1-based line number, stripped line) of the non-blank lines."""
  numbered = [(i + 1, line.strip()) for i, line in enumerate(lines)]
  return [(number, line) for number, line in numbered if line]


def _check_lengths(config, rows, numbers: Sequence[int], what: str):
  """A UserError naming the first line of more pieces than the bound.

  rows: the lines' ids, each ending with EOS.
  """
  bound = config.decode.max_input_length
  for number, row in zip(numbers, rows):
    pieces = len(row) - 1  # EOS is not the line's
    if pieces > bound:
      raise UserError(
          f'{what} line {number} has {pieces} pieces, more than'
          f' decode.max_input_length={bound} (default 4 x data.max_length);'
          ' split the line, or raise --config.decode.max_input_length'
      )


def alignments_file(config, output: Optional[str]) -> Optional[str]:
  """Where translate writes decode.alignments='soft' matrices (else None).

  decode.alignments_file, else beside translate's `output` file
  (<output>.alignments.npz). Raises ConfigError when neither names a file.
  """
  if config.decode.alignments != 'soft':
    return None
  if config.decode.alignments_file:
    return config.decode.alignments_file
  if output:
    return f'{output}.alignments.npz'
  raise ConfigError(
      "config: decode.alignments='soft' writes attention matrices to a file,"
      ' and translate writes to stdout here; set'
      ' --config.decode.alignments_file=FILE.npz (or give --output=FILE:'
      ' they go to FILE.alignments.npz)'
  )


def checked_alignments_file(config, output: Optional[str]) -> Optional[str]:
  """alignments_file(), checked before decoding: a writable folder, and no
  device, FIFO or socket at the path (the .npz is written whole, renamed over
  it). A UserError in one line if not."""
  path = alignments_file(config, output)
  if path is None:
    return None
  return writers.check_regular_file(path, 'config.decode.alignments_file')


def translate(
    config, paths: Sequence[str], lines, output: Optional[str] = None
) -> List[str]:
  """Translates source `lines` -> output lines.

  One translation per input line (a blank line gives a blank line), followed
  by ' ||| alignment' with decode.alignments='pharaoh'; with decode.nbest
  (or several decode.num_samples), the n-best lines of every non-blank input
  line instead, numbered by input line from 0 (sampling: the samples in
  order). With decode.alignments='soft' the attention matrices go to
  alignments_file(config, output) (`output`: the file the lines go to, None
  for stdout), keyed by 0-based input line.
  """
  config = validation.resolve(config)
  soft_file = None
  if jax.process_index() == 0:  # the one that writes: fail before decoding
    soft_file = checked_alignments_file(config, output)
  numbered = _numbered(lines)
  if not numbered:
    raise ConfigError(
        'translate got no input sentences; pass --input=FILE or pipe text '
        'on stdin'
    )
  task, scorer, mesh, params, _ = restore.restore_scorer(
      config, paths, corpus=False
  )
  split = dataset.sentences_split(
      [line for _, line in numbered],
      task.source_vocab,
      line_numbers=[number for number, _ in numbered],
      reverse=config.data.reverse_source,
  )
  _check_lengths(config, split.source, [n for n, _ in numbered], 'input')
  evaluator = evaluation.Evaluator(config, scorer, task, mesh)
  decoded, rows = _decode(config, evaluator, params, split)
  if soft_file:
    writers.write_npz(
        soft_file,
        _soft_alignments(config, decoded, [n - 1 for n, _ in numbered]),
    )
  if _nbest_size(config.decode):
    return [
        _nbest_lines(number - 1, row).rstrip('\n')
        for (number, _), row in zip(numbered, rows)
    ]
  out = [''] * len(lines)
  for (number, _), row in zip(numbered, rows):
    text, _, alignment = row[0]
    out[number - 1] = text if alignment is None else f'{text} ||| {alignment}'
  return out


def score(config, paths: Sequence[str], pairs) -> List[str]:
  """Scores (source, target) text pairs -> one outputs.score_line per pair.

  Teacher-forced log-probabilities of each target token (EOS included), the
  same numbers the validation loss averages; they do not depend on
  decode.batch_size (pairs per batch).
  """
  config = validation.resolve(config)
  if not pairs:
    raise ConfigError(
        'score got no sentence pairs; give --source=FILE --target=FILE or'
        ' tab-separated pairs on stdin'
    )
  task, scorer, mesh, params, _ = restore.restore_scorer(
      config, paths, corpus=False
  )
  numbers = [number for number, _, _ in pairs]
  sources = dataset.sentences_split(
      [s for _, s, _ in pairs],
      task.source_vocab,
      line_numbers=numbers,
      reverse=config.data.reverse_source,
  )
  targets = [
      np.asarray(task.target_vocab.encode(t, line=number), np.int32)
      for number, _, t in pairs
  ]
  split = dataset.Split(
      sources.source, targets, sources.source_text, [t for _, _, t in pairs]
  )
  _check_lengths(config, split.source, numbers, 'source')
  _check_lengths(config, split.target, numbers, 'target')
  evaluator = evaluation.Evaluator(config, scorer, task, mesh)
  values = evaluator.token_log_probs(
      params, split, evaluator.sentences_per_batch(config.decode.batch_size)
  )
  return [outputs.score_line(v) for v in values]
