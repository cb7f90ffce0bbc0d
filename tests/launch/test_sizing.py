"""Per-rule placement on a cluster and the planning-time GPU-memory check
(oodcorr.planning.plan, oodcorr.launch.sizing)."""

import re

import pytest
import yaml

from oodcorr.core.errors import ConfigError
from oodcorr.launch.sizing import GiB, ModelSize, check_gpu_memory, checkpoint_bytes, gpu_memory, lora_parameters
from oodcorr.planning.plan import build_plan
from oodcorr.planning.schema import check_config, fill_defaults

from helpers import REPO, micro_config, smk

SCHEMA = REPO / "config/schema.yaml"


def micro(**extra) -> dict:
    cfg = micro_config()
    cfg.update(extra)
    return cfg


def plan(cfg):
    check_config(cfg, SCHEMA)
    fill_defaults(cfg, SCHEMA)
    return build_plan(cfg, REPO)


def two_models(**extra):
    """micro's tiny model, and a copy of it in size class `big`."""
    cfg = micro(**extra)
    cfg["models"].append(dict(cfg["models"][0], name="micro-big", size_class="big"))
    return cfg


def _dry_run(tmp_path, cfg):
    """`snakemake -n --cores 1` of ``cfg`` (written to tmp_path/c.yaml) in tmp_path."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return smk(tmp_path, path, "-n", "--cores", "1", timeout=300)


def test_placement_precedence_default_cpu_rule_and_layers():
    cfg = two_models(
        resources={
            "default": {"slurm_partition": "gpu", "slurm_account": "lab"},
            "cpu": {"slurm_partition": "cpu"},
            "evaluate": {"gpu": 1},
            "finetune": {"gpu": 1, "slurm_partition": "gpu-long", "slurm_extra": "--nice=10"},
        },
        size_classes={"big": {"default": {"slurm_partition": "bigmem"}, "evaluate": {"constraint": "a100|h100"}}},
    )
    cfg["models"][0]["resources"] = {"evaluate": {"qos": "high"}}
    cfg["models"][1]["resources"] = {"evaluate": {"qos": "low"}}
    p = plan(cfg)
    small, big = p.models["micro-opt"].resources, p.models["micro-big"].resources
    # the config's layer: default < cpu (no GPU) < the rule's own keys
    assert small["tokenize_testset"].slurm_partition == "cpu" and small["tokenize_testset"].gpu == 0
    assert small["evaluate"].slurm_partition == "gpu" and small["finetune"].slurm_partition == "gpu-long"
    assert small["tokenize_testset"].where("slurm_partition") == "resources.cpu.slurm_partition"
    assert {r.slurm_account for r in small.values()} == {"lab"}
    # a size class's layer comes after the config's: its default wins over the config's cpu and rules
    assert {rule: r.slurm_partition for rule, r in big.items()} == dict.fromkeys(big, "bigmem")
    assert big["finetune"].where("slurm_partition") == "size_classes.big.default.slurm_partition"
    assert big["evaluate"].constraint == "a100|h100" and small["evaluate"].constraint is None
    assert big["finetune"].slurm_extra == "--nice=10"
    # Snakemake resources: a constant where every model agrees, a callable per model where not
    ev = p.rule_resources("evaluate")
    assert ev["slurm_account"] == "lab" and callable(ev["slurm_partition"]) and callable(ev["qos"])
    wc = type("W", (), {"model": "micro-big"})
    assert ev["slurm_partition"](wc) == "bigmem" and ev["qos"](wc) == "low"
    assert "constraint" not in p.rule_resources("tokenize_testset")


def test_a_placement_key_set_for_some_models_of_a_rule_only_is_an_error():
    cfg = two_models(size_classes={"big": {"finetune": {"slurm_partition": "bigmem"}}})
    with pytest.raises(ConfigError) as e:
        plan(cfg)
    msg = str(e.value)
    assert msg.startswith(
        "size_classes.big.finetune.slurm_partition: slurm_partition is set for the finetune "
        "jobs of micro-big but not for those of micro-opt"
    )
    assert "resources.default.slurm_partition" in msg


@pytest.mark.parametrize(
    "bad, where",
    [
        ({"finetune": {"slurm_extra": "--nice=1; rm -rf ~"}}, "resources.finetune.slurm_extra"),
        ({"finetune": {"slurm_extra": "--gres=gpu:2"}}, "resources.finetune.slurm_extra"),
        ({"cpu": {"slurm_partition": "$(whoami)"}}, "resources.cpu.slurm_partition"),
        ({"cpu": {"gpu": 1}}, "resources.cpu"),  # placement-only sets
        ({"evalute": {"gpu": 1}}, "resources"),  # a rule that does not exist
    ],
)
def test_schema_refuses_unsafe_or_unknown_resources(bad, where):
    with pytest.raises(ConfigError) as e:
        check_config(micro(resources=bad), SCHEMA)
    assert where in str(e.value)


def test_dry_run_shows_each_rules_partition(tmp_path):
    """`snakemake -n` prints every job's resources: CPU jobs in the CPU partition, GPU jobs in theirs."""
    cfg = micro(resources={"cpu": {"slurm_partition": "cpuq"}, "evaluate": {"gpu": 1, "slurm_partition": "gpuq"}})
    res = _dry_run(tmp_path, cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    seen = {}
    for rule, block in re.findall(r"^rule (\w+):\n(.*?)(?:\n\n|\Z)", res.stdout, re.M | re.S):
        m = re.search(r"slurm_partition=(\w+)", block)
        seen.setdefault(rule, set()).add(m.group(1) if m else None)
    assert seen["evaluate"] == {"gpuq"}
    assert seen["tokenize_testset"] == seen["finetune"] == seen["build_tiny_model"] == {"cpuq"}
    assert seen["prepare_dataset"] == {None}  # local rules: no placement


# ---- the GPU-memory check ---------------------------------------------------------------------


def big_model(gpu_mem_gb, **entry):
    cfg = micro(
        size_classes={
            "huge": {"finetune": {"gpu": 1, "gpu_mem_gb": gpu_mem_gb}, "evaluate": {"gpu": 1, "gpu_mem_gb": gpu_mem_gb}}
        }
    )
    cfg["models"] = [
        {
            "name": "big",
            "hub": "org/big",
            "revision": "a" * 40,
            "dtype": "bfloat16",
            "params_b": 70,
            "size_class": "huge",
            **entry,
        }
    ]
    cfg["finetune"]["lora"] = {"r": 8, "alpha": 16, "target_modules": ["q_proj"]}
    return cfg


def test_a_model_too_large_for_its_gpus_fails_planning_naming_model_and_key():
    with pytest.raises(ConfigError) as e:
        check_gpu_memory(plan(big_model(80)))
    msg = str(e.value)
    # 70e9 parameters x 2 bytes = 130.4 GiB; x 1.2 + 2 GiB = 158.5 GiB, for evaluation and the LoRA finetune
    need = 70e9 * 2 / GiB * 1.2 + 2
    assert f"{need:.1f}" == "158.5"
    for rule in ("finetune", "evaluate"):
        assert (
            f"models[big]: its {rule} jobs need at least 158.5 GiB on each GPU (70.00 B parameters (from "
            f"models[big].params_b) x 2 bytes (bfloat16)"
        ) in msg
        assert f"asks for GPUs of 80 GiB (size_classes.huge.{rule}.gpu_mem_gb)" in msg
    assert "models[big].distributed" in msg and "models[big].dtype" in msg
    assert check_gpu_memory(plan(big_model(160))) == []  # it fits on 160 GiB GPUs


def test_gpu_memory_by_training_mode_and_sharding():
    spec = plan(big_model(1000)).models["big"]
    size = ModelSize(7_000_000_000, "test", {"q_proj": [[4096, 4096, 32]]})
    # LoRA on q_proj, r=8: 8 x (4096 + 4096) x 32 layers = 2,097,152 parameters, 16 bytes each in training
    assert lora_parameters(size, spec.finetune["lora"]) == 2_097_152
    lora = (7e9 * 2 + 2_097_152 * 16) / GiB * 1.2 + 2
    assert gpu_memory(spec, "finetune", size)[0] == pytest.approx(lora)
    assert gpu_memory(spec, "evaluate", size)[0] == pytest.approx(7e9 * 2 / GiB * 1.2 + 2)
    full = plan(dict(big_model(1000), finetune=dict(micro()["finetune"], lora=None))).models["big"]
    assert gpu_memory(full, "finetune", size)[0] == pytest.approx(7e9 * 2 * 4 / GiB * 1.2 + 2)
    sharded = plan(big_model(1000, distributed={"strategy": "fsdp", "gpus": 4})).models["big"]
    raw = (7e9 * 2 + 2_097_152 * 16) / 4
    assert gpu_memory(sharded, "finetune", size)[0] == pytest.approx(raw / GiB * 1.2 + 2)
    zero2 = plan(
        big_model(1000, distributed={"strategy": "deepspeed", "gpus": 4, "deepspeed": {"zero_stage": 2}})
    ).models["big"]
    assert gpu_memory(zero2, "finetune", size)[0] == pytest.approx((7e9 * 2 + 2_097_152 * 16 / 4) / GiB * 1.2 + 2)
    # checkpoints: the fp32 adapter (LoRA), the weights in the model's dtype (full)
    assert checkpoint_bytes(spec, size)[0] == 2_097_152 * 4
    assert checkpoint_bytes(full, size)[0] == 7e9 * 2


def test_unknown_sizes_are_said_not_guessed():
    cfg = big_model(80)
    del cfg["models"][0]["params_b"]
    warnings = check_gpu_memory(plan(cfg))
    assert warnings == [
        "GPU memory check skipped for models[big] (no lock entry (run oodcorr prefetch) and no "
        "params_b on the entry): parameter count unknown (run oodcorr prefetch, or set params_b on "
        "the model entry)"
    ]
    cfg = micro(resources={"evaluate": {"gpu": 1}})
    assert check_gpu_memory(plan(cfg)) == [
        "GPU memory not checked for micro-opt (evaluate): set gpu_mem_gb (GiB per GPU) in their size class or resources"
    ]


def test_paper_grid_fits_its_80_gib_gpus():
    p = plan(yaml.safe_load((REPO / "config/paper.yaml").read_text()))
    assert check_gpu_memory(p) == []
    # the tightest: OLMo-2 32B evaluated in bf16 on one GPU, 32.23e9 x 2 bytes x 1.2 + 2 GiB = 74.0 GiB
    olmo = p.models["olmo2-32b"]
    from oodcorr.launch.sizing import model_size

    assert gpu_memory(olmo, "evaluate", model_size(olmo))[0] == pytest.approx(32.23e9 * 2 / GiB * 1.2 + 2)
    assert round(gpu_memory(olmo, "evaluate", model_size(olmo))[0], 1) == 74.0


def test_params_b_changes_no_result_key():
    a, b = plan(big_model(1000)), plan(big_model(1000, params_b=13))
    assert (
        a.models["big"].model_entry.params() == b.models["big"].model_entry.params()
    )  # params (and the run identity) are unchanged
    assert a.models["big"].params_b == 70 and b.models["big"].params_b == 13


def test_lora_adapter_size_formula_equals_peft(tiny_models, tmp_path):
    """The adapter parameter count from the safetensors shapes equals what peft builds and saves."""
    from transformers import AutoModelForCausalLM

    from oodcorr.core.model_dirs import safetensors_header
    from oodcorr.jobs.finetune import apply_lora
    from oodcorr.modeling.weights import weight_shapes

    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "fc1"]}
    params, linear = weight_shapes(tiny_models["opt"])
    predicted = lora_parameters(ModelSize(params, "test", linear), lora)
    model = apply_lora(AutoModelForCausalLM.from_pretrained(tiny_models["opt"]), lora)
    built = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert predicted == built > 0
    model.save_pretrained(tmp_path / "adapter")
    f = tmp_path / "adapter" / "adapter_model.safetensors"
    tensors = {k: m for k, m in safetensors_header(f).items() if k != "__metadata__"}
    assert {m["dtype"] for m in tensors.values()} == {"F32"}  # 4 bytes a parameter
    assert (
        max(m["data_offsets"][1] for m in tensors.values())
        == predicted * 4
        == checkpoint_bytes(
            plan(micro(finetune=dict(micro()["finetune"], lora=lora))).models["micro-opt"],
            ModelSize(params, "test", linear),
        )[0]
    )


@pytest.mark.slow  # a real Snakemake dry run
def test_snakemake_planning_stops_on_a_model_too_large_for_its_gpus(tmp_path):
    """The check runs when the Snakefile plans, before any job: one message, naming the model and the key."""
    res = _dry_run(tmp_path, big_model(80))
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "rule finetune" not in res.stdout
    assert "models[big]: its evaluate jobs need at least 158.5 GiB on each GPU" in out
    assert "size_classes.huge.evaluate.gpu_mem_gb" in out
    ok = _dry_run(tmp_path, big_model(160))  # the same config on 160 GiB GPUs plans
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "rule finetune:" in ok.stdout
