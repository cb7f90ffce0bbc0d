"""`oodcorr analyse`: the real McCoy et al. (2020) table, long tables with examples, errors."""

import csv
import gzip
import json
import logging
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pingouin as pg
import pytest

from oodcorr.analysis import Options, analyse
from oodcorr.analysis.simulate.runs import ar1_series
from oodcorr.cli import build_parser, main
from oodcorr.core.errors import DataError

from helpers import SHARED

BERTS = SHARED / "data/external/berts_of_a_feather/accuracies_by_run.csv"


@pytest.mark.slow
@pytest.mark.skipif(not BERTS.exists(), reason=f"needs the shared data beside the checkout: {BERTS} is absent")
def test_berts_of_a_feather_wide_table(tmp_path, caplog):
    out = tmp_path / "berts"
    with caplog.at_level(logging.INFO):
        rc = main(
            [
                "analyse",
                str(BERTS),
                "--format",
                "wide",
                "--unit",
                "Run",
                "--in-domain",
                "MNLI dev acc.",
                "--residualisers",
                "linear",
                "--out",
                str(out),
            ]
        )
    assert rc == 0, caplog.text
    # the four summary rows at the bottom are named and excluded, never silently
    for line, label in ((102, "Minimum"), (103, "Maximum"), (104, "Mean"), (105, "Standard deviation")):
        assert f"excluded line {line}, unit '{label}': a summary row" in caplog.text
    pc = pd.read_csv(out / "partial_correlations.csv")
    with open(BERTS, encoding="utf-8-sig", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Run"].startswith("Run ")]
    assert len(rows) == 100
    ood = [c for c in rows[0] if c not in ("Run", "MNLI dev acc.")]
    assert len(ood) == 37 and len(pc) == 2 * 37 * 36 // 2  # the run ("all") and the pooled row per pair
    assert "MNLI dev acc." not in set(pc.x) | set(pc.y)
    fin = pc[pc.r.notna()]
    # the runs are exchangeable units: the ordinary partial-correlation t-test on n - 3 = 97 df
    assert (fin.n == 100).all() and fin.block_length.isna().all() and fin.phi_x.isna().all()
    assert (fin.loc[fin.run == "all", "n_eff"].round(9) == 99).all()
    assert (fin.p_method.str.startswith("t-test (exchangeable units)")).all()  # pooled: "... (single run)"
    assert ((fin.p < 0.05) == ((fin.ci_low > 0) | (fin.ci_high < 0))).all()  # interval and p agree
    # constant columns (the same accuracy in all 100 runs): NaN with the reason
    const = pc[(pc.x == "ce_adverb") | (pc.y == "ce_adverb")]
    assert const.r.isna().all() and const.note.str.contains("ce_adverb is constant across the 100 points").all()
    # every r is the OLS partial correlation, computed here from the file read independently
    data = pd.DataFrame({c: [float(r[c]) for r in rows] for c in rows[0] if c != "Run"})
    X = np.column_stack([np.ones(100), data["MNLI dev acc."]])
    res = data - X @ np.linalg.lstsq(X, data.to_numpy(), rcond=None)[0]
    run_rows = pc[(pc.run == "all") & pc.r.notna()]
    want = [np.corrcoef(res[x], res[y])[0, 1] for x, y in zip(run_rows.x, run_rows.y)]
    assert len(run_rows) == 595 and np.abs(run_rows.r.to_numpy() - want).max() < 1e-10
    # ... and one cell's r and p against pingouin's
    ref = pg.partial_corr(data, x="Lexical (nonent)", y="Subseq (nonent)", covar="MNLI dev acc.")
    cell = pc[(pc.run == "all") & (pc.x == "Lexical (nonent)") & (pc.y == "Subseq (nonent)")].iloc[0]
    assert abs(cell.r - ref["r"].iloc[0]) < 1e-10 and cell.p == pytest.approx(ref["p_val"].iloc[0], rel=1e-8)
    # Lexical (nonent) is the mean of the five ln_* subcases: each part correlates
    # positively and significantly with the whole, after Holm over all 595 tested pairs
    part = pc[(pc.run == "pooled") & (pc.x == "Lexical (nonent)") & pc.y.str.startswith("ln_")]
    assert len(part) == 5 and (part.r > 0.4).all() and part.significant.all()
    assert (part.ci_low > 0).all() and (part.conclusion == "positive").all()
    agree = pd.read_csv(out / "agreement.csv")
    assert len(agree) == 666 and set(agree.verdict) == {"fewer than 2 models tested", "no data"}
    png = (out / "heatmaps/accuracies_by_run.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 100_000
    assert (out / "scatter/accuracies_by_run.png").exists()
    assert not (out / "heatmap_grid.png").exists()  # one model: nothing to put side by side
    assert not (out / "learning_curves").exists()  # runs are not training steps


def _long_table(tmp_path):
    """Two models x three runs x 14 steps; model B's pair (a, b) moves in the opposite direction."""
    rng = np.random.default_rng(0)
    rows, ex = [], []
    for model, sign in (("A", 1), ("B", -1)):
        for run in ("r0", "r1", "r2"):
            shared = rng.normal(size=14)
            for step in range(14):
                z = 0.5 + 0.02 * step
                accs = {
                    "mnli": z,
                    "a": 0.3 + 0.5 * z + 0.03 * shared[step] + 0.005 * rng.normal(),
                    "b": 0.2 + 0.3 * z + sign * 0.03 * shared[step] + 0.005 * rng.normal(),
                    "c": 0.4 + 0.2 * z + 0.02 * rng.normal(),
                }
                for ts, acc in accs.items():
                    correct = (rng.uniform(size=200) < acc).astype(int)
                    rows.append({"model": model, "run": run, "step": step * 50, "testset": ts, "accuracy": acc})
                    ex += [
                        {"model": model, "run": run, "step": step * 50, "testset": ts, "example": i, "correct": c}
                        for i, c in enumerate(correct)
                    ]
    rows.append({"model": "A", "run": "r0", "step": "mean", "testset": "a", "accuracy": 0.5})
    scores, examples = tmp_path / "scores.csv", tmp_path / "examples.parquet"
    pd.DataFrame(rows).to_csv(scores, index=False)
    pd.DataFrame(ex).to_parquet(examples)
    return scores, examples


def test_long_table_two_models_pooling_agreement_and_examples(tmp_path, caplog):
    scores, examples = _long_table(tmp_path)
    out = tmp_path / "out"
    with caplog.at_level(logging.INFO):
        rc = main(
            [
                "analyse",
                str(scores),
                "--in-domain",
                "mnli",
                "--run",
                "run",
                "--examples",
                str(examples),
                "--methods",
                "pearson",
                "spearman",
                "--residualisers",
                "linear",
                "--n-boot",
                "300",
                "--n-perm",
                "300",
                "--example-boot",
                "50",
                "--out",
                str(out),
            ]
        )
    assert rc == 0, caplog.text
    assert "unit 'mean': a summary row" in caplog.text
    pc = pd.read_csv(out / "partial_correlations.csv")
    assert set(pc.run) == {"r0", "r1", "r2", "pooled"} and set(pc.model) == {"A", "B"}
    ab = pc[(pc.run == "pooled") & (pc.x == "a") & (pc.y == "b") & (pc.method == "pearson")].set_index("model")
    assert ab.loc["A", "r"] > 0.7 and ab.loc["B", "r"] < -0.7 and (ab.n_runs == 3).all()
    assert ab.loc["A", "conclusion"] == "positive" and ab.loc["B", "conclusion"] == "negative"
    assert ab.p_method.str.startswith("random effects across 3 runs").all() and ab.i2.notna().all()
    runs = pc[(pc.run != "pooled") & (pc.method == "pearson")]
    assert runs.ex_ci_low.notna().all() and (runs.ex_ci_low <= runs.r).all() and (runs.r <= runs.ex_ci_high).all()
    assert runs.n_eff.between(2, 13 + 1e-9).all() and runs.p_method.str.startswith("modified t-test").all()
    agree = pd.read_csv(out / "agreement.csv")
    row = agree[(agree.x == "a") & (agree.y == "b") & (agree.method == "pearson")].iloc[0]
    assert row.n_positive == 1 and row.n_negative == 1 and row.verdict == "sign reversal"
    assert row.reversal.startswith("A +0.") and " vs B -0." in row.reversal and row.family_size == 3
    assert "agreement pearson/linear: sign reversal 1" in caplog.text
    # the answer across the two models: their consensus (random effects; no prediction interval
    # from 2 models), and the consensus heatmap of the in-domain set
    assert math.isfinite(row.r_consensus) and math.isnan(row.pi_low_consensus) and row.n_models_consensus == 2
    for f in (
        "consensus/mnli.png",
        "heatmaps/A.png",
        "heatmaps/B.png",
        "heatmap_grid.png",
        "learning_curves/A.png",
        "scatter/B.png",
        "settings.json",
        "explorer.html",
    ):
        assert (out / f).stat().st_size > 0, f
    # the last line names the explorer page
    last = [r.getMessage() for r in caplog.records][-1]
    assert last.startswith(f"every pair, explored in a browser (one file, offline): {out / 'explorer.html'} (6 pairs")


def test_errors_name_the_problem_and_exit_2(tmp_path, caplog):
    scores, _ = _long_table(tmp_path)
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(scores), "--in-domain", "snli", "--out", str(tmp_path / "o")]) == 2
    assert "'snli' does not occur in column 'testset'" in caplog.text
    assert not (tmp_path / "o" / "partial_correlations.csv").exists()
    assert main(["analyse", str(tmp_path / "nope.csv"), "--in-domain", "x"]) == 2
    assert "nope.csv: file not found" in caplog.text


@pytest.mark.slow
def test_console_script_help_documents_the_flags():
    exe = Path(sys.executable).with_name("oodcorr")
    assert exe.exists(), "pip install -e . creates the oodcorr command ([project.scripts])"
    res = subprocess.run([str(exe), "analyse", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    for flag in (
        "--format",
        "--unit",
        "--in-domain",
        "--residualisers",
        "--block-length",
        "--correction",
        "--examples",
        "summary row",
        "--inference",
        "--pool-by",
        "--pool-two-runs",
        "--drop-step0",
        "--no-step0-check",
        "--near-zero",
        "--min-n-eff",
    ):
        assert flag in res.stdout, flag


def test_analyse_defaults_are_the_analysis_defaults_and_its_help_shows_them(capsys, monkeypatch):
    d = Options()
    args = build_parser().parse_args(["analyse", "scores.csv", "--in-domain", "mnli"])
    same_name = ("inference", "level", "min_n_eff", "near_zero", "pool_two_runs", "n_boot", "n_perm")
    same_name += ("block_length", "interval", "correction", "alpha", "seed", "example_boot")
    for name in same_name:
        assert getattr(args, name) == getattr(d, name), name
    assert (tuple(args.methods), tuple(args.residualisers)) == (d.methods, d.residualisers)
    assert (args.gam_n_splines, args.gam_min_points) == (d.gam.n_splines, d.gam.min_points)
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no wrap inside a "(default: ...)"
    with pytest.raises(SystemExit):
        main(["analyse", "--help"])
    entries = {}  # flag -> its help entry (a long invocation puts the help on the next line)
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  -"):
            flag = line.split()[0]
            entries[flag] = line
        elif line.startswith("   ") and entries:
            entries[flag] += " " + line.strip()
    for flag, shown in {
        "--methods": " ".join(d.methods),
        "--min-n-eff": f"{d.min_n_eff:g}",
        "--block-length": "auto",
        "--level": str(d.level),
        "--pool-two-runs": d.pool_two_runs,
        "--gam-min-points": str(d.gam.min_points),
    }.items():
        assert entries[flag].endswith(f"(default: {shown})"), entries[flag]


def _analysed(args, out):
    """The partial correlations a run of `oodcorr analyse` wrote (sorted, for comparison)."""
    assert main(["analyse", *args, "--out", str(out), "--no-plots", "--n-boot", "50", "--n-perm", "50", "-q"]) == 0
    pc = pd.read_csv(out / "partial_correlations.csv")
    return pc.sort_values(["model", "run", "x", "y"]).reset_index(drop=True)


def test_tables_as_people_have_them_give_the_same_analysis(tmp_path):
    """gzip (by name and by content), a byte-order mark, CRLF, Latin-1 with --encoding: one answer."""
    scores, _ = _long_table(tmp_path)
    text = scores.read_text().replace("mnli", "mnli-é")  # a testset name outside ASCII
    args = ["--in-domain", "mnli-é", "--run", "run"]
    (tmp_path / "utf8.csv").write_text(text, encoding="utf-8")
    ref = _analysed([str(tmp_path / "utf8.csv"), *args], tmp_path / "ref")
    variants = {
        "t.csv.gz": (gzip.compress(text.encode()), []),
        "gz-named-plain.csv": (gzip.compress(text.encode()), []),
        "bom.csv": (text.encode("utf-8-sig"), []),
        "crlf.csv": (text.replace("\n", "\r\n").encode(), []),
        "latin1.csv": (text.encode("latin-1"), ["--encoding", "latin-1"]),
        "utf16.csv": (text.encode("utf-16"), []),
    }
    for name, (data, extra) in variants.items():
        (tmp_path / name).write_bytes(data)
        got = _analysed([str(tmp_path / name), *args, *extra], tmp_path / name.replace(".", "_"))
        pd.testing.assert_frame_equal(got, ref, obj=name)


@pytest.mark.parametrize(
    "name, data, extra, message",
    [
        ("empty.csv", b"", [], r"empty\.csv: the file is empty \(no header, no rows\)"),
        (
            "header.csv",
            b"step,testset,accuracy\n",
            [],
            r"header\.csv: has a header \(step, testset, accuracy\) but no "
            r"rows",
        ),
        ("header.tsv", b"step\ttestset\taccuracy\r\n", [], r"header\.tsv: has a header .* but no rows"),
        (
            "blank.csv",
            b"step,testset,accuracy\n,,\n\n",
            [],
            r"blank\.csv: no rows left once empty rows and summary rows",
        ),
        (
            "summary.csv",
            b"step,testset,accuracy\nMean,a,0.5\nStd,a,0.1\n",
            [],
            r"summary\.csv: no rows left once empty rows and summary rows \(mean, std, \.\.\.\) are excluded",
        ),
        (
            "latin.csv",
            "step,testset,accuracy\n1,caf\u00e9,0.5\n".encode("latin-1"),
            [],
            r"latin\.csv:2: not UTF-8 \(byte 0xe9 at offset \d+\); if the file is in another encoding, pass --encoding "
            r"latin-1",
        ),
        (
            "dup.csv",
            b"step,testset,accuracy,accuracy\n1,a,0.5,0.6\n",
            [],
            r"dup\.csv:1: the header names column\(s\) \['accuracy'\] more than once",
        ),
        (
            "ragged.csv",
            b"step,testset,accuracy\n1,a,0.5\n2,a,0.5,9\n",
            [],
            r"ragged\.csv: cannot be read as a table "
            r"\(.*line 3",
        ),
        ("trunc.csv.gz", None, [], r"trunc\.csv\.gz: a damaged or truncated gzip file"),
        ("bad.parquet", b"PAR1 nothing", [], r"bad\.parquet: not a readable parquet file"),
        (
            "x.csv",
            b"step,testset,accuracy\n1,a,0.5\n",
            ["--encoding", "klingon"],
            r"x\.csv: unknown encoding 'klingon'",
        ),
    ],
)
def test_bad_tables_are_refused_with_the_file_and_what_is_wrong(tmp_path, caplog, name, data, extra, message):
    if data is None:
        data = gzip.compress(b"step,testset,accuracy\n" + b"1,a,0.5\n" * 1000)[:60]
    (tmp_path / name).write_bytes(data)
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(tmp_path / name), "--in-domain", "a", "--out", str(tmp_path / "o"), *extra]) == 2
    assert re.search(message, caplog.text), caplog.text
    assert "Traceback" not in caplog.text and not (tmp_path / "o").exists()


def test_out_that_is_a_file_is_refused_before_any_work(tmp_path, caplog):
    scores, _ = _long_table(tmp_path)
    out = tmp_path / "analysis"
    out.write_text("my notes")
    with caplog.at_level(logging.ERROR):
        assert main(["analyse", str(scores), "--in-domain", "mnli", "--run", "run", "--out", str(out)]) == 2
    assert f"--out {out}: is an existing file; give a folder (it is created if missing)" in caplog.text
    assert out.read_text() == "my notes"


def test_an_out_on_a_read_only_file_system_is_one_sentence_not_a_traceback(tmp_path, caplog):
    """Before: the write error's sentence (issue 47) came with a traceback, the CLI not catching it."""
    from faults import read_only_mount

    scores, _ = _long_table(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    with read_only_mount(ro), caplog.at_level(logging.ERROR):
        code = main(["analyse", str(scores), "--in-domain", "mnli", "--run", "run", "--out", str(ro / "o"), "-q"])
    assert code == 2
    assert f"{ro / 'o'} is on a read-only file system" in caplog.text and "another --out" in caplog.text, caplog.text


@pytest.mark.slow
def test_the_console_script_prints_no_traceback_for_bad_tables(tmp_path):
    exe = Path(sys.executable).with_name("oodcorr")
    scores, _ = _long_table(tmp_path)
    (tmp_path / "h.csv").write_text("step,testset,accuracy\n")
    (tmp_path / "file").write_text("")
    (tmp_path / "l.csv").write_bytes("step,testset,accuracy\n1,caf\u00e9,0.5\n".encode("latin-1"))
    for args in (
        ["h.csv", "--in-domain", "a"],
        [str(scores), "--in-domain", "mnli", "--out", "file"],
        ["l.csv", "--in-domain", "a"],
    ):
        res = subprocess.run([str(exe), "analyse", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith("ERROR oodcorr: ") and res.stderr.count("\n") == 1, res.stderr


def _scores_like(tmp_path):
    """The workflow's scores table: two n_train values x three seeds, one model."""
    rng = np.random.default_rng(3)
    rows = []
    for n_train in (64, 512):
        for seed in range(3):
            run = f"m/synth/n{n_train}/seed{seed}"
            x_, y_, z_ = ar1_series(rng, 11, 0.4, 0.5)
            for step in range(11):
                for ts, role, v in (
                    ("synth", "in-domain", z_),
                    ("a", "ood", x_),
                    ("b", "ood", y_),
                    ("c", "ood", z_ * 0.3 + 0.01 * rng.normal()),
                ):
                    rows.append(
                        {
                            "model": "m",
                            "in_domain": "synth",
                            "n_train": n_train,
                            "seed": seed,
                            "run_id": run,
                            "step": step * 10,
                            "testset": ts,
                            "role": role,
                            # an accuracy: a share around 0.5 (the partial correlations are those of v)
                            "accuracy": 0.5 + 0.02 * (float(v[step]) if hasattr(v, "__len__") else float(v)),
                        }
                    )
    scores = pd.DataFrame(rows)
    path = tmp_path / "scores.csv"
    scores.to_csv(path, index=False)
    return scores, path


def test_settings_name_the_code_and_for_a_published_scores_table_its_jobs_libraries(tmp_path):
    """settings.json's provenance: the code that analysed (this checkout's commit) and, for a scores table
    the workflow published (unchanged since), the libraries its finetunes and evaluations recorded, from
    the provenance.json published with it; any other table (a copy, or the published one edited): the code."""
    import shutil

    from oodcorr.core.atomic_write import write_json_atomic
    from oodcorr.core.published import publish_set
    from oodcorr.core.seals import seal

    from helpers import REPO

    _, path = _scores_like(tmp_path)
    root, staging = tmp_path / "results/x", tmp_path / "results/x/.staging"
    staging.mkdir(parents=True)
    shutil.copy(path, staging / "scores.csv")
    jobs = {"evaluate": {"torch": {"2.13.0": 264}}, "finetune": {"torch": {"2.12.0": 66}}}
    write_json_atomic(staging / "provenance.json", dict(jobs, aggregated_by={}))
    seal([staging / "scores.csv", staging / "provenance.json"])  # as the aggregation does
    staged = {name: staging / name for name in ("scores.csv", "provenance.json")}
    publish_set(root, staged, experiment="x")

    def provenance(table, out):
        args = ["analyse", str(table), "--in-domain", "synth", "--out", str(tmp_path / out), "--no-plots", "-q"]
        assert main([*args, "--n-boot", "50", "--n-perm", "50"]) == 0
        return json.loads((tmp_path / out / "settings.json").read_text())["provenance"]

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    published = provenance(root / "scores.csv", "a")  # the published path people read (a link)
    assert published["analysed_by"]["git_commit"] == head.stdout.strip()
    assert {k: published[k] for k in jobs} == jobs
    assert provenance(path, "b") == {"analysed_by": published["analysed_by"]}
    (root / "scores.csv").write_text(path.read_text().replace("0.5", "0.6", 1))  # edited since it was published
    assert provenance(root / "scores.csv", "c") == {"analysed_by": published["analysed_by"]}


def test_cli_pools_within_n_train_like_the_workflow(tmp_path, caplog):
    from oodcorr.analysis.readers.workflow_scores import from_scores

    scores, path = _scores_like(tmp_path)
    out = tmp_path / "out"
    assert main(["analyse", str(path), "--in-domain", "synth", "--out", str(out), "--no-plots"]) == 0, caplog.text
    cli = pd.read_csv(out / "partial_correlations.csv")
    pooled = cli[cli.run == "pooled"]
    assert sorted(pooled.n_train.unique()) == [64, 512] and set(pooled.pool_group) == {"n_train=64", "n_train=512"}
    assert list(cli.columns[-2:]) == ["n_train", "seed"]
    # the workflow's path (scores table -> from_scores -> analyse with run information) gives the same cells
    long, info = from_scores(scores)
    wf = analyse(long, Options(), ordered=True, run_info=info)
    for col in ("r", "ci_low", "ci_high", "p", "p_adj", "n_eff", "tau2", "r_no_step0"):
        assert np.allclose(cli[col].to_numpy(float), wf[col].to_numpy(float), equal_nan=True, rtol=1e-9), col
    # --pool-by with no column pools all six runs
    assert (
        main(["analyse", str(path), "--in-domain", "synth", "--out", str(tmp_path / "all"), "--no-plots", "--pool-by"])
        == 0
    )
    across = pd.read_csv(tmp_path / "all" / "partial_correlations.csv")
    assert set(across.loc[across.run == "pooled", "n_runs"]) == {6}


def test_pool_by_errors_name_the_column(tmp_path, caplog):
    scores, path = _scores_like(tmp_path)
    with caplog.at_level(logging.ERROR):
        assert (
            main(["analyse", str(path), "--in-domain", "synth", "--out", str(tmp_path / "o"), "--pool-by", "lr"]) == 2
        )
    assert "no column 'lr' to pool by" in caplog.text
    assert not (tmp_path / "o" / "partial_correlations.csv").exists()
    scores.loc[(scores.run_id == "m/synth/n64/seed0") & (scores.step == 50), "n_train"] = 65
    scores.to_csv(path, index=False)
    assert main(["analyse", str(path), "--in-domain", "synth", "--out", str(tmp_path / "o")]) == 2
    assert "column 'n_train' is not constant within run 'm/synth/n64/seed0'" in caplog.text


def test_out_into_an_experiments_published_folder_is_refused_unless_forced(tmp_path, caplog):
    """`oodcorr analyse --out results/<experiment>/analysis` would replace the published tables (and
    could mix with a run publishing now): refused without --force, naming the folder and the way out;
    with --force it writes, holding the experiment's lock, and is refused while a run holds it.
    (Before: it wrote over the published tables.)"""
    scores, path = _scores_like(tmp_path)
    exp = tmp_path / "results/x"
    (exp / ".published/v1/analysis").mkdir(parents=True)
    (exp / "analysis").symlink_to(".published/current/analysis")
    (exp / ".published/current").symlink_to("v1")
    (exp / ".published/v1/analysis/partial_correlations.csv").write_text("published\n")
    args = ["analyse", str(path), "--in-domain", "synth", "--no-plots", "-q"]
    for out in (exp / "analysis", exp, exp / "analysis/mine"):
        with caplog.at_level(logging.ERROR):
            assert main([*args, "--out", str(out)]) == 2
        assert f"--out {out}: is inside the experiment folder {exp.resolve()}" in caplog.text
        assert "Give another --out" in caplog.text and "pass --force" in caplog.text
    assert (exp / "analysis/partial_correlations.csv").read_text() == "published\n"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oodcorr.core.locks import EXPERIMENT, hold\n"
            "with hold(sys.argv[1], EXPERIMENT, extra={'config': 'my.yaml'}):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n",
            str(exp.resolve()),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            assert main([*args, "--out", str(exp / "analysis"), "--force"]) == 2
        assert f"experiment folder {exp.resolve()} is in use by another run of the workflow" in caplog.text
        assert f"PID {holder.pid}" in caplog.text and "config my.yaml" in caplog.text
        assert (exp / "analysis/partial_correlations.csv").read_text() == "published\n"
    finally:
        holder.kill()
        holder.wait()
    assert main([*args, "--out", str(exp / "analysis"), "--force"]) == 0
    assert (exp / "analysis/partial_correlations.csv").read_text() != "published\n"
    assert (exp / "experiment.lock").read_text() == ""  # released
    assert main([*args, "--out", str(tmp_path / "elsewhere")]) == 0  # anywhere else: as before


# ---- the analysis: an estimate, and a refusal above the limit ------------------------------------------------
def _wide(path: Path, n_ood: int, n_units: int = 12) -> Path:
    rng = np.random.default_rng(0)
    cols = {"step": list(range(0, 10 * n_units, 10)), "mnli": rng.random(n_units)}
    cols.update({f"ood{j}": rng.random(n_units) for j in range(n_ood)})
    pd.DataFrame(cols).to_csv(path, index=False)
    return path


def test_analyse_says_how_many_cells_and_refuses_above_max_cells(tmp_path, caplog):
    table = _wide(tmp_path / "wide.csv", 30)  # 435 pairs
    args = ["analyse", str(table), "--format", "wide", "--in-domain", "mnli", "--no-plots"]
    with caplog.at_level(logging.INFO):
        rc = main([*args, "--methods", "pearson", "spearman", "--max-cells", "800", "--out", str(tmp_path / "a")])
    assert rc == 2
    assert (
        f"the analysis of {table} would compute 870 cells (435 OOD pair(s) summed over 1 run(s) x 2 method(s) x 1 "
        "residualiser(s)), more than the 800 that --max-cells allows (time and memory grow with the cells: millions "
        "run for tens of minutes). Analyse fewer (--testsets, --exclude, --methods or --residualisers), or pass "
        "--max-cells 870 to run it anyway"
    ) in caplog.text
    assert not (tmp_path / "a").exists()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert main([*args, "--max-cells", "435", "--out", str(tmp_path / "b")]) == 0
    assert "analysing 435 cells (435 OOD pair(s) summed over 1 run(s) x 1 method(s) x 1 residualiser(s))" in (
        caplog.text
    )
    assert len(pd.read_csv(tmp_path / "b/partial_correlations.csv")) == 2 * 435  # the run and the pooled row


def test_analyse_refuses_two_thousand_testsets_by_default(tmp_path, caplog):
    """About two million pairs: tens of minutes and gigabytes, refused before any is computed."""
    table = _wide(tmp_path / "huge.csv", 2000, n_units=6)
    with caplog.at_level(logging.ERROR):
        rc = main(["analyse", str(table), "--format", "wide", "--in-domain", "mnli", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "would compute 1,999,000 cells" in caplog.text and "--max-cells (its default) allows" in caplog.text
    assert "pass --max-cells 1999000 to run it anyway" in caplog.text


def test_an_analysis_size_error_is_a_data_error_in_the_cli(tmp_path):
    """What main() turns into one line and exit status 2 (not a traceback)."""
    from oodcorr.cli.analyse import check_analysis_size

    long = pd.DataFrame(
        {"model": "m", "in_domain": "z", "run": "r", "unit": 0, "testset": ["z", "a", "b", "c"], "score": 0.5}
    )
    assert check_analysis_size(long, ["pearson"], ["linear"], 3) == 3
    with pytest.raises(DataError, match=r"would compute 3 cells"):
        check_analysis_size(long, ["pearson"], ["linear"], 2)


@pytest.mark.parametrize("second", ["org_a", "ORG/A"])
def test_two_models_that_would_share_a_figure_file_are_refused_naming_both(tmp_path, caplog, second):
    """Before: both analysed, and heatmaps/org_a.png (scatter/, learning_curves/) drawn twice, the
    second model's figure over the first's (issue 41)."""
    rng = np.random.default_rng(0)
    rows = [
        {"model": m, "step": s, "testset": t, "accuracy": float(0.5 + 0.1 * rng.random())}
        for m in ("org/a", second)
        for s in range(8)
        for t in ("mnli", "x", "y")
    ]
    path = tmp_path / "two.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    out = tmp_path / "out"
    assert main(["analyse", str(path), "--in-domain", "mnli", "--out", str(out), "-q"]) == 2
    said = re.search(r"models ('[^']+') and ('[^']+') both become the figure file name ('[^']+')", caplog.text)
    assert said and {said[1], said[2]} == {"'org/a'", repr(second)} and said[3].lower() == "'org_a'", caplog.text
    assert not (out / "partial_correlations.csv").exists()  # refused before anything is written
    assert main(["analyse", str(path), "--in-domain", "mnli", "--out", str(out), "-q", "--no-plots"]) == 0


# ---- --out reused (issue 47): what an earlier analysis wrote there and this one does not is removed ----
def _models_table(path, models):
    rng = np.random.default_rng(1)
    rows = []
    for model in models:
        for step in range(10):
            z = 0.5 + 0.02 * step
            for ts, acc in {"mnli": z, "a": 0.3 + 0.4 * z, "b": 0.2 + 0.3 * z, "c": 0.4 + 0.1 * z}.items():
                rows.append({"model": model, "step": step * 10, "testset": ts, "accuracy": acc + 0.01 * rng.normal()})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _analyse_models(tmp_path, models, out, caplog):
    table = _models_table(tmp_path / f"{''.join(models)}.csv", models)
    args = ["analyse", str(table), "--in-domain", "mnli", "--out", str(out), "--workers", "1", "--forest-max", "0"]
    with caplog.at_level(logging.INFO):
        assert main(args) == 0, caplog.text


def test_out_reused_for_another_input_keeps_no_figure_of_the_earlier_one(tmp_path, caplog):
    """Before: the new tables held 2 models, and the figures of a third, analysed before, stayed beside them."""
    out = tmp_path / "out"
    _analyse_models(tmp_path, ["A", "B", "C"], out, caplog)
    per_model = ("heatmaps/{}.png", "scatter/{}.png", "learning_curves/{}.png")
    assert all((out / f.format("C")).exists() for f in per_model)
    (out / "my-notes.txt").write_text("mine")  # a file of the user's, never touched
    (out / "scatter" / "C.png").write_bytes(b"edited by hand")  # written by the analysis, then changed
    caplog.clear()
    _analyse_models(tmp_path, ["A", "B"], out, caplog)
    assert not (out / "heatmaps" / "C.png").exists() and not (out / "learning_curves" / "C.png").exists()
    assert all((out / f.format(m)).exists() for f in per_model for m in ("A", "B"))
    assert (out / "my-notes.txt").read_text() == "mine"
    assert (out / "scatter" / "C.png").read_bytes() == b"edited by hand"  # changed since: kept, and said
    said = caplog.text
    assert "removed 2 file(s) of the earlier analysis in" in said and "heatmaps/C.png" in said, said
    assert "scatter/C.png: written by an earlier analysis and changed since: kept" in said, said


def test_an_out_written_before_the_record_existed_is_left_alone_and_said(tmp_path, caplog):
    out = tmp_path / "out"
    _analyse_models(tmp_path, ["A", "B", "C"], out, caplog)
    next(out.glob(".oodcorr-*.json")).unlink()  # as an --out written before the record existed
    caplog.clear()
    _analyse_models(tmp_path, ["A", "B"], out, caplog)
    assert (out / "heatmaps" / "C.png").exists()  # not known to be ours: left alone
    assert "written before analyses recorded what they write there" in caplog.text, caplog.text
    assert "heatmaps/C.png" in caplog.text
    caplog.clear()
    _analyse_models(tmp_path, ["A", "B"], out, caplog)  # recorded now: the same analysis again says nothing
    assert "heatmaps/C.png" not in caplog.text


def test_an_out_record_of_another_format_is_not_read_its_files_are_left_and_it_is_written_anew(tmp_path):
    from oodcorr.cli.out_record import RECORD, RECORD_FORMAT, settle, snapshot
    from oodcorr.core.digests import stat_key

    out = tmp_path / "out"
    out.mkdir()
    for name in ("a.png", "b.png"):
        (out / name).write_bytes(b"earlier")
    files = {name: stat_key(out / name) for name in ("a.png", "b.png")}
    (out / RECORD).write_text(json.dumps({"format": RECORD_FORMAT + 1, "files": files}))
    before = snapshot(out)
    (out / "a.png").write_bytes(b"this analysis")
    (line,) = settle(out, before)
    assert line.startswith(
        f"{out}: {out / RECORD}, the record of what an earlier analysis wrote there, is of format "
        f"{RECORD_FORMAT + 1}, not {RECORD_FORMAT} (another version of oodcorr wrote it"
    )
    assert "did not write are left as they were: b.png" in line
    assert (out / "b.png").read_bytes() == b"earlier"  # its record was not read: not known to be ours
    doc = json.loads((out / RECORD).read_text())
    assert doc["format"] == RECORD_FORMAT and list(doc["files"]) == ["a.png"]


def test_a_wide_table_of_columns_on_different_scales_is_read_as_the_flags_say(tmp_path, caplog):
    """Before: refused, and the only way on was to reshape the table (issue 47); then a median over every
    column told their scale, and --items was refused beside a column's metric (issue 54)."""
    rng = np.random.default_rng(2)
    z = np.linspace(0.5, 0.8, 12)
    table = pd.DataFrame(
        {
            "step": np.arange(12) * 10,
            "mnli": z,
            "a": 0.3 + 0.4 * z + 0.01 * rng.normal(size=12),
            "b": 100 * (0.2 + 0.3 * z + 0.01 * rng.normal(size=12)),  # in percent
            "ll": -3 + z + 0.05 * rng.normal(size=12),  # a log-likelihood
        }
    )
    path = tmp_path / "mixed.csv"
    table.to_csv(path, index=False)
    args = ["analyse", str(path), "--format", "wide", "--in-domain", "mnli", "--no-plots", "-q"]
    with caplog.at_level(logging.ERROR):
        assert main([*args, "--out", str(tmp_path / "o1")]) == 2
    assert "column 'll'" in caplog.text and "--metric 'COLUMN=METRIC'" in caplog.text and "'b'" not in caplog.text
    assert main([*args, "--out", str(tmp_path / "o2"), "--metric", "ll=loglik"]) == 0
    pc = pd.read_csv(tmp_path / "o2" / "partial_correlations.csv")
    assert {"a", "b", "ll"} == set(pc.x) | set(pc.y)
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        assert (
            main(["analyse", str(path), "--in-domain", "mnli", "--metric", "ll=loglik", "--metric", "accuracy", "-q"])
            == 2
        )
    assert "a long table has one score column" in caplog.text
    caplog.clear()  # sizes bound the noise of the shares; the log-likelihood's item noise is unknown, and said
    with caplog.at_level(logging.WARNING):
        assert main([*args, "--out", str(tmp_path / "o3"), "--metric", "ll=loglik", "--items", "200"]) == 0
    assert "the metric of ['ll'] is not one, so their item noise is unknown" in caplog.text
