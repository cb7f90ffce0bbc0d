"""The helpers every other folder uses: stdlib only, no model, no table library at import.

``errors`` (the error types a user sees); files: ``atomic_write`` (every result written whole or not
at all), ``io`` (reading the files people give: compression, encodings, JSON), ``yaml_files`` (a
user's YAML, loaded and its errors worded), ``limits`` (size budgets of YAML files, configs and the
analysis), ``digests`` (hashes and fingerprints), ``table_files`` (CSV/TSV and parquet, one set of
checks), ``filesystems`` (a file system's room, and what stopped a write, in a sentence); what jobs
leave for others: ``records`` (a predictions file's result record, a dataset's source),
``token_cache`` (a tokenised testset's sidecar), ``seals`` (a staged result's seal), ``published``
(results published as one set by one rename, and their record), ``refusals`` (the sentence a job
stopped with); one writer per folder: ``locks``, ``lock_places``; the config's model entries and
defaults: ``model_entry``, ``defaults``; model files: ``model_dirs``, ``gguf``, ``gguf_tensors``;
processes and devices: ``gpus``, ``ranks``; the answer: ``answer``, ``reasons``; what made a result:
``provenance``; the experiment trackers: ``trackers``.

May import: nothing of oodcorr outside this folder.
"""
