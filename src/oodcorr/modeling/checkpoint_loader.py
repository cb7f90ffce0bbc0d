"""A run's checkpoints loaded one after another for scoring, reusing what does not change."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from ..core.model_entry import ModelEntry
from .loading import lean_enabled, load_checkpoint, load_folded, loaded_by, release_memory

log = logging.getLogger(__name__)


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
            # looked up at call time: tests replace oodcorr.modeling.loading.load_model
            from .loading import load_model

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
        from safetensors.torch import load_file  # torch stack: planning and the CLI never import it

        files = sorted(ckpt.glob("*.safetensors"))
        if not files:
            return False
        state = {}
        for f in files:
            state.update(load_file(str(f), device=str(self.device)))
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
