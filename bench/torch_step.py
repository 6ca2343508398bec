"""transformers' PyTorch BertForPreTraining, trained as a PyTorch user trains it, for
bench/train_bench.py to time beside bertjax on the same config, batch and device: the stock model
(vocab logits at every position), the MLM head at the gathered masked positions (as the original
BERT and bertjax apply it), eager and under torch.compile. torch and transformers are imported
when a runner is built: a bench process that times bertjax alone loads neither."""

import numpy as np

TORCH_VARIANTS = ('stock', 'gathered', 'compiled')
# What PyTorch runs by default where jax runs: a GPU user runs the gathered head, eager and
# compiled; on the CPU, the stock model beside the gathered one.
DEFAULT_TORCH_VARIANTS = {'gpu': ('gathered', 'compiled'), 'cpu': ('stock', 'gathered')}
TORCH_DEVICE = {'gpu': 'cuda', 'cpu': 'cpu'}  # jax's platform -> torch's device type.


def torch_runner(config, batch, variant, *, device_type, attn_implementation,
                 compile_backend='inductor'):
  """A function running n PyTorch updates of one variant (TORCH_VARIANTS) on `device_type`
  ('cuda' or 'cpu'), synchronising once per call as bertjax's runner does."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  mcfg, ocfg = config.model, config.optimizer
  device = torch.device(device_type)
  hf = transformers.BertConfig(
      vocab_size=mcfg.vocab_size, hidden_size=mcfg.hidden_size,
      num_hidden_layers=mcfg.num_layers, num_attention_heads=mcfg.num_heads,
      intermediate_size=mcfg.mlp_dim, hidden_dropout_prob=mcfg.dropout_rate,
      attention_probs_dropout_prob=mcfg.attention_dropout_rate,
      layer_norm_eps=mcfg.layer_norm_eps, attn_implementation=attn_implementation)

  def tensor(x):
    return torch.tensor(np.asarray(x), dtype=torch.long, device=device)

  inputs = dict(input_ids=tensor(batch['input_ids']),
                attention_mask=tensor(batch['input_mask']),
                token_type_ids=tensor(batch['segment_ids']))
  positions = tensor(batch['masked_lm_positions'])
  ids = tensor(batch['masked_lm_ids'])
  weights = torch.tensor(batch['masked_lm_weights'], device=device)
  nsp_labels = tensor(batch['next_sentence_labels']).reshape(-1)
  labels = torch.full(inputs['input_ids'].shape, -100, dtype=torch.long, device=device)
  labels.scatter_(1, positions, ids)  # -100: not a target.

  torch.manual_seed(0)
  ref = transformers.BertForPreTraining(hf).to(device).train()

  def no_decay(name):  # BERT decays no LayerNorm parameter and no bias.
    return name.endswith('bias') or 'LayerNorm' in name

  groups = [
      {'params': [p for n, p in ref.named_parameters() if not no_decay(n)],
       'weight_decay': ocfg.weight_decay},
      {'params': [p for n, p in ref.named_parameters() if no_decay(n)], 'weight_decay': 0.0}]
  # On a GPU, the fused kernel a GPU user picks (one launch for all parameters).
  fused = {'fused': True} if device.type == 'cuda' else {}
  opt = torch.optim.AdamW(groups, lr=ocfg.learning_rate, betas=(ocfg.b1, ocfg.b2),
                          eps=ocfg.eps, **fused)
  # Mixed precision as PyTorch users run it: float32 parameters, autocast compute.
  bf16 = mcfg.dtype == 'bfloat16'

  def stock_loss():
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
      return ref(**inputs, labels=labels, next_sentence_label=nsp_labels).loss

  def gathered_loss():  # The MLM head only at the masked positions, as the original BERT does.
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
      seq, pooled = ref.bert(**inputs, return_dict=False)[:2]
      seq = torch.gather(seq, 1, positions[..., None].expand(-1, -1, seq.shape[-1]))
      mlm_logits, nsp_logits = ref.cls(seq, pooled)
      mlm = torch.nn.functional.cross_entropy(
          mlm_logits.flatten(0, 1).float(), ids.flatten(), reduction='none')
      return ((mlm * weights.flatten()).sum() / weights.sum().clamp_min(1e-8)
              + torch.nn.functional.cross_entropy(nsp_logits.float(), nsp_labels))

  loss_fn = stock_loss if variant == 'stock' else gathered_loss
  if variant == 'compiled':
    loss_fn = torch.compile(gathered_loss, backend=compile_backend)

  def run(n):
    for _ in range(n):
      loss = loss_fn()
      opt.zero_grad(set_to_none=True)
      loss.backward()
      torch.nn.utils.clip_grad_norm_(ref.parameters(), ocfg.grad_clip_norm)
      opt.step()
    return loss.item()  # The one sync: on a GPU the updates queue up, as bertjax's do.
  return run
