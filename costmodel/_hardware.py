"""GPU presets, the efficiency model, and clusters (nodes x GPUs per node, two link tiers).

Peak figures come from ``data/hardware_presets.csv`` (dense, never sparse; its last column names the sources). The
efficiency constants below are global per GPU type: the same for every model, strategy and measured run.

Efficiency model
----------------
A matrix product (M x K) @ (K x N) reaches a fraction of dense peak

    util(M, N, K) = gemm_eff_max * sat(M) * sat(N) * sat(K),   sat(x) = x / (x + gemm_half_dim)

(small or thin products fill the GPU's tiles and waves poorly; large square ones approach ``gemm_eff_max``). Its time is
the roofline maximum of the FLOP time at that utilisation and the HBM time of reading both operands and writing the
result at ``hbm_eff`` of peak B/s. Element-wise work (norms, activations, dropout, residual adds, softmax,
cross-entropy, the optimizer step) is memory-bound: bytes moved / (hbm_eff * HBM B/s).

Collectives use the bandwidth of the tier that a group spans, times ``link_eff`` (the
bus-bandwidth fraction NCCL reaches), plus one latency per algorithm step.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import numbers
import re
from pathlib import Path

from costmodel._codes import name_words
from costmodel._errors import InputError


def _is_number(v) -> bool:
    """A real number (int or float, numpy's too), not a bool; NaN included (comparisons reject it)."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


# Nodes, and GPUs per node, above this are refused: far past any cluster, and their products with a
# strategy's degrees stay inside int64.
CLUSTER_INT_MAX = 2**31 - 1

# Precision codes (integer at the boundary; strings only for people).
PRECISIONS = ("bf16", "fp16", "fp8")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Efficiency:
    """The efficiency constants of one GPU type (see the module docstring and EFFICIENCY)."""

    gemm_eff_max: float
    gemm_half_dim: float
    hbm_eff: float
    link_eff: float
    scaleup_latency_s: float
    scaleout_latency_s: float
    kernel_overhead_s: float  # fixed cost per transformer sub-layer kernel launch group


@dataclasses.dataclass(frozen=True, kw_only=True)
class GPU(Efficiency):
    """One GPU type: sourced peak figures and the global efficiency constants."""

    name: str
    peak_flops: tuple[float, float, float]  # dense FLOP/s for bf16, fp16, fp8 (PRECISIONS order)
    hbm_bytes: float
    hbm_Bps: float
    scaleup_Bps: float  # NVLink (or xGMI) per GPU per direction
    scaleout_Bps: float  # inter-node network per GPU per direction
    # and the efficiency constants, inherited from Efficiency

    def __post_init__(self) -> None:
        if not (_is_number(self.hbm_bytes) and self.hbm_bytes > 0):  # (inf: memory not a bound, as validate asks)
            raise InputError("gpu.hbm_bytes", "a positive number", self.hbm_bytes)
        for f in ("hbm_Bps", "scaleup_Bps", "scaleout_Bps", "gemm_half_dim"):
            if not (_is_number(getattr(self, f)) and 0 < getattr(self, f) < math.inf):
                raise InputError(f"gpu.{f}", "a finite positive number", getattr(self, f))
        for f in ("gemm_eff_max", "hbm_eff", "link_eff"):
            v = getattr(self, f)
            if not (_is_number(v) and 0 < v <= 1):
                raise InputError(f"gpu.{f}", "a fraction in (0, 1]", v)
        for f in ("scaleup_latency_s", "scaleout_latency_s", "kernel_overhead_s"):
            if not (_is_number(getattr(self, f)) and 0 <= getattr(self, f) < math.inf):
                raise InputError(f"gpu.{f}", "a time >= 0 s", getattr(self, f))
        if any(not (_is_number(p) and 0 < p < math.inf) for p in self.peak_flops[:2]):
            raise InputError("gpu.peak_flops", "positive bf16 and fp16 peaks", self.peak_flops)


# Global per-GPU-type constants. Where they come from:
# - gemm_eff_max = MAMF / dense peak x sustained clock. MAMF, the maximum achievable bf16 matmul FLOP/s of a shape
#   sweep (S. Bekman, "Machine Learning Engineering", compute/accelerator, MAMF table, CUDA 12.1 / ROCm 6.2): A100 SXM
#   267.9 of 312 (0.859); H100 SXM 792.1 of 989 (0.801; 798 for 8192^3 on an H100 SXM here, device KINDS.md
#   2026-11-13); GH200 821.0 of 989 (0.830, used for the H200, the same chip). Blackwell and the MI300X from the same
#   table's later version (stas00/ml-engineering 744d01e, 2026-08; mamf-finder's benchmark version 2, which resets the
#   caches and output between products): B200 SXM 1,745.0 of 2,250 (0.776; torch 2.7.1, CUDA 12.8), GB200 1,822.0 of
#   2,500 (0.729, used for the GB300 too: no GB300 figure), B300 SXM 1,769.0 of 2,250 (0.786, 1.4% above the B200's),
#   MI300X 668.4 (0.511 of 1307.4; 781.9 in the first version). A100, H100 and GH200 keep the figures the sustained
#   clock below was chosen with: that version lists 271.2, 794.5 and 828.6, which would move the clock scan's choice
#   from 0.85 to 0.84 (Table 1 2.8% against 3.0%). Sustained clock 0.85: FLOP/s and HBM B/s derated by thermal and
#   power throttling (MAMF is a burst of 100 products), between the linear-layer model's base utilisation 0.8
#   (costmodel/_linear.py) and the A100's 1305 of 1410 MHz under HPL, 0.93 (glennklockwood.com/garden/peak-FLOPS);
#   chosen with Narayanan et al. 2021 Table 1 (full recompute, ten runs) in view: of 0.84-0.90, the value with the
#   lowest mean |error| that keeps it within 5% mean and 10% max (benchmarks/sustained_clock_scan.py): one constant
#   for every GPU type.
# - gemm_half_dim: the matrix side at which a product reaches half of gemm_eff_max along it: 128, the CUTLASS/cuBLAS
#   tile edge on Ampere and Hopper. H100 (and H200, the same GH100): 240, fitted (least squares in log time) to the 96
#   layer GEMMs of tests/data/h100_gemm_measured.csv, timed on an H100 SXM here (benchmarks/gpu_gemm_sweep.py,
#   2026-11-23; BENCHMARKS.md "GEMM calibration"): 128 ran 8.1% fast on average (max 18.8%), 240 4.1% (max 14.4%).
# - hbm_eff = streaming fraction x sustained clock: copies reach about 0.9 of peak HBM B/s (3.0 of 3.35 TB/s measured on
#   an H100 here, device KINDS.md), times the sustained clock.
# - link_eff: NCCL bus bandwidth / link bandwidth for large all-reduces, about 0.8 on NVLink and InfiniBand (nccl-tests
#   on DGX A100: ~230 of 300 GB/s NVLink per direction; ~20 of 25 GB/s per HDR port).
# - latencies: NCCL ring step latency, about 5 us over NVLink and 10 us over IB (nccl-tests small all-reduces, DGX).
#   NCCL's collectives read them through costmodel._nccl.hop_ratio: across nodes as Simple's ring hop; inside a node
#   as the step of the node on which the ring's LL hop was measured (1.98 us on 5 us), each protocol scaled from it.
# - kernel_overhead_s: launch and sync cost per transformer sub-layer (attention, MLP): about 20 us forward, eager.
SUSTAINED_CLOCK = 0.85  # between the linear model's 0.8 and HPL's 0.93, see above
STREAM_HBM_FRACTION = 0.9
MAMF_FRACTION = {
    "A100-SXM4-40GB": 267.9 / 312,
    "A100-SXM4-80GB": 267.9 / 312,
    # A800: the A100 80GB die with NVLink cut to 400 GB/s; the same compute ceiling.
    "A800-SXM4-80GB": 267.9 / 312,
    "H100-SXM5-80GB": 792.1 / 989.4,
    # Grand Teton's 96 GB part: the same die, the H100's fraction of its peak; its 500 W limit is in its preset peaks
    # (hardware_presets.csv: the middle of H100 SXM's and NVL's, torchtitan's footnote), which the kernels scale with.
    "H100-SXM5-96GB-500W": 792.1 / 989.4,
    # H800: the H100 SXM5 die with NVLink cut to 400 GB/s; the same compute ceiling.
    "H800-SXM5-80GB": 792.1 / 989.4,
    "H200-SXM-141GB": 821.0 / 989.4,
    "B200-HGX-180GB": 1745.0 / 2250,
    "B300-HGX-288GB": 1769.0 / 2250,
    # GB200 / GB300 NVL72: the B200 die (Blackwell Ultra for GB300) at a higher power limit, its peaks in the preset;
    # GB200's MAMF measured (above), GB300's not: GB200's fraction of the same 2,500 peak.
    "GB200-NVL72-186GB": 1822.0 / 2500,
    "GB300-NVL72-279GB": 1822.0 / 2500,
    "MI300X-OAM-192GB": 668.4 / 1307.4,
}


# Measured gemm_half_dim where a GPU type has been measured (see above); 128 otherwise.
GEMM_HALF_DIM = {"H100-SXM5-80GB": 240.0, "H100-SXM5-96GB-500W": 240.0, "H800-SXM5-80GB": 240.0,
                 "H200-SXM-141GB": 240.0}
TILE_HALF_DIM = 128.0


def _efficiency(mamf_fraction: float, gemm_half_dim: float = TILE_HALF_DIM) -> Efficiency:
    return Efficiency(gemm_eff_max=mamf_fraction * SUSTAINED_CLOCK, gemm_half_dim=gemm_half_dim,
                      hbm_eff=STREAM_HBM_FRACTION * SUSTAINED_CLOCK, link_eff=0.8, scaleup_latency_s=5e-6,
                      scaleout_latency_s=10e-6, kernel_overhead_s=20e-6)


_DEFAULT_EFF = _efficiency(792.1 / 989.4)
EFFICIENCY: dict[str, Efficiency] = {
    name: _efficiency(f, GEMM_HALF_DIM.get(name, TILE_HALF_DIM)) for name, f in MAMF_FRACTION.items()
}


# Ceilings of the constants a file may set, far past any GPU's (a step of a second, a GEMM side of 64k before half
# the peak), so that a value past them is a damaged file, not a machine, and no step time overflows.
MAX_LATENCY_S = 1.0
MAX_GEMM_HALF_DIM = 65536.0
MAX_GBPS = 1e6  # a link's GB/s per GPU per direction (a petabyte a second)
MIN_EFF = 1e-3  # the least share of a peak an efficiency constant may give (a thousandth)


def efficiency_values(consts, where: str) -> dict[str, float]:
    """The efficiency constants a mapping names ({constant: value}, some of Efficiency's fields), checked: the
    efficiencies (gemm_eff_max and the *_eff) in [MIN_EFF, 1], gemm_half_dim in (0, MAX_GEMM_HALF_DIM], the
    latencies and kernel_overhead_s in [0, MAX_LATENCY_S], each a finite number. InputError naming ``where`` and the
    constant otherwise."""
    names = [f.name for f in dataclasses.fields(Efficiency)]
    if not isinstance(consts, dict):
        raise InputError(where, "an object of constants", consts)
    unknown = set(consts) - set(names)
    if unknown:
        raise InputError(where, "constants among " + ", ".join(names), sorted(unknown, key=str)[0])
    values = {}
    for k, v in consts.items():
        ok = _is_number(v) and math.isfinite(v) and v >= 0
        efficiency = k.endswith("_eff") or k == "gemm_eff_max"
        half = k == "gemm_half_dim"
        if not ok or (efficiency and not MIN_EFF <= v <= 1) or (half and not 0 < v <= MAX_GEMM_HALF_DIM) or (
                not efficiency and not half and v > MAX_LATENCY_S):
            raise InputError(f"{where}.{k}", f"a number in [{MIN_EFF:g}, 1]" if efficiency else
                             f"a number in (0, {MAX_GEMM_HALF_DIM:g}]" if half else
                             f"a number of seconds in [0, {MAX_LATENCY_S:g}]", v)
        values[k] = float(v)
    return values


def efficiency_of(gpu: Efficiency) -> Efficiency:
    """The efficiency constants a GPU (or any object with Efficiency's fields) carries."""
    return Efficiency(**{f.name: getattr(gpu, f.name) for f in dataclasses.fields(Efficiency)})


# Fused attention kernels, priced apart from the GEMMs (Framework.attention_kernel). "standard": the whole s x s square
# of QK^T and AV at the GEMM constant times the tile edges (ATTN_HALF_DIM on query rows, keys, head dimension). A kernel
# measured on a GPU: the causal half of the square at its causal forward / backward rates at the length it runs on,
# timed on an H100 SXM here (benchmarks/gpu_small_model_sweep.py, tests/data/h100_small_*.csv, 2026-11-26; BENCHMARKS.md
# "Small models' layers"), bf16, head dim 128, >= 16k tokens a batch, mean at 2k/4k/8k: FlashAttention-2 (PyTorch SDPA's
# flash backend, alone), cuDNN (Transformer Engine's FusedAttention; its kernels inside a layer); 512, 1k, 16k: Shah et
# al. 2024 Figs. 5-6 there x the measured / published ratio at 2k or 8k. A backward does 2.5x the forward's FLOPs: a
# pass runs at 3/(1/fwd + 2.5/bwd) on three forwards' FLOPs, x SUSTAINED_CLOCK (burst timings). Hopper only.
# "triton": LLM Foundry's flash_attn_triton.py (v0.3.0 lines 129, 302 skip the blocks above the diagonal), unpublished
# rate: on the A100 _ATTN_EFF of the peak, calibrated on 74 LLM Foundry A100 rows apart from the validation set (mean
# |error| 6.9%, standard formula 17.9%: benchmarks/llm_foundry_calibration.py)
ATTENTION_KERNELS = ("standard", "flash2", "cudnn", "triton")
ATTN_SEQ_POINTS = (512, 1024, 2048, 4096, 8192, 16384)  # tokens; rates between them by log2 of the length, clamped
_ATTN_TFLOPS_H100 = {"flash2": ((177, 241, 276, 286, 300, 302), (138, 167, 187, 231, 281, 285)),
                     "cudnn": ((307, 400, 472, 523, 597, 609), (234, 314, 357, 427, 493, 491))}
_HOPPER = ("H100-SXM5-80GB", "H100-SXM5-96GB-500W", "H800-SXM5-80GB", "H200-SXM-141GB")
_ATTN_EFF = {("triton", "A100-SXM4-80GB"): 0.30, ("triton", "A100-SXM4-40GB"): 0.30}


# A context-parallel ring runs 1 / c of a rank's causal attention in one causal kernel (its sc x sc diagonal block) and
# the rest in non-causal kernels on sc x sc / 2 rectangles (load-balanced chunks: Transformer Engine's
# AttnFuncWithCPAndKVP2P, PyTorch's _templated_ring_attention). A non-causal kernel skips no tiles and runs no masked
# ones, so it does more useful FLOP/s: the measured gain over the causal kernel per useful FLOP (2 t_causal / t_full,
# forward + backward), at ATTN_SEQ_POINTS, Hopper: cuDNN (the SDPA kernel of tests/data/h100_attention_measured.csv,
# timed on an H100 SXM here, benchmarks/gpu_attention_sweep.py; its causal rates are the table's cuDNN ones): the
# median over its rows, 1.46 at 2k tokens (12 rows, 1.33-1.84), 1.16 at 8k (4 rows, 1.11-1.30); 4k their mean (the
# rates' log2 interpolation); 512 and 1k held at 2k's (not measured); 16k: 1.0, the flash kernel's sub-blocks at 16k-32k
# running at its causal rate (benchmarks/gpu_ring_attention_probe.py, BENCHMARKS.md "Ring attention"), taken for
# cuDNN too. FlashAttention-2: 1.0 (measured only at 16k-32k). Priced at the rank's length sc (attention_eff_at).
_NONCAUSAL_GAIN = {"cudnn": (1.46, 1.46, 1.46, 1.31, 1.16, 1.0)}


def attention_noncausal_gain(gpu_name: str, kernel: str) -> tuple[float, ...]:
    """The non-causal kernel's rate over the causal one's (per useful FLOP) of ``kernel`` on ``gpu_name`` at each
    length of ATTN_SEQ_POINTS (_NONCAUSAL_GAIN); ones where not measured."""
    if kernel not in _NONCAUSAL_GAIN or gpu_name not in _HOPPER:
        return (1.0,) * len(ATTN_SEQ_POINTS)
    return _NONCAUSAL_GAIN[kernel]


# A head of 64 where the rates above are at 128: Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) time each
# kernel at heads of 64 and 128 on an H100 SXM5 (BF16, hidden 2048, batch x length 16k tokens, at ATTN_SEQ_POINTS),
# forward (Fig. 4, no causal mask) and backward (Fig. 5): cuDNN forward 335, 373, 395, 408, 412, 413 TFLOP/s at 64
# against 497, 574, 617, 609, 600, 595 at 128, backward 266, 348, 395, 417, 432, 433 against 305, 408, 465, 499, 518,
# 516; FlashAttention-2 forward 282, 306, 318, 321, 322, 324 against 309, 350, 362, 368, 370, 370, backward 198, 238,
# 264, 279, 287, 291 against 214, 260, 291, 310, 318, 322. Their ratios (64 / 128), forward then backward, taken for
# the causal kernels too: with heads of 64 a pass runs at 0.79-0.82 of its rate at 128 under cuDNN, 0.89-0.92 under
# FlashAttention-2 (fewer FLOPs per byte of Q, K and V a tile loads). Between 64 and 128 by log2 of the head; below 64 held at 64's (not published); from 128
# up none (256's forward only is published, MLA's 192 not at all). Chosen with the gpt-oss-120b rows (heads of 64) in
# view, the only visible rows a head below 128 on a measured kernel moves.
_HEAD64_RATIO = {
    "cudnn": ((0.674, 0.650, 0.640, 0.670, 0.687, 0.694), (0.872, 0.853, 0.849, 0.836, 0.834, 0.839)),
    "flash2": ((0.913, 0.874, 0.878, 0.872, 0.870, 0.876), (0.925, 0.915, 0.907, 0.900, 0.903, 0.904)),
}


def attention_head_dim_factor(gpu_name: str, kernel: str, head_dim: float) -> tuple[float, ...]:
    """The share of attention_kernel_eff's rate ``kernel`` keeps on ``gpu_name`` with heads of ``head_dim`` at each
    length of ATTN_SEQ_POINTS (_HEAD64_RATIO): a pass's 3 / (1 / fwd + 2.5 / bwd) with the forward and backward rates
    x their ratios at 64, over the same at 128, raised to log2(128 / head_dim) (at most 1); ones from 128 up or where
    not published."""
    if kernel not in _HEAD64_RATIO or gpu_name not in _HOPPER or not head_dim < 128:
        return (1.0,) * len(ATTN_SEQ_POINTS)
    w = min(math.log2(128.0 / head_dim), 1.0)
    (fwd, bwd), (rf, rb) = _ATTN_TFLOPS_H100[kernel], _HEAD64_RATIO[kernel]
    return tuple(((1.0 / f + 2.5 / b) / (1.0 / (f * x) + 2.5 / (b * y))) ** w
                 for f, b, x, y in zip(fwd, bwd, rf, rb, strict=True))


def attention_kernel_eff(gpu_name: str, kernel: str) -> tuple[float, ...]:
    """Fractions of the 16-bit dense peak at which ``kernel`` runs causal attention on ``gpu_name`` at each length of
    ATTN_SEQ_POINTS (module notes above); zeros where not measured (the standard formula)."""
    if (kernel, gpu_name) in _ATTN_EFF:
        return (_ATTN_EFF[kernel, gpu_name],) * len(ATTN_SEQ_POINTS)
    if kernel not in _ATTN_TFLOPS_H100 or gpu_name not in _HOPPER:
        return (0.0,) * len(ATTN_SEQ_POINTS)
    fwd, bwd = _ATTN_TFLOPS_H100[kernel]
    return tuple(3.0 / (1.0 / f + 2.5 / b) / 989.4 * SUSTAINED_CLOCK for f, b in zip(fwd, bwd, strict=True))


# Short names users type, mapped to the CSV's names.
GPU_ALIASES = {
    "a100-40gb": "A100-SXM4-40GB",
    "a100": "A100-SXM4-80GB",
    "a100-80gb": "A100-SXM4-80GB",
    "a800": "A800-SXM4-80GB",
    "h100": "H100-SXM5-80GB",
    "h100-96gb": "H100-SXM5-96GB-500W",
    "h800": "H800-SXM5-80GB",
    "h200": "H200-SXM-141GB",
    "b200": "B200-HGX-180GB",
    "b300": "B300-HGX-288GB",
    "gb200": "GB200-NVL72-186GB",
    "gb300": "GB300-NVL72-279GB",
    "mi300x": "MI300X-OAM-192GB",
}

_GB = 1e9
_TF = 1e12


def _read_presets() -> dict[str, dict[str, str]]:
    # The package's own data folder (installed unzipped with it: pyproject's package-data), read
    # by path: importlib.resources would import its zip readers at every start-up.
    text = (Path(__file__).parent / "data" / "hardware_presets.csv").read_text()
    return {row["name"]: row for row in csv.DictReader(text.splitlines())}


def _num(row: dict[str, str], key: str) -> float:
    value = row.get(key, "")
    return float(value) if value not in ("", None) else 0.0


def gpu_names() -> list[str]:
    return list(_read_presets())


# Words of a GPU's name that say how the same chip is mounted (resolve_gpu_name drops them): every preset is the
# NVLink board part (SXM, HGX, OAM, NVL72). A PCIe card is a different product (lower clocks and power, no NVLink
# between the cards of a server), so a name with "pcie" matches no preset. "ac": the B300's device name as CUDA gives
# it, "NVIDIA B300 SXM6 AC".
_FORM_WORDS = frozenset({"sxm", "sxm4", "sxm5", "sxm6", "hgx", "dgx", "oam", "nvl72", "nvl", "ac"})
_VENDOR_WORDS = frozenset({"nvidia", "amd", "tesla", "instinct"})


def resolve_gpu_name(name: str) -> str | None:
    """The preset's CSV name a user's spelling of a GPU means, or None: a preset name or an alias (GPU_ALIASES) in
    any case, with spaces or underscores for hyphens ("H100 SXM5 80GB", "a100_80gb"); otherwise the chip and, where
    given, the memory ("NVIDIA H100-SXM 80GB HBM3" is the H100 SXM5 80GB, "A100 40GB" the 40 GB part), the vendor,
    the memory's kind and the words of the board form (_FORM_WORDS) left out. The chip alone is its alias (the
    80 GB A100 and H100). A name that fits no preset or more than one (or says PCIe) gives None."""
    rows = _read_presets()
    words = name_words(name)
    key = "-".join(words)
    by_lower = {n.lower(): n for n in rows}
    if key in GPU_ALIASES:
        return GPU_ALIASES[key]
    if key in by_lower:
        return by_lower[key]
    if "pcie" in words:
        return None
    words = [w for w in words if w not in _VENDOR_WORDS and w not in _FORM_WORDS]
    if not words:
        return None
    chip, rest = words[0], words[1:]
    if not rest:
        return GPU_ALIASES.get(chip)
    memory = [w for w in rest if re.fullmatch(r"\d+gb", w)]
    if len(memory) != 1 or any(w not in memory and not re.fullmatch(r"hbm\de?", w) for w in rest):
        return None
    fits = [n for n in rows if n.lower().split("-")[0] == chip and memory[0] in n.lower().split("-")]
    return fits[0] if len(fits) == 1 else None


def device_memory_bytes(row: dict[str, str]) -> float:
    """A preset's memory in bytes: the device's total as nvidia-smi (NVML) or rocm-smi reports it (hbm_MiB), where
    the CSV gives it, else its nominal size (hbm_GB, in 1e9 bytes). The nominal "80 GB" of an H100 or A100 is the
    product's round figure: the device holds 81,559 MiB (H100) or 81,920 MiB (A100), 85.5e9 and 85.9e9 bytes, so
    a plan priced against 80e9 bytes was held to 6.9-7.4% less memory than the GPU has. What the framework keeps
    outside the model (the CUDA context, workspaces, the allocator's fragmentation) is priced as memory
    (costmodel._memory_terms.RESERVED_BYTES), not taken off the capacity."""
    mib = _num(row, "hbm_MiB")
    return mib * 2.0**20 if mib > 0 else _num(row, "hbm_GB") * _GB


def gpu_preset(name: str, efficiency: Efficiency | None = None) -> GPU:
    """The GPU called ``name`` (a CSV name or an alias such as ``h100``, spelt as resolve_gpu_name reads it)."""
    rows = _read_presets()
    full = resolve_gpu_name(name)
    if full not in rows:
        choices = ", ".join(sorted(set(rows) | set(GPU_ALIASES)))
        raise InputError("gpu", f"one of {choices}", name)
    row = rows[full]
    eff = efficiency or EFFICIENCY.get(full, _DEFAULT_EFF)
    return GPU(name=full, peak_flops=tuple(_num(row, f"{p}_dense_tflops") * _TF for p in PRECISIONS),
               hbm_bytes=device_memory_bytes(row), hbm_Bps=_num(row, "hbm_TBps") * 1e12,
               scaleup_Bps=_num(row, "scaleup_GBps_per_dir") * _GB,
               scaleout_Bps=_num(row, "scaleout_GBps_per_gpu_per_dir") * _GB, **dataclasses.asdict(eff))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cluster:
    """``nodes`` x ``gpus_per_node`` GPUs of one type with two link tiers.

    Rank placement follows Megatron-LM's default order: tensor-parallel ranks innermost, then context-parallel, then
    data-parallel, then pipeline-parallel (rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i). A group of ``size``
    ranks at stride ``stride`` stays inside a node iff stride * size <= gpus_per_node (with sizes that divide the node);
    otherwise it is priced on the scale-out tier.
    """

    gpu: GPU
    nodes: int
    gpus_per_node: int
    scaleup_Bps: float
    scaleout_Bps: float
    scaleup_latency_s: float
    scaleout_latency_s: float
    name: str = "custom"

    def __post_init__(self) -> None:
        for f in ("nodes", "gpus_per_node"):
            v = getattr(self, f)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise InputError(f"cluster.{f}", "an integer >= 1", v)
            if v > CLUSTER_INT_MAX:
                raise InputError(f"cluster.{f}", f"an integer of at most {CLUSTER_INT_MAX:,}", v)
        for f in ("scaleup_Bps", "scaleout_Bps"):
            if not (_is_number(getattr(self, f)) and 0 < getattr(self, f) < math.inf):
                raise InputError(f"cluster.{f}", "a finite positive bandwidth in B/s", getattr(self, f))
        for f in ("scaleup_latency_s", "scaleout_latency_s"):
            if not (_is_number(getattr(self, f)) and 0 <= getattr(self, f) < math.inf):
                raise InputError(f"cluster.{f}", "a latency >= 0 s", getattr(self, f))

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def node_gpus(gpu_name: str) -> int:
    """GPUs of the GPU type ``gpu_name`` on one NVLink domain, its preset's gpus_per_node (8 for an HGX / DGX board, 72
    for an NVL72 rack); 8 for a GPU that is not a preset (a Calculon system file's, say)."""
    row = _read_presets().get(gpu_name)
    return int(_num(row, "gpus_per_node")) if row and _num(row, "gpus_per_node") >= 1 else 8


# A GB200 / GB300 NVL72 rack: 18 compute trays of 4 GPUs on one NVLink fabric (NVIDIA DGX GB200 user guide).
RACK_TRAY_GPUS = 4
RACK_TRAYS = 18


def rack_domain(num_gpus: int) -> int:
    """GPUs a job of ``num_gpus`` NVL72 GPUs gets on one NVLink domain when no file says: the job itself up to one
    rack; beyond, whole trays, the largest count of a rack's 18 that divides the job's trays (Megatron-Bridge's
    launcher asks Slurm for that segment: scripts/performance/utils/executors.py at v0.3.0, 21b02e0): 72 for whole
    racks, 64 for 128, 256, 512 or 1,024 GPUs (16 trays a rack). InputError for more than a rack that is no whole
    number of trays."""
    if num_gpus <= RACK_TRAY_GPUS * RACK_TRAYS:
        return num_gpus
    if num_gpus % RACK_TRAY_GPUS:
        raise InputError("num_gpus", f"a multiple of {RACK_TRAY_GPUS} (an NVL72 rack's compute tray)", num_gpus)
    trays = num_gpus // RACK_TRAY_GPUS
    return RACK_TRAY_GPUS * max(k for k in range(1, min(trays, RACK_TRAYS) + 1) if trays % k == 0)


def make_cluster(gpu: GPU | str, num_gpus: int, *, gpus_per_node: int | None = None, scaleup_Bps: float | None = None,
                 scaleout_Bps: float | None = None, name: str | None = None) -> Cluster:
    """A homogeneous cluster of ``num_gpus`` GPUs with the GPU's own link figures by default, in nodes of
    ``gpus_per_node`` (default: the GPU type's NVLink domain, node_gpus; on an NVL72 rack the segment of it a job of
    that many GPUs gets, rack_domain)."""
    g = gpu_preset(gpu) if isinstance(gpu, str) else gpu
    if not (isinstance(num_gpus, int) and not isinstance(num_gpus, bool) and num_gpus >= 1):
        raise InputError("num_gpus", "an integer >= 1", num_gpus)
    if gpus_per_node is None:
        gpus_per_node = node_gpus(g.name)
        if gpus_per_node == RACK_TRAY_GPUS * RACK_TRAYS:
            gpus_per_node = rack_domain(num_gpus)
    if not (isinstance(gpus_per_node, int) and not isinstance(gpus_per_node, bool)
            and 1 <= gpus_per_node <= CLUSTER_INT_MAX):
        raise InputError("gpus_per_node", f"an integer in [1, {CLUSTER_INT_MAX:,}]", gpus_per_node)
    if num_gpus % gpus_per_node and num_gpus > gpus_per_node:
        raise InputError("num_gpus", f"a multiple of gpus_per_node={gpus_per_node}", num_gpus)
    per_node = min(gpus_per_node, num_gpus)
    return Cluster(gpu=g, nodes=num_gpus // per_node, gpus_per_node=per_node,
                   scaleup_Bps=scaleup_Bps if scaleup_Bps is not None else g.scaleup_Bps,
                   scaleout_Bps=scaleout_Bps if scaleout_Bps is not None else g.scaleout_Bps,
                   scaleup_latency_s=g.scaleup_latency_s, scaleout_latency_s=g.scaleout_latency_s,
                   name=name or f"{g.name}x{num_gpus}")


# Named clusters ("<gpu>x<N>", e.g. h100x1024, is also accepted by cluster_preset). a100x16-flat: 16 A100s linked
# all-to-all at 200 Gb/s (25 GB/s), written as 16 one-GPU nodes on a 25 GB/s network (seed 000's topology).
_NAMED_CLUSTERS = {
    "dgx-h100-1024": ("h100", 1024, 8),
    "dgx-a100-1024": ("a100", 1024, 8),
    "selene-3072": ("a100", 3072, 8),
}
_CLUSTER_RE = re.compile(r"^([a-z0-9-]+)x(\d+)$")


FLAT_A100X16 = "a100x16-flat"
# Old preset names that still work: alias -> the name it stands for.
CLUSTER_ALIASES: dict[str, str] = {"seed000-16": FLAT_A100X16}


def cluster_names() -> list[str]:
    return [*_NAMED_CLUSTERS, FLAT_A100X16, "<gpu>x<N> (gpu: " + ", ".join(GPU_ALIASES) + ")"]


def cluster_preset(name: str) -> Cluster:
    key = CLUSTER_ALIASES.get(name.lower(), name.lower())
    if key == FLAT_A100X16:
        g = gpu_preset("a100")
        return Cluster(gpu=g, nodes=16, gpus_per_node=1, scaleup_Bps=25e9, scaleout_Bps=25e9,
                       scaleup_latency_s=g.scaleout_latency_s, scaleout_latency_s=g.scaleout_latency_s,
                       name=FLAT_A100X16)
    if key in _NAMED_CLUSTERS:
        gpu, n, per = _NAMED_CLUSTERS[key]
        return make_cluster(gpu, n, gpus_per_node=per, name=key)
    m = _CLUSTER_RE.match(key)
    if m:
        gpu = m.group(1)
        if gpu not in GPU_ALIASES and gpu + "x" in GPU_ALIASES:  # mi300x1024: the GPU's own name ends in x
            gpu += "x"
        if gpu in GPU_ALIASES:
            return make_cluster(gpu, int(m.group(2)), name=key)
    raise InputError("cluster", "one of " + ", ".join(cluster_names()), name)
