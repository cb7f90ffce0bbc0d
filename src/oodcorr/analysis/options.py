"""Every analysis setting in one frozen value; its defaults are the config's (core.defaults.ANALYSIS)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..core.defaults import ANALYSIS as DEFAULTS
from .across import multitest
from .across.pooling import TWO_RUNS
from .cell.correlate import check_method
from .cell.inference import INFERENCES
from .cell.resample import INTERVALS
from .cell.residualise import GamSettings, parse


@dataclass(frozen=True)
class Options:
    """Every analysis setting."""

    methods: tuple[str, ...] = tuple(DEFAULTS["methods"])
    residualisers: tuple[str, ...] = tuple(DEFAULTS["residualisers"])
    inference: str = DEFAULTS["inference"]  # or "iid", "block" (see oodcorr.analysis.cell.inference)
    level: float = DEFAULTS["level"]  # confidence level of every interval
    correction: str = DEFAULTS["correction"]  # or "bh", "none": across the pairs of a heatmap
    # across the pairs of the agreement table: "bh" (the false discovery rate), "holm", "none"
    agreement_correction: str = DEFAULTS["agreement_correction"]
    alpha: float = DEFAULTS["alpha"]  # significance threshold on p_adj (stars, agreement)
    # below this effective sample size a cell's note says its interval is uninformative
    min_n_eff: float = float(DEFAULTS["min_n_eff"])
    # an interval inside (-near_zero, near_zero) reads "near zero", not "unresolved"
    near_zero: float = DEFAULTS["near_zero"]
    # run-information columns; runs are pooled within their groups
    pool_by: tuple[str, ...] = tuple(DEFAULTS["pooling"]["by"])
    # a model with 2 runs: "none" (no pooled test) or "fixed-effect"
    pool_two_runs: str = DEFAULTS["pooling"]["two_runs"]
    # leave out unit 0 (the pre-finetuning checkpoint) everywhere
    drop_step0: bool = DEFAULTS["step0"]["drop"]
    # recompute every cell without unit 0 and say whether its conclusion changes
    step0_check: bool = DEFAULTS["step0"]["check"]
    seed: int = DEFAULTS["seed"]
    # inference "block": moving-block bootstrap resamples per cell
    n_boot: int = DEFAULTS["bootstrap"]["n_boot"]
    # inference "block": block permutations per cell (all orderings when fewer)
    n_perm: int = DEFAULTS["permutation"]["n_perm"]
    # inference "block": or "percentile"; also the example-level bootstrap's
    interval: str = DEFAULTS["bootstrap"]["interval"]
    # inference "block": "auto" is ceil(n^(1/3)) for ordered units, 1 otherwise
    block_length: int | str = DEFAULTS["bootstrap"]["block_length"]
    # example-level bootstrap resamples (0: off)
    example_boot: int = DEFAULTS["example_bootstrap"]["n_boot"]
    gam: GamSettings = field(default_factory=GamSettings)

    def __post_init__(self):
        for m in self.methods:
            check_method(m)
        for r in self.residualisers:
            parse(r)
        if self.inference not in INFERENCES:
            raise ValueError(f"unknown inference {self.inference!r}; choose from {', '.join(INFERENCES)}")
        for name in ("correction", "agreement_correction"):
            if getattr(self, name) not in multitest.CORRECTIONS:
                raise ValueError(
                    f"unknown {name} {getattr(self, name)!r}; choose from {', '.join(multitest.CORRECTIONS)}"
                )
        if self.interval not in INTERVALS:
            raise ValueError(f"unknown interval {self.interval!r}; choose from {', '.join(INTERVALS)}")
        if not (self.block_length == "auto" or (isinstance(self.block_length, int) and self.block_length >= 1)):
            raise ValueError(f"block_length must be 'auto' or a positive integer, got {self.block_length!r}")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ValueError("level and alpha must lie strictly between 0 and 1")
        if not 0 <= self.near_zero < 1:
            raise ValueError(f"near_zero must lie in [0, 1), got {self.near_zero!r}")
        if self.pool_two_runs not in TWO_RUNS:
            raise ValueError(f"unknown pool_two_runs {self.pool_two_runs!r}; choose from {', '.join(TWO_RUNS)}")
        if isinstance(self.pool_by, str):
            raise ValueError(f"pool_by must be a list of column names, got the string {self.pool_by!r}")

    @classmethod
    def from_mapping(cls, cfg: dict) -> Options:
        """From the config's ``analysis`` section; unknown keys raise naming the key."""
        cfg = dict(cfg or {})
        if "p_method" in cfg:
            raise ValueError(
                "analysis.p_method was replaced by analysis.inference (modified-t, iid or block): see "
                "docs/analysis.md#what-is-computed-and-the-defaults"
            )
        kw = {}
        nested = {
            "pooling": {"by": "pool_by", "two_runs": "pool_two_runs"},
            "step0": {"drop": "drop_step0", "check": "step0_check"},
            "bootstrap": {"n_boot": "n_boot", "block_length": "block_length", "interval": "interval"},
            "permutation": {"n_perm": "n_perm"},
            "example_bootstrap": {"n_boot": "example_boot"},
        }
        in_blocks = {attr for keys in nested.values() for attr in keys.values()} | {"gam"}
        for k in (f.name for f in fields(cls) if f.name not in in_blocks):  # the settings at the top level
            if k in cfg:
                v = cfg.pop(k)
                kw[k] = tuple(v) if isinstance(v, list) else v
        leftover = []
        for block, keys in nested.items():
            sub = dict(cfg.pop(block, {}) or {})
            for k, attr in keys.items():
                if k in sub:
                    v = sub.pop(k)
                    kw[attr] = tuple(v) if isinstance(v, list) else v
            leftover += [f"analysis.{block}.{k}" for k in sub]
        g = dict(cfg.pop("gam", {}) or {})
        gam_kw = {k: g.pop(k) for k in ("n_splines", "min_points") if k in g}
        leftover = [f"analysis.{k}" for k in cfg] + leftover + [f"analysis.gam.{k}" for k in g]
        if leftover:
            raise ValueError(f"unknown analysis setting(s): {', '.join(leftover)}")
        return cls(**kw, gam=GamSettings(**gam_kw))

    def describe(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "gam"}
        d["gam"] = {"n_splines": self.gam.n_splines, "min_points": self.gam.min_points}
        return d
