"""PyTorch checkpoints, in the three layouts `torch.load` reads: `zip` (torch.save since 1.6),
`legacy` (the magic-number pickle stream) and `tar` (the oldest). They share `common` (unpickling
a `data.pkl` into tensor descriptors), `members` (ZIP members as byte sources), `globals` (the
allow-list of torch globals) and `safety` (the report of every global a pickle names)."""
