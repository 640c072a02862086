"""The shape of the package: wings by role, imports flow down, kinds in one place.

The package top holds the command lines and drivers; everything else lives in
a wing, and a wing imports only from the wings listed before it in WINGS
(docs/design.md has the map).
"""

import ast
import glob
import io
import os
import re
import sys
import tokenize

import pytest

from nmt_jax import attention

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, 'nmt_jax')
# Imported inside functions on purpose: optional extras, or slow to import
# for a rarely used feature (nltk: 1 s for RIBES, sacremoses: 0.3 s).
LAZY_IMPORTS = {'matplotlib', 'tensorflow_datasets', 'nltk', 'sacremoses'}
MAX_LINES = 600
# Bottom to top: a module imports from its own wing and the wings before it.
# training and decoding are siblings: neither imports the other.
WINGS = (
    'system',
    'data',
    'attention',
    'config',
    'model',
    'workdir',
    'training',
    'decoding',
    'analysis',
)
SIBLINGS = {('decoding', 'training'), ('training', 'decoding')}
# The front door: command lines and the drivers they call.
TOP = {'__init__', 'main', 'train', 'inference', 'average', 'sweep'}


def module_files():
  return sorted(glob.glob(os.path.join(PACKAGE, '**', '*.py'), recursive=True))


def module_name(path):
  relative = os.path.relpath(path, ROOT)[: -len('.py')].split(os.sep)
  return '.'.join(relative[:-1] if relative[-1] == '__init__' else relative)


def parse(path):
  with open(path, encoding='utf-8') as f:
    return ast.parse(f.read(), path)


def imported_modules(tree, known):
  """The nmt_jax modules a module imports (anywhere in it)."""
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names if a.name.startswith('nmt_jax'))
    elif isinstance(node, ast.ImportFrom) and (node.module or '').startswith(
        'nmt_jax'
    ):
      for alias in node.names:
        submodule = f'{node.module}.{alias.name}'
        found.add(submodule if submodule in known else node.module)
  return found


def test_the_import_graph_has_no_cycle():
  known = {module_name(p) for p in module_files()}
  graph = {
      module_name(p): imported_modules(parse(p), known) for p in module_files()
  }
  assert graph['nmt_jax.train'] >= {
      'nmt_jax.training.steps',
      'nmt_jax.decoding.evaluation',
  }
  visiting, done = [], set()

  def visit(module):
    if module in done:
      return
    assert module not in visiting, ' -> '.join(visiting + [module])
    visiting.append(module)
    for other in sorted(graph.get(module, ())):
      visit(other)
    visiting.pop()
    done.add(module)

  for module in sorted(graph):
    visit(module)


def wing(module):
  """'nmt_jax.model.lstm' -> 'model'; a module at the package top -> None."""
  parts = module.split('.')
  if len(parts) > 2 or (len(parts) == 2 and parts[1] in WINGS):
    return parts[1]
  return None


def test_the_package_top_is_the_front_door_and_the_rest_lives_in_wings():
  top = {
      os.path.basename(p)[: -len('.py')]
      for p in glob.glob(os.path.join(PACKAGE, '*.py'))
  }
  folders = {
      name
      for name in os.listdir(PACKAGE)
      if os.path.exists(os.path.join(PACKAGE, name, '__init__.py'))
  }
  assert top == TOP
  assert folders == set(WINGS)


def test_imports_flow_down_between_wings():
  known = {module_name(p) for p in module_files()}
  upward = []
  for path in module_files():
    here = wing(module_name(path))
    if here is None:
      continue  # the top imports what it drives
    for other in imported_modules(parse(path), known):
      there = wing(other)
      if there is None:
        upward.append(f'{module_name(path)} -> {other} (the package top)')
        continue
      if there == here:
        continue
      if (here, there) in SIBLINGS or WINGS.index(there) > WINGS.index(here):
        upward.append(f'{module_name(path)} -> {other}')
  assert not upward


def _root_imports(folder):
  """'path:line name' of every import in the .py files under `folder`."""
  found = []
  for path in glob.glob(
      os.path.join(ROOT, folder, '**', '*.py'), recursive=True
  ):
    for node in ast.walk(parse(path)):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or '']
      found += [
          f'{os.path.relpath(path, ROOT)}:{node.lineno} {n}' for n in names
      ]
  return found


# Root folders and the root folders they must never import: the package is
# installed without the other two; a benchmark measures speed and does not
# depend on a research experiment (experiments may call benchmarks' helpers).
FORBIDDEN_IMPORTS = {
    'nmt_jax': ('benchmarks', 'experiments', 'tests'),
    'benchmarks': ('experiments', 'tests'),
    'experiments': ('tests',),
}


@pytest.mark.parametrize('folder', sorted(FORBIDDEN_IMPORTS))
def test_root_folders_import_only_what_they_may(folder):
  found = [
      line
      for line in _root_imports(folder)
      if line.split(' ')[-1].split('.')[0] in FORBIDDEN_IMPORTS[folder]
  ]
  assert not found
  assert _root_imports(folder)  # the folder was read


def test_no_two_modules_share_a_name():
  names = {}
  for path in module_files():
    name = os.path.basename(path)
    if name != '__init__.py':
      names.setdefault(name, []).append(os.path.relpath(path, ROOT))
  assert not {n: p for n, p in names.items() if len(p) > 1}


def test_imports_are_at_module_level():
  lazy = []
  for path in module_files():
    tree = parse(path)
    for function in ast.walk(tree):
      if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        continue
      for node in ast.walk(function):
        if isinstance(node, ast.Import):
          names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
          names = [node.module or '']
        else:
          continue
        for name in names:
          if name.split('.')[0] not in LAZY_IMPORTS:
            lazy.append(f'{os.path.relpath(path, ROOT)}:{node.lineno} {name}')
  assert not lazy


def test_no_module_shadows_the_standard_library():
  names = {os.path.basename(p)[: -len('.py')] for p in module_files()}
  names |= {os.path.basename(os.path.dirname(p)) for p in module_files()}
  assert not names & set(sys.stdlib_module_names)


def test_no_file_is_over_the_line_limit():
  long = {}
  for path in module_files():
    with open(path, encoding='utf-8') as f:
      count = len(f.read().splitlines())
    if count > MAX_LINES:
      long[os.path.relpath(path, ROOT)] = count
  assert not long


def test_no_kind_name_outside_its_module():
  """Outside nmt_jax/attention/, kinds are reached through the registry only."""
  kinds = set(attention.kinds()) - {'none'}  # 'none' is a value of other fields
  assert {'global', 'memory', 'flexible', 'local_m', 'local_p'} <= kinds
  found = []
  for path in module_files():
    if os.sep + 'attention' + os.sep in path:
      continue
    for node in ast.walk(parse(path)):
      if isinstance(node, ast.Constant) and node.value in kinds:
        found.append(
            f'{os.path.relpath(path, ROOT)}:{node.lineno} {node.value!r}'
        )
  assert not found


@pytest.mark.parametrize(
    'pattern',
    [
        '**/*.py',
        '**/*.md',
        '**/*.sh',
        '**/*.ipynb',
        '*.cfg',
        '*.toml',
        '.ci/run',
    ],
)
def test_no_reference_to_documents_outside_the_repository(pattern):
  outside = re.compile(
      r'\b(SPEC|API_NOTES|FORMULAS|USERS|STYLE)(\.md)?\s*§|'
      r'API_NOTES|FORMULAS\.md|\.\./shared|peers/opennmt'
  )
  found = []
  for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
    if '.venv' in path or path == os.path.abspath(__file__):
      continue
    with open(path, encoding='utf-8') as f:
      for number, line in enumerate(f, 1):
        if outside.search(line):
          found.append(f'{os.path.relpath(path, ROOT)}:{number}')
  assert not found


# The repository's folders a docstring or comment may name files in.
REPO_FOLDERS = (
    'nmt_jax',
    'tests',
    'docs',
    'benchmarks',
    'experiments',
    'configs',
    'launch',
)
# The importable ones, named as dotted modules (nmt_jax.decoding.beam).
PACKAGES = ('nmt_jax', 'tests', 'benchmarks', 'experiments')
# Named files that live elsewhere: NTT's RIBES scorer.
EXTERNAL_FILES = {'RIBES.py'}
# Command examples train into runs/: workdirs, not part of the repository.
OUTPUT_FOLDERS = {'runs'}
_PATH = re.compile(r'(?<![\w.\-/])((?:[\w\-]+/)*[\w\-.]*\w\.(?:py|md|sh))\b')
_DOTTED = re.compile(rf'(?<![\w.])(?:{"|".join(PACKAGES)})(?:\.\w+)+')


def _prose(path):
  """(line, text) of a module's docstrings and comments."""
  with open(path, encoding='utf-8') as f:
    source = f.read()
  found = [
      (token.start[0], token.string)
      for token in tokenize.generate_tokens(io.StringIO(source).readline)
      if token.type == tokenize.COMMENT
  ]
  for node in ast.walk(ast.parse(source)):
    if isinstance(
        node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    ):
      docstring = ast.get_docstring(node, clean=False)
      if docstring:
        found.append((node.body[0].lineno, docstring))
  return found


def _top_level_names(path):
  names = set()
  for node in parse(path).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      names.update(t.id for t in targets if isinstance(t, ast.Name))
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split('.')[0] for a in node.names)
  return names


def _module_file(root, parts):
  base = os.path.join(root, *parts)
  for path in (base + '.py', os.path.join(base, '__init__.py')):
    if os.path.isfile(path):
      return path
  return None


def _missing_dotted(root, name):
  """Why `name` (nmt_jax.model.seq2seq.Decoder) names nothing, or None."""
  parts = name.split('.')
  for k in range(len(parts), 0, -1):
    module = _module_file(root, parts[:k])
    if module:
      break
  else:
    return 'no such module'
  if k < len(parts) and parts[k] not in _top_level_names(module):
    return f'no {parts[k]} in {".".join(parts[:k])}'
  return None


def _missing_path(root, source, path, basenames):
  """Why a named file path does not exist, or None."""
  first = path.split('/')[0]
  if first in OUTPUT_FOLDERS:
    return None
  if '/' not in path:  # a bare name: some file of the repository's
    known = path in basenames or path in EXTERNAL_FILES
    return None if known else 'no file of that name'
  bases = [root]
  if first not in REPO_FOLDERS:  # relative to the package or to the module
    bases += [os.path.join(root, 'nmt_jax'), os.path.dirname(source)]
  if any(os.path.exists(os.path.join(base, path)) for base in bases):
    return None
  return 'no such file'


def stale_names(root):
  """'file:line name (why)' of each file or module the prose names that is
  not in the tree at `root`."""
  sources = []
  for folder in ('nmt_jax', 'configs'):
    sources += glob.glob(
        os.path.join(root, folder, '**', '*.py'), recursive=True
    )
  basenames = {
      name
      for folder in REPO_FOLDERS
      for _, _, files in os.walk(os.path.join(root, folder))
      for name in files
  } | set(os.listdir(root))
  stale = []
  for source in sorted(sources):
    where = os.path.relpath(source, root)
    for line, text in _prose(source):
      for match in _DOTTED.finditer(text):
        why = _missing_dotted(root, match.group())
        if why:
          stale.append(f'{where}:{line} {match.group()} ({why})')
      for match in _PATH.finditer(text):
        why = _missing_path(root, source, match.group(1), basenames)
        if why:
          stale.append(f'{where}:{line} {match.group(1)} ({why})')
  return stale


def test_the_prose_names_only_files_and_modules_that_exist():
  """Docstrings and comments of nmt_jax/ and configs/ name modules (dotted or
  as files under the repository's folders) that are there: a module that
  moves takes its mentions along."""
  assert not stale_names(ROOT)
