"""Command lines run as forks of one process that imported the package once.

A `python -m nmt_jax.main ...` of the tests spends about 2.5 s importing
JAX, Flax, Orbax and the package, and 1 s more importing nltk for RIBES when
it evaluates: more than a tiny run's training. Each pytest worker keeps one
server process that has imported those once (it never starts JAX's backend
or a thread, so forking it is safe) and forks it per command. The child
takes the command's argv, working directory, stdin, stdout and stderr and
runs the module as `python -m` does (its exit status and message, an
uncaught exception's traceback), so a test sees what a user's process prints
and writes.

Only commands under the tests' environment (`conftest.subprocess_env()`),
or that one with other XLA_FLAGS (XLA reads them when the child starts its
backend: a device count, say), come here: JAX reads its own variables when
it is imported, so a command with other ones runs as a process of its own
(`forkable` decides). Tests that signal a command or feed it line by line
start it with subprocess themselves.

  python -m tests.forked_commands   # the server: JSON requests on stdin
"""

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import List, Optional

# Imported once by the server. Not the command-line modules themselves
# (nmt_jax.main, nmt_jax.sweep, nmt_jax.average, benchmarks.bench define
# their flags when imported, and each command imports its own afresh).
PRELOAD = (
    'nmt_jax.train',
    'nmt_jax.inference',
    'nmt_jax.analysis.sweep_runs',
    'nmt_jax.config.cli_flags',
    'benchmarks.decode_speed',
    'nltk.translate.ribes_score',
    'sacremoses',
)


def _exit_status(code) -> int:
  """The exit status of SystemExit(code), printing a message as Python does."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code
  print(code, file=sys.stderr)
  return 1


# The one variable a command's environment may change: read by XLA when the
# child starts its backend, after the fork.
CHILD_VARIABLES = ('XLA_FLAGS',)


def forkable(env: dict, server_env: dict) -> bool:
  """Whether a command under `env` may run as a fork of the server."""
  names = set(env) | set(server_env)
  return all(
      env.get(name) == server_env.get(name)
      for name in names
      if name not in CHILD_VARIABLES
  )


def _child(request):
  """Runs one request's module (or code) as `python -m` (`-c`) would; never
  returns."""
  for name, value in request['env'].items():
    if value is None:
      os.environ.pop(name, None)
    else:
      os.environ[name] = value
  os.chdir(request['cwd'])
  for fd, path, flags in (
      (0, request['stdin'], os.O_RDONLY),
      (1, request['stdout'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
      (2, request['stderr'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
  ):
    os.dup2(os.open(path, flags), fd)
  sys.path[0] = request['cwd']
  status = 0
  try:
    if request['module'] is None:  # python -c CODE ARGS
      sys.argv = ['-c', *request['args']]
      exec(compile(request['code'], '<string>', 'exec'), {'__name__': '__main__'})  # pylint: disable=exec-used
    else:
      sys.argv = [request['module'], *request['args']]
      runpy.run_module(request['module'], run_name='__main__', alter_sys=True)
  except SystemExit as e:
    status = _exit_status(e.code)
  except KeyboardInterrupt:
    traceback.print_exc()
    status = -signal.SIGINT
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()  # as the interpreter prints an uncaught exception
    status = 1
  # Ends as multiprocessing's forked children end: the exit handlers and
  # the streams' buffers run and are flushed, and os._exit skips tearing
  # down the thousands of modules the server imported (a second a command).
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  sys.stdout.flush()
  sys.stderr.flush()
  if status < 0:  # killed by a signal, as the interpreter reports SIGINT
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
  os._exit(status)


def serve():
  """Reads requests (one JSON line each), forks and answers per command.

  Answers are two JSON lines: {'pid': the child's} at its start and
  {'exit': its exit status} at its end.
  """
  for name in PRELOAD:
    importlib.import_module(name)
  requests = os.fdopen(os.dup(0), 'r')
  replies = os.fdopen(os.dup(1), 'w')
  # The children get their own streams; nothing of the server's is left on
  # fds 0 and 1 for them to inherit.
  null = os.open(os.devnull, os.O_RDWR)
  os.dup2(null, 0)
  os.dup2(null, 1)
  for line in requests:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      requests.close()
      replies.close()
      _child(request)
    replies.write(json.dumps({'pid': pid}) + '\n')
    replies.flush()
    _, status = os.waitpid(pid, 0)
    replies.write(
        json.dumps({'exit': os.waitstatus_to_exitcode(status)}) + '\n'
    )
    replies.flush()


class Server:
  """One forking server process for this test process (started on first use)."""

  def __init__(self, root: str, env: dict):
    self.root, self.env = root, env
    self.process: Optional[subprocess.Popen] = None

  def _start(self):
    self.process = subprocess.Popen(
        [sys.executable, '-m', 'tests.forked_commands'],
        cwd=self.root,
        env=self.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

  def _reply(self, timeout: float):
    ready, _, _ = select.select([self.process.stdout], [], [], timeout)
    if not ready:
      return None
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError('the forked-commands server ended')
    return json.loads(line)

  def run(
      self,
      module: Optional[str],
      args: List[str],
      input_text: Optional[str] = None,
      timeout: float = 600,
      env: Optional[dict] = None,
      code: Optional[str] = None,
  ) -> subprocess.CompletedProcess:
    """`python -m module args` (or, module None, `python -c code args`) in a
    fork, as subprocess.run would report it. `env`: the command's, one
    `forkable` accepts (the caller checks; default: the server's)."""
    env = self.env if env is None else env
    command = ['-m', module] if module else ['-c', code]
    if self.process is None or self.process.poll() is not None:
      self._start()
    with tempfile.TemporaryDirectory() as folder:
      stdin = os.path.join(folder, 'stdin')
      with open(stdin, 'w', encoding='utf-8') as f:
        f.write(input_text or '')
      out, err = os.path.join(folder, 'out'), os.path.join(folder, 'err')
      request = dict(
          module=module,
          code=code,
          args=list(args),
          env={name: env.get(name) for name in CHILD_VARIABLES},
          cwd=self.root,
          stdin=stdin,
          stdout=out,
          stderr=err,
      )
      self.process.stdin.write(json.dumps(request) + '\n')
      self.process.stdin.flush()
      pid = self._reply(60)['pid']
      reply = self._reply(timeout)
      if reply is None:
        os.kill(pid, signal.SIGKILL)
        self._reply(60)
        raise subprocess.TimeoutExpired([*command, *args], timeout)
      read = lambda path: open(path, encoding='utf-8', errors='replace').read()
      return subprocess.CompletedProcess(
          [*command, *args], reply['exit'], read(out), read(err)
      )

  def close(self):
    if self.process is not None and self.process.poll() is None:
      self.process.stdin.close()
      self.process.wait(timeout=60)


_SERVER: Optional[Server] = None


def server(root: str, env: dict) -> Server:
  """This process's server (one per pytest worker), closed at its exit."""
  global _SERVER
  if _SERVER is None:
    _SERVER = Server(root, env)
    atexit.register(_SERVER.close)
  return _SERVER


if __name__ == '__main__':
  serve()
