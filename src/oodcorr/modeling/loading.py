"""Loading models and tokenizers safely (safetensors only, no remote code unless opted in), and a run's
checkpoints one after another for scoring, reusing what does not change (:class:`CheckpointLoader`)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import replace
from pathlib import Path

from ..core.errors import ConfigError
from ..core.model_dirs import check_local_weights, package_dir, vocab_problem
from ..core.model_entry import ModelEntry
from . import adaptation

log = logging.getLogger(__name__)
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def model_source(model_entry: ModelEntry, built_model_dir: str | Path | None = None) -> tuple[str, dict]:
    """(name_or_path, extra from_pretrained kwargs) for a model entry."""
    if model_entry.tiny or model_entry.is_gguf:
        if built_model_dir is None:
            if model_entry.tiny:
                raise ConfigError(f"{model_entry.where}: tiny model needs its built directory")
            raise ConfigError(f"{model_entry.where}: a GGUF entry needs its converted folder (rule convert_gguf)")
        return str(built_model_dir), {}
    if model_entry.path:
        return str(model_entry.path), {}
    if model_entry.package:
        return str(package_dir(model_entry)), {}
    if model_entry.series:
        # a series as a whole (its tokenizer, say): its first checkpoint (planning.config.Experiment.model_entry)
        first = model_entry.series["tokenizer"]
        if first.get("path"):
            return str(first["path"]), {}
        return str(first["hub"]), {"revision": first["revision"]}

    from .hub import pinned_model_revision  # the hub lock (yaml): a local model's job does not need it

    kwargs = {}
    revision = pinned_model_revision(model_entry)
    if revision:
        kwargs["revision"] = revision
    return str(model_entry.hub), kwargs


def load_tokenizer(model_entry: ModelEntry, built_model_dir=None):
    from transformers import AutoTokenizer  # torch stack: planning and the CLI never import it

    src, kw = model_source(model_entry, built_model_dir)
    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=model_entry.trust_remote_code, **kw)
    if tok.pad_token_id is None:
        # decoder-only models often lack a pad token; any id works, pad positions are masked
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    folder = local_folder(src, kw)
    if folder is not None:  # ids past the embeddings: an index error deep inside a job otherwise
        problem = vocab_problem(model_entry.name, folder, max(tok.get_vocab().values(), default=None))
        if problem:
            raise ConfigError(problem)
    return tok


def lean_enabled(device: str) -> bool:
    """Whether the lean loader and LoRA folding may be tried: on a CPU (they were not run on a GPU,
    where a job loads and scores as before) unless ``OODCORR_LEAN`` is ``0`` (``1``: the default)."""
    value = os.environ.get("OODCORR_LEAN", "1")
    if value not in ("0", "1"):
        raise ConfigError(f"OODCORR_LEAN={value!r}: must be 1 (the lean loader where it applies) or 0 (never)")
    return value == "1" and str(device).split(":")[0] == "cpu"


def local_folder(src: str, kw: dict) -> Path | None:
    """The local folder ``from_pretrained(src, **kw)`` reads: ``src`` itself, or a hub id's snapshot
    in the local cache when its revision is a commit (as under a hub lock); else None."""
    if Path(src).is_dir():
        return Path(src)
    revision = kw.get("revision")
    if revision and COMMIT.match(str(revision)) and set(kw) == {"revision"}:
        from .hub import model_snapshot  # the hub lock (yaml): a local model's job does not need it

        snap = model_snapshot(src, revision)
        if (snap / "config.json").exists():
            return snap
    return None


# the files a tokenizer is read from (whichever the model has): what its fingerprint hashes
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
)


def tokenizer_fingerprint(model_entry: ModelEntry, built_model_dir=None) -> str | None:
    """The fingerprint of a model's tokenizer files, without loading it (None where its folder is not on
    this machine): a tokenised testset records it, so that one made by another tokenizer is never scored."""
    try:
        folder = local_folder(*model_source(model_entry, built_model_dir))
    except ConfigError:
        return None
    return tokenizer_files_fingerprint(folder) if folder is not None else None


def tokenizer_files_fingerprint(folder: str | Path) -> str | None:
    """The sha256 of the tokenizer files in ``folder`` (name and bytes of each); None when it holds none."""
    files = [Path(folder) / name for name in TOKENIZER_FILES if (Path(folder) / name).is_file()]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest() if files else None


def load_model(
    model_entry: ModelEntry,
    built_model_dir=None,
    device: str = "cpu",
    labels: list[str] | None = None,
    pad_token_id: int | None = None,
    *,
    lean: bool = False,
):
    """The model for the entry's method (causal LM or sequence classifier), weights from safetensors."""
    method = adaptation.get(model_entry.method)
    src, kw = model_source(model_entry, built_model_dir)
    check_local_weights(src, model_entry)
    if lean and lean_enabled(device):
        folder = local_folder(src, kw)
        if folder is not None:
            from .plain_torch import lean_model  # torch stack: planning and the CLI never import it

            model, why = lean_model(folder, model_entry, method.name)
            if model is not None:
                return model
            log.info("%s: %s; loading with transformers' from_pretrained", model_entry.name, why)
    import torch  # torch stack: planning and the CLI never import it
    import transformers  # torch stack: planning and the CLI never import it

    kw.update(method.model_kwargs(labels, pad_token_id))
    dtype = model_entry.dtype
    model, info = getattr(transformers, method.auto_class).from_pretrained(
        src,
        trust_remote_code=model_entry.trust_remote_code,
        use_safetensors=None if model_entry.allow_pickle_weights else True,
        dtype=getattr(torch, dtype) if dtype != "auto" else "auto",
        output_loading_info=True,
        **kw,
    )
    check_loaded_whole(model, info.get("missing_keys") or [], model_entry, src, method.name)
    return model.to(device)


def check_loaded_whole(model, missing, model_entry: ModelEntry, src: str, method: str) -> None:
    """Every parameter the architecture needs was in the files (transformers would start a missing one
    from random values), but a head model's new classification head (outside the pretrained base model:
    ``classifier.*``, ``score.*``, ..., and the pooler that only feeds it); else a :class:`ConfigError`."""
    missing = sorted(missing)
    prefix = getattr(model, "base_model_prefix", "") or ""
    outside = [k for k in missing if (prefix and not k.startswith(prefix + ".")) or ".pooler." in f".{k}"]
    head = outside if method == "head" else []
    lacking = [k for k in missing if k not in head]
    if head:
        log.info("%s: a new classification head, started from random values: %s", model_entry.name, ", ".join(head))
    if lacking:
        arch = type(model).__name__
        raise ConfigError(
            f"{model_entry.where}: {src} lacks {len(lacking)} of the parameters {arch} needs "
            f"({', '.join(lacking[:4])}{', ...' if len(lacking) > 4 else ''}); loaded, they would start from "
            "random values. Its files are incomplete or of another architecture: copy or download the model again"
        )


def load_checkpoint(
    model_entry: ModelEntry,
    ckpt_dir: str | Path,
    built_model_dir=None,
    device: str = "cpu",
    labels: list[str] | None = None,
    pad_token_id: int | None = None,
    *,
    for_scoring: bool = False,
):
    """The model as saved at one checkpoint: full weights, or base model + LoRA adapter."""
    ckpt_dir = Path(ckpt_dir)
    if (ckpt_dir / "adapter_config.json").exists():
        if for_scoring and lean_enabled(device):
            model, _, why = load_folded(model_entry, ckpt_dir, built_model_dir, device, labels, pad_token_id)
            if model is not None:
                return model
            log.info("%s: adapter not folded (%s); scoring with peft's adapter layers", ckpt_dir, why)
        from peft import PeftModel  # torch stack: planning and the CLI never import it

        base = load_model(model_entry, built_model_dir, device, labels, pad_token_id)
        model = PeftModel.from_pretrained(base, str(ckpt_dir))
    else:
        own = replace(model_entry, tiny=None, hub=None, package=None, path=str(ckpt_dir), revision=None)
        model = load_model(own, None, device, labels, pad_token_id, lean=for_scoring)
    model.eval()
    return model


def load_folded(
    model_entry: ModelEntry,
    ckpt_dir: str | Path,
    built_model_dir=None,
    device: str = "cpu",
    labels: list[str] | None = None,
    pad_token_id: int | None = None,
):
    """(the base model, lean where that applies, with the LoRA adapter folded into its weights, what the
    fold changed, ""), or (None, None, why not) when the adapter is not one a fold knows."""
    from .lora import fold, read_adapter  # torch stack: planning and the CLI never import it

    adapter, why = read_adapter(ckpt_dir, device)
    if adapter is None:
        return None, None, why
    base = load_model(model_entry, built_model_dir, device, labels, pad_token_id, lean=True)
    done, why = fold(base, adapter)
    if done is None:
        return None, None, why
    return base.eval(), done, ""


def loaded_by(model) -> str:
    """``lean`` or ``transformers``: which code computes a loaded model's forward pass."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "lean" if getattr(base, "lean", False) else "transformers"


def release_memory(device) -> None:
    """Collect garbage and empty ``device``'s cache (a ``torch.device``)."""
    import gc

    import torch  # torch stack: planning and the CLI never import it

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class CheckpointLoader:
    """Loads a run's checkpoints one after another, reusing what does not change."""

    def __init__(
        self, model_entry: ModelEntry, built_model_dir: str | None, device: str, labels: list[str], pad_id: int
    ):
        self.model_entry, self.built_model_dir, self.device = model_entry, built_model_dir, device
        self.labels, self.pad_id = labels, pad_id
        self.model = None
        self.kind = None  # "folded", "adapter" (peft's layers), "full" or "hub": what the loaded model holds
        self.adapter_config = None
        self.folded = None  # what the last fold changed (oodcorr.modeling.lora.Folded)
        self.last_load = ""  # how the last checkpoint was loaded: fresh, adapter swap, in place

    def how(self) -> dict:
        """How the last checkpoint is scored: ``loader`` (lean or transformers) and ``lora``
        (folded, peft, or None for full weights)."""
        lora = {"folded": "folded", "adapter": "peft"}.get(self.kind)
        return {"loader": loaded_by(self.model), "lora": lora}

    def load(self, checkpoint: str | Path, source: dict | None = None):
        """The model at ``checkpoint`` (a local directory); ``source`` ``{"hub", "revision"}`` names a
        series checkpoint on the hub instead, always loaded afresh."""
        if source and source.get("hub"):
            self.close()
            own = replace(self.model_entry, series=None, hub=source["hub"], revision=source["revision"])
            self.model = load_model(own, None, self.device, self.labels, self.pad_id, lean=True).eval()
            self.kind, self.adapter_config, self.last_load = "hub", None, "fresh"
            return self.model
        ckpt = Path(checkpoint)
        adapter = (ckpt / "adapter_config.json").exists()
        if adapter:
            model = self._fold(ckpt)
            if model is not None:
                return model
            from peft import PeftConfig  # torch stack: planning and the CLI never import it

            # as peft reads it: set-valued fields (target_modules) compare without regard to the order written
            adapter_config = PeftConfig.from_pretrained(str(ckpt))
        if self.model is not None:
            if adapter and self.kind == "adapter" and adapter_config == self.adapter_config:
                if self._swap_adapter(ckpt):
                    self.last_load = "adapter swap"
                    return self.model
            elif not adapter and self.kind == "full":
                if self._load_in_place(ckpt):
                    self.last_load = "in place"
                    return self.model
        self.close()

        # an adapter a fold does not know (_fold said why): peft's layers on transformers' model
        self.model = load_checkpoint(
            self.model_entry, ckpt, self.built_model_dir, self.device, self.labels, self.pad_id, for_scoring=not adapter
        )
        self.kind, self.adapter_config = ("adapter", adapter_config) if adapter else ("full", None)
        self.last_load = "fresh"
        return self.model

    def _fold(self, ckpt: Path):
        """The base model with ``ckpt``'s adapter folded in (onto the loaded base when there is one),
        or None when the adapter is not one a fold knows."""
        from .lora import fold, read_adapter  # torch stack: planning and the CLI never import it

        if not lean_enabled(self.device):
            return None
        if self.model is not None and self.kind == "folded":
            adapter, _ = read_adapter(ckpt, self.device)
            if adapter is not None:
                self.folded.restore(self.model)  # the base model's own weights again, bit for bit
                done, _ = fold(self.model, adapter)
                if done is not None:
                    self.folded, self.last_load = done, "adapter swap"
                    return self.model
        self.close()
        model, done, why = load_folded(
            self.model_entry, ckpt, self.built_model_dir, self.device, self.labels, self.pad_id
        )
        if model is None:
            log.info("%s: adapter not folded (%s); scoring with peft's adapter layers", ckpt, why)
            return None
        self.model, self.folded, self.kind, self.adapter_config = model, done, "folded", None
        self.last_load = "fresh"
        return model

    def _swap_adapter(self, ckpt: Path) -> bool:
        # torch stack: planning and the CLI never import it
        from peft.utils import load_peft_weights, set_peft_model_state_dict

        weights = load_peft_weights(str(ckpt), device=str(self.device))
        result = set_peft_model_state_dict(self.model, weights)
        unset = [k for k in result.missing_keys if "lora_" in k or ".modules_to_save." in k]
        if result.unexpected_keys or unset:
            log.warning(
                "%s: adapter swap did not fit (unexpected %s, unset %s); loading afresh",
                ckpt,
                result.unexpected_keys[:3],
                unset[:3],
            )
            return False
        return True

    def _load_in_place(self, ckpt: Path) -> bool:
        from .plain_torch import read_safetensors  # torch stack: planning and the CLI never import it

        files = sorted(ckpt.glob("*.safetensors"))
        if not files:
            return False
        state = read_safetensors(files, self.device)
        own = dict(self.model.state_dict())
        unexpected = [k for k in state if k not in own]
        wrong = [k for k in state if k in own and own[k].shape != state[k].shape]
        ptrs = {own[k].data_ptr() for k in state if k in own}
        # a key the file lacks must be tied to one it has (e.g. an LM head tied to the embeddings)
        untied = [k for k in own if k not in state and own[k].data_ptr() not in ptrs]
        if unexpected or wrong or untied:
            log.info(
                "%s: in-place load does not fit (unexpected %s, shape %s, not in file %s); loading afresh",
                ckpt,
                unexpected[:3],
                wrong[:3],
                untied[:3],
            )
            return False
        self.model.load_state_dict(state, strict=False)  # copied under no_grad by torch
        return True

    def close(self, release: bool = True) -> None:
        """Drop the loaded model; ``release``: also collect garbage and empty the device's cache (skipped at
        the end of a job, whose process then exits)."""
        if self.model is not None:
            self.model, self.folded = None, None
            if release:
                release_memory(__import__("torch").device(self.device))
