"""Shared machinery for causal language models (torch, ``transformers``: the ``lm`` extra).

- :mod:`~dpaudit.language.texts`: text records from JSONL, CSV or one record per line;
- :mod:`~dpaudit.language.loading`: a causal LM and its tokenizer from a local folder,
  offline, never with remote code;
- :mod:`~dpaudit.language.scoring`: every text token's log-probability given its prefix,
  with the mean and standard deviation of log p under the next-token distribution, batched
  with left padding that changes no score;
- :mod:`~dpaudit.language.attacks`: the membership scores ``loss``, ``zlib``, ``min-k``,
  ``min-k++`` and ``reference`` computed from those statistics;
- :mod:`~dpaudit.language.tiny`: a tiny GPT-2-style model and a word-level tokenizer built
  from a config and from text made offline (tests and shipped examples);
- :mod:`~dpaudit.language.finetune`: DP-SGD fine-tuning with ``torch.func`` per-record
  gradients, new-token canaries (added to a loaded model's tokenizer too) and their scores;
- :mod:`~dpaudit.language.secrets`: inserted secrets of a digit format and their candidate
  spaces, for canary exposure (:mod:`dpaudit.bounds.exposure`).

Nothing here is imported when an audit file loads: the membership and dpsgd families reach
it inside their units.
"""
