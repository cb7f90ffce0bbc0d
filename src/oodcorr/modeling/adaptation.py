"""Adaptation methods: how a model reads an NLI example and gives one score per label."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..core.errors import ConfigError


@runtime_checkable
class Method(Protocol):
    """What every method provides. A method is a class used as it is (its members are class
    attributes and static methods), never instantiated."""

    name: str  # the config's `method:` value
    auto_class: str  # the transformers Auto class that loads its model
    peft_task: str  # the peft TaskType of its LoRA adapters

    def model_kwargs(self, labels: list[str], pad_token_id: int | None) -> dict:
        """Extra from_pretrained arguments (a head's label count and names)."""

    def encode(
        self,
        tokenizer,
        records: list[dict],
        *,
        labels: list[str],
        prompt: dict | None,
        max_length: int,
        model_name: str,
    ) -> tuple[list[list[int]], int, dict]:
        """(token ids per record, number truncated, what scoring needs)."""

    def label_logits(self, model, input_ids, attention_mask, extra: dict) -> Any:
        """(batch, n_labels) scores, one per label in the label mode's order."""


class Pattern:
    name = "pattern"
    auto_class = "AutoModelForCausalLM"
    peft_task = "CAUSAL_LM"

    @staticmethod
    def model_kwargs(labels: list[str], pad_token_id: int | None) -> dict:
        return {}

    @staticmethod
    def encode(
        tokenizer, records: list[dict], *, labels: list[str], prompt: dict | None, max_length: int, model_name: str
    ) -> tuple[list[list[int]], int, dict]:
        """(token ids per record, number truncated, what scoring needs: the verbaliser ids and,
        for ``scored_position: padded-end``, how to pad: to ``max_length``, on the tokenizer's side)."""
        from .prompting import encode_prompts, reading, verbaliser_ids  # prompting imports torch: kept out of planning

        if not prompt:
            raise ConfigError(f"models[{model_name}]: the pattern method needs a prompt")
        how = reading(prompt)
        verb = verbaliser_ids(tokenizer, prompt["verbalisers"], labels, model_name)
        padded_end = how["scored_position"] == "padded-end"
        ids, n_trunc = encode_prompts(
            tokenizer,
            records,
            prompt["template"],
            max_length,
            strip_fields=how["strip_fields"],
            truncation=how["truncation"],
            keep_appended=padded_end,
        )
        extra = {"verbaliser_ids": verb}
        if padded_end:
            extra.update(
                position="padded-end",
                pad_to=int(max_length),
                padding_side=tokenizer.padding_side,
                pad_id=int(tokenizer.pad_token_id),
            )
        return ids, n_trunc, extra

    @staticmethod
    def label_logits(model, input_ids, attention_mask, extra: dict):
        from .prompting import verbaliser_logits  # prompting imports torch: kept out of planning

        return verbaliser_logits(model, input_ids, attention_mask, extra["verbaliser_ids"], extra)

    @staticmethod
    def vocab_logits(model, input_ids, attention_mask, extra: dict):
        """(batch, vocab) logits at the scored position: what ``finetune.loss: vocabulary`` trains."""
        from .prompting import scored_logits  # prompting imports torch: kept out of planning

        return scored_logits(model, input_ids, attention_mask, extra).float()


class Head:
    name = "head"
    auto_class = "AutoModelForSequenceClassification"
    peft_task = "SEQ_CLS"

    @staticmethod
    def model_kwargs(labels: list[str], pad_token_id: int | None) -> dict:
        kw = {
            "num_labels": len(labels),
            "id2label": dict(enumerate(labels)),
            "label2id": {lab: i for i, lab in enumerate(labels)},
        }
        if pad_token_id is not None:
            # decoders pool at the last token that is not padding: they must know the pad id
            kw["pad_token_id"] = int(pad_token_id)
        return kw

    @staticmethod
    def encode(
        tokenizer, records: list[dict], *, labels: list[str], prompt: dict | None, max_length: int, model_name: str
    ) -> tuple[list[list[int]], int, dict]:
        """Sentence-pair token ids; segment ids (BERT's token_type_ids) are rebuilt at scoring time
        from the separator token, and checked here against the tokenizer's own."""
        premises = [r["premise"].strip() for r in records]
        hypotheses = [r["hypothesis"].strip() for r in records]
        full = tokenizer(premises, hypotheses)["input_ids"]
        enc = tokenizer(premises, hypotheses, truncation="longest_first", max_length=max_length)
        ids = [list(x) for x in enc["input_ids"]]
        n_trunc = sum(len(a) != len(b) for a, b in zip(full, ids))
        extra = {}
        types = enc.get("token_type_ids")
        if types is not None and any(any(t) for t in types):
            extra["sep_id"] = tokenizer.sep_token_id
            import torch  # torch stack: planning and the CLI never import it

            for x, t in zip(ids, types):
                got = _segments(torch.tensor([x]), torch.ones(1, len(x), dtype=torch.long), extra["sep_id"])
                if got[0].tolist() != list(t):
                    raise ConfigError(
                        f"models[{model_name}]: the tokenizer's segment ids for sentence pairs "
                        "do not follow the [CLS] A [SEP] B [SEP] layout this method rebuilds"
                    )
        return ids, n_trunc, extra

    @staticmethod
    def label_logits(model, input_ids, attention_mask, extra: dict):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if extra.get("sep_id") is not None:
            kwargs["token_type_ids"] = _segments(input_ids, attention_mask, extra["sep_id"])
        return model(**kwargs).logits.float()


def _segments(input_ids, attention_mask, sep_id: int):
    """Segment ids: 1 from the token after the first separator on (padding stays 0)."""
    is_sep = (input_ids == sep_id).long()
    before = is_sep.cumsum(-1) - is_sep
    return (before >= 1).long() * attention_mask


ADAPTATIONS = {m.name: m for m in (Pattern, Head)}


def get(name: str | None) -> Method:
    """The method called ``name``; ``None`` (an entry built without the schema, which fills in
    ``pattern``) is ``pattern``."""
    try:
        return ADAPTATIONS[name or "pattern"]
    except KeyError:
        raise ConfigError(f"method {name!r} is unknown; known: {', '.join(ADAPTATIONS)}") from None


def correct_mask(pred, gold, label_names: list[str], coarse: dict | None):
    """Which predictions are right: equal to the gold label, or (for a coarse gold
    label, such as non-entailment under a 3-way mode) one of the labels it collapses."""
    import torch  # torch stack: planning and the CLI never import it

    ok = pred == gold
    for gold_name, preds in (coarse or {}).items():
        if gold_name not in label_names:
            continue
        g = label_names.index(gold_name)
        allowed = torch.tensor([label_names.index(p) for p in preds])
        ok |= (gold == g) & torch.isin(pred, allowed)
    return ok
