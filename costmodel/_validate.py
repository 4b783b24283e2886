"""Predicted vs measured speed (and memory) of published (or a user's own) runs; fitting GPU constants to them.

The measured-runs schema is docs/validation.md's ("The measured-runs file", one row per run). An empty cell means the
source did not say: the authors tuned it, so we take the value the cost model finds best among the candidates below,
and report which.
The gradient exchange overlaps the backward pass as the row's framework usually runs it (Framework.overlap_dp_usual;
an ``overlap_dp`` cell says otherwise); precision is bf16 unless the row's ``precision`` cell says. A row's model is a
preset (``model`` cell) or its shape columns, its cluster the GPU preset with the row's own network where given.

A row is compared on what its source published, the first of: iteration time, tokens/s per GPU, TFLOP/s per GPU (with
its counting convention, FLOP_CONVENTIONS), MFU, HFU, each turned into the iteration time it implies: error_pct is
(predicted - measured) / measured time, positive when the model is slow. Memory is judged apart: the prediction is the
fastest candidate that fits the GPU (or, when none does, the fastest, flagged ``memory_fits: false``); a
``measured_memory_gb`` cell is compared with the predicted bytes per GPU.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np

from costmodel._codes import RECOMPUTE_MODULES, module_code
from costmodel._errors import InputError
from costmodel._evaluate import evaluate
from costmodel._feasibility import REASONS
from costmodel._files import DuplicateKey, read_text, replaced_for, unique_pairs
from costmodel._frameworks import DEFAULT_FRAMEWORK, Framework, framework_preset, with_state_dtypes
from costmodel._hardware import (PRECISIONS, Cluster, Efficiency, efficiency_of, efficiency_values, gpu_preset,
                                 make_cluster)
from costmodel._strategy import BOOL_WORDS, RECOMPUTE, StrategyTable
from costmodel._workloads import GATED, Transformer, model_preset

# Columns every file has. The transformer's shape columns (SHAPE_COLUMNS) are required too unless the file has a
# ``model`` column (a preset's name) and every row names one there.
REQUIRED = (
    "name", "gpu", "num_gpus", "gpus_per_node", "seq_len", "tp", "pp", "dp", "cp", "vpp", "global_batch",
    "micro_batch", "recompute", "sequence_parallel", "zero_stage",
)
SHAPE_COLUMNS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "activation")
# Optional model columns: a head's size, the mixture-of-experts fields (empty on dense rows) and the layer's make-up
# (empty: SwiGLU rows are Llama-like, RMSNorm, no bias, untied head, rotary; other rows GPT-like, LayerNorm, bias, tied
# head, learned positions). All are costmodel._workloads.Transformer's fields of the same name.
MOE_COLUMNS = ("experts", "experts_per_token", "shared_experts", "expert_ffn_hidden", "dense_layers", "moe_layer_freq")
ARCH_COLUMNS = ("norm", "bias", "tied_embeddings", "learned_positions")
# Optional run columns: expert and expert-tensor parallel degrees (ep, etp), layers per pipeline stage (stage_layers,
# space-separated, one number per stage: Megatron-Core's uneven first / last stages), whether the gradient exchange
# overlaps the backward pass (overlap_dp; empty: the framework's usual, Framework.overlap_dp_usual), and the row's own
# network where the source publishes it (GB/s per GPU per direction, replacing the GPU preset's NVLink and scale-out
# figures).
NETWORK_COLUMNS = {"scaleup_GBps": "scaleup_Bps", "scaleout_GBps": "scaleout_Bps"}
# Optional routing column of an MoE row: the token copies the busiest expert-parallel rank takes over the mean
# (Transformer.capacity_factor; empty: 1.0, balanced, as forced load balancing or a capacity factor of 1.0 runs). A
# run's routing, not its model's shape, so a preset row sets it too.
ROUTING_COLUMN = "capacity_factor"
# Published speed, most direct first: the first one a row fills is what it is compared on.
MEASURES = ("measured_iteration_time_s", "measured_tokens_per_s_per_gpu", "measured_tflops_per_gpu", "measured_mfu",
            "measured_hfu")
# Counting conventions of published FLOP figures (tflops_convention column), FLOPs per iteration for a model and a
# global batch of B sequences of s tokens:
#   narayanan_eq3: Narayanan et al. 2021 Eq. 3, 96 B s l h^2 (1 + s / 6h + V / 16 l h), full recompute's extra forward
#       included (GPT shapes)
#   model_flops: the cost model's own count (Transformer.model_flops_per_sample: matrix products, attention over the
#       full s x s square; Korthikanti et al. 2022 Eq. 7 for GPT shapes), no recompute
#   causal_model_flops: model_flops with the attention score products over the causal half of the s x s square
#       (Megatron-Bridge's performance tables and Megatron-LM's training.py since 2025 count so)
#   6nd: 6 x parameters x tokens (Kaplan et al. 2020), every parameter counted
#   palm: 6 N + 12 l h s per token, N without embeddings (Chowdhery et al. 2022, App. B)
FLOP_CONVENTIONS = ("narayanan_eq3", "model_flops", "causal_model_flops", "6nd", "palm")
# Candidates for cells the source left empty.
MICRO_BATCH_CANDIDATES = (1, 2, 4, 8, 16)
VPP_CANDIDATES = (1, 2, 3, 4, 5, 6, 8)
TUNABLE = ("vpp", "micro_batch", "recompute", "sequence_parallel", "zero_stage", "cp")


@dataclasses.dataclass(frozen=True)
class MeasuredRun:
    name: str
    model: Transformer
    cluster: Cluster
    fixed: dict  # strategy columns the source gave
    measure: str  # the MEASURES column it is compared on
    measured: float  # its value
    convention: str | None = None  # FLOP counting of measured_tflops_per_gpu
    measured_memory_gb: float | None = None
    framework: str = DEFAULT_FRAMEWORK  # its profile's name (costmodel._frameworks)
    stage_layers: tuple[int, ...] | None = None  # layers per pipeline stage, where the row gives them
    state_dtypes: tuple[tuple[str, str], ...] = ()  # (STATE_DTYPE_COLUMNS keyword, dtype) the row names
    memory_measure: str | None = None  # what measured_memory_gb is: MEMORY_MEASURES, None where the row does not say

    def profile(self) -> Framework:
        """The run's framework profile with the gradient and optimizer dtypes its row names
        (costmodel._frameworks.with_state_dtypes)."""
        fw = framework_preset(self.framework)
        return with_state_dtypes(fw, **dict(self.state_dtypes)) if self.state_dtypes else fw


def _number(row: dict, key: str, where: str, *, integer: bool = False) -> float | int | None:
    """A cell as a non-negative integer (``integer``) or a positive number; None when empty (the
    source does not say); InputError naming the row (``where``) and column otherwise."""
    v = row.get(key) or ""
    v = v.strip() if isinstance(v, str) else v
    if v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {key}", "an integer" if integer else "a number", v) from None
    if not math.isfinite(f):
        raise InputError(f"{where}: {key}", "a finite number", v)
    if integer and (f != int(f) or f < 0):
        raise InputError(f"{where}: {key}", "a non-negative integer", v)
    if not integer and not f > 0:
        raise InputError(f"{where}: {key}", "a positive number", v)
    return int(f) if integer else f


def _int(row: dict, key: str, where: str) -> int | None:
    return _number(row, key, where, integer=True)


# Published measurement sets shipped with the package (costmodel/data/measured/*.csv), by name:
# the file's stem with "-" for "_" (narayanan2021-table1).
MEASURED = Path(__file__).resolve().parent / "data" / "measured"


def measured_sets() -> dict[str, Path]:
    """{name: path} of the published measurement sets shipped with plansweep."""
    return {p.stem.replace("_", "-"): p for p in sorted(MEASURED.glob("*.csv"))}


def measured_path(word: str | Path) -> Path:
    """A CSV path, or the path of a shipped set named ``word``; InputError naming both kinds."""
    p = Path(word)
    if p.is_file():
        return p
    sets = measured_sets()
    if str(word) in sets:
        return sets[str(word)]
    raise InputError("FILE", "a readable CSV file or a published set (" + ", ".join(sets) + ")", str(word))


def read_runs(path: str | Path, efficiency: dict[str, Efficiency] | None = None,
              framework: str | None = None) -> list[MeasuredRun]:
    """Parse and validate a measured-runs CSV (a path or a shipped set's name, see measured_sets). Every bad cell is
    one InputError naming the file, the row's name, the line and the column (``runs.csv, row my-run, line 7: gpu``). A
    row's ``framework`` cell names its profile (costmodel._frameworks, aliases too); an empty cell takes ``framework``
    (None: the default profile)."""
    p = measured_path(path)
    reader = csv.DictReader(io.StringIO(read_text(p, str(path), "measured-runs CSV file"), newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED + (() if "model" in header else SHAPE_COLUMNS) if c not in header]
        if missing:
            raise InputError(str(path), "the measured-runs columns (docs/validation.md)", f"missing {missing}")
        rows = list(reader)
    except csv.Error as exc:
        raise InputError(str(path), "a well-formed CSV file", f"line {reader.line_num}: {exc}") from None
    if not rows:
        raise InputError(str(path), "at least one run", "no rows")
    runs = []
    for line, row in enumerate(rows, start=2):
        name = row.get("name")
        named = f"row {name.strip()}, " if isinstance(name, str) and name.strip() else ""
        where = f"{path}, {named}line {line}"
        try:
            runs.append(_run_of_row(row, where, efficiency, framework))
        except InputError as exc:  # a check below the row's own (model, cluster): name the row
            if exc.argument.startswith(where):
                raise
            raise InputError(f"{where}: {exc.argument}", exc.expected, exc.got) from None
    return runs


def _text(row: dict, key: str, where: str) -> str:
    """A cell that must hold a word (name, gpu, activation); InputError naming the row otherwise."""
    v = row.get(key)
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"{where}: {key}", "a value (this column may not be empty)", v or "")
    return v.strip()


def _word(row: dict, key: str, where: str, words) -> str | None:
    """An optional cell among ``words`` (lower case); None when empty."""
    v = (row.get(key) or "").strip().lower()
    if v and v not in words:
        raise InputError(f"{where}: {key}", "one of " + ", ".join(words) + " (or empty)", row[key])
    return v or None


def _model_fields(row: dict, where: str) -> dict:
    """The Transformer fields a row's cells give (empty cells left out)."""
    out: dict[str, object] = {}
    for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "head_dim", *MOE_COLUMNS):
        v = _int(row, k, where)
        if v is not None:
            out[k] = v
    activation = (row.get("activation") or "").strip().lower()
    if activation:
        out["activation"] = activation
    norm = _word(row, "norm", where, ("layernorm", "rmsnorm"))
    if norm:
        out["norm"] = norm
    for k in ARCH_COLUMNS[1:]:
        v = _word(row, k, where, tuple(BOOL_WORDS))
        if v:
            out[k] = BOOL_WORDS[v]
    return out


def _row_model(row: dict, where: str) -> Transformer:
    """The row's transformer: the preset its ``model`` cell names (each filled shape cell must agree with it), else
    its shape columns, with the seq_len cell either way."""
    fields = _model_fields(row, where)
    seq = _int(row, "seq_len", where)
    if not seq:
        raise InputError(f"{where}: seq_len", "an integer >= 1 (this column may not be empty)",
                         row.get("seq_len") or "")
    name = _text(row, "name", where)
    preset = (row.get("model") or "").strip()
    if preset:
        base = model_preset(preset)
        for k, v in fields.items():
            if getattr(base, k) != v:
                raise InputError(f"{where}: {k}", f"{getattr(base, k)} (the value of model {preset}), or empty", v)
        return _row_routing(row, where, dataclasses.replace(base, name=name, seq_len=seq))
    for k in SHAPE_COLUMNS:
        if k not in fields:
            raise InputError(f"{where}: {k}", "a value (this column may not be empty without a model preset)",
                             row.get(k) or "")
    if fields.get("experts", 1) > 1 and "experts_per_token" not in fields:
        raise InputError(f"{where}: experts_per_token", "a value on a row with experts > 1", "")
    llama = fields["activation"] in GATED
    arch = {"norm": "rmsnorm" if llama else "layernorm", "bias": not llama, "tied_embeddings": not llama,
            "learned_positions": not llama}
    return _row_routing(row, where, Transformer(name=name, seq_len=seq, **{**arch, **fields}))


def _row_routing(row: dict, where: str, model: Transformer) -> Transformer:
    """``model`` with the row's ROUTING_COLUMN cell as its capacity_factor (empty: the model's own); InputError naming
    the row and the column for a value below 1.0, or above it on a dense row (the checks are Transformer's)."""
    cf = _number(row, ROUTING_COLUMN, where)
    if cf is None:
        return model
    try:
        return dataclasses.replace(model, capacity_factor=cf)  # Transformer refuses < 1.0, and > 1.0 when dense
    except InputError:
        expected = ("empty on a dense row (experts 1)" if model.experts == 1 else
                    "a number >= 1.0 (the busiest expert-parallel rank's token copies over the mean), or empty")
        raise InputError(f"{where}: {ROUTING_COLUMN}", expected, row[ROUTING_COLUMN].strip()) from None


def _row_cluster(row: dict, where: str, efficiency: dict[str, Efficiency] | None) -> Cluster:
    """The row's GPUs: the preset its ``gpu`` cell names (with ``efficiency``'s constants where given), num_gpus in
    nodes of gpus_per_node, the network columns replacing the preset's link figures where filled."""
    n, per = (_int(row, k, where) for k in ("num_gpus", "gpus_per_node"))
    for k, v in (("num_gpus", n), ("gpus_per_node", per)):
        if not v:
            raise InputError(f"{where}: {k}", "an integer >= 1", row.get(k) or "")
    gpu_name = _text(row, "gpu", where)
    gpu = gpu_preset(gpu_name, efficiency=(efficiency or {}).get(gpu_preset(gpu_name).name))
    links = {arg: v * 1e9 for col, arg in NETWORK_COLUMNS.items() if (v := _number(row, col, where)) is not None}
    return make_cluster(gpu, n, gpus_per_node=per, **links)


def _row_stage_layers(row: dict, where: str, layers: int, pp: int) -> tuple[int, ...] | None:
    """The stage_layers cell: pp whole numbers >= 1 adding up to the model's layers; None when empty."""
    text = (row.get("stage_layers") or "").strip()
    if not text:
        return None
    try:
        out = tuple(int(x) for x in text.split())
    except ValueError:
        raise InputError(f"{where}: stage_layers", "whole numbers separated by spaces", text) from None
    if len(out) != pp or min(out) < 1 or sum(out) != layers:
        raise InputError(f"{where}: stage_layers", f"pp={pp} numbers >= 1 adding up to layers={layers}", text)
    return out


def _row_fixed(row: dict, where: str) -> dict:
    """The strategy columns a row fills (the rest are chosen by predict)."""
    fixed: dict[str, object] = {}
    for k in ("tp", "pp", "dp", "global_batch"):
        v = _int(row, k, where)
        if not v:
            raise InputError(f"{where}: {k}", "an integer >= 1 (this column may not be empty)", row.get(k) or "")
        fixed[k] = v
    for k in ("cp", "vpp", "micro_batch", "zero_stage", "ep", "etp"):
        v = _int(row, k, where)
        if v is not None:
            fixed[k] = v
    for k, words in (("recompute", RECOMPUTE), ("sequence_parallel", tuple(BOOL_WORDS)), ("precision", PRECISIONS)):
        v = _word(row, k, where, words)
        if v:
            fixed[k] = v
    overlap = _word(row, "overlap_dp", where, tuple(BOOL_WORDS))
    if overlap:
        fixed["overlap_dp"] = BOOL_WORDS[overlap]
    modules = (row.get("recompute_modules") or "").strip()
    if modules:  # Megatron-Core's --recompute-modules, names separated by spaces: selective recompute of those
        code = module_code(modules)
        if code is None:
            raise InputError(f"{where}: recompute_modules", "Megatron-Core recompute modules among "
                             + ", ".join(RECOMPUTE_MODULES) + ", separated by spaces", modules)
        if fixed.setdefault("recompute", "selective") != "selective":
            raise InputError(f"{where}: recompute", "selective (or empty) where recompute_modules is filled",
                             fixed["recompute"])
        fixed["recompute_modules"] = code
    return fixed


# Optional columns: the dtypes a run keeps its gradients and optimizer state in (empty: the profile's own), by
# with_state_dtypes' keyword.
STATE_DTYPE_COLUMNS = {"grad_dtype": "grad", "main_params_dtype": "main_params", "moments_dtype": "moments"}


def _row_state_dtypes(row: dict, where: str, fw: Framework) -> tuple[tuple[str, str], ...]:
    """(keyword, dtype) of the STATE_DTYPE_COLUMNS a row fills; InputError naming the row and column for a dtype
    with_state_dtypes does not know."""
    given = tuple((kw, (row.get(col) or "").strip().lower()) for col, kw in STATE_DTYPE_COLUMNS.items()
                  if (row.get(col) or "").strip())
    with_state_dtypes(fw, **dict(given), arguments=tuple(f"{where}: {c}" for c in STATE_DTYPE_COLUMNS))
    return given


# What a published memory figure measures (the row's memory_measure cell): "allocated", the peak of live tensors
# (torch.cuda.max_memory_allocated, what the model predicts); "reserved", the caching allocator's peak of reserved
# segments (torch.cuda.max_memory_reserved: live tensors, blocks cached for reuse and their fragmentation), which
# torchtitan's metrics log ("memory: X GiB", DeviceMemoryMonitor.get_peak_stats: reserved_bytes.all.peak, 9dec370
# torchtitan/metrics.py, e7c0cae torchtitan/components/metrics.py). A reserved figure bounds the prediction from above:
# it is compared as a bound and its share above the prediction reported, kept out of the memory error.
MEMORY_MEASURES = ("allocated", "reserved")


def _run_of_row(row: dict, where: str, efficiency: dict[str, Efficiency] | None, framework: str | None) -> MeasuredRun:
    """One MeasuredRun from a CSV row (read_runs); ``where`` names the file, line and row in errors."""
    if None in row:  # csv.DictReader keeps cells past the header under None
        raise InputError(where, "at most one cell per column of the header", f"{len(row[None])} more")
    given = {k: _number(row, k, where) for k in MEASURES + ("measured_memory_gb",)}
    measure = next((k for k in MEASURES if given[k] is not None), None)
    if measure is None:
        raise InputError(f"{where}: measured_*", "one of " + ", ".join(MEASURES) + " filled", "all empty")
    convention = (row.get("tflops_convention") or "").strip().lower() or None
    if measure == "measured_tflops_per_gpu" and convention not in FLOP_CONVENTIONS:
        raise InputError(f"{where}: tflops_convention", "one of " + ", ".join(FLOP_CONVENTIONS), convention or "")
    model = _row_model(row, where)
    cluster = _row_cluster(row, where, efficiency)
    fixed = _row_fixed(row, where)
    degrees = fixed["tp"] * fixed["pp"] * fixed["dp"] * fixed.get("cp", 1)
    if degrees != cluster.num_gpus:
        raise InputError(f"{where}: tp*pp*dp*cp", f"num_gpus={cluster.num_gpus}", degrees)
    fw = framework_preset((row.get("framework") or "").strip() or framework, f"{where}: framework")
    return MeasuredRun(model.name, model, cluster, fixed, measure, given[measure], convention,
                       given["measured_memory_gb"], fw.name, _row_stage_layers(row, where, model.layers, fixed["pp"]),
                       _row_state_dtypes(row, where, fw), _word(row, "memory_measure", where, MEMORY_MEASURES))


def flops_per_iteration(model: Transformer, global_batch: int, convention: str) -> float:
    """FLOPs of one iteration of ``global_batch`` sequences as ``convention`` counts them (FLOP_CONVENTIONS)."""
    B, s, L, h, V = global_batch, model.seq_len, model.layers, model.hidden, model.vocab
    if convention == "narayanan_eq3":
        return 96.0 * B * s * L * h**2 * (1.0 + s / (6.0 * h) + V / (16.0 * L * h))
    if convention == "model_flops":
        return model.model_flops_per_sample() * B
    if convention == "causal_model_flops":  # QK^T and AV: 4 s q per token forward (q: the query width, h unless a head
        # size is set; MLA: (q + o) / 2, Transformer.core_hidden), halved; x3 with backward
        return (model.model_flops_per_sample() - 3.0 * L * 2.0 * s * model.core_hidden * s) * B
    if convention == "6nd":
        return 6.0 * model.num_params() * B * s
    if convention == "palm":
        n = model.num_params() - model.embedding_params()
        return (6.0 * n + 12.0 * L * h * s) * B * s
    raise InputError("tflops_convention", "one of " + ", ".join(FLOP_CONVENTIONS), convention)


def balanced_stage_layers(L: int, p: int) -> list[int]:
    """L layers over p stages as evenly as whole layers allow, the lighter stages at both ends
    (they hold the embedding and the head): Megatron-Core's --decoder-first/last-pipeline-num-
    layers and Llama 3 405B's 7, 8 x 14, 7 over 16 stages (Llama 3 paper, Sec. 3.3.2)."""
    base, extra = divmod(L, p)
    light = p - extra  # stages with base layers, split between the two ends
    return [base + (light // 2 <= i < p - (light - light // 2)) for i in range(p)]


def _candidates(run: MeasuredRun) -> StrategyTable:
    """Every combination of the unknown settings, the known ones fixed: one table."""
    f = run.fixed
    options: dict[str, tuple] = {
        "micro_batch": (f["micro_batch"],) if "micro_batch" in f else MICRO_BATCH_CANDIDATES,
        "vpp": (f["vpp"],) if "vpp" in f else VPP_CANDIDATES,
        "recompute": (f["recompute"],) if "recompute" in f else ("none", "selective", "full"),
        "sequence_parallel": (f["sequence_parallel"],) if "sequence_parallel" in f else ("false", "true"),
        "zero_stage": (f["zero_stage"],) if "zero_stage" in f else (0, 1),
        "cp": (f.get("cp", 1),),
    }
    grids = np.meshgrid(*[np.arange(len(o)) for o in options.values()], indexing="ij")
    cols = {k: np.asarray(o, dtype=object)[g.ravel()] for (k, o), g in zip(options.items(), grids, strict=True)}
    vpp = cols["vpp"].astype(np.int64)
    cols = {k: (np.asarray(v.tolist()) if k in ("recompute", "sequence_parallel") else v.astype(np.int64))
            for k, v in cols.items()}
    L, p = run.model.layers, f["pp"]
    split = run.stage_layers or (None if L % p == 0 else balanced_stage_layers(L, p))
    layers = None if split is None else np.tile(split, (len(vpp), 1))
    experts = {k: f[k] for k in ("ep", "etp", "recompute_modules") if k in f}
    return StrategyTable.from_columns(
        stage_layers=layers, dp=f["dp"], tp=f["tp"], pp=f["pp"], global_batch=f["global_batch"], **experts,
        schedule=np.where(vpp > 1, "interleaved", "1f1b"), precision=f.get("precision", "bf16"),
        overlap_dp=(f["overlap_dp"] if "overlap_dp" in f
                    else np.asarray(run.profile().overlap_dp_usual)[cols["zero_stage"]]),
        **cols,
    )


def predict(run: MeasuredRun) -> dict:
    """The best prediction over the unknown settings, which values it took, and how memory
    compares. Time is priced with memory unbounded, so every candidate that passes the
    other checks has one; the chosen one is the fastest that fits the GPU, else the fastest."""
    table = _candidates(run)
    unbounded = dataclasses.replace(run.cluster.gpu, hbm_bytes=math.inf)
    metrics = evaluate(run.model, dataclasses.replace(run.cluster, gpu=unbounded), table, framework=run.profile())
    step = metrics["step_time_s"]
    fits = metrics["mem_total_bytes"] <= run.cluster.gpu.hbm_bytes
    pool = np.isfinite(step) & fits
    pool = pool if np.any(pool) else np.isfinite(step)
    i = int(np.argmin(np.where(pool, step, np.inf)))
    t = float(step[i])
    row = table.row(i)
    chosen = {k: row[k] for k in TUNABLE if k not in run.fixed}
    if "vpp" not in run.fixed:
        chosen["schedule"] = row["schedule"]
    B = run.fixed["global_batch"]
    peak_all = run.cluster.gpu.peak_flops[0] * run.cluster.num_gpus
    flops_hw = float(metrics["hfu"][i] * step[i] * peak_all) if math.isfinite(t) else math.nan
    measured_s = _as_measure(run, run.measured, B, flops_hw)  # the time the published quantity implies
    result = {
        "name": run.name,
        "predicted_iteration_time_s": t,
        "measured_iteration_time_s": measured_s,
        "error_pct": 100.0 * (t - measured_s) / measured_s if math.isfinite(t) else math.inf,
        "chosen": chosen,
        "compared_on": run.measure.removeprefix("measured_"),
        "measured_value": run.measured,
        "predicted_value": _as_measure(run, t, B, flops_hw),
        "memory_fits": bool(fits[i]) if math.isfinite(t) else None,
        "predicted_memory_gb": float(metrics["mem_total_bytes"][i]) / 1e9 if math.isfinite(t) else math.nan,
        "framework": run.framework,
    }
    if run.measured_memory_gb is not None and math.isfinite(t):
        result["measured_memory_gb"] = run.measured_memory_gb
        gap = result["predicted_memory_gb"] - run.measured_memory_gb
        result["memory_error_pct"] = 100.0 * gap / run.measured_memory_gb
        if run.memory_measure is not None:
            result["memory_measure"] = run.memory_measure
    if not math.isfinite(t):  # every candidate fails a check: the one that got furthest says which
        result["reason"] = REASONS[int(metrics["reason"].max())]
    return result


def _as_measure(run: MeasuredRun, t: float, B: int, flops_hw: float) -> float:
    """A predicted iteration time t in the unit of the row's published quantity. Each unit is
    c / t for a constant c, so the same map takes a published quantity to the iteration time it
    implies (``flops_hw``: the model's FLOPs of one iteration with its recompute, for HFU)."""
    if not math.isfinite(t):
        return math.nan
    n, peak = run.cluster.num_gpus, run.cluster.gpu.peak_flops[0]  # utilisation: against the dense bf16 peak
    return {
        "measured_iteration_time_s": t,
        "measured_tokens_per_s_per_gpu": B * run.model.seq_len / (t * n),
        "measured_tflops_per_gpu": flops_per_iteration(run.model, B, run.convention or "model_flops") / (t * n * 1e12),
        "measured_mfu": run.model.model_flops_per_sample() * B / (t * peak * n),
        "measured_hfu": flops_hw / (t * peak * n),
    }[run.measure]


def repeated_figures(runs: list[MeasuredRun]) -> list[tuple[str, str]]:
    """(first, later) names of every pair of runs of one model on one cluster with different layouts (framework,
    strategy columns, stages) whose published figure, compared on the same measure, agrees in every digit: more
    likely one cell copied than two runs that ran alike (the shipped set leaves such rows out)."""
    seen: dict = {}
    out = []
    for r in runs:
        # the model by its shape (read_runs names it after its run; its routing share belongs to the layout)
        shape = dataclasses.replace(r.model, name="", capacity_factor=1.0)
        key = (repr(shape), r.cluster.gpu.name, r.cluster.num_gpus, r.measure, r.measured)
        layout = (r.framework, tuple(sorted((k, str(v)) for k, v in r.fixed.items())), r.stage_layers,
                  r.model.capacity_factor)
        first, first_layout = seen.setdefault(key, (r.name, layout))
        if first_layout != layout:
            out.append((first, r.name))
    return out


def validate(runs: list[MeasuredRun], bands=None, *, check_bands: bool = True) -> dict:
    """Per-run predictions and the error summary: mean and max |error| over the runs the model
    can price (every run that passes the structural checks), how many it thinks do not fit
    in memory, the memory error where runs publish their memory, the pairs of runs whose
    figures repeat across layouts (repeated_figures), and each run held to its error band (band_summary: the shipped
    bands, or ``bands``; left out where not ``check_bands``, as before a band table is written)."""
    rows = [predict(r) for r in runs]
    errs = np.array([abs(r["error_pct"]) for r in rows])
    priced = errs[np.isfinite(errs)]
    mem = np.array([abs(r["memory_error_pct"]) for r in rows
                    if "memory_error_pct" in r and r.get("memory_measure") != "reserved"])
    # reserved peaks: how far each lies above the predicted live tensors, in per cent of the prediction (cache,
    # fragmentation and what is not priced)
    above = np.array([100.0 * (r["measured_memory_gb"] / r["predicted_memory_gb"] - 1.0) for r in rows
                      if r.get("memory_measure") == "reserved" and "memory_error_pct" in r])
    return {
        "rows": rows,
        "mean_abs_error_pct": float(priced.mean()) if priced.size else math.inf,
        "max_abs_error_pct": float(priced.max()) if priced.size else math.inf,
        "unpriced_runs": int(np.count_nonzero(~np.isfinite(errs))),
        "out_of_memory_runs": sum(1 for r in rows if r["memory_fits"] is False),
        "memory_mean_abs_error_pct": float(mem.mean()) if mem.size else None,
        "memory_runs": int(mem.size),
        "reserved_memory_runs": int(above.size),
        "reserved_memory_below_prediction": int(np.count_nonzero(above < 0.0)),
        "reserved_memory_mean_above_pct": float(above.mean()) if above.size else None,
        "repeated_figures": [list(pair) for pair in repeated_figures(runs)],
        "gpus": gpu_summary([r.cluster.gpu.name for r in runs], [r["error_pct"] for r in rows]),
        **(band_summary(runs, rows, bands) if check_bands else {}),
    }


def gpu_summary(gpus: list[str], errors: list[float]) -> list[dict]:
    """Per GPU type (the preset names ``gpus``, one per run), the runs the model prices (a finite error in
    ``errors``, per cent) and their mean |error| and mean signed error: how far the model's record on each GPU goes.
    Most priced runs first, then by name; a GPU with no priced run is left out."""
    groups: dict[str, list[float]] = {}
    for g, e in zip(gpus, errors, strict=True):
        if math.isfinite(e):
            groups.setdefault(g, []).append(e)
    return [{"gpu": g, "runs": len(v), "mean_abs_error_pct": float(np.mean(np.abs(v))),
             "mean_signed_error_pct": float(np.mean(v))}
            for g, v in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def band_summary(runs: list[MeasuredRun], rows: list[dict], bands=None) -> dict:
    """validate's band fields: band_check's per-row fields set on ``rows``, and the counts and regimes."""
    regimes = band_check(runs, rows, bands)
    return {"band_checked_runs": sum(1 for r in rows if r["inside_band"] is not None),
            "inside_band_runs": sum(1 for r in rows if r["inside_band"]), "regimes": regimes}


def band_check(runs: list[MeasuredRun], rows: list[dict], bands=None) -> list[dict]:
    """Hold each priced run against the error band plansweep gives a plan of its regime (the shipped bands,
    costmodel/data/error_bands.json, or ``bands``): sets each row's "regime" (framework family x parallelism family,
    costmodel._bands), "band_low_pct" / "band_high_pct" (the band around the predicted throughput, in per cent) and
    "inside_band" (whether the measured throughput falls in it: -(its low side) <= ln(T_measured / T_predicted) <=
    its high side, T_measured / T_predicted = 1 + error_pct / 100, as Bands.inside; None for a run the model cannot
    price), and returns one summary per regime that holds runs, in the bands' order: {"regime", "runs",
    "mean_abs_error_pct", "inside_band"}."""
    from costmodel._bands import FAMILIES, PARALLELISMS, shipped_bands

    b = bands if bands is not None else shipped_bands()
    fam, par = regime_codes(runs)
    groups: dict[tuple[int, int], list[dict]] = {}  # (parallelism, family): the regime's priced rows
    for row, f, p, lo, hi in zip(rows, fam, par, b.half_low[fam, par], b.half_high[fam, par], strict=True):
        row["regime"] = f"{FAMILIES[f]} x {PARALLELISMS[p]}"
        row["band_low_pct"], row["band_high_pct"] = 100.0 * math.expm1(-lo), 100.0 * math.expm1(hi)
        e = row["error_pct"]
        row["inside_band"] = None if not math.isfinite(e) else bool(-lo <= math.log1p(e / 100.0) <= hi)
        if row["inside_band"] is not None:
            groups.setdefault((int(p), int(f)), []).append(row)
    return [{"regime": g[0]["regime"], "runs": len(g),
             "mean_abs_error_pct": float(np.mean([abs(r["error_pct"]) for r in g])),
             "inside_band": sum(r["inside_band"] for r in g)} for _, g in sorted(groups.items())]


def regime_codes(runs: list[MeasuredRun]) -> tuple[np.ndarray, np.ndarray]:
    """(family, parallelism) codes of each run's error-band regime (costmodel._bands): its profile's framework family
    and the parallelism family of its degrees and precision."""
    from costmodel._bands import family_codes, parallelism_codes

    table = StrategyTable.from_columns(**{k: [r.fixed.get(k, 1) for r in runs] for k in ("tp", "pp", "dp", "cp", "ep")},
                                       precision=[r.fixed.get("precision", "bf16") for r in runs], global_batch=1)
    seq = [r.model.seq_len for r in runs]
    return family_codes([r.framework for r in runs], len(runs)), parallelism_codes(table, seq)


def band_table_of(path: str | Path, runs: list[MeasuredRun], result: dict) -> dict:
    """The error-band table (costmodel._bands.band_table) of ``runs`` read from ``path`` and validate()'s ``result``
    over them: each run's regime from its strategy columns and profile, its source from the file's ``source`` column,
    and the file's name, row count, SHA-256 and today's date."""
    import datetime
    import hashlib

    from costmodel._bands import band_table, source_group

    p = measured_path(path)
    data = p.read_bytes()
    cells = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    if len(cells) != len(runs):
        raise InputError(str(path), f"the file the {len(runs)} runs were read from", f"{len(cells)} rows")
    origin = {"file": Path(path).as_posix() if Path(path).is_file() else str(path), "rows": len(runs),
              "sha256": hashlib.sha256(data).hexdigest(), "date": datetime.date.today().isoformat()}
    sources = [source_group(c.get("source"), r.name) for c, r in zip(cells, runs, strict=True)]
    families, parallelisms = regime_codes(runs)
    table = band_table([row["error_pct"] for row in result["rows"]], families, parallelisms, sources,
                       [r.name for r in runs], origin)
    # validate's record per GPU type (gpu_summary), which evaluate shows beside a plan's band
    table["gpus"] = [{**g, "mean_abs_error_pct": round(g["mean_abs_error_pct"], 3),
                      "mean_signed_error_pct": round(g["mean_signed_error_pct"], 3)} for g in result["gpus"]]
    return table


def strict_json(value):
    """``value`` with every non-finite float as None, so json.dumps(..., allow_nan=False)
    writes standard JSON (no Infinity or NaN)."""
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ---- calibration ---------------------------------------------------------------------------
CALIBRATED = ("gemm_eff_max", "hbm_eff", "link_eff")


def _with_eff(run: MeasuredRun, eff: Efficiency) -> MeasuredRun:
    gpu = dataclasses.replace(run.cluster.gpu, **dataclasses.asdict(eff))
    return dataclasses.replace(run, cluster=dataclasses.replace(run.cluster, gpu=gpu))


def _loss(runs: list[MeasuredRun], eff: Efficiency) -> float:
    """Mean absolute percentage error of predicted vs measured time over the runs the model can price (what validate
    reports; a run it cannot price fails a structural check, whatever the constants); inf where it prices none."""
    errs = [e for r in runs if math.isfinite(e := abs(predict(_with_eff(r, eff))["error_pct"]))]
    return float(np.mean(errs)) if errs else math.inf


def calibrate(runs: list[MeasuredRun]) -> dict[str, Efficiency]:
    """Fit gemm_eff_max, hbm_eff and link_eff per GPU type by coordinate descent over
    multiplicative steps (each constant kept in (0, 1]), starting from the sourced defaults
    and accepting only steps that lower the mean absolute error: never worse than the start."""
    by_gpu: dict[str, list[MeasuredRun]] = {}
    for r in runs:
        by_gpu.setdefault(r.cluster.gpu.name, []).append(r)
    out = {}
    for name, group in by_gpu.items():
        g = group[0].cluster.gpu
        eff = Efficiency(**{f.name: getattr(g, f.name) for f in dataclasses.fields(Efficiency)})
        best = _loss(group, eff)
        for _sweep in range(3):
            for field in CALIBRATED:
                cur = getattr(eff, field)
                for factor in (0.6, 0.75, 0.85, 0.92, 0.97, 0.99, 1.01, 1.03, 1.08, 1.15, 1.3):
                    cand = dataclasses.replace(eff, **{field: min(cur * factor, 1.0)})
                    loss = _loss(group, cand)
                    if loss < best - 1e-12:
                        best, eff = loss, cand
        out[name] = eff
    return out


def write_hardware(path: str | Path, fitted: dict[str, Efficiency], argument: str = "--out") -> None:
    """Write fitted constants as JSON {gpu name: {constant: value}} (tmp file + rename); InputError naming
    ``argument`` where ``path`` cannot be written."""
    with replaced_for(argument, path) as tmp:
        Path(tmp).write_text(json.dumps({k: dataclasses.asdict(v) for k, v in fitted.items()}, indent=2) + "\n")


def read_hardware(path: str | Path, argument: str = "--hardware") -> dict[str, Efficiency]:
    """Read a --hardware file written by ``plansweep calibrate``: {gpu name: {constant: value}}, each GPU type and
    constant once, each constant in its range (costmodel._hardware.efficiency_values); InputError naming
    ``argument``, the GPU and constant otherwise."""
    text = read_text(path, argument, "JSON file written by plansweep calibrate")
    try:
        data = json.loads(text, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise InputError(argument, "a JSON file whose objects name each key once", f"{path}: {exc.args[0]!r} twice") \
            from None
    except json.JSONDecodeError as exc:
        raise InputError(argument, "JSON written by plansweep calibrate", f"{path}: {exc.msg}") from None
    except RecursionError:
        raise InputError(argument, "JSON written by plansweep calibrate", f"{path}: nested too deep") from None
    if not isinstance(data, dict):
        raise InputError(argument, "a JSON object {gpu: {constant: value}}", type(data).__name__)
    out, named = {}, {}
    for name, consts in data.items():
        try:
            gpu = gpu_preset(name)
        except InputError as exc:
            raise InputError(f"{argument} {path}", exc.expected, name) from None
        if gpu.name in named:
            raise InputError(f"{argument} {path}", "each GPU type once", f"{named[gpu.name]!r} and {name!r}, both "
                             f"{gpu.name}")
        named[gpu.name] = name
        values = efficiency_values(consts, f"{argument} {name}")
        base = efficiency_of(gpu)  # the preset's own constants
        out[gpu.name] = dataclasses.replace(base, **values)
    return out
