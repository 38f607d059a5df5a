"""PyTorch checkpoints, in the three layouts `torch.load` reads: `zipped` (torch.save since 1.6),
`legacy` (the magic-number pickle stream) and `tar` (the oldest). They share `common` (unpickling
a `data.pkl` into tensor descriptors), `members` (ZIP members as byte sources), `allowlist` (the
allow-list of torch globals) and `safety` (the report of every global a pickle names).
`loadpath` says which of the three torch.load itself takes through a file's bytes."""
