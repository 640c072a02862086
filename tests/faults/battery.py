"""The fault battery's harness: cases, the classifier, the damages, the runner.

Each case runs one command line (`nmt_jax.main` in every mode,
`nmt_jax.average`, `nmt_jax.sweep`, `benchmarks.bench`) on a bad input or a
damaged workdir and sorts its outcome into one class:

  clean       refused as expected: a non-zero exit, and the last line names
              the problem (matches the case's regex) with nothing else around it
  handled     a case that must succeed (resume after SIGKILL, a damaged
              checkpoint set aside) succeeded
  traceback   a Python traceback or a bare exception repr was printed
  misleading  refused, but the line does not match, or more than one error
              line, or other output (library logs, warnings, usage text); also
              a hang, or a failure where success was expected
  accepted    exit 0 where a refusal was expected: the bad input was taken
  data loss   a file the workdir held before (checkpoints, metrics.jsonl,
              config.json, vocab, eval results) was deleted or changed when
              the command had no business changing it (a damaged checkpoint
              moved intact to checkpoints/corrupt/ is not a loss)

A case passes when it is `clean` (a refusal) or `handled` (a success). The
cases live in cases_*.py, one file per group of categories, and run as the
tests of test_*.py beside them (docs/faults.md, "The fault battery").
"""

import dataclasses
import fnmatch
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Callable, List, Optional, Tuple

from tests import conftest

ROOT = conftest.ROOT

CONFIG = 'configs/global_general.py:tiny'
# The tests' quick settings (tests/commands.py): greedy, few validation lines.
QUICK = ['--config.decode.beam_size=1', '--config.train.eval_num_sentences=8']
# The copy-task workdir: checkpoints 2, 4 and 6 (LAST).
BASE = [f'--config={CONFIG}', *QUICK, '--config.train.keep_checkpoints=3']
BASE_TRAIN = [*BASE, '--config.train.num_steps=6']
LAST = 6
# The text-corpus workdir: a word vocabulary of tests/corpora/numbers.*.
TEXT = [
    f'--config={CONFIG}',
    *QUICK,
    '--config.data.name=text:{corpus}',
    '--config.data.vocab.kind=word',
    '--config.data.max_length=20',
]

CLASSES = (
    'clean',
    'handled',
    'traceback',
    'misleading',
    'accepted',
    'data loss',
)
# What a training, evaluation run may write in its workdir.
TRAIN_WRITES = (
    'checkpoints/*',
    'metrics.jsonl',
    'eval_*',
    'events.out.tfevents.*',
    'config.json',
    'lock',
)
EVAL_WRITES = ('eval_*', 'lock')
# Records a command may add to, keeping what they held.
APPENDS = ('metrics.jsonl',)


@dataclasses.dataclass
class Case:
  """One command on one fault, and what it must do.

  `args` may hold {w} and {w2} (the case's workdirs), {d} (its folder) and
  {corpus} (the shared corpus prefix). `workdir`/`workdir2`: 'base' or 'text'
  (copied to {w}/{w2} first) or None. `writes`: globs of workdir files the
  command may change. `check(d, stdout)` returns a problem or ''.
  `runner(case, d, fixtures)` -> Outcome replaces the plain run (signals).
  """

  name: str
  args: List[str]
  expect: str = 'refuse'  # or 'succeed'
  pattern: str = ''
  module: str = 'nmt_jax.main'
  workdir: Optional[str] = None
  workdir2: Optional[str] = None
  setup: Optional[Callable[[str], None]] = None
  stdin: bytes = b''
  writes: Tuple[str, ...] = ()
  check: Optional[Callable[[str, str], str]] = None
  runner: Optional[Callable] = None
  timeout: int = 180

  @property
  def category(self):
    return self.name.split('.')[0]


def refuse(name, args, pattern, **kwargs):
  """A case that must end in one error line matching `pattern`."""
  return Case(name, list(args), 'refuse', pattern, **kwargs)


def succeed(name, args, **kwargs):
  """A case that must exit 0 and keep what it must keep."""
  return Case(name, list(args), 'succeed', **kwargs)


# ------------------------------------------------------------ classification

_LOG_LINE = re.compile(r'^([IWEF])\d{4} [\d:.]+\s+\d+ ([\w.-]+):\d+\] ')
_REPR = re.compile(r'\b[A-Z]\w*(Error|Exception)\((\'|")')
_BARE = re.compile(r'^(\w+\.)*[A-Z]\w*(Error|Exception|Interrupt|Exit)(:|$)')


def nmt_sources():
  """The file names of nmt_jax's modules (absl logs name them)."""
  names = set()
  for path in glob.glob(
      os.path.join(ROOT, 'nmt_jax', '**', '*.py'), **{'recursive': True}
  ):
    names.add(os.path.basename(path))
  return frozenset(names)


def has_traceback(text):
  """A traceback or a bare exception repr in `text`."""
  if 'Traceback (most recent call last)' in text:
    return True
  return any(_BARE.match(x) or _REPR.search(x) for x in text.splitlines())


def classify(
    expect,
    pattern,
    returncode,
    stdout,
    stderr,
    lost=(),
    problem='',
    timed_out=False,
    sources=frozenset(),
):
  """(class, reason) of one outcome (see the module docstring)."""
  if lost:
    return 'data loss', 'lost or changed: ' + ', '.join(sorted(lost)[:5])
  if has_traceback(stdout) or has_traceback(stderr):
    return 'traceback', 'a traceback or exception repr was printed'
  if timed_out:
    return 'misleading', 'timed out (a hang)'
  lines = [x for x in stderr.splitlines() if x.strip()]
  last = lines[-1] if lines else ''
  if expect == 'succeed':
    if returncode != 0:
      return 'misleading', f'exit {returncode} where success was expected'
    if problem:
      return 'misleading', problem
    return 'handled', ''
  if returncode == 0:
    return 'accepted', 'exit 0 where a refusal was expected'
  if not re.search(pattern, last):
    return 'misleading', f'the last line does not match {pattern!r}'
  errors = [x for x in lines if x.startswith('error:')]
  if len(errors) > 1:
    return 'misleading', f'{len(errors)} error lines'
  noise = []
  for line in lines[:-1]:
    log = _LOG_LINE.match(line)
    if not (log and log.group(1) in 'IW' and log.group(2) in sources):
      noise.append(line)
  if noise:
    return 'misleading', f'{len(noise)} other lines: {noise[0][:80]!r}'
  if problem:
    return 'misleading', problem
  return 'clean', ''


def _digest(path, size=None):
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read(size)).hexdigest()


def snapshot(folder):
  """{relative path: (sha256, size)} of every file under `folder`."""
  digest = {}
  for base, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(base, name)
      if os.path.isfile(path):
        digest[os.path.relpath(path, folder)] = (
            _digest(path),
            os.path.getsize(path),
        )
  return digest


def lost_files(before, folder, writes=(), appends=APPENDS):
  """Files of `before` gone or changed in `folder`, but those in `writes`.

  A file in `appends` may grow if it starts with what it held; a checkpoint
  moved intact to checkpoints/corrupt/<step> is kept.
  """
  after = snapshot(folder) if os.path.isdir(folder) else {}
  lost = []
  for path, digest in before.items():
    if after.get(path) == digest:
      continue
    if any(fnmatch.fnmatch(path, glob_) for glob_ in writes):
      continue
    if path in appends and path in after:
      if _digest(os.path.join(folder, path), digest[1]) == digest[0]:
        continue
    parts = path.split('/')
    if len(parts) > 2 and parts[0] == 'checkpoints':
      moved = '/'.join(['checkpoints', 'corrupt', *parts[1:]])
      if after.get(moved) == digest:
        continue
    lost.append(path)
  return lost


# ------------------------------------------------------------- damages


def step_path(d, step=LAST, workdir='w'):
  return os.path.join(d, workdir, 'checkpoints', str(step))


def _best_step(d):
  with open(os.path.join(d, 'w', 'eval_results.json')) as f:
    return json.load(f)['checkpoint_step']


def _array_files(step_dir):
  return sorted(glob.glob(os.path.join(step_dir, 'state', 'd', '*')))


def truncate_arrays(step_dir):
  for path in _array_files(step_dir):
    os.truncate(path, os.path.getsize(path) // 2)


def zero_arrays(step_dir):
  for path in _array_files(step_dir):
    size = os.path.getsize(path)
    with open(path, 'wb') as f:
      f.write(bytes(size))


def delete_arrays(step_dir):
  for path in _array_files(step_dir):
    os.remove(path)


def flip_a_byte(step_dir):
  for path in _array_files(step_dir):
    with open(path, 'r+b') as f:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 1]))


def delete_state_metadata(step_dir):
  os.remove(os.path.join(step_dir, 'state', '_METADATA'))


def delete_state(step_dir):
  shutil.rmtree(os.path.join(step_dir, 'state'))


def delete_meta(step_dir):
  shutil.rmtree(os.path.join(step_dir, 'meta'))


def bad_meta_json(step_dir):
  with open(os.path.join(step_dir, 'meta', 'metadata'), 'w') as f:
    f.write('{"step": 6, ')


def bad_data_state(step_dir):
  with open(os.path.join(step_dir, 'data', 'process_0-of-1.json'), 'w') as f:
    f.write('{"next_ind')


def delete_checkpoint_metadata(step_dir):
  os.remove(os.path.join(step_dir, '_CHECKPOINT_METADATA'))


DAMAGES = {
    'truncated_arrays': truncate_arrays,
    'zeroed_arrays': zero_arrays,
    'missing_arrays': delete_arrays,
    'flipped_byte': flip_a_byte,
    'missing_state_metadata': delete_state_metadata,
    'missing_state': delete_state,
    'missing_meta': delete_meta,
    'bad_meta_json': bad_meta_json,
    'bad_data_state': bad_data_state,
    'missing_checkpoint_metadata': delete_checkpoint_metadata,
}


def write(path, data):
  """Writes bytes or text to `path`, making its folder."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data if isinstance(data, bytes) else data.encode('utf-8'))


def edit_config(change):
  """A setup that applies `change(dict)` to {w}/config.json."""

  def setup(d):
    path = os.path.join(d, 'w', 'config.json')
    with open(path) as f:
      config = json.load(f)
    change(config)
    with open(path, 'w') as f:
      json.dump(config, f)

  return setup


def corpus(d, **files):
  """Writes {d}/c.<split>.<lang> from the test corpus, with `files` replaced.

  `files` maps 'train_de' etc. to bytes, or to None to leave the file out.
  """
  for split in ('train', 'dev', 'test'):
    for lang in ('de', 'en'):
      key = f'{split}_{lang}'
      if key in files and files[key] is None:
        continue
      if key in files:
        data = files[key]
      else:
        with open(
            os.path.join(ROOT, 'tests', 'corpora', f'numbers.{split}.{lang}'),
            'rb',
        ) as f:
          data = f.read()
      write(os.path.join(d, f'c.{split}.{lang}'), data)


def with_corpus(**files):
  return lambda d: corpus(d, **files)


def corpus_lines(name):
  with open(os.path.join(ROOT, 'tests', 'corpora', name), 'rb') as f:
    return f.read().splitlines(keepends=True)


def lock_holding(content):
  return lambda d: write(os.path.join(d, 'w', 'lock'), content)


def make_dir(*parts):
  def setup(d):
    path = os.path.join(d, *parts)
    if os.path.isfile(path):
      os.remove(path)
    elif os.path.isdir(path):
      shutil.rmtree(path)
    os.makedirs(path)

  return setup


def chain(*setups):
  def setup(d):
    for one in setups:
      one(d)

  return setup


def damage(how, step=LAST, workdir='w'):
  return lambda d: how(step_path(d, step, workdir))


def damage_best(how):
  return lambda d: how(step_path(d, _best_step(d)))


def damage_all(how):
  def setup(d):
    for step_dir in glob.glob(os.path.join(d, 'w', 'checkpoints', '[0-9]*')):
      how(step_dir)

  return setup


# ---------------------------------------------------------------- checks


def set_aside(step=LAST):
  def check(d, stdout):
    del stdout
    if not os.path.isdir(os.path.join(d, 'w', 'checkpoints', 'corrupt')):
      return 'no damaged checkpoint was set aside in checkpoints/corrupt'
    return ''

  return check


def stdout_lines(count):
  def check(d, stdout):
    del d
    got = len(stdout.split('\n')) - 1
    return '' if got == count else f'{got} output lines, not {count}'

  return check


def both(*checks):
  """A check that runs each of `checks` (None: none) in turn."""

  def check(d, stdout):
    for one in checks:
      problem = one(d, stdout) if one else ''
      if problem:
        return problem
    return ''

  return check


def absent(*parts):
  def check(d, stdout):
    del stdout
    path = os.path.join(d, *parts)
    return f'{path} was left behind' if os.path.exists(path) else ''

  return check


# ---------------------------------------------------------------- running


@dataclasses.dataclass
class Outcome:
  returncode: Optional[int]
  stdout: str
  stderr: str
  timed_out: bool = False
  problem: str = ''


def decode(data):
  return (data or b'').decode('utf-8', 'replace')


class Fixtures:
  """The trained workdirs the cases copy, each trained when first needed.

  One per test process (a session fixture): an xdist worker trains the ones
  its cases need once. A training that failed fails every case needing it.
  """

  def __init__(self, output, env):
    self.output = output
    self.env = env
    self.corpus = os.path.join(output, 'corpus', 'c')
    self._made = {}

  def trained(self, name, args):
    """{output}/{name}, trained by `nmt_jax.main args` (once)."""
    if name not in self._made:
      workdir = os.path.join(self.output, name)
      if os.path.exists(workdir):
        shutil.rmtree(workdir)
      argv = [a.replace('{corpus}', self.corpus) for a in args]
      result = subprocess.run(
          [sys.executable, '-m', 'nmt_jax.main', *argv, f'--workdir={workdir}'],
          cwd=ROOT,
          env=self.env,
          capture_output=True,
          timeout=900,
          check=False,
      )
      if result.returncode == 0:
        self._made[name] = workdir
      else:
        lines = decode(result.stderr).strip().splitlines()
        self._made[name] = RuntimeError(
            f'training the {name} workdir failed (exit {result.returncode}):'
            f' {lines[-1] if lines else ""}'
        )
    made = self._made[name]
    if isinstance(made, Exception):
      raise made
    return made

  def workdir(self, kind):
    """The trained copy-task ('base') or text-corpus ('text') workdir."""
    if kind == 'base':
      return self.trained('base', BASE_TRAIN)
    if not os.path.exists(self.corpus + '.train.de'):
      corpus(os.path.dirname(self.corpus))
    return self.trained('text', [*TEXT, '--config.train.num_steps=4'])


def _substitute(args, d, corpus_prefix):
  out = []
  for arg in args:
    arg = arg.replace('{w2}', os.path.join(d, 'w2'))
    arg = arg.replace('{w}', os.path.join(d, 'w'))
    arg = arg.replace('{d}', d).replace('{corpus}', corpus_prefix)
    out.append(arg)
  return out


@dataclasses.dataclass
class Prepared:
  """A case made ready in its folder: its command and what its workdirs held."""

  case: Case
  d: str
  args: List[str]
  held: dict
  before: dict


def prepare(case, d, fixtures):
  """Makes folder `d` for `case`: its workdirs copied, its setup run."""
  if os.path.exists(d):
    shutil.rmtree(d)
  os.makedirs(d)
  held = {}
  for key, kind in (('w', case.workdir), ('w2', case.workdir2)):
    if kind:
      shutil.copytree(fixtures.workdir(kind), os.path.join(d, key))
      held[key] = os.path.join(d, key)
  if case.setup:
    case.setup(d)
  before = {key: snapshot(path) for key, path in held.items()}
  args = _substitute(case.args, d, fixtures.corpus)
  return Prepared(case, d, args, held, before)


def judge(prepared, outcome, seconds):
  """The record (a dict) of a prepared case's outcome, its class in it."""
  case = prepared.case
  lost = []
  for key, path in prepared.held.items():
    lost += [
        f'{key}/{p}'
        for p in lost_files(prepared.before[key], path, case.writes)
    ]
  problem = outcome.problem
  if not problem and case.check and not outcome.timed_out:
    problem = case.check(prepared.d, outcome.stdout)
  cls, reason = classify(
      case.expect,
      case.pattern,
      outcome.returncode,
      outcome.stdout,
      outcome.stderr,
      lost=lost,
      problem=problem,
      timed_out=outcome.timed_out,
      sources=nmt_sources(),
  )
  return {
      'name': case.name,
      'category': case.category,
      'expect': case.expect,
      'command': shlex.join(['python', '-m', case.module, *prepared.args]),
      'exit': outcome.returncode,
      'class': cls,
      'reason': reason,
      'seconds': round(seconds, 1),
      'stderr_tail': outcome.stderr.strip().splitlines()[-8:],
      'stdout_tail': outcome.stdout.strip().splitlines()[-3:],
  }


def run_case(case, d, fixtures):
  """Runs one case in folder `d`, a process of its own -> its record."""
  prepared = prepare(case, d, fixtures)
  start = time.time()
  if case.runner is not None:
    outcome = case.runner(case, d, fixtures)
  else:
    try:
      result = subprocess.run(
          [sys.executable, '-m', case.module, *prepared.args],
          cwd=ROOT,
          env=fixtures.env,
          input=case.stdin,
          capture_output=True,
          timeout=case.timeout,
          check=False,
      )
      outcome = Outcome(
          result.returncode, decode(result.stdout), decode(result.stderr)
      )
    except subprocess.TimeoutExpired as e:
      outcome = Outcome(None, decode(e.stdout), decode(e.stderr), True)
  return judge(prepared, outcome, time.time() - start)


def can_fork(case):
  """Whether `case` may run forked (run_forked): it stops at the edge.

  A case on no trained workdir, reading no stdin, without a runner of its
  own, of the command line's flags, config files, config values and rules.
  """
  return (
      case.category in ('flags', 'config_file', 'config', 'rules')
      and case.module == 'nmt_jax.main'
      and not (case.workdir or case.workdir2 or case.stdin or case.runner)
  )


def run_forked(cases_and_dirs, fixtures, timeout=600):
  """Runs cases of can_fork in one process forked per case -> records.

  tests/conftest.py's run_module_lines: JAX and the package are imported
  once, and each command line runs in a child with its own stdout, stderr
  (stdin: /dev/null) and exit status, as `python -m` runs it. Output a
  fresh interpreter prints while it imports would not show here; the cases
  that run as processes of their own (run_case) see it.
  """
  assert all(can_fork(case) for case, _ in cases_and_dirs)
  prepared = [prepare(case, d, fixtures) for case, d in cases_and_dirs]
  start = time.time()
  results = conftest.run_module_lines(
      'nmt_jax.main', [p.args for p in prepared], timeout=timeout
  )
  seconds = (time.time() - start) / max(len(prepared), 1)
  return [
      judge(p, Outcome(r.returncode, r.stdout, r.stderr), seconds)
      for p, r in zip(prepared, results)
  ]


def failure(record):
  """What a failed case shows: its class, the reason, the command, stderr."""
  lines = [
      (
          f'{record["name"]}: {record["class"]}, not'
          f' {expected_class(record)}:'
          f' {record["reason"]} (exit {record["exit"]})'
      ),
      f'  $ {record["command"]}',
      '  stderr, last lines:',
      *(f'    {line}' for line in record['stderr_tail']),
  ]
  if record['stdout_tail']:
    lines += ['  stdout, last lines:']
    lines += [f'    {line}' for line in record['stdout_tail']]
  return '\n'.join(lines)


class ForkedBatch:
  """Records of cases run with run_forked, a chunk at a time when asked for.

  `order`: the names in the order their tests run; asking for one runs it
  and the next ones not yet run (`chunk` in all) in one forking process.
  """

  def __init__(self, cases, order, fixtures, folder, chunk=40):
    self.cases = {case.name: case for case in cases}
    self.order = list(order)
    self.fixtures = fixtures
    self.folder = folder
    self.chunk = chunk
    self.records = {}

  def record(self, name):
    if name not in self.records:
      start = self.order.index(name) if name in self.order else 0
      todo = [n for n in self.order[start:] if n not in self.records]
      todo = ([name] + [n for n in todo if n != name])[: self.chunk]
      batch = [(self.cases[n], os.path.join(self.folder, n)) for n in todo]
      for record in run_forked(batch, self.fixtures):
        self.records[record['name']] = record
    return self.records[name]


def expected_class(record) -> str:
  """The class a case's record must have: 'clean' (a refusal) or 'handled'."""
  return 'clean' if record['expect'] == 'refuse' else 'handled'
