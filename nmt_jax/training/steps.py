"""The model, the optimizer and the pure step functions of training.

The step functions are jitted once per bucket shape by their callers; the
dropout key is `fold_in(seed, step)` and the data order a function of the
step, so a checkpoint (step, params, optimizer state) is all a resumed run
needs to follow the trajectory of an uninterrupted one.
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from nmt_jax.data.vocab import PAD
from nmt_jax.model import seq2seq
from nmt_jax.training import fused_softmax


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32 scalar: number of updates applied
  params: Any
  opt_state: Any
  # train.ema_decay: the exponential moving average of `params`, which
  # validation, evaluation and translation read (None: not kept).
  ema_params: Any = None


def eval_params(state: TrainState):
  """The parameters a validation decodes with: the EMA when kept."""
  return state.params if state.ema_params is None else state.ema_params


def learning_rate_fn(train_config, steps_per_epoch: int):
  """step -> learning rate.

  'constant'; 'halve': halved at the start of epoch halve_from_epoch (1-based)
  and every epoch after, as Shu & Nakayama; 'warmup_rsqrt': linear warmup,
  then lr * sqrt(warmup / step). Any schedule starts with the linear warmup
  when train.warmup_steps > 0.
  """
  lr, warmup = train_config.learning_rate, train_config.warmup_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    factor = jnp.minimum(1.0, (step + 1) / warmup) if warmup else 1.0
    if train_config.schedule == 'halve':
      epoch = jnp.floor(step / steps_per_epoch) + 1
      halvings = jnp.maximum(0.0, epoch - train_config.halve_from_epoch + 1)
      factor = factor * 0.5**halvings
    elif train_config.schedule == 'warmup_rsqrt':
      decay = jnp.sqrt(max(warmup, 1) / jnp.maximum(step, 1.0))
      factor = factor * jnp.minimum(1.0, decay)
    return lr * factor

  return schedule


def create_optimizer(train_config, steps_per_epoch: int):
  """Adam (AdamW with train.weight_decay) or SGD after global-norm clipping.

  -> (optimizer, schedule).
  With train.plateau_decay a last `scale` stage holds the plateau factor in
  the optimizer state (set_plateau_scale), so checkpoints carry it.
  """
  schedule = learning_rate_fn(train_config, steps_per_epoch)
  parts = []
  if train_config.clip_norm:
    parts.append(optax.clip_by_global_norm(train_config.clip_norm))
  if train_config.optimizer == 'sgd':
    parts.append(optax.sgd(schedule))
  elif train_config.weight_decay:
    # Decoupled weight decay (Loshchilov & Hutter's AdamW): params shrink by
    # learning_rate * weight_decay each step, outside Adam's scaling.
    parts.append(optax.adamw(schedule, weight_decay=train_config.weight_decay))
  else:
    parts.append(optax.adam(schedule))
  if train_config.plateau_decay:
    parts.append(optax.inject_hyperparams(optax.scale)(step_size=1.0))
  return optax.chain(*parts), schedule


def plateau_scale(opt_state) -> float:
  """The learning-rate factor of plateau decay in `opt_state` (1 without)."""
  last = opt_state[-1]
  if not hasattr(last, 'hyperparams'):
    return 1.0
  return float(
      np.asarray(jax.device_get(last.hyperparams['step_size'])).flat[0]
  )


def set_plateau_scale(state: TrainState, value: float) -> TrainState:
  """`state` with the plateau factor `value`, placed as the old one was."""
  last = state.opt_state[-1]
  old = last.hyperparams['step_size']
  new = jax.make_array_from_callback(
      old.shape,
      old.sharding,
      lambda index: np.full(old.shape, value, old.dtype)[index],
  )
  hyperparams = dict(last.hyperparams, step_size=new)
  opt_state = state.opt_state[:-1] + (last._replace(hyperparams=hyperparams),)
  return state.replace(opt_state=opt_state)


def uniform_init(params, key, scale: float):
  """Every parameter uniform in (-scale, scale) (OpenNMT-py's param_init);
  biases and layer normalisation's scales keep their initial value on top
  (the forget-gate bias, a gain of 1)."""
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  keys = jax.random.split(jax.random.fold_in(key, 1), len(flat))
  leaves = []
  for (path, leaf), k in zip(flat, keys):
    new = jax.random.uniform(k, leaf.shape, leaf.dtype, -scale, scale)
    name = str(getattr(path[-1], 'key', path[-1]))
    if 'bias' in name or name.endswith('_scale'):
      new = new + leaf
    leaves.append(new)
  return jax.tree_util.tree_unflatten(treedef, leaves)


def init_state(config, model, optimizer, sharding, sample_batch) -> TrainState:
  """Step-0 state: parameters from config.seed, placed with `sharding`."""

  def init(key):
    params = model.init(key, sample_batch['source'], sample_batch['target_in'])[
        'params'
    ]
    if config.model.init_uniform:
      params = uniform_init(params, key, config.model.init_uniform)
    return TrainState(
        step=jnp.int32(0),
        params=params,
        opt_state=optimizer.init(params),
        ema_params=params if config.train.ema_decay else None,
    )

  return jax.jit(init, out_shardings=sharding)(jax.random.key(config.seed))


def cross_entropy(logits, targets, label_smoothing: float = 0.0):
  """Summed token cross-entropy over non-PAD targets -> (loss_sum, num_tokens).

  logits [B, T, V], targets [B, T]. With label smoothing the loss is shifted
  by the smoothed distribution's entropy, so a perfect prediction scores 0
  either way.
  """
  weights = (targets != PAD).astype(jnp.float32)
  if label_smoothing:
    vocab = logits.shape[-1]
    confidence, low, entropy = fused_softmax.smoothed_target(
        label_smoothing, vocab
    )
    soft = jax.nn.one_hot(targets, vocab) * (confidence - low) + low
    loss = optax.softmax_cross_entropy(logits, soft) - entropy
  else:
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(loss * weights), jnp.sum(weights)


def strength_reward(strength, mask, normalization: str):
  """The penalty strengths g(t) [B, T] that fine-tuning rewards, summed.

  Shu & Nakayama's objective (eq. 9) is, per sentence, the summed NLL minus
  beta times the sentence's mean g(t): 'sentence' returns sum_i mean_t g_i(t)
  so that (NLL sum - beta * this) / tokens is that objective scaled by
  1 / tokens, the scale of the token-mean loss. 'token' returns
  sum_{i,t} g_i(t): beta then weighs each step like a token's NLL, about
  mean-target-length times more than the paper's beta.
  """
  strength = jnp.where(mask, strength, 0.0)
  if normalization == 'token':
    return jnp.sum(strength)
  steps = jnp.maximum(jnp.sum(mask, axis=1), 1)
  return jnp.sum(jnp.sum(strength, axis=1) / steps)


def micro_batches(batch, count: int):
  """A batch [B, ...] as `count` micro-batches [count, B / count, ...].

  Micro-batch i holds rows i, i + count, ...: a batch sharded over devices
  in contiguous blocks of rows gives each device its share of every one.
  """
  return jax.tree_util.tree_map(
      lambda x: x.reshape(x.shape[0] // count, count, *x.shape[1:]).swapaxes(
          0, 1
      ),
      batch,
  )


def train_step(
    state: TrainState, batch, *, model, optimizer, config, axis_name=None
):
  """One update on a batch {'source', 'target_in', 'target_out'} [B, L].

  Returns (state, metric sums). Under pmap, `axis_name` names the device
  axis: each device holds B / devices rows, and token counts and gradients
  are summed over devices, so the update equals the jit one on the whole
  batch (dropout masks are drawn per device). With train.accumulate_steps =
  N the batch's gradient is summed over N micro-batches of B / N rows, one
  after another (activations of one micro-batch at a time): the same update
  (dropout masks aside), the loss normalised by the whole batch's tokens.
  """
  seed = jax.random.key(config.seed, impl=config.train.dropout_rng)
  dropout_key = jax.random.fold_in(seed, state.step)
  if axis_name:
    device = jax.lax.axis_index(axis_name)
    dropout_key = jax.random.fold_in(dropout_key, device)

  def total(x):
    return jax.lax.psum(x, axis_name) if axis_name else x

  # The whole batch's target tokens (over devices): every micro-batch's loss
  # sum is divided by it, so their gradients add up to the batch's.
  all_tokens = jnp.maximum(
      total(jnp.sum(batch['target_out'] != PAD).astype(jnp.float32)), 1.0
  )

  def loss_fn(params, batch, dropout_key):
    variables = {'params': params}
    htilde, diagnostics = model.apply(
        variables,
        batch['source'],
        batch['target_in'],
        train=True,
        rngs={'dropout': dropout_key},
        method=seq2seq.Seq2Seq.features,
    )
    # The softmax layer and the loss in one pass (fused_softmax.py).
    x, kernel, bias = model.apply(
        variables, htilde, method=seq2seq.Seq2Seq.softmax_layer
    )
    x = x.reshape(-1, x.shape[-1])
    targets = batch['target_out'].reshape(-1)
    weights = (targets != PAD).astype(jnp.float32)
    rows = fused_softmax.chunk_rows(
        x.shape[0],
        kernel.shape[1],
        config.train.loss_chunk,
        batch['target_out'].shape[0],
    )
    loss_sum = fused_softmax.cross_entropy(
        x, kernel, bias, targets, weights, rows, config.train.label_smoothing
    )
    tokens = jnp.sum(weights)
    loss = loss_sum / all_tokens
    if config.train.beta:
      reward = strength_reward(
          diagnostics['strength'],
          batch['target_out'] != PAD,
          config.train.beta_normalization,
      )
      loss = loss - config.train.beta * reward / all_tokens
    return loss, (loss_sum, tokens)

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  count = config.train.accumulate_steps
  if count == 1:
    (_, (loss_sum, tokens)), grads = grad_fn(state.params, batch, dropout_key)
  else:

    def accumulate(sums, xs):
      index, micro = xs
      key = jax.random.fold_in(dropout_key, index)
      (_, (loss_sum, tokens)), grads = grad_fn(state.params, micro, key)
      add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)
      return add(sums, (grads, loss_sum, tokens)), None

    zero = jnp.zeros((), jnp.float32)
    start = (jax.tree_util.tree_map(jnp.zeros_like, state.params), zero, zero)
    (grads, loss_sum, tokens), _ = jax.lax.scan(
        accumulate,
        start,
        (jnp.arange(count), micro_batches(batch, count)),
    )
  grads, loss_sum, tokens = total(grads), total(loss_sum), total(tokens)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  ema_params = state.ema_params
  if ema_params is not None:
    decay = config.train.ema_decay
    ema_params = jax.tree_util.tree_map(
        lambda e, p: decay * e + (1.0 - decay) * p, ema_params, params
    )
  state = TrainState(
      step=state.step + 1,
      params=params,
      opt_state=opt_state,
      ema_params=ema_params,
  )
  metrics = {
      'loss_sum': loss_sum,
      'tokens': tokens,
      'grad_norm': optax.global_norm(grads),
  }
  return state, metrics


def eval_step(params, batch, *, model):
  """Teacher-forced loss sums of a batch (PAD rows contribute nothing)."""
  logits, _ = model.apply(
      {'params': params}, batch['source'], batch['target_in']
  )
  loss_sum, tokens = cross_entropy(logits, batch['target_out'])
  return {'loss_sum': loss_sum, 'tokens': tokens}
