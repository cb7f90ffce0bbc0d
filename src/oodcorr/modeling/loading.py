"""Loading models and tokenizers safely: safetensors only, no remote code unless opted in."""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConfigError
from ..core.model_dirs import check_local_weights, package_dir
from . import adaptation
from .hub import pinned_model_revision


def model_source(spec: dict, tiny_dir: str | Path | None = None) -> tuple[str, dict]:
    """(name_or_path, extra from_pretrained kwargs) for a model entry."""
    if spec.get("tiny"):
        if tiny_dir is None:
            raise ConfigError(f"models[{spec['name']}]: tiny model needs its built directory")
        return str(tiny_dir), {}
    if spec.get("path"):
        return str(spec["path"]), {}
    if spec.get("package"):
        return str(package_dir(spec)), {}
    if spec.get("series"):
        # a series as a whole (its tokenizer, say): its first checkpoint (oodcorr.planning.config.model_spec)
        first = spec["series"]["tokenizer"]
        if first.get("path"):
            return str(first["path"]), {}
        return str(first["hub"]), {"revision": first["revision"]}

    kwargs = {}
    # under a hub lock (oodcorr prefetch) the locked commit; another revision than the lock's is refused
    revision = pinned_model_revision(spec)
    if revision:
        kwargs["revision"] = revision
    return str(spec["hub"]), kwargs


def load_tokenizer(spec: dict, tiny_dir=None):
    from transformers import AutoTokenizer  # torch stack: planning and the CLI never import it

    src, kw = model_source(spec, tiny_dir)
    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=bool(spec.get("trust_remote_code", False)), **kw)
    if tok.pad_token_id is None:
        # decoder-only models often lack a pad token; any id works, pad positions are masked
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


def load_model(
    spec: dict, tiny_dir=None, device: str = "cpu", labels: list[str] | None = None, pad_token_id: int | None = None
):
    """The model for the entry's method (causal LM or sequence classifier), weights from safetensors."""
    import torch  # torch stack: planning and the CLI never import it
    import transformers  # torch stack: planning and the CLI never import it

    method = adaptation.get(spec.get("method"))
    src, kw = model_source(spec, tiny_dir)
    check_local_weights(src, spec)
    if method.name != "pattern":
        if not labels:
            raise ConfigError(f"models[{spec['name']}]: method {method.name!r} needs the label list")
        kw.update(method.model_kwargs(labels, pad_token_id))
    dtype = spec.get("dtype", "float32")
    model = getattr(transformers, method.auto_class).from_pretrained(
        src,
        trust_remote_code=bool(spec.get("trust_remote_code", False)),
        use_safetensors=None if spec.get("allow_pickle_weights") else True,
        dtype=getattr(torch, dtype) if dtype != "auto" else "auto",
        **kw,
    )
    return model.to(device)


def load_checkpoint(
    spec: dict,
    ckpt_dir: str | Path,
    tiny_dir=None,
    device: str = "cpu",
    labels: list[str] | None = None,
    pad_token_id: int | None = None,
):
    """The model as saved at one checkpoint: full weights, or base model + LoRA adapter."""
    ckpt_dir = Path(ckpt_dir)
    if (ckpt_dir / "adapter_config.json").exists():
        from peft import PeftModel  # torch stack: planning and the CLI never import it

        base = load_model(spec, tiny_dir, device, labels, pad_token_id)
        model = PeftModel.from_pretrained(base, str(ckpt_dir))
    else:
        own = dict(spec, tiny=None, hub=None, package=None, path=str(ckpt_dir), revision=None)
        model = load_model(own, None, device, labels, pad_token_id)
    model.eval()
    return model
