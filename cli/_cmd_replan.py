"""`plansweep replan`: the best plan after losing (or gaining) nodes, per re-planning policy
(search.replan): a table over the nodes lost, and with --out a Parquet file and a PNG."""

from __future__ import annotations

from pathlib import Path

from cli import COMMAND_HELP
from cli._cmd_evaluate import (add_failure_args, add_spec_args, add_strategy_args, build_strategy, failure_from_args,
                               strategy_reason_error)
from cli._specs import load_cluster, load_model, one_framework
from costmodel import REASONS, HeteroCluster, InputError, evaluate
from costmodel._files import replaced_together
from search import POLICIES, replan

# The most node counts a --lost range may name (each is a re-plan of its own); checked before it is expanded.
MAX_LOST_COUNTS = 4096


def register(sub) -> None:
    p = sub.add_parser("replan", help=COMMAND_HELP["replan"])
    add_spec_args(p, frameworks=False)
    add_strategy_args(p)
    p.add_argument("--lost", default="1-16", help="nodes lost: a range A-B or a list (default 1-16; negative: gained)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated, of " + ", ".join(POLICIES))
    p.add_argument("--objective", choices=("tokens_per_s", "goodput"), default="tokens_per_s")
    add_failure_args(p)
    p.add_argument("--out", help="a directory to write replan.parquet and replan.png into")
    p.set_defaults(func=run)


def _lost(text: str, nodes: int) -> list[int]:
    """--lost as node counts, each below the cluster's ``nodes`` and, for a range, at most MAX_LOST_COUNTS of
    them (both checked before the range is expanded); InputError naming --lost otherwise."""
    counts = _lost_words(text)
    most = counts[-1] if isinstance(counts, range) else max(counts)
    if most >= nodes:
        raise InputError("--lost", f"node counts below the cluster's {nodes} nodes", most)
    if len(counts) > MAX_LOST_COUNTS:
        raise InputError("--lost", f"a range of at most {MAX_LOST_COUNTS:,} node counts (each is re-planned)", text)
    return list(counts)


def _lost_words(text: str) -> range | list[int]:
    """--lost as written: a range A-B (A <= B; -A-B from A gained), not expanded, or a comma-separated list;
    InputError naming --lost for anything else, an empty or reversed range included."""
    expected = "a range A-B with A <= B, or comma-separated node counts"
    try:
        if "-" in text.lstrip("-") and "," not in text:
            a, b = text.rsplit("-", 1) if not text.startswith("-") else text[1:].split("-", 1)
            lo, hi = (int(a) if not text.startswith("-") else -int(a)), int(b)
            if lo > hi:
                raise ValueError(text)
            return range(lo, hi + 1)
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError("--lost", expected, text) from None


def run(args) -> int:
    model = load_model(args.model, args.seq_len)
    framework = one_framework(args.framework, why="the plan's, re-planned under it")
    cluster = load_cluster(args.cluster, args.hardware)
    if isinstance(cluster, HeteroCluster):
        raise InputError("--cluster", "a cluster of one GPU type (replan re-plans one pool)", args.cluster)
    out = None if args.out is None else Path(args.out)
    if out is not None and (not args.out or (out.exists() and not out.is_dir())):
        raise InputError("--out", "a directory", args.out)
    lost = _lost(args.lost, cluster.nodes)
    table = build_strategy(args, model, cluster)
    priced = evaluate(model, cluster, table, framework=framework)
    reason = REASONS[int(priced["reason"][0])]
    if reason == "out_of_memory":
        raise InputError("--strategy" if args.strategy else "plan", f"a plan that fits in the "
                         f"{cluster.gpu.hbm_bytes / 1e9:.1f} GB of a {cluster.gpu.name} on {cluster.name}",
                         f"{priced['mem_total_bytes'][0] / 1e9:.1f} GB per GPU")
    if reason != "ok":
        raise strategy_reason_error(args, model, cluster, table, reason, framework)
    plan = table.row(0)
    records = replan(model, cluster, plan, lost, policies=args.policies.split(","),
                     objective=args.objective, failure=failure_from_args(args), framework=framework)
    print(f"{model.name} on {cluster.name}: re-planning a plan of {plan['dp']} x {plan['tp']} x {plan['pp']} x "
          f"{plan['cp']} GPUs (dp x tp x pp x cp), by {args.objective}")
    print(f"{'nodes lost':>10} {'GPUs left':>9} {'policy':<11} {'GPUs used':>9} {'tokens/s':>11} {'goodput':>11} "
          f"{'kept':>6}  plan")
    for r in records:
        p = r["plan"]
        what = "none fits" if p is None else (
            f"dp {p['dp']} tp {p['tp']} pp {p['pp']} cp {p['cp']} b {p['micro_batch']} {p['schedule']} "
            f"vpp {p['vpp']} {p['recompute']} ZeRO {p['zero_stage']}")
        print(f"{r['nodes_lost']:>10} {r['gpus_left']:>9} {r['policy']:<11} {r['gpus_used']:>9} "
              f"{r['tokens_per_s']:>11,.0f} {r['goodput_tokens_per_s']:>11,.0f} {100 * r['kept']:5.1f}%  {what}")
    if out is not None:
        write_outputs(out, records, args.objective, model.name, cluster.name)
        print(f"wrote {out / 'replan.parquet'} and {out / 'replan.png'}")
    return 0


def write_outputs(out: Path, records: list[dict], objective: str, model_name: str, cluster_name: str) -> None:
    """replan.parquet (one row per nodes lost and policy, naming the model and the cluster) and
    replan.png (replan_figure), both or neither (each written to a temporary name, then both renamed); InputError
    naming --out where they cannot be written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError("--out", "a directory that can be made", f"{out} ({exc.strerror or exc})") from None
    cols = {"model": [model_name] * len(records), "cluster": [cluster_name] * len(records)}
    cols |= {k: [r[k] for r in records] for k in ("nodes_lost", "gpus_left", "policy", "gpus_used", "tokens_per_s",
                                                   "goodput_tokens_per_s", "kept")}
    for k in ("dp", "tp", "pp", "cp", "micro_batch", "vpp", "zero_stage"):
        cols[k] = [None if r["plan"] is None else int(r["plan"][k]) for r in records]
    for k in ("schedule", "recompute"):
        cols[k] = [None if r["plan"] is None else str(r["plan"][k]) for r in records]
    fig = replan_figure(records, objective, model_name, cluster_name, original=original_score(records, objective))
    try:
        with replaced_together("--out", [out / "replan.parquet", out / "replan.png"]) as (parquet, png):
            pq.write_table(pa.table(cols), parquet)
            fig.savefig(png, dpi=110, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)


def original_score(records: list[dict], objective: str) -> float | None:
    """The plan before the loss, by ``objective``: a record's score over its share ``kept`` of it (search.replan's
    kept = score / the original plan's); None where no policy kept a plan."""
    key = "tokens_per_s" if objective == "tokens_per_s" else "goodput_tokens_per_s"
    kept = [r[key] / r["kept"] for r in records if r["kept"] > 0 and r[key] > 0]
    return kept[0] if kept else None


def replan_figure(records: list[dict], objective: str, model_name: str, cluster_name: str, *,
                  original: float | None = None):
    """Throughput against the GPUs left, a line per policy, the plan before the loss (``original``, by
    ``objective``) as a dashed reference line; the title names the model and the cluster, the axes their units, the
    legend sits outside the axes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 3.8))
    key = "tokens_per_s" if objective == "tokens_per_s" else "goodput_tokens_per_s"
    markers = ("o", "s", "^", "D", "v", "P")
    for i, policy in enumerate(dict.fromkeys(r["policy"] for r in records)):
        pts = [(r["gpus_left"], r[key]) for r in records if r["policy"] == policy]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=markers[i % len(markers)], label=policy)
    what = "tokens/s" if objective == "tokens_per_s" else "goodput, tokens/s"
    if original:
        ax.axhline(original, color="black", linestyle="--", linewidth=1,
                   label=f"the plan before the loss: {original:,.0f} {what.split(', ')[-1]}")
    ax.set(xlabel="GPUs left after the loss (GPUs)",
           ylabel="throughput (tokens/s)" if objective == "tokens_per_s" else "goodput (tokens/s)",
           title=f"{model_name} on {cluster_name}: best plan on what is left, per policy")
    ax.grid(alpha=0.3)
    ax.legend(title="policy", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
