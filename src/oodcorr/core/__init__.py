"""The helpers every other folder uses: stdlib only, no model, no table library at import.

``errors`` (the error types a user sees), ``io`` (atomic writes, reading what people have, fingerprints),
``table_files`` (CSV/TSV and parquet files, read with one set of checks),
``filesystems`` (the room a file system has, and what stopped a write, in a sentence), ``records``
(what jobs record beside their outputs, for the readers that are not those jobs), ``defaults`` (the
defaults Python reads, written once), ``model_entry`` (a model entry of the config, typed once by
planning: what every later stage receives), ``model_dirs`` (model folders on disk and whether they load
safely), ``locks`` (one writer per folder; lock files opened without following links), ``published``
(results published as one set, switched by one rename, and checked against their record), ``gpus``
(device claims), ``ranks`` (which process of a distributed launch this is), ``limits`` (the size
budgets of YAML files, configs and the analysis, checked before any work), ``gguf`` (a GGUF file's
header, read and checked before anything loads it; the tensors its architecture needs:
``gguf_tensors``), ``answer`` (the answer in a sentence: the pairs per verdict of an agreement table,
for the console and the report; and the ladder's words, every verdict, which the analysis, the figures
and the page read), ``provenance`` (what made a result: the code's commit and versions, the
libraries the jobs recorded) and ``trackers`` (the experiment trackers ``finetune.report_to``
names: where each writes, from its own environment variables, and whether it is installed and
reachable).

May import: nothing of oodcorr outside this folder.
"""
