"""Training and evaluation (SPEC §3): `train_and_evaluate` and `evaluate`.

The step functions are pure and jitted once per bucket shape; the dropout
key is `fold_in(seed, step)` and the data order a function of the step, so a
checkpoint (step, params, optimizer state) is all a resumed run needs to
follow the trajectory of an uninterrupted one.
"""

import functools
import json
import math
import os
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from absl import logging
import flax
import jax
import jax.numpy as jnp
import optax

from nmt_jax import checkpoint
from nmt_jax import data
from nmt_jax import decode
from nmt_jax import default_config
from nmt_jax import metrics as metrics_lib
from nmt_jax import models
from nmt_jax import parallel
from nmt_jax import writers
from nmt_jax.errors import CheckpointError, ConfigError, TrainingError
from nmt_jax.vocab import PAD


@flax.struct.dataclass
class TrainState:
  step: jax.Array        # int32 scalar: number of updates applied
  params: Any
  opt_state: Any


# ----------------------------------------------------------------- building blocks


def create_model(config, task: data.Task) -> models.Seq2Seq:
  return models.Seq2Seq(config.model, len(task.source_vocab), len(task.target_vocab),
                        config.model.attention.max_source_length)


def learning_rate_fn(train_config, steps_per_epoch: int):
  """step -> learning rate for the schedules of SPEC §3."""
  lr, warmup = train_config.learning_rate, train_config.warmup_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    factor = jnp.minimum(1.0, (step + 1) / warmup) if warmup else 1.0
    if train_config.schedule == 'halve':
      # Halve at the start of epoch halve_from_epoch (1-based) and every epoch after.
      epoch = jnp.floor(step / steps_per_epoch) + 1
      factor = factor * 0.5 ** jnp.maximum(0.0, epoch - train_config.halve_from_epoch + 1)
    elif train_config.schedule == 'warmup_rsqrt':
      factor = factor * jnp.minimum(1.0, jnp.sqrt(max(warmup, 1) / jnp.maximum(step, 1.0)))
    return lr * factor

  return schedule


def create_optimizer(train_config, steps_per_epoch: int):
  schedule = learning_rate_fn(train_config, steps_per_epoch)
  parts = [optax.clip_by_global_norm(train_config.clip_norm)] if train_config.clip_norm else []
  return optax.chain(*parts, optax.adam(schedule)), schedule


def cross_entropy(logits, targets, label_smoothing: float = 0.0):
  """Summed token cross-entropy over non-PAD targets -> (loss_sum, num_tokens).

  With label smoothing the loss is shifted by the smoothed distribution's
  entropy, so a perfect prediction scores 0 either way.
  """
  weights = (targets != PAD).astype(jnp.float32)
  if label_smoothing:
    vocab = logits.shape[-1]
    confidence, low = 1.0 - label_smoothing, label_smoothing / (vocab - 1)
    soft = jax.nn.one_hot(targets, vocab) * (confidence - low) + low
    entropy = -(confidence * math.log(confidence) + (vocab - 1) * low * math.log(low + 1e-20))
    loss = optax.softmax_cross_entropy(logits, soft) - entropy
  else:
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(loss * weights), jnp.sum(weights)


def train_step(state: TrainState, batch, *, model, optimizer, config, axis_name=None):
  """One update on a batch {'source', 'target_in', 'target_out'} [B, L] -> (state, metric sums).

  Under pmap, `axis_name` names the device axis: each device holds B / devices
  rows, and token counts and gradients are summed over devices, so the update
  equals the jit one on the whole batch (dropout masks are drawn per device).
  """
  dropout_key = jax.random.fold_in(jax.random.key(config.seed), state.step)
  if axis_name:
    dropout_key = jax.random.fold_in(dropout_key, jax.lax.axis_index(axis_name))

  def total(x):
    return jax.lax.psum(x, axis_name) if axis_name else x

  def loss_fn(params):
    logits, diagnostics = model.apply({'params': params}, batch['source'], batch['target_in'],
                                      train=True, rngs={'dropout': dropout_key})
    loss_sum, tokens = cross_entropy(logits, batch['target_out'], config.train.label_smoothing)
    all_tokens = jnp.maximum(total(tokens), 1.0)
    loss = loss_sum / all_tokens
    if config.train.beta:
      # Shu & Nakayama fine-tuning: reward strong penalties, J = NLL - beta * mean_t g(t).
      mask = batch['target_out'] != PAD
      strength = jnp.sum(jnp.where(mask, diagnostics['strength'], 0.0)) / all_tokens
      loss = loss - config.train.beta * strength
    return loss, (loss_sum, tokens)

  (_, (loss_sum, tokens)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  grads, loss_sum, tokens = total(grads), total(loss_sum), total(tokens)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  state = TrainState(step=state.step + 1, params=optax.apply_updates(state.params, updates),
                     opt_state=opt_state)
  return state, {'loss_sum': loss_sum, 'tokens': tokens, 'grad_norm': optax.global_norm(grads)}


def eval_step(params, batch, *, model):
  """Teacher-forced loss sums of a batch (PAD rows contribute nothing)."""
  logits, _ = model.apply({'params': params}, batch['source'], batch['target_in'])
  loss_sum, tokens = cross_entropy(logits, batch['target_out'])
  return {'loss_sum': loss_sum, 'tokens': tokens}


class StepRunner(NamedTuple):
  """The train step of one parallel.mode, on the state layout that mode keeps in the loop."""
  run: Callable        # (loop state, this process's batch rows) -> (loop state, device metrics)
  to_loop: Callable    # global state (jit layout: replicated on the mesh) -> loop state
  to_global: Callable  # loop state -> global state, for evaluation and checkpoints
  metrics: Callable    # device metrics -> host values


def make_step_runner(config, model, optimizer, mesh) -> StepRunner:
  step = functools.partial(train_step, model=model, optimizer=optimizer, config=config)
  if config.parallel.mode == 'pmap':
    mapped = jax.pmap(functools.partial(step, axis_name=parallel.AXIS), axis_name=parallel.AXIS,
                      donate_argnums=0)
    return StepRunner(lambda state, rows: mapped(state, parallel.pmap_batch(rows)),
                      parallel.to_pmap, lambda state: parallel.from_pmap(state, mesh),
                      parallel.first_replica)
  jitted = jax.jit(step, donate_argnums=0)
  return StepRunner(lambda state, rows: jitted(state, parallel.shard_batch(rows, mesh)),
                    lambda state: state, lambda state: state, jax.device_get)


class Setup(NamedTuple):
  """What a training run is made of."""
  config: Any
  task: data.Task
  boundaries: List[int]
  batches: data.TrainBatches
  model: models.Seq2Seq
  optimizer: Any
  schedule: Any
  mesh: Any
  state: TrainState


def build(config, workdir: Optional[str] = None) -> Setup:
  """Validated config -> data, model, optimizer and the initial (step 0) state.

  Real corpora build their vocabularies into `<workdir>/vocab` if missing.
  """
  config = default_config.validate(config)
  task = data.load_task(config.data, config.seed, workdir, build_vocab=True)
  boundaries = data.bucket_boundaries(task.max_length, config.data.num_buckets)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  sizes = data.batch_sizes(boundaries, config.train.batch_size, config.data.batch_tokens,
                           mesh.devices.size)
  batches = data.TrainBatches(task.train, sizes, boundaries, config.seed)
  model = create_model(config, task)
  optimizer, schedule = create_optimizer(config.train, batches.num_batches)
  state = init_state(config, model, optimizer, mesh, data.dummy_batch(1, boundaries[0]))
  return Setup(config, task, boundaries, batches, model, optimizer, schedule, mesh, state)


def init_state(config, model, optimizer, mesh, sample_batch) -> TrainState:
  """Parameters from `seed`, replicated over the mesh."""
  def init(key):
    params = model.init(key, sample_batch['source'], sample_batch['target_in'])['params']
    return TrainState(step=jnp.int32(0), params=params, opt_state=optimizer.init(params))
  return jax.jit(init, out_shardings=parallel.replicated(mesh))(jax.random.key(config.seed))


class Evaluator:
  """Validation loss and decoding of a split with one model (jitted functions cached)."""

  def __init__(self, config, model, task: data.Task, mesh):
    self.config, self.model, self.task, self.mesh = config, model, task, mesh
    self.boundaries = data.bucket_boundaries(task.max_length, config.data.num_buckets)
    self._eval_step = jax.jit(functools.partial(eval_step, model=model))
    self._decoders = {}

  def loss(self, params, split: data.Split) -> float:
    sums = {'loss_sum': 0.0, 'tokens': 0.0}
    batch_size = self.config.train.batch_size
    for _, batch in data.eval_batches(split, batch_size, self.boundaries):
      out = jax.device_get(self._eval_step(params, parallel.shard_global_batch(batch, self.mesh)))
      sums = {k: sums[k] + float(out[k]) for k in sums}
    return sums['loss_sum'] / max(sums['tokens'], 1.0)

  def decode_batch_size(self, beam_size: int) -> int:
    devices = self.mesh.devices.size
    size = max(1, self.config.decode.batch_size // beam_size)
    return max(devices, size // devices * devices)

  def translate(self, params, split: data.Split, beam_size: int, limit: Optional[int] = None):
    """-> (hypothesis texts in split order, window metrics)."""
    if beam_size not in self._decoders:
      self._decoders[beam_size] = decode.make_decode_fn(self.model, self.config.decode, beam_size)
    hyps, stats = decode.decode_split(
        self._decoders[beam_size], params, split, self.decode_batch_size(beam_size),
        self.boundaries, limit, mesh=self.mesh,
        timing_repeats=self.config.decode.timing_repeats)
    vocab = self.task.target_vocab
    info = decode.window_metrics(stats)
    info['decode_ms_per_sentence'] = 1000 * stats['decode_seconds'] / max(len(hyps), 1)
    info['decode_compile_seconds'] = stats['compile_seconds']
    if len(stats['decode_seconds_all']) > 1:
      info['decode_ms_per_sentence_all'] = [
          1000 * t / max(len(hyps), 1) for t in stats['decode_seconds_all']]
    return [vocab.decode(h) for h in hyps], info

  def evaluate(self, params, split: data.Split, beam_size: int, limit: Optional[int] = None):
    """Loss, BLEU (+ signature), chrF, RIBES, window size and decoding time on `split`."""
    hypotheses, info = self.translate(params, split, beam_size, limit)
    references = split.target_text[:len(hypotheses)]
    result = metrics_lib.translation_metrics(hypotheses, references,
                                             self.config.data.target_lang)
    result.update(info)
    result['loss'] = self.loss(params, split)
    result['beam_size'] = beam_size
    result['num_sentences'] = len(hypotheses)
    return result, hypotheses


# ----------------------------------------------------------------- workdir


def prepare(config, workdir: str) -> data.Task:
  """One-time preparation of a real corpus: builds the workdir's vocabularies."""
  config = default_config.validate(config)
  if config.data.name in data.EMBEDDED_TASKS:
    logging.info('data.name=%s is generated on the fly; nothing to prepare', config.data.name)
  prepare_workdir(workdir)
  if config.data.name.startswith('tfds:'):
    from nmt_jax import corpus  # pylint: disable=g-import-not-at-top
    corpus.prepare_tfds(config.data)
  task = data.load_task(config.data, config.seed, workdir, build_vocab=True)
  splits = [('train', task.train), ('validation', task.eval)] + (
      [('test', task.test)] if task.test is not None else [])
  logging.info('prepared: %s', ', '.join(f'{name} {len(split):,} pairs' for name, split in splits))
  return task


def prepare_workdir(workdir: str):
  """Creates the workdir and checks it is writable, before anything is written."""
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, f'.write-test-{os.getpid()}')
    with open(probe, 'w') as f:
      f.write('ok')
    os.remove(probe)
  except OSError as e:
    raise CheckpointError(f'workdir {workdir} is not writable ({e.strerror}); '
                          'choose another --workdir') from None


def write_config(workdir: str, config):
  """Writes config.json, logging the fields that differ from the run the workdir had."""
  path = os.path.join(workdir, 'config.json')
  resolved = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    with open(path) as f:
      before = _flatten(json.load(f))
    changes = {k: (before.get(k), v) for k, v in _flatten(resolved).items() if before.get(k) != v}
    if changes:
      logging.warning('config differs from the workdir\'s config.json: %s', ', '.join(
          f'{k}: {old!r} -> {new!r}' for k, (old, new) in sorted(changes.items())))
  writers.write_json(path, resolved)


def _flatten(tree, prefix=''):
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def checkpoint_meta(config, task: data.Task, step: int, validation: Optional[Dict] = None):
  return {'step': int(step), 'config': json.loads(config.to_json_best_effort()),
          'source_vocab': task.source_vocab.tokens, 'target_vocab': task.target_vocab.tokens,
          'validation': validation or {}}


def check_vocab(meta: Dict, task: data.Task, where: str):
  for side, vocab in (('source', task.source_vocab), ('target', task.target_vocab)):
    stored = meta.get(f'{side}_vocab')
    if stored is not None and stored != vocab.tokens:
      raise CheckpointError(
          f'{where} was trained with a different {side} vocabulary ({len(stored)} tokens, '
          f'now {len(vocab.tokens)}); use the data config it was trained with or a new --workdir')


def load_params_from(workdir: str, config, abstract_params, mesh):
  """Best params of another workdir (train.init_from), checked against this model."""
  config_path = os.path.join(workdir, 'config.json')
  if not os.path.exists(config_path) or not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(f'train.init_from={workdir!r} has no config.json and checkpoints; '
                          'point it at the workdir of a finished training run')
  with open(config_path) as f:
    other_kind = json.load(f)['model']['attention']['kind']
  if other_kind != config.model.attention.kind:
    raise CheckpointError(
        f'train.init_from={workdir!r} trained attention kind {other_kind!r}, this config '
        f'{config.model.attention.kind!r}; fine-tune a workdir of the same kind')
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    step = ckpts.best_step()
    params = ckpts.restore_params(step, abstract_params, parallel.replicated(mesh),
                                  f'this model (train.init_from={workdir})')
    return params, step
  finally:
    ckpts.close()


# ----------------------------------------------------------------- the loop


def train_and_evaluate(config, workdir: str) -> Dict[str, Any]:
  """Trains (resuming from the workdir's latest checkpoint), then evaluates the best."""
  config = default_config.validate(config)
  prepare_workdir(workdir)
  lead = jax.process_index() == 0

  # ------------------------------------------------------------- data and model
  # (validated above, before the workdir exists: a config error leaves nothing behind)
  config, task, _, batches, model, optimizer, schedule, mesh, state = build(config, workdir)
  logging.info('model: %s parameters; %d training batches per epoch',
               f'{sum(x.size for x in jax.tree_util.tree_leaves(state.params)):,}',
               batches.num_batches)

  # ------------------------------------------------------------- checkpoints
  ckpts = checkpoint.Checkpoints(workdir, keep=config.train.keep_checkpoints)
  writer = None
  # Each process builds only its rows of every batch, ahead of the step, in a Grain thread.
  rows = functools.partial(parallel.process_rows, mesh=mesh)
  iterator = data.train_iterator(batches, config.train.num_steps, rows)
  try:
    start = ckpts.latest_step() or 0
    if start:
      check_vocab(ckpts.meta(start), task, f'workdir {workdir}')   # before shapes: says why
      state, _ = ckpts.restore(start, checkpoint.abstract(state), iterator)
      position = iterator.get_state()['next_index']
      if position not in (0, start):
        raise CheckpointError(f'checkpoint {start} in {workdir} has its data iterator at batch '
                              f'{position}; the checkpoint is inconsistent, resume from another '
                              'step or start a new --workdir')
      if position != start:    # saved with another process count: the stream is a function of step
        iterator.set_state({'next_index': start})
      logging.info('resuming from step %d', start)
    elif config.train.init_from:
      params, from_step = load_params_from(config.train.init_from, config,
                                           checkpoint.abstract(state.params), mesh)
      state = state.replace(params=params, opt_state=jax.jit(optimizer.init)(params))
      logging.info('initialised from %s (step %d)', config.train.init_from, from_step)
    if lead:
      write_config(workdir, config)
    writer = writers.MetricWriter(workdir, enabled=lead)
    evaluator = Evaluator(config, model, task, mesh)
    runner = make_step_runner(config, model, optimizer, mesh)
    logging.info('global batch %s over %d device(s) in %d process(es), parallel.mode=%s',
                 f'{config.data.batch_tokens} tokens (sentences per bucket: '
                 f'{", ".join(map(str, batches.sizes))})' if config.data.batch_tokens else
                 config.train.batch_size, mesh.devices.size, jax.process_count(),
                 config.parallel.mode)
    _train_loop(config, runner.to_loop(state), start, runner, batches, iterator, schedule,
                evaluator, ckpts, writer, task, mesh)
  finally:
    ckpts.close()
    if writer is not None:
      writer.close()
  return evaluate(config, workdir)


def _train_loop(config, state, start, runner, batches, iterator, schedule, evaluator, ckpts,
                writer, task, mesh):
  t = config.train
  devices = mesh.devices.size
  timer = time.perf_counter()
  since_log = {'loss_sum': 0.0, 'tokens': 0.0, 'grad_norm': 0.0, 'steps': 0, 'sentences': 0}
  pending = None   # (step, device metrics) of the previous step: at most two steps in flight
  last_saved = ckpts.latest_step()

  def consume(done_step, device_metrics):
    host = runner.metrics(device_metrics)
    loss = float(host['loss_sum']) / max(float(host['tokens']), 1.0)
    if not math.isfinite(loss) or not math.isfinite(float(host['grad_norm'])):
      raise TrainingError(
          f'training loss became {loss} at step {done_step}; stopped, the last good checkpoint '
          f'(step {last_saved}) is kept; lower train.learning_rate or set train.clip_norm')
    since_log['loss_sum'] += float(host['loss_sum'])
    since_log['tokens'] += float(host['tokens'])
    since_log['grad_norm'] += float(host['grad_norm'])
    since_log['steps'] += 1

  for step in range(start, t.num_steps):
    batch = next(iterator)
    since_log['sentences'] += len(batch['source']) * jax.process_count()
    state, device_metrics = runner.run(state, batch)
    if pending is not None:
      consume(*pending)
    pending = (step + 1, device_metrics)
    done = step + 1
    last = done == t.num_steps
    if done % t.log_every == 0 or last:
      consume(*pending)
      pending = None
      elapsed = time.perf_counter() - timer
      record = {'loss': since_log['loss_sum'] / max(since_log['tokens'], 1.0),
                # Target tokens of the global batch, over all devices and per device.
                'tokens_per_sec': since_log['tokens'] / elapsed,
                'tokens_per_sec_per_device': since_log['tokens'] / elapsed / devices,
                # Sentences per step (varies by bucket with data.batch_tokens).
                'global_batch': since_log['sentences'] / max(since_log['steps'], 1),
                'devices': devices,
                'grad_norm': since_log['grad_norm'] / max(since_log['steps'], 1),
                'learning_rate': float(schedule(done - 1)),
                'epoch': done / batches.num_batches}
      writer.write(done, 'train', record)
      eta = elapsed / max(since_log['steps'], 1) * (t.num_steps - done)
      per_device = (f' ({record["tokens_per_sec_per_device"]:,.0f} per device)'
                    if devices > 1 else '')
      logging.info('step %d/%d | loss %.4f | %s tgt tok/s%s | lr %.2e | ETA %s', done,
                   t.num_steps, record['loss'], f'{record["tokens_per_sec"]:,.0f}', per_device,
                   record['learning_rate'], _duration(eta))
      since_log = {'loss_sum': 0.0, 'tokens': 0.0, 'grad_norm': 0.0, 'steps': 0, 'sentences': 0}
      timer = time.perf_counter()
    validation = None
    if done % t.eval_every == 0 or last:
      if pending is not None:
        consume(*pending)
        pending = None
      validation, hypotheses = evaluator.evaluate(runner.to_global(state).params, task.eval,
                                                  t.eval_beam_size, limit=t.eval_num_sentences)
      writer.write(done, 'valid', _scalars(validation))
      writer.write_text(done, 'valid/samples', '\n\n'.join(
          f'src: {s}  \nhyp: {h}' for s, h in zip(task.eval.source_text[:3], hypotheses[:3])))
      logging.info('step %d validation | loss %.4f | BLEU %.2f | avg window %.1f', done,
                   validation['loss'], validation['bleu'], validation['avg_window'])
      timer = time.perf_counter()
    if done % t.checkpoint_every == 0 or last:
      if pending is not None:   # never save a state whose loss was not checked
        consume(*pending)
        pending = None
      ckpts.save(done, runner.to_global(state),
                 checkpoint_meta(config, task, done, validation and _scalars(validation)),
                 bleu=validation['bleu'] if validation else None, data_iterator=iterator)
      last_saved = done
      timer = time.perf_counter()


def _scalars(result: Dict) -> Dict:
  return {k: v for k, v in result.items() if isinstance(v, (int, float))}


def _duration(seconds: float) -> str:
  seconds = int(seconds)
  return f'{seconds // 3600}h{seconds % 3600 // 60:02d}m' if seconds >= 3600 else \
      f'{seconds // 60}m{seconds % 60:02d}s'


# ----------------------------------------------------------------- evaluation and translation


def restore_for_inference(config, workdir: str):
  """(task, model, mesh, params, step) of the workdir's best checkpoint."""
  config = default_config.validate(config)
  if not checkpoint.has_checkpoints(workdir):
    raise CheckpointError(f'workdir {workdir} has no checkpoints; train first '
                          f'(python -m nmt_jax.main --config=... --workdir={workdir})')
  task = data.load_task(config.data, config.seed, workdir)
  model = create_model(config, task)
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  sample = data.dummy_batch(1, 1)
  abstract_params = jax.eval_shape(
      lambda: model.init(jax.random.key(0), sample['source'], sample['target_in'])['params'])
  ckpts = checkpoint.Checkpoints(workdir, create=False)
  try:
    step = ckpts.best_step()
    check_vocab(ckpts.meta(step), task, f'workdir {workdir}')
    params = ckpts.restore_params(step, abstract_params, parallel.replicated(mesh))
  finally:
    ckpts.close()
  return config, task, model, mesh, params, step


def evaluate(config, workdir: str) -> Dict[str, Any]:
  """Decodes the test split (else validation) with the best checkpoint and decode.beam_size."""
  config, task, model, mesh, params, step = restore_for_inference(config, workdir)
  evaluator = Evaluator(config, model, task, mesh)
  result, hypotheses = evaluator.evaluate(params, task.test_or_eval, config.decode.beam_size)
  result['eval_split'] = 'test' if task.test is not None else 'validation'
  result['checkpoint_step'] = step
  lead = jax.process_index() == 0
  if lead:
    writers.write_json(os.path.join(workdir, 'eval_results.json'), result)
    with open(os.path.join(workdir, 'eval_hypotheses.txt'), 'w', encoding='utf-8') as f:
      f.write(''.join(h + '\n' for h in hypotheses))
    writer = writers.MetricWriter(workdir)
    writer.write(step, 'eval', _scalars(result))
    writer.close()
  logging.info('evaluation of step %d (beam %d): BLEU %.2f | chrF %.2f | RIBES %.4f | '
               'avg window %.1f | %.2f ms/sentence', step, config.decode.beam_size,
               result['bleu'], result['chrf'], result['ribes'], result['avg_window'],
               result['decode_ms_per_sentence'])
  logging.info('sacreBLEU signature: %s', result['bleu_signature'])
  return result


def translate(config, workdir: str, lines):
  """Translates source `lines` with the best checkpoint -> list of target texts."""
  config, task, model, mesh, params, _ = restore_for_inference(config, workdir)
  if not lines:
    raise ConfigError('translate got no input sentences; pass --input=FILE or pipe text on stdin')
  split = data.sentences_split(lines, task.source_vocab)
  longest = max(len(s) for s in split.source)
  if longest > task.max_length:
    raise ConfigError(f'an input sentence has {longest - 1} tokens, more than the model\'s '
                      f'data.max_length={task.max_length - 1}; split the sentence')
  evaluator = Evaluator(config, model, task, mesh)
  hypotheses, _ = evaluator.translate(params, split, config.decode.beam_size)
  return hypotheses
