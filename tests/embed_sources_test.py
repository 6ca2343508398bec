"""embed reads every source the one loader reads (interop/sources.load): a fine-tuning run's
workdir at any step embeds as transformers runs its export, with the run's own pooling."""

import json

from embedder_test import reference
from matmul_precision import float32_matmuls  # noqa: F401  (autouse: float32, not TF32)
import numpy as np
import pytest

from bertjax import embed
from bertjax import export

SENTENCES = ['a gripping, funny film', 'the plot is dull and slow', 'I loved it']


def test_a_fine_tuning_run_embeds_as_transformers_runs_its_export(fine_tuned_sst2, tmp_path):
  workdir, _ = fine_tuned_sst2
  run = json.loads((workdir / 'config.json').read_text())
  embedder = embed.Embedder.from_pretrained(workdir)  # No export first.
  assert embedder.pooling == run['pooling'] and not embedder.normalize
  assert embedder.max_seq_length == run['data']['max_seq_length']
  out = export.export(workdir, 'hf', tmp_path / 'hf')
  want = reference(out, SENTENCES, embedder.max_seq_length, embedder.pooling)
  np.testing.assert_allclose(embedder.encode(SENTENCES), want, atol=1e-5)
  # Mean pooling asked for: what the run's transformers export gives, mean-pooled.
  mean = embed.Embedder.from_pretrained(workdir, pooling='mean', normalize=True)
  want = reference(out, SENTENCES, embedder.max_seq_length, 'mean')
  want /= np.linalg.norm(want, axis=-1, keepdims=True)
  np.testing.assert_allclose(mean.encode(SENTENCES), want, atol=1e-5)


def test_a_run_embeds_at_the_step_asked_for(fine_tuned_sst2):
  workdir, _ = fine_tuned_sst2
  steps = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  newest = embed.Embedder.from_pretrained(workdir).encode(SENTENCES)
  np.testing.assert_array_equal(
      embed.Embedder.from_pretrained(workdir, step='latest').encode(SENTENCES), newest)
  np.testing.assert_array_equal(
      embed.Embedder.from_pretrained(workdir / 'checkpoints' / str(steps[-1])).encode(SENTENCES),
      newest)
  assert embed.Embedder.from_pretrained(workdir).step == steps[-1]  # Said by the job's summary.
  if len(steps) > 1:  # An older step is other weights: other vectors.
    older = embed.Embedder.from_pretrained(workdir, step=steps[0])
    assert older.step == steps[0]
    assert np.abs(older.encode(SENTENCES) - newest).max() > 1e-4
  with pytest.raises(FileNotFoundError, match='has no checkpoint step 999999; its steps'):
    embed.Embedder.from_pretrained(workdir, step=999999)


def test_a_run_given_by_a_relative_path_loads(fine_tuned_sst2, monkeypatch):
  """Pass U: sources.load('run') from the run's parent folder called every healthy step
  damaged ('none of the checkpoints ... can be read'): orbax took the relative path."""
  from bertjax.interop import sources  # pylint: disable=g-import-not-at-top
  workdir, _ = fine_tuned_sst2
  monkeypatch.chdir(workdir.parent)
  relative = sources.load(workdir.name)
  absolute = sources.load(workdir)
  assert sorted(relative.params) == sorted(absolute.params)
  for name, value in absolute.params.items():
    np.testing.assert_array_equal(relative.params[name], value)
