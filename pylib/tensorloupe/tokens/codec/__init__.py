"""Text -> token ids and back, in pure Python, equal to the `tokenizers` library (tokenizer.json)
and to llama.cpp (GGUF vocabularies):

  encoder.py      the pipeline: added tokens cut out, normalise, pre-tokenise, model, post-process;
                  decode through the decoder
  charclass.py    Unicode classes for Oniguruma-style regexes (\\p{L}, a Unicode \\s), for `re`
  normalize.py    tokenizer.json normalisers          pretokenize.py  pre-tokenizers
  models.py       BPE, SentencePiece merge by score, WordPiece, Unigram
  decoders.py     tokenizer.json decoders
  from_json.py    an Encoder from tokenizer.json      from_gguf.py    from GGUF tokenizer metadata
"""
