"""benchmarks/wmt_slice.py: the mocked TFDS corpus reaches the preset's path."""

import json
import os

from benchmarks import wmt_slice


def test_the_slice_is_the_presets_corpus_split_by_split(tmp_path):
  config = wmt_slice.stage_config('shu_de_en', steps=2)
  output = str(tmp_path)
  wmt_slice.write_corpus(config, output, pairs=400, eval_pairs=7)
  wmt_slice.run_stage('encode', 'shu_de_en', output, steps=2)
  workdir = os.path.join(output, 'workdir')
  # 50k words per side (the preset) of a corpus with fewer: every word kept.
  with open(os.path.join(workdir, 'vocab', 'words_source.txt')) as f:
    source_words = f.read().split('\n')[4:-1]
  prefix = wmt_slice.corpus_prefix(output)
  with open(f'{prefix}.train.de') as f:
    train_lines = f.read().splitlines()
  assert sorted(source_words) == sorted(
      {word for line in train_lines for word in line.split()}
  )
  (cache,) = os.listdir(os.path.join(workdir, 'data_cache'))
  for split, name in (('eval', 'dev'), ('test', 'test')):
    with open(
        os.path.join(workdir, 'data_cache', cache, f'{split}.text.json')
    ) as f:
      texts = json.load(f)
    with open(f'{prefix}.{name}.de') as f:
      assert texts['source'] == f.read().splitlines()
