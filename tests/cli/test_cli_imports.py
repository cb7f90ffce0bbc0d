"""The light verbs stay light: importing the command line, building its parser for ``oodcorr
--help``, ``prefetch`` or ``budget`` and showing their help load no pandas, numpy or torch (only
``analyse`` and ``design`` import the statistics, when they run: oodcorr.cli's docstring)."""

import json
import subprocess
import sys

import pytest

HEAVY = ("pandas", "numpy", "scipy", "torch", "matplotlib")

PROBE = """
import contextlib, io, json, sys
import oodcorr.cli as cli
argv = json.loads(sys.argv[1])
if argv is not None:
    cli.build_parser(argv[:1])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        cli.main(argv)
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)))
"""


def loaded_after(argv) -> list[str]:
    """The heavy modules loaded in a fresh interpreter after importing oodcorr.cli (and, with
    ``argv``, building its parser and running ``main(argv)``)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=repr(HEAVY)), json.dumps(argv)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "argv",
    [None, ["--help"], ["prefetch", "--help"], ["budget", "--help"]],
    ids=["import", "help", "prefetch", "budget"],
)
def test_a_light_verb_imports_no_statistics_and_no_torch(argv):
    assert loaded_after(argv) == []


def test_the_analysis_verbs_do_import_them():
    """The probe can fail: ``analyse --help`` builds the analysis' options, which need pandas."""
    assert {"numpy", "pandas"} <= set(loaded_after(["analyse", "--help"]))
