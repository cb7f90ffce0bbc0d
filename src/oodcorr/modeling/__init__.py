"""Models: how one is loaded (``loading``: one checkpoint, or a run's in turn;
for scoring on a CPU, ``plain_torch`` without transformers and ``lora`` adapters folded into the weights),
adapted to NLI and scored (``adaptation``, ``prompting``), built offline (``tiny``, ``synthetic``), or
fetched from the hub (``hub``; the files and weights of a model repository, ``weights``).

torch and transformers are imported inside the functions that need them (``prompting``, ``plain_torch``
and ``lora`` import torch at their top, and are themselves imported only inside functions), so planning
can ask a model's size or tokenizer without them.

May import: ``core``.
"""
