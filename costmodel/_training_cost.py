"""Time and money to train: a plan's throughput turned into days, GPU-hours and dollars for a token budget.

    t_s       = D / T               D: training tokens, T: tokens/s (goodput where failures are priced)
    days      = t_s / 86,400
    gpu_hours = N t_s / 3,600       N: the cluster's GPUs (what is rented, used by the plan or idle)
    usd       = gpu_hours p         p: US dollars per GPU-hour

Pure functions over whole columns ((P,) arrays, one value per problem); a problem without a feasible plan (T = 0 or
NaN) or a GPU without a price gets NaN. Default prices: data/gpu_prices.json, public on-demand list prices, each
with its provider, source address and date (prices_table).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from costmodel._errors import InputError

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
DEFAULT_TRAIN_TOKENS = 1e12  # --train-tokens' default: a round trillion tokens
PRICES_FILE = Path(__file__).parent / "data" / "gpu_prices.json"
PRICES_FLAG = "--gpu-hour-usd"


def prices_table() -> dict[str, dict]:
    """data/gpu_prices.json's prices: GPU preset name -> {usd_per_gpu_hour, provider, source, date}."""
    return json.loads(PRICES_FILE.read_text())["prices"]


def gpu_prices(text: str | None = None, argument: str = PRICES_FLAG) -> dict[str, float]:
    """US dollars per GPU-hour by GPU preset name: the shipped table, with ``text`` (--gpu-hour-usd's
    ``gpu=usd,gpu=usd``, a GPU by alias or preset name) replacing or adding prices. InputError naming
    ``argument`` (the flag, or the file it was read from)."""
    from costmodel._hardware import gpu_preset

    out = {name: float(row["usd_per_gpu_hour"]) for name, row in prices_table().items()}
    if text is None:
        return out
    expected = "comma-separated GPU=USD pairs, a price per GPU-hour > 0 (e.g. h100=2.99,b200=6.03)"
    for pair in str(text).split(","):
        gpu, eq, usd = pair.strip().partition("=")
        if not eq or not gpu.strip():
            raise InputError(argument, expected, pair)
        try:
            name = gpu_preset(gpu.strip()).name
        except InputError as exc:
            raise InputError(argument, f"a GPU {exc.expected}", gpu.strip()) from None
        try:
            value = float(usd)
        except ValueError:
            raise InputError(argument, expected, pair) from None
        if not (0 < value < math.inf):
            raise InputError(argument, expected, pair)
        out[name] = value
    return out


def train_tokens(text, argument: str = "--train-tokens") -> float:
    """--train-tokens' word (1e12, 15e12, 2000000000000) as a number of tokens > 0; InputError naming
    ``argument`` (the flag, or the file it was read from)."""
    if text is None:
        return DEFAULT_TRAIN_TOKENS
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(argument, "a number of tokens > 0 (e.g. 1e12)", text) from None
    if not (0 < value < math.inf):
        raise InputError(argument, "a number of tokens > 0 (e.g. 1e12)", text)
    return value


def training_cost(tokens_per_s, num_gpus, usd_per_gpu_hour, tokens: float) -> dict[str, np.ndarray]:
    """days_to_train, gpu_hours and usd of (P,) problems: their best plan's tokens/s (or goodput), the cluster's
    GPUs and its price per GPU-hour (NaN: unknown), for ``tokens`` training tokens (module docstring)."""
    t = np.asarray(tokens_per_s, dtype=np.float64)  # (P,)
    n = np.asarray(num_gpus, dtype=np.float64)  # (P,)
    p = np.asarray(usd_per_gpu_hour, dtype=np.float64)  # (P,)
    with np.errstate(divide="ignore", invalid="ignore"):
        seconds = np.where(t > 0, tokens / t, np.nan)  # (P,)
    gpu_hours = n * seconds / SECONDS_PER_HOUR
    return {"days_to_train": seconds / SECONDS_PER_DAY, "gpu_hours": gpu_hours, "usd": gpu_hours * p}
