"""Whether the plans `rank` recommends can be launched: for each model, cluster and framework profile, the top plans of
`plansweep rank --framework P --json` are exported with `plansweep export` in the profile's launch format, and each
refusal is counted by the argument its one line names.

    PYTHONPATH=. python3 benchmarks/rank_export_check.py [--top 15] [--models a,b] [--clusters x,y]

Prints one Markdown table (plans checked, written, refused by argument) per (profile, format)."""

from __future__ import annotations

import argparse
import collections
import json
import re

from tests.in_process import cli

PAIRS = (("megatron-core", "megatron"), ("fsdp2", "torchtitan"), ("deepspeed", "megatron-deepspeed"),
         ("deepspeed-flash2", "deepspeed-flash2"))
MODELS = ("llama3-8b", "llama3-70b", "llama3-405b", "qwen3-32b", "gpt3-175b", "megatron-530b", "mixtral-8x22b",
          "qwen3-30b-a3b")
CLUSTERS = ("h100x64", "h100x256")


def flags_of(row: dict, model: str, cluster: str) -> list[str]:
    """export's strategy flags for a row of rank --json."""
    out = ["--model", model, "--cluster", cluster]
    for key in ("dp", "tp", "pp", "cp", "ep", "etp", "micro_batch", "global_batch", "zero_stage", "recompute",
                "precision", "schedule", "vpp"):
        out += ["--" + key.replace("_", "-"), str(row[key])]
    out += ["--sequence-parallel"] if row["sequence_parallel"] else []
    out += [] if row["overlap_dp"] else ["--no-overlap-dp"]
    if row.get("stage_layers"):
        out += ["--stage-layers", ",".join(str(x) for x in row["stage_layers"] if x)]
    if row.get("recompute_modules"):
        out += ["--recompute-modules", row["recompute_modules"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    a = ap.parse_args()
    tally: dict[tuple[str, str], collections.Counter] = {p: collections.Counter() for p in PAIRS}
    for model in a.models.split(","):
        for cluster in a.clusters.split(","):
            for profile, fmt in PAIRS:
                out = cli("rank", "--model", model, "--cluster", cluster, "--framework", profile, "--top",
                          str(a.top), "--json")
                if out.returncode:
                    tally[(profile, fmt)]["rank refused"] += 1
                    continue
                for row in json.loads(out.stdout)["rows"]:
                    got = cli("export", "--framework", fmt, *flags_of(row, model, cluster))
                    c = tally[(profile, fmt)]
                    c["checked"] += 1
                    if got.returncode == 0:
                        c["written"] += 1
                    else:
                        m = re.search(r"error: (\S+): expected", got.stderr)
                        c["refused: " + (m.group(1) if m else "other")] += 1
    print("| profile | format | plans | written | refused (argument named) |")
    print("| --- | --- | ---: | ---: | --- |")
    for (profile, fmt), c in tally.items():
        refused = ", ".join(f"{k[9:]} {n}" for k, n in sorted(c.items()) if k.startswith("refused: ")) or "none"
        print(f"| {profile} | {fmt} | {c['checked']} | {c['written']} | {refused} |")


if __name__ == "__main__":
    main()
