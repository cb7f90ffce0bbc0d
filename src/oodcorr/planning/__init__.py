"""From a config to the plan of every job, without loading a model or running a job.

``schema`` (config/schema.yaml: shape, defaults, file:line messages), ``config`` (the
experiment resolved against its registries and label modes), ``checks`` (what the schema cannot
say of the config; of each model entry: ``model_checks``; of what the plan built:
``plan_checks``), ``plan`` (runs, schedules, jobs, params; ``plan.load`` is the one entry point),
``layout`` (the results folder: where each file of an experiment lives), ``resources`` (what each
rule's job asks for, per model), ``rule_callables`` (what the rules get as callables: each rule's
threads and resources) and ``finetune_job`` (one finetune as a typed object the job
receives).

May import: ``core``. Never a model (``modeling``) or a job (``jobs``): planning stays fast and
torch-free.
"""
