"""The run config: what a fine-tuning run resolves before any run or checkpoint exists."""

from bertjax.finetune import run_config
from bertjax.pretraining_data import embedded
from configs import finetune as finetune_config


def test_no_init_from_and_no_vocab_is_a_random_encoder_with_the_embedded_vocab():
  config = finetune_config.get_config('task=sst2,size=tiny')
  config.data.vocab_file = ''
  model_cfg, vocab_file = run_config.resolve_model(config, '')
  assert vocab_file == str(embedded.vocab_path())
  assert model_cfg.vocab_size == embedded.VOCAB_SIZE
