"""Text -> wordpiece ids: BERT's exact WordPiece, the fast in-graph path, vocab learning."""
