"""Models: how one is loaded, adapted to NLI and scored, built offline, or fetched from the hub.

``loading`` (models and tokenizers under the safety defaults; for scoring on a CPU, ``plain_torch``:
OPT and OLMo2 read and run without transformers, the same logits bit for bit, and ``lora``:
LoRA adapters folded into the base weights), ``checkpoint_loader`` (a run's checkpoints loaded one
after another for scoring, reusing the base model), ``adaptation`` (the adaptation
methods: pattern or head), ``prompting`` (prompt, verbalisers, the scored position), ``tiny`` and
``synthetic`` (the offline stand-ins: tiny pretrained models, the synthetic NLI task), ``hub``
(the hub lock, prefetching, pinned revisions) and ``weights`` (the files of a model repository a job
loads; the parameters and linear layers its weights hold). torch and transformers are imported inside the
functions that need them (``prompting``, ``plain_torch`` and ``lora`` import torch at their top, and are
themselves imported only inside functions), so planning can ask a model's size or tokenizer
without them.

May import: ``core``.
"""
