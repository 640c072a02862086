"""A user's SentencePiece model file that is not one: one line."""

import pytest

from nmt_jax.data import vocab
from nmt_jax.system import errors


@pytest.mark.parametrize(
    'content, message', [(b'', 'is an empty file'), (b'x' * 10, 'is not')]
)
def test_a_file_that_is_no_sentencepiece_model_is_one_line(
    tmp_path, content, message
):
  path = tmp_path / 'user.model'
  path.write_bytes(content)
  with pytest.raises(errors.UserError) as error:
    vocab.read_sentencepiece_model(str(path))
  assert message in str(error.value) and '\n' not in str(error.value)
  assert str(error.value).startswith(f'data.vocab.sentencepiece_model={path}')
