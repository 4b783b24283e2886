"""Error bands: where a priced plan's measured throughput may fall, from the model's error on published runs.

A plan predicted at T tokens/s gets ``low = T exp(-h)`` and ``high = T exp(h)``, where h is the half-width of its
regime's band in log space. Residuals are ``r = ln(T_measured / T_predicted) = ln(1 + e)``, e the validator's signed
relative error of the iteration time (costmodel._validate: (predicted - measured) / measured time, so T_measured =
T_predicted (1 + e)). Log space makes a band the same for "twice too fast" and "half too slow".

The regime: framework family x parallelism family.

Framework families (FAMILY_OF_PROFILE) group the profiles by the runtime whose mechanisms the profile prices, since that
is where the model's errors come from: "megatron" (Megatron-Core and the profiles built on it: Megatron-Bridge, NeMo's
runs, which are Megatron-Core's, the MoE dispatcher variants, Megatron-LM 2021, DeepSeek's HAI-LLM as priced here),
"deepspeed" (DeepSpeed and Megatron-DeepSpeed: ZeRO, its pipeline engine), "fsdp" (PyTorch FSDP: torchtitan's FSDP2,
compiled or eager, and LLM Foundry's Composer FSDP; both shard with PyTorch's FSDP and use flash attention, and kept
apart each would be one source's cell), "generic" (plansweep's profile before framework profiles: no published run is
priced under it).

Parallelism families, in precedence order: a row that is several takes the first (PARALLELISMS):
    moe            ep > 1: the expert dispatch / combine all-to-alls and routing are priced by no other family
    long-context   sequences of LONG_CONTEXT tokens or more, with or without context parallelism: attention's core
                   is a large share of the FLOPs (its causal half at 64k tokens: 57% of a Llama 2 7B layer's, 39%
                   of a Llama 3 70B layer's, more beyond), so its kernels' rates at long lengths and the
                   context-parallel ring beside them set the error (the largest residuals of the dense set: -27%
                   to +19%)
    deep-pp        pp >= 16 (DEEP_PP): the bubble, uneven stages and the peak of many micro-batches in flight
    fp8            precision fp8: every GEMM at the fp8 rate plus the casts; a multiplicative error on compute
    tp-pp          tp > 1 or 1 < pp < 16 (or cp > 1 at shorter sequences): tensor and shallow pipeline parallelism
                   (with data parallelism or FSDP)
    data-parallel  tp = pp = cp = 1: pure data parallelism, ZeRO 0-3 and FSDP full sharding
Long context is a family of its own, not context parallelism: the misses of the context-parallel runs grow with the
sequence and not with the ring (docs/validation.md: NeMo's Llama 2 7B runs without context parallelism at 4k-128k
tokens miss as those with it, growing with attention's share; torchtitan's rings hide their exchange), while context
parallelism of 2 at 8k tokens (Megatron-Bridge's Llama 3.1 405B runs) misses as the other pipelined fp8 runs do. The
order puts a mechanism the others do not have before one that changes a rate all rows share: a long-context row in
fp8 takes long-context, since attention's long-sequence rate is the term no short fp8 row tests; pp >= 16 in fp8
takes deep-pp for the same reason. A table with placements takes its widest stage's tp.

The band of a regime (band_table): the split-conformal bound (Vovk et al. 2005; Lei et al. 2018) on |r| at level c:
the k-th smallest |r| of the regime's n runs, k = ceil(c (n + 1)). It is centred on zero, not on the regime's mean
residual: a regime's runs mostly come from one or two sources, and a source's bias does not carry to another (with the
bands centred on the other sources' median, leave-one-source-out coverage of the published set fell from 82% to 57%).
At c = 0.8 the bound exists from n = 4 runs (min_runs): a regime with fewer says so ("megatron x deep-pp (1 run: too
few; ...)") and borrows, in this order (a fallback hierarchy, each level pooling more families):
    1. its parallelism family's band over every framework family (the between-family spread is in it), if that has
       min_runs runs;
    2. for deep-pp, the tp-pp family's band (PARENT: a deep pipeline is a pipeline, priced by the same terms at more
       stages; the family is kept apart to watch those terms, not because a shallow pipeline's error says nothing of
       it), if that has min_runs runs;
    3. the wide default: the widest band of any regime or parallelism family that has min_runs runs (and of all runs),
       since nothing tells it is better priced than the worst-priced regime we have seen.
A regime that borrows but holds runs of its own keeps them inside: where they fall below (above) the borrowed band,
its low (high) side widens to the farthest of them, the other side as borrowed. A band that the published runs of its
own regime fall outside is too narrow by the only evidence there is (DeepSpeed's data-parallel runs: the 1,024-GPU
ZeRO-3 runs at -87% and -89% against the data-parallel band's -12%). The conformal bands of regimes with enough runs
stay symmetric: there the bound leaves out the runs beyond its level by construction.
The level c is the least of LEVELS whose leave-one-source-out coverage (every source's runs against the bands computed
without that source, fallbacks included) reaches TARGET_COVERAGE: bands no wider than that needs.

A source (source_group) is the first word of a run's ``source`` cell (a repository such as pytorch/torchtitan, an
organisation, a first author), so that two benchmark pages of one team are left out together; a run without a source is
its own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from costmodel._errors import InputError
from costmodel._frameworks import framework_names, framework_preset
from costmodel._hardware import PRECISIONS

FAMILIES = ("megatron", "deepspeed", "fsdp", "generic")
FAMILY_OF_PROFILE = {
    "generic": "generic",
    "megatron-2021": "megatron", "megatron-core": "megatron", "megatron-bridge": "megatron",
    "megatron-core-a2a-overlap": "megatron", "megatron-core-deepep": "megatron",
    "megatron-core-deepep-a2a-overlap": "megatron", "hai-llm": "megatron",
    "internevo": "megatron",  # its layers, tensor parallelism, schedules: Megatron's design, priced as megatron-core's
    "deepspeed": "deepspeed", "deepspeed-flash2": "deepspeed", "deepspeed-bigscience": "deepspeed",
    "fsdp2": "fsdp", "fsdp2-eager": "fsdp", "fsdp2-async-tp": "fsdp", "fsdp2-compiled-loss": "fsdp",
    "llm-foundry": "fsdp", "llm-foundry-triton": "fsdp", "llm-foundry-triton-pure": "fsdp",
    "llama3-fsdp": "fsdp",  # PyTorch FSDP with pipelines (Meta's Llama 3 stack)
}
# A profile missing above takes the family its name starts with (tests/test_bands.py holds every profile listed).
FAMILY_PREFIXES = (("megatron", "megatron"), ("nemo", "megatron"), ("deepspeed", "deepspeed"), ("fsdp", "fsdp"),
                   ("torchtitan", "fsdp"), ("llm-foundry", "fsdp"))
PARALLELISMS = ("moe", "long-context", "deep-pp", "fp8", "tp-pp", "data-parallel")  # precedence order
LONG_CONTEXT = 65536  # tokens a sequence from which it is long context (the 64k of the published long-context runs)
PARENT = {"deep-pp": "tp-pp"}  # a sparse family's band borrowed from the family it refines (module docstring)
DEEP_PP = 16  # pipeline stages from which a pipeline is "deep" (Llama 3 405B's 16, Megatron's 462B at 16)
LEVELS = (0.80, 0.85, 0.90, 0.95)  # conformal levels tried, least first
TARGET_COVERAGE = 0.80  # leave-one-source-out share of runs inside their band
BAND_FORMAT = 1
BANDS_PATH = Path(__file__).resolve().parent / "data" / "error_bands.json"


# ---- regimes -----------------------------------------------------------------------------------------------------
def family_of(profile: str) -> str:
    """The framework family of a profile name (aliases resolved): FAMILY_OF_PROFILE, else FAMILY_PREFIXES."""
    name = framework_preset(profile).name
    if name in FAMILY_OF_PROFILE:
        return FAMILY_OF_PROFILE[name]
    return next((fam for prefix, fam in FAMILY_PREFIXES if name.startswith(prefix)), "generic")


def family_codes(framework, n: int) -> np.ndarray:
    """(n,) codes into FAMILIES of ``framework``: one profile name for every row, or (n,) names, or (n,) codes into
    costmodel.framework_names()."""
    if framework is None or isinstance(framework, str):
        return np.full(n, FAMILIES.index(family_of(framework)), dtype=np.int8)
    arr = np.asarray(framework)
    if arr.shape != (n,):
        raise InputError("framework", f"one name, or one per row ({n})", f"shape {arr.shape}")
    if arr.dtype.kind in "iu":
        names = framework_names()
        if arr.size and (arr.min() < 0 or arr.max() >= len(names)):
            raise InputError("framework", f"codes 0..{len(names) - 1} (costmodel.framework_names())", int(arr.max()))
        by_code = np.array([FAMILIES.index(family_of(x)) for x in names], dtype=np.int8)
        return by_code[arr]
    names, inverse = np.unique(arr.astype(str), return_inverse=True)
    return np.array([FAMILIES.index(family_of(x)) for x in names], dtype=np.int8)[inverse.reshape(-1)]


def _widest_tp(table) -> np.ndarray:
    """(N,) tp, or with placements the widest of a row's stages."""
    if not table.placed:
        return table["tp"]
    active = np.arange(table.num_stages)[None, :] < table["pp"][:, None]  # (N, S)
    return np.max(np.where(active, table.stages["tp"], 1), axis=1)


def parallelism_codes(table, seq_len) -> np.ndarray:
    """(N,) codes into PARALLELISMS of a StrategyTable's rows of sequences of ``seq_len`` tokens (one number, or one a
    row): the first family of the precedence order a row is."""
    tp, pp, cp, ep = _widest_tp(table), table["pp"], table["cp"], table["ep"]
    fp8 = table["precision"] == PRECISIONS.index("fp8")
    conds = [ep > 1, np.broadcast_to(np.asarray(seq_len) >= LONG_CONTEXT, np.shape(ep)), pp >= DEEP_PP, fp8,
             (tp > 1) | (pp > 1) | (cp > 1)]
    return np.select(conds, np.arange(len(conds)), default=len(conds)).astype(np.int8)


def source_group(source: str | None, name: str) -> str:
    """The source a run is left out with: the first word of its source cell, else its own name."""
    words = re.split(r"[\s,;]+", (source or "").strip(), maxsplit=1)
    return words[0] if words[0] else f"run {name}"


# ---- bands from residuals ---------------------------------------------------------------------------------------
def _rank(level: float, n: int) -> int:
    """k = ceil(level (n + 1)): the rank of the split-conformal bound among n residuals."""
    return math.ceil(round(level * (n + 1), 9))


def min_runs(level: float) -> int:
    """The fewest runs whose conformal bound at ``level`` exists (k <= n): 4 at 0.8, 6 at 0.85, 9 at 0.9."""
    return next(n for n in range(1, 10_000) if _rank(level, n) <= n)


def conformal_half_width(abs_r: np.ndarray, level: float) -> float:
    """The k-th smallest of n absolute residuals, k = ceil(level (n + 1)); inf when k > n (too few runs)."""
    k = _rank(level, abs_r.size)
    return float(np.sort(abs_r)[k - 1]) if k <= abs_r.size else math.inf


@dataclasses.dataclass(frozen=True)
class Bands:
    """Resolved bands, one per regime: (F, P) arrays over FAMILIES x PARALLELISMS."""

    level: float
    half_width: np.ndarray  # (F, P) log half-width of the band each regime uses (its own or borrowed)
    runs: np.ndarray  # (F, P) runs in the regime itself
    label: np.ndarray  # (F, P) object: the regime's name, and where a sparse one's band comes from
    half_low: np.ndarray  # (F, P) the low side's log width: half_width, or wider to hold a borrower's own runs
    half_high: np.ndarray  # (F, P) the high side's, likewise

    def inside(self, log_ratio, family, parallelism) -> np.ndarray:
        """Whether each ln(T_measured / T_predicted) falls in its regime's band."""
        r = np.asarray(log_ratio, dtype=float)
        return (r >= -self.half_low[family, parallelism]) & (r <= self.half_high[family, parallelism])


def _plural(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def resolve_bands(log_ratio: np.ndarray, family: np.ndarray, parallelism: np.ndarray, level: float) -> Bands:
    """Each regime's band from residuals ``log_ratio`` (n,) of runs in regimes ``family``, ``parallelism`` (n,),
    with the fallback of the module docstring; InputError when there are fewer runs than min_runs(level)."""
    m, a = min_runs(level), np.abs(log_ratio)
    if a.size < m:
        raise InputError("measured runs", f"at least {m} priced runs to compute error bands", a.size)
    F, P = len(FAMILIES), len(PARALLELISMS)
    runs = np.zeros((F, P), dtype=np.int64)
    np.add.at(runs, (family, parallelism), 1)
    own = np.array([[conformal_half_width(a[(family == f) & (parallelism == p)], level) for p in range(P)]
                    for f in range(F)])  # (F, P), inf where too few
    per_p = np.array([conformal_half_width(a[parallelism == p], level) for p in range(P)])  # (P,)
    from_p = np.arange(P)  # whose pooled band each family uses: its own, or its PARENT's where it has too few runs
    for child, parent in PARENT.items():
        c, q = PARALLELISMS.index(child), PARALLELISMS.index(parent)
        if not math.isfinite(per_p[c]) and math.isfinite(per_p[q]):
            from_p[c] = q
    own_p, per_p = per_p, per_p[from_p]  # (P,) each family's pooled band, then the one it uses
    every = conformal_half_width(a, level)
    names = np.array([[f"{FAMILIES[f]} x {PARALLELISMS[p]}" for p in range(P)] for f in range(F)], dtype=object)
    found = [(h, str(x)) for h, x in zip(own.ravel(), names.ravel(), strict=True) if math.isfinite(h)]
    found += [(h, PARALLELISMS[p]) for p, h in enumerate(own_p) if math.isfinite(h)] + [(every, "all runs")]
    wide, wide_from = max(found, key=lambda t: t[0])
    half = np.where(np.isfinite(own), own, np.where(np.isfinite(per_p)[None, :], per_p[None, :], wide))
    label = names.copy()
    n_p = runs.sum(axis=0)
    low, high = half.copy(), half.copy()
    for f, p in zip(*np.nonzero(~np.isfinite(own)), strict=True):
        head = f"{names[f, p]} ({_plural(runs[f, p])}: too few; "
        label[f, p] = head + (f"the {PARALLELISMS[from_p[p]]} band of {_plural(n_p[from_p[p]])}"
                              if math.isfinite(per_p[p]) else
                              f"{PARALLELISMS[p]} {_plural(n_p[p])}: too few; the widest band, {wide_from}'s")
        r = log_ratio[(family == f) & (parallelism == p)]  # its own runs, held inside (module docstring)
        low[f, p], high[f, p] = max(low[f, p], -r.min(initial=0.0)), max(high[f, p], r.max(initial=0.0))
        sides = [f"the {side} side to {100 * math.expm1(x):+.1f}%" for side, x, was in (
            ("low", -low[f, p], half[f, p]), ("high", high[f, p], half[f, p])) if abs(x) > was]
        label[f, p] += (", " + " and ".join(sides) + " to hold its own runs)") if sides else ")"
    return Bands(level, half, runs, label, low, high)


def leave_one_source_out(log_ratio: np.ndarray, family: np.ndarray, parallelism: np.ndarray, source: np.ndarray,
                         level: float) -> tuple[np.ndarray, np.ndarray]:
    """(inside (n,) bool, half-width (n,)): each run against the band of its regime computed without its source's
    runs (inf and outside when the other sources hold too few runs); the half-width is the mean of the band's two
    log sides (width_pct of it: the band's width where they are equal)."""
    inside, half = np.zeros(log_ratio.size, dtype=bool), np.full(log_ratio.size, math.inf)
    for s in np.unique(source):
        held = source == s
        if np.count_nonzero(~held) < min_runs(level):
            continue
        b = resolve_bands(log_ratio[~held], family[~held], parallelism[~held], level)
        f, p = family[held], parallelism[held]
        half[held] = 0.5 * (b.half_low[f, p] + b.half_high[f, p])
        inside[held] = b.inside(log_ratio[held], f, p)
    return inside, half


def choose_level(log_ratio, family, parallelism, source) -> tuple[float, float]:
    """(level, its leave-one-source-out coverage): the least of LEVELS whose coverage reaches TARGET_COVERAGE, else
    the last. InputError where there are too few runs for a band at any level."""
    if log_ratio.size < min_runs(LEVELS[0]):
        raise InputError("measured runs", f"at least {min_runs(LEVELS[0])} priced runs to compute error bands",
                         log_ratio.size)
    for level in LEVELS:
        if log_ratio.size < min_runs(level):
            break
        cover = float(leave_one_source_out(log_ratio, family, parallelism, source, level)[0].mean())
        if cover >= TARGET_COVERAGE:
            return level, cover
    level = LEVELS[-1] if log_ratio.size >= min_runs(LEVELS[-1]) else LEVELS[0]
    return level, float(leave_one_source_out(log_ratio, family, parallelism, source, level)[0].mean())


def band_table(error_pct: Sequence[float], family: np.ndarray, parallelism: np.ndarray, sources: Sequence[str],
               names: Sequence[str], origin: dict) -> dict:
    """The band table as written to costmodel/data/error_bands.json, from the runs' signed errors (validate's
    error_pct, time), regimes (codes) and sources; unpriced runs (non-finite error) left out. ``origin``: the file,
    its row count, hash and date."""
    e = np.asarray(error_pct, dtype=float)
    ok = np.isfinite(e)
    r = np.log1p(e[ok] / 100.0)  # ln(T_measured / T_predicted)
    fam, par = np.asarray(family)[ok], np.asarray(parallelism)[ok]
    src = np.asarray(sources, dtype=object)[ok]
    level, cover = choose_level(r, fam, par, src)
    bands = resolve_bands(r, fam, par, level)
    inside, loso_half = leave_one_source_out(r, fam, par, src, level)
    regimes = []
    for f, fname in enumerate(FAMILIES):
        for p, pname in enumerate(PARALLELISMS):
            cell = (fam == f) & (par == p)
            h, lo, hi = (float(x[f, p]) for x in (bands.half_width, bands.half_low, bands.half_high))
            regimes.append({
                "family": fname, "parallelism": pname, "regime": str(bands.label[f, p]), "runs": int(cell.sum()),
                "sources": len(set(src[cell])), "half_width": round(h, 6), "half_low": round(lo, 6),
                "half_high": round(hi, 6), "low_pct": round(100 * math.expm1(-lo), 3),
                "high_pct": round(100 * math.expm1(hi), 3),
                "loso_coverage": round(float(inside[cell].mean()), 4) if cell.any() else None,
                "loso_median_width_pct": (round(200 * math.sinh(float(np.median(loso_half[cell]))), 3)
                                          if cell.any() and np.isfinite(loso_half[cell]).all() else None),
            })
    named = np.asarray(names, dtype=object)[ok]
    return {
        "format": BAND_FORMAT,
        "what": "error bands of predicted throughput by regime (costmodel/_bands.py); written by `plansweep validate "
                "FILE --write-bands PATH`, never edited by hand",
        "origin": origin, "level": level, "min_runs": min_runs(level), "target_coverage": TARGET_COVERAGE,
        "loso_coverage": round(cover, 4), "priced_runs": int(ok.sum()),
        "families": list(FAMILIES), "parallelisms": list(PARALLELISMS), "regimes": regimes,
        "runs": [{"name": str(n), "source": str(s), "family": FAMILIES[f], "parallelism": PARALLELISMS[p],
                  "error_pct": round(float(x), 4)}
                 for n, s, f, p, x in zip(named, src, fam, par, e[ok], strict=True)],
    }


# ---- the shipped table and the lookup -----------------------------------------------------------------------------
def bands_from_json(doc: dict, where: str = "error bands") -> Bands:
    """The Bands of a band table (band_table's dict); InputError naming ``where`` when it is not one."""
    try:
        if doc["format"] != BAND_FORMAT or doc["families"] != list(FAMILIES) or doc["parallelisms"] != list(
                PARALLELISMS):
            raise InputError(where, f"a band table of format {BAND_FORMAT} over families {list(FAMILIES)} and "
                             f"parallelisms {list(PARALLELISMS)} (regenerate it: plansweep validate --write-bands)",
                             f"format {doc['format']}, {doc['families']}, {doc['parallelisms']}")
        cells = {(c["family"], c["parallelism"]): c for c in doc["regimes"]}
        grid = [[cells[(f, p)] for p in PARALLELISMS] for f in FAMILIES]
        half = np.array([[float(c["half_width"]) for c in row] for row in grid])
        # (a table written before the sides: both sides the half-width)
        low, high = (np.array([[float(c.get(k, c["half_width"])) for c in row] for row in grid])
                     for k in ("half_low", "half_high"))
        runs = np.array([[int(c["runs"]) for c in row] for row in grid])
        label = np.array([[str(c["regime"]) for c in row] for row in grid], dtype=object)
        level = float(doc["level"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(where, "a band table written by plansweep validate --write-bands", repr(exc)) from None
    every = np.stack([half, low, high])
    if not np.all(np.isfinite(every) & (every >= 0)):
        raise InputError(where, "finite half-widths >= 0", every[~(np.isfinite(every) & (every >= 0))][0])
    if np.any((low < half) | (high < half)):
        raise InputError(where, "each side at least the half-width", "a side narrower than its regime's half-width")
    return Bands(level, half, runs, label, low, high)


@functools.lru_cache(maxsize=4)
def _shipped_doc(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(path, "the band table plansweep validate --write-bands writes", str(exc)) from None


@functools.lru_cache(maxsize=4)
def shipped_bands(path: str = str(BANDS_PATH)) -> Bands:
    """The band table shipped with plansweep (costmodel/data/error_bands.json), read once."""
    return bands_from_json(_shipped_doc(path), path)


def gpu_record(gpu_name: str, path: str = str(BANDS_PATH)) -> dict | None:
    """The published runs of the band table's set on GPU type ``gpu_name`` (a preset's name): {"gpu", "runs",
    "mean_abs_error_pct", "mean_signed_error_pct"} as validate's record per GPU type gives it; None where the set
    holds none (or the table predates the record)."""
    for g in _shipped_doc(path).get("gpus") or ():
        if isinstance(g, dict) and g.get("gpu") == gpu_name:
            return dict(g)
    return None


def error_bands(tokens_per_s: np.ndarray, table, framework, seq_len,
                bands: Bands | None = None) -> dict[str, np.ndarray]:
    """Each row's band: {"low", "high": (N,) tokens/s, "half_width": (N,) log (the mean of the two sides),
    "regime": (N,) names, "runs": (N,)} for rows of ``table`` of sequences of ``seq_len`` tokens predicted at
    ``tokens_per_s`` (N,) under ``framework`` (a name, (N,) names or codes)."""
    b = bands if bands is not None else shipped_bands()
    t = np.asarray(tokens_per_s, dtype=float)
    f, p = family_codes(framework, len(t)), parallelism_codes(table, seq_len)
    lo, hi = b.half_low[f, p], b.half_high[f, p]  # (N,)
    return {"low": t * np.exp(-lo), "high": t * np.exp(hi), "half_width": 0.5 * (lo + hi), "regime": b.label[f, p],
            "runs": b.runs[f, p]}


def error_band_row(tokens_per_s: float, table, framework, seq_len: int, row: int = 0) -> dict:
    """One row's band as evaluate --json gives it: {"low", "high" (tokens/s), "regime", "runs"}."""
    fw = framework if framework is None or isinstance(framework, str) else np.asarray(framework)[[row]]
    b = error_bands(np.asarray([tokens_per_s], dtype=float), table.take(np.array([row])), fw, seq_len)
    return {"low": float(b["low"][0]), "high": float(b["high"][0]), "regime": str(b["regime"][0]),
            "runs": int(b["runs"][0])}
