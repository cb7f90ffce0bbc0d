"""Tables read: long and wide, the workflow's scores table, lm-evaluation-harness results."""
