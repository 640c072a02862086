"""Training: `train_and_evaluate(config, workdir)`, read top to bottom.

The pieces live in the wings: the step functions in training/steps.py,
validation and the final evaluation in decoding/evaluation.py, the workdir's
files in workdir/ (folders.py, checkpoint.py; where a run resumes in
resume.py), the parallel step in system/parallel.py, batches in
data/batching.py.
"""

import contextlib
import dataclasses
import functools
import math
import os
from typing import Any, Callable, Dict, Optional

from absl import logging
import jax

from nmt_jax import data
from nmt_jax import inference
from nmt_jax.analysis import attention_maps
from nmt_jax.analysis import plots
from nmt_jax.config import compiler_options
from nmt_jax.config import validation
from nmt_jax.data import batching
from nmt_jax.data import dataset
from nmt_jax.decoding import evaluation
from nmt_jax.model import seq2seq
from nmt_jax.system import allocator
from nmt_jax.system import errors
from nmt_jax.system import parallel
from nmt_jax.system import profiling
from nmt_jax.system import progress_bars
from nmt_jax.system import workdir_files
from nmt_jax.system.errors import Preempted
from nmt_jax.training import plateau as plateau_lib
from nmt_jax.training import preemption
from nmt_jax.training import progress as progress_lib
from nmt_jax.training import steps
from nmt_jax.workdir import checkpoint
from nmt_jax.workdir import folders
from nmt_jax.workdir import init_from
from nmt_jax.workdir import locks
from nmt_jax.workdir import resume
from nmt_jax.workdir import run_config
from nmt_jax.workdir import writers


@dataclasses.dataclass
class Setup:
  """What a training run is made of (train.build)."""

  config: Any  # resolved
  task: dataset.Task
  batches: batching.TrainBatches  # .boundaries: the bucket lengths
  model: Any  # seq2seq.Seq2Seq
  optimizer: Any
  schedule: Callable  # step -> learning rate
  mesh: Any
  state: steps.TrainState  # step 0, replicated on the mesh

  def step_fn(self, axis_name=None):
    """steps.train_step(state, batch) for this run.

    It uses this run's model, optimizer and config.
    """
    return functools.partial(
        steps.train_step,
        model=self.model,
        optimizer=self.optimizer,
        config=self.config,
        axis_name=axis_name,
    )


def make_mesh(config):
  """The device mesh, checked against the training batch.

  Checked before anything is built.
  """
  mesh = parallel.make_mesh(config.parallel.mesh_shape)
  if not config.data.batch_tokens:  # else batch_sizes rounds them (below)
    parallel.check_divisible(config.train.batch_size, mesh, 'train.batch_size')
    count, devices = config.train.accumulate_steps, mesh.devices.size
    if config.train.batch_size // count % devices:
      raise errors.ConfigError(
          f'config: train.accumulate_steps={count} splits'
          f' train.batch_size={config.train.batch_size} into micro-batches'
          f' of {config.train.batch_size // count}, not divisible by the'
          f' {devices} devices; use a batch_size that is a multiple of'
          f' {count * devices}'
      )
  if config.train.dropout_rng == 'philox2x32' and mesh.devices.size > 1:
    # XLA cannot lower Philox's mulhi in a step sharded over devices.
    raise errors.ConfigError(
        'config: train.dropout_rng=philox2x32 does not compile in a step '
        f'sharded over {mesh.devices.size} devices; use '
        '--config.train.dropout_rng=threefry2x32'
    )
  # Every bucket holds a batch of a multiple of the device count.
  batching.training_batch_sizes(config, mesh.devices.size)
  return mesh


def with_init_from_learning_rate(config):
  """(`config` with train.learning_rate of train.init_from, that run's step).

  Resolved the same way on every start, so a resumed fine-tuning run matches
  the config.json it wrote.
  """
  step, rate = init_from.init_from_learning_rate(config.train.init_from)
  if not math.isfinite(rate) or rate <= 0:
    # Checked here: the config's own checks ran before the rate was known.
    raise errors.ConfigError(
        f'train.init_from={config.train.init_from!r} trained at learning'
        f' rate {rate} up to step {step}, which must be a positive number;'
        ' set train.init_from_learning_rate=False and give'
        ' train.learning_rate'
    )
  config = config.copy_and_resolve_references()
  config.train.learning_rate = rate
  logging.info(
      'train.init_from_learning_rate: train.learning_rate=%.3g, the rate of'
      ' %s at step %d',
      rate,
      config.train.init_from,
      step,
  )
  return config, step


def with_epochs(config, steps_per_epoch: int):
  """`config` with train.num_steps from train.num_epochs, when that is set."""
  if not config.train.num_epochs:
    return config
  config = config.copy_and_resolve_references()
  # Rounded first: 1.1 epochs of 50 steps is 55.00000000000001 steps.
  exact = round(config.train.num_epochs * steps_per_epoch, 6)
  steps = max(1, math.ceil(exact))
  config.train.num_steps = steps
  logging.info(
      'train.num_epochs=%g: %d steps of %d per epoch',
      config.train.num_epochs,
      steps,
      steps_per_epoch,
  )
  return config


def build(config, workdir=None, mesh=None) -> Setup:
  """Resolved config -> data, model, optimizer and the step-0 state.

  Real corpora build their vocabularies into `<workdir>/vocab` if missing.
  `Setup.config` has train.num_steps derived from train.num_epochs (if set).
  """
  mesh = mesh or make_mesh(config)
  task = parallel.process_0_first(
      lambda: data.load_task(config.data, config.seed, workdir, True),
      'loading the data',
  )
  batches = batching.training_batches(task, config, mesh.devices.size)
  config = with_epochs(config, batches.num_batches)
  model = seq2seq.create_model(config, task)
  optimizer, schedule = steps.create_optimizer(
      config.train, batches.num_batches
  )
  sample = batching.dummy_batch(1, batches.boundaries[0])
  state = steps.init_state(
      config, model, optimizer, parallel.replicated(mesh), sample
  )
  return Setup(config, task, batches, model, optimizer, schedule, mesh, state)


def prepare(config, workdir: str) -> dataset.Task:
  """--mode=prepare: downloads a TFDS corpus and builds the vocabularies.

  The vocabularies are built in the workdir.
  """
  config = validation.resolve(config)
  if config.data.name in data.embedded.NAMES:
    logging.info(
        'data.name=%s is generated on the fly; nothing to prepare',
        config.data.name,
    )

  def prepare_and_load():
    # On process 0 first: downloads into a shared TFDS data dir at once
    # collide (and the vocabularies are built once).
    data.prepare_corpus(config.data)
    return data.load_task(config.data, config.seed, workdir, True)

  created = folders.prepare(workdir)
  try:
    task = parallel.process_0_first(prepare_and_load, 'preparing the data')
  except BaseException:
    if created:
      folders.remove_if_empty(workdir, created)  # a failed download: nothing
    raise
  splits = [('train', task.train), ('validation', task.eval)]
  if task.test is not None:
    splits.append(('test', task.test))
  logging.info(
      'prepared: %s',
      ', '.join(f'{name} {len(split):,} pairs' for name, split in splits),
  )
  return task


def train_and_evaluate(
    config, workdir: str, evaluate: bool = True
) -> Optional[Dict[str, Any]]:
  """Trains, then evaluates the best checkpoint (unless not `evaluate`).

  Training resumes from the workdir's latest checkpoint.
  """
  # A config or device error raises here, before the workdir exists.
  config = validation.resolve(config)
  if evaluate and config.decode.step is not None:
    # The final evaluation would refuse it, after the whole training.
    raise errors.ConfigError(
        f'decode.step={config.decode.step} names a checkpoint for --mode=eval,'
        ' translate or score; training evaluates its best checkpoint at the'
        ' end: drop decode.step here, and evaluate a kept step afterwards'
        ' with --mode=eval --config.decode.step=N'
    )
  init_step = None  # train.init_from's best checkpoint
  if config.train.init_from_learning_rate:
    # Parameters and learning rate of one and the same step.
    config, init_step = with_init_from_learning_rate(config)
  mesh = make_mesh(config)
  if checkpoint.has_checkpoints(workdir):
    run_config.check_identity(config, workdir, 'resuming its training')
  elif checkpoint.set_aside_steps(workdir):
    # Training from scratch would drop its records (metrics.jsonl).
    corrupt = os.path.join(
        workdir, workdir_files.CHECKPOINTS, workdir_files.CORRUPT
    )
    raise errors.CheckpointError(
        f'every checkpoint of {workdir} was set aside as damaged ({corrupt});'
        ' train in a new --workdir, or delete that folder to train this one'
        ' from scratch'
    )
  created = folders.prepare(workdir)
  try:
    with locks.locked(workdir):
      return _train_and_evaluate(config, workdir, mesh, evaluate, init_step)
  except BaseException:
    if created:
      folders.remove_if_empty(workdir, created)  # nothing left by a failure
    raise


def _train_and_evaluate(
    config, workdir: str, mesh, evaluate: bool, init_step: Optional[int]
):
  """train_and_evaluate's work once the workdir is locked.

  Builds the run, resumes it from its latest checkpoint (or starts from
  train.init_from's, at `init_step` if given), trains to train.num_steps
  (validating, saving, maybe stopping early) and evaluates the best
  checkpoint. `config` is resolved; `mesh` is make_mesh's. -> the
  evaluation's results (inference.evaluate), None without `evaluate`.
  """
  lead = jax.process_index() == 0

  if (
      config.train.beta
      and not config.train.init_from
      and not checkpoint.has_checkpoints(workdir)
  ):
    raise errors.config_error(
        'train.init_from',
        config.train.init_from,
        f'is empty, but train.beta={config.train.beta} fine-tunes a trained'
        " model's attention strength (from random weights it would reward g(t)"
        ' of nothing learnt)',
        'give the workdir of a trained flexible run',
    )

  # ------------------------------------------------------------ data and model
  setup = build(config, workdir, mesh)
  config, t = setup.config, setup.config.train
  task, batches, state = setup.task, setup.batches, setup.state
  for beam_size in (config.decode.beam_size, t.eval_beam_size):
    evaluation.check_beam(beam_size, task)  # before anything is written
  num_params = sum(x.size for x in jax.tree_util.tree_leaves(state.params))
  logging.info(
      'model: %s parameters; %d training batches per epoch',
      f'{num_params:,}',
      batches.num_batches,
  )
  if jax.default_backend() == 'cpu' and allocator.describe() == 'system':
    logging.info(
        'malloc: glibc gives every step fresh pages (docs/options.md, "CPU'
        ' memory allocator": tcmalloc, or NMT_JAX_KEEP_FREED_MEMORY=1)'
    )

  # ------------------------------------------------------------ checkpoints
  ckpts = checkpoint.Checkpoints(
      workdir, keep=t.keep_checkpoints, keep_every=t.keep_every
  )
  writer = None
  stack = contextlib.ExitStack()
  # Each process builds only its rows of every batch, ahead of the step, in a
  # Grain thread.
  rows = functools.partial(parallel.process_rows, mesh=mesh)
  iterator = batching.train_iterator(batches, t.num_steps, rows)
  try:
    start, resumed_meta = 0, {}
    if ckpts.latest_step() is not None:
      start, state, resumed_meta = resume.restore_training(
          ckpts, state, iterator, task, workdir, t
      )
      logging.info('resuming from step %d', start)
    elif t.init_from:
      params, from_step = init_from.load_params_from(
          t.init_from,
          config,
          checkpoint.abstract(state.params),
          mesh,
          task,
          init_step,
      )
      opt_state = jax.jit(setup.optimizer.init)(params)
      state = state.replace(
          params=params,
          opt_state=opt_state,
          ema_params=None if state.ema_params is None else params,
      )
      logging.info('initialised from %s (step %d)', t.init_from, from_step)
    if lead:
      run_config.write_config(workdir, config)
      writers.truncate_metrics(workdir, start)  # the re-run steps anew
    plateau = plateau_lib.resume(
        t, workdir, start, steps.plateau_scale(state.opt_state)
    )
    end = start if plateau.stopped else t.num_steps
    if plateau.stopped:
      logging.info('stopped early at step %d: %s', start, plateau.describe())
    writer = writers.MetricWriter(workdir, enabled=lead)
    evaluator = evaluation.Evaluator(config, setup.model, task, mesh)
    train_step = parallel.data_parallel_step(
        setup.step_fn(),
        config.parallel.mode,
        mesh,
        compiler_options.get(config),
    )
    _log_batch(config, batches, mesh)

    # ---------------------------------------------------------- the loop
    state = train_step.to_loop(state)
    progress = progress_lib.Progress(
        train_step.metrics,
        ckpts.latest_step(),
        t.divergence_factor,
        math.log(len(task.target_vocab)),
        t.divergence_steps,
        'lower train.learning_rate or train.clip_norm'
        if t.clip_norm
        else (
            'lower train.learning_rate (train.clip_norm, off in this run,'
            ' changes the optimizer state: turn it on in a new --workdir)'
        ),
    )
    # A resumed run checks its losses against the running mean it had.
    progress.restore_divergence_state(resumed_meta.get('divergence'))
    time_left = progress_lib.Eta(t.num_steps, t.eval_every)
    sigterm = stack.enter_context(
        preemption.Preemption(t.sigterm_grace_seconds)
    )
    profiler = stack.enter_context(
        profiling.Profiler(
            profiling.profile_dir(workdir, workdir_files.PROFILE), t
        )
    )
    loop = _Loop(
        setup,
        evaluator,
        train_step,
        iterator,
        writer,
        ckpts,
        plateau,
        progress,
        time_left,
        ckpts.best_bleu(),
    )
    for step in range(start, end):
      preemption.raise_if_interrupted()  # one a gc callback dropped
      profiler.before(step)
      batch = next(iterator)
      state, device_metrics = train_step(state, batch)
      done = step + 1
      profiler.after(done, state)
      last = done == t.num_steps
      progress.push(done, device_metrics, len(batch['source']))
      stop = sigterm.reached(done)
      log, validate, save = (
          done % every == 0 or last
          for every in (t.log_every, t.eval_every, t.checkpoint_every)
      )
      save = save or (stop and progress.last_saved != done)
      if not (log or validate or save or stop):
        continue
      progress.flush()  # never log, validate or save an unchecked loss
      if log:
        record = progress.summary(
            done,
            mesh.devices.size,
            batches.num_batches,
            lambda s: setup.schedule(s) * plateau.scale,
        )
        writer.write(done, 'train', record)
        eta = time_left.seconds_left(done, progress.seconds_per_step)
        _log_progress(
            done, t.num_steps, record, eta, time_left.steps_only(done)
        )
        progress.reset()
      progress.pause()  # validation and saving are not training time
      state = _validate_and_save(loop, state, done, validate, save)
      if plateau.stopped:
        break
      if stop:
        raise Preempted(
            f'stopped by SIGTERM after step {done}, saved in {ckpts.directory};'
            ' run the same command again to resume'
        )
      progress.resume()
  finally:
    stack.close()
    try:
      with preemption.uninterrupted():
        ckpts.close()  # the save in flight is finished
    finally:
      if writer is not None:
        writer.close()
  # `config` is resolved: train_and_evaluate's start checked it.
  return inference.evaluate_resolved(config, [workdir]) if evaluate else None


@dataclasses.dataclass
class _Loop:
  """What the training loop's validations and saves use besides the state."""

  setup: Setup
  evaluator: evaluation.Evaluator
  train_step: Any  # parallel.data_parallel_step's: jit or pmap
  iterator: Any  # the training batches, saved with every checkpoint
  writer: writers.MetricWriter
  ckpts: checkpoint.Checkpoints
  plateau: plateau_lib.Plateau
  progress: progress_lib.Progress
  time_left: progress_lib.Eta
  # A validation better than every saved one is saved whatever the step:
  # the best checkpoint is what eval, translate and early stopping use.
  best_bleu: Optional[float]


def _validate_and_save(
    loop: _Loop, state, done: int, validate: bool, save: bool
):
  """Validates and saves after step `done` as the loop's flags say -> state.

  A validation writes its scalars and samples (and attention images) and
  counts towards the plateau's decay (the returned state then has the new
  learning-rate scale) and early stop; a BLEU better than every saved one,
  or an early stop, makes it a save. A save keeps the state with the data
  iterator's position, the validation and the divergence check's state.
  """
  config, t, task = loop.setup.config, loop.setup.config.train, loop.setup.task
  evaluator, train_step, writer = loop.evaluator, loop.train_step, loop.writer
  plateau, progress = loop.plateau, loop.progress
  result = None
  if validate:
    params = steps.eval_params(train_step.to_global(state))
    with loop.time_left.validation():
      result, hypotheses = evaluator.evaluate(
          params, task.eval, t.eval_beam_size, limit=t.eval_num_sentences
      )
    writer.write(done, 'valid', evaluation.scalars(result))
    writer.write_text(done, 'valid/samples', _samples(task, hypotheses))
    if t.attention_images:
      _attention_images(config, evaluator, params, writer, done)
    logging.info(
        'step %d validation | loss %.4f | BLEU %.2f | avg window %.1f',
        done,
        result['loss'],
        result['bleu'],
        result['avg_window'],
    )
    if loop.best_bleu is None or result['bleu'] > loop.best_bleu:
      save, loop.best_bleu = True, result['bleu']
    if plateau.active:
      decayed, stopped = plateau.update(done, result)
      if decayed:
        state = steps.set_plateau_scale(state, plateau.scale)
        logging.info(
            'learning rate x%g (x%g in all): %s',
            plateau.decay,
            plateau.scale,
            plateau.describe(),
        )
      if stopped:
        logging.info('stopping early: %s', plateau.describe())
        save = True
  if save:
    meta = checkpoint.checkpoint_meta(
        config, task, done, result and evaluation.scalars(result)
    )
    meta['divergence'] = progress.divergence_state()
    with preemption.uninterrupted():
      loop.ckpts.save(
          done,
          train_step.to_global(state),
          meta,
          bleu=result['bleu'] if result else None,
          data_iterator=loop.iterator,
      )
    progress.last_saved = done
  return state


def _log_batch(config, batches, mesh):
  if config.data.batch_tokens:
    sizes = ', '.join(map(str, batches.sizes))
    batch = f'{config.data.batch_tokens} tokens (sentences per bucket: {sizes})'
  else:
    batch = config.train.batch_size
  logging.info(
      'global batch %s over %d device(s) in %d process(es), parallel.mode=%s',
      batch,
      mesh.devices.size,
      jax.process_count(),
      config.parallel.mode,
  )
  kind, _ = batching.training_bucketing(config.data)
  logging.info(
      'training length buckets (%s, data.bucketing=%s): %s',
      kind,
      config.data.bucketing,
      ', '.join(map(str, batches.boundaries)),
  )


def _log_progress(step, num_steps, record, eta, steps_only):
  per_device = ''
  if record['devices'] > 1:
    per_device = f' ({record["tokens_per_sec_per_device"]:,.0f} per device)'
  logging.info(
      'step %d/%d | loss %.4f | %s tgt tok/s%s | lr %.2e | ETA %s%s',
      step,
      num_steps,
      record['loss'],
      f'{record["tokens_per_sec"]:,.0f}',
      per_device,
      record['learning_rate'],
      progress_bars.duration(eta),
      ' (training steps only: no validation timed yet)' if steps_only else '',
  )


def _attention_images(config, evaluator, params, writer, step: int):
  """The attention of the first train.attention_images validation sentences
  as TensorBoard images valid/attention/<i>.

  A greedy decode of its own, with the weights (the validation's decoder
  keeps none), in one small batch; every process decodes, process 0 draws.
  """
  task = evaluator.task
  count = min(config.train.attention_images, len(task.eval))
  decoded = evaluator.decode(
      params,
      task.eval,
      1,
      limit=count,
      attention_weights=True,
      batch_size=count,
  )
  if not writer.enabled:
    return
  translations = attention_maps.decoded_translations(
      task,
      decoded,
      task.eval,
      count,
      config.data.reverse_source,
      config.model.attention.kind,
  )
  for i, translation in enumerate(translations):
    figure = plots.plot_attention(translation)
    writer.write_figure(step, f'valid/attention/{i}', figure)


def _samples(task, hypotheses) -> str:
  pairs = zip(task.eval.source_text[:3], hypotheses[:3])
  return '\n\n'.join(f'src: {s}  \nhyp: {h}' for s, h in pairs)
