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
