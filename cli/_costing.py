"""--train-tokens and --gpu-hour-usd: the flags of a study's time and cost to train (sweep, show, plot)."""

from __future__ import annotations

import argparse


def add_costing_args(p: argparse.ArgumentParser, *, override: bool = False) -> None:
    """--train-tokens and --gpu-hour-usd: what a problem's best plan costs to train (costmodel._training_cost)."""
    from costmodel._training_cost import DEFAULT_TRAIN_TOKENS, prices_table

    shipped = ", ".join(f"{g}={r['usd_per_gpu_hour']}" for g, r in prices_table().items())
    also = " (default: the run's, as given to `plansweep sweep`)" if override else ""
    p.add_argument("--train-tokens", default=None, metavar="N",
                   help=f"tokens to train, for each problem's days, GPU-hours and dollars (default "
                   f"{DEFAULT_TRAIN_TOKENS:.0e}){also}")
    p.add_argument("--gpu-hour-usd", default=None, metavar="GPU=USD,..",
                   help="US dollars per GPU-hour, replacing the shipped public on-demand prices (" + shipped
                   + "; costmodel/data/gpu_prices.json names each one's source and date)" + also)


def costing_request(args: argparse.Namespace) -> dict:
    """run.json's costing: the training tokens and the prices given (checked now; not part of the run's identity,
    so a run resumes under other prices)."""
    from costmodel._training_cost import gpu_prices, train_tokens

    gpu_prices(args.gpu_hour_usd)  # checked: one line naming the flag
    return {"train_tokens": train_tokens(args.train_tokens), "gpu_hour_usd": args.gpu_hour_usd}


def check_costing_args(args: argparse.Namespace) -> None:
    """--train-tokens and --gpu-hour-usd where given, checked before a run is read or a figure drawn: one line naming
    the flag."""
    from costmodel._training_cost import gpu_prices, train_tokens

    if args.train_tokens is not None:
        train_tokens(args.train_tokens)
    if args.gpu_hour_usd is not None:
        gpu_prices(args.gpu_hour_usd)


def run_costing(args: argparse.Namespace, info: dict, run_dir: str) -> tuple[float, dict[str, float]]:
    """The training tokens and the prices per GPU-hour: the flags', or else the run's (run.json's costing, which an
    error then names)."""
    import os

    from costmodel._training_cost import gpu_prices, train_tokens

    costing = info.get("costing") if isinstance(info.get("costing"), dict) else {}
    where = os.path.join(run_dir, "run.json") + " costing."
    tokens = (train_tokens(args.train_tokens) if args.train_tokens is not None
              else train_tokens(costing.get("train_tokens"), where + "train_tokens"))
    prices = (gpu_prices(args.gpu_hour_usd) if args.gpu_hour_usd is not None
              else gpu_prices(costing.get("gpu_hour_usd"), where + "gpu_hour_usd"))
    return tokens, prices
