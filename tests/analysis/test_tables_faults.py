"""A scores table cut short (a full disk, a killed copy): named, with what to do."""

from __future__ import annotations

import pandas as pd
import pytest

from oodcorr.analysis.readers.tables import read_table
from oodcorr.core.errors import DataError
from oodcorr.core.seals import seal
from oodcorr.jobs.aggregate_scores import read_scores


@pytest.mark.parametrize("reader", [read_table, read_scores], ids=["oodcorr analyse", "workflow"])
def test_a_staged_scores_parquet_cut_short_says_to_delete_it_and_that_the_next_run_rebuilds_it(tmp_path, reader):
    path = tmp_path / ".staging" / "scores.parquet"
    path.parent.mkdir()
    pd.DataFrame({"model": ["m"] * 50, "step": range(50), "accuracy": [0.5] * 50}).to_parquet(path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    seal([path])  # as rule aggregate_scores leaves a table it wrote: the cut is not the seal's to find
    with pytest.raises(ValueError) as e:  # DataError (analyse) or ResultError (the workflow's readers)
        reader(path)
    msg = str(e.value)
    assert str(path) in msg and "delete it" in msg and "aggregat" in msg
    assert isinstance(e.value, DataError) or reader is read_scores
