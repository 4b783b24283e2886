"""The frameworks' own parsers accept plansweep's exports as written (the optional ``parsers``
extra: torch, torchtitan, DeepSpeed; Megatron-LM's training package from a checkout, see
tests/framework_parsers.py).

Ten random feasible plans per model space and framework (the spaces of tests/test_cli_export.py),
exported as ``plansweep export`` writes them, then:
- Megatron-LM: pretrain_gpt.py's parse_args + validate_args in the launch environment the
  command line sets (CUDA_DEVICE_MAX_CONNECTIONS), on every checkout named;
- torchtitan: ConfigManager on the TOML, ParallelDims on its degrees, the flavor comment as the
  model's args dataclass (and llama3's ffn width as its FeedForward builds it);
- DeepSpeed: DeepSpeedConfig on ds_config with the mpu launcher.topology describes.
A module is skipped, with the reason, only where its framework is not installed.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from cli._export import WRITERS, megatron_launch
from tests import framework_parsers as fp
from tests.test_cli_export import SPACES, _feasible_plans

N = 10
SPACES_OF = {"megatron": ("dense", "mixtral", "deepseek", "qwen3"),
             "torchtitan": ("dense", "mixtral", "deepseek", "qwen3"), "deepspeed": ("dense", "qwen3")}
EXTRA = "pip install -e '.[parsers]'"


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _exports(fw: str, space: str, seed: int = 7, profile: str | None = None) -> list[tuple[dict, str]]:
    model, cluster = SPACES[space]
    kw = {"profile": profile} if profile else {}
    return [(p, WRITERS[fw](p, model, cluster, **kw)) for p in _feasible_plans(fw, N, seed=seed, space=space)]


def _world(plan: dict) -> int:
    return plan["dp"] * plan["tp"] * plan["pp"] * plan["cp"]


# ---- Megatron-LM -----------------------------------------------------------------------------
def _megatron_cases() -> list[tuple[str, dict, str]]:
    """(label, plan, text): every space's plans under megatron-core, and Mixtral's under the
    expert-parallel overlap profile where that profile takes the plan (its own launch environment)."""
    cases = [(f"{space}/{i}", p, t) for space in SPACES_OF["megatron"]
             for i, (p, t) in enumerate(_exports("megatron", space))]
    model, cluster = SPACES["mixtral"]
    for i, p in enumerate(_feasible_plans("megatron", 40, seed=13, space="mixtral")):
        if p["ep"] > 1 and p["recompute"] != "full" and (p["pp"] == 1 or p["vpp"] > 1):
            cases.append((f"mixtral-a2a-overlap/{i}", p,
                          WRITERS["megatron"](p, model, cluster, profile="megatron-core-a2a-overlap")))
    return cases


@pytest.mark.skipif(not _installed("torch"), reason=f"torch is not installed (the parsers extra: {EXTRA})")
@pytest.mark.skipif(not fp.megatron_checkouts(), reason="Megatron-LM's training package is not importable and "
                    "PLANSWEEP_MEGATRON_LM names no checkout (megatron.training is not in the megatron-core wheel: "
                    "point PLANSWEEP_MEGATRON_LM at Megatron-LM checkouts, os.pathsep between them)")
@pytest.mark.parametrize("checkout", fp.megatron_checkouts() or [""])
def test_megatron_validate_args_takes_every_export(checkout):
    cases = _megatron_cases()
    launches = [megatron_launch(text) for _, _, text in cases]
    overlap = [launch["env"] for (label, _, _), launch in zip(cases, launches, strict=True)
               if label.startswith("mixtral-a2a")]
    assert len(overlap) >= 5 and {"CUDA_DEVICE_MAX_CONNECTIONS": "32"} in overlap
    for (_, plan, _), launch in zip(cases, launches, strict=True):
        assert launch["world"] == _world(plan)
    verdicts = fp.run_megatron(checkout, launches)
    bad = [f"{label} ({launch['env']}): {v}" for (label, _, _), launch, v in zip(cases, launches, verdicts, strict=True)
           if v is not None]
    assert not bad, "\n".join(bad)
    # the launch environment is what validate_args asked: without it the plans with tp or cp > 1
    # (not Megatron-FSDP) are refused, and Megatron-FSDP's are refused with it set to 1
    bare = [dict(launch, env={}) for launch in launches]
    needs_one = [i for i, launch in enumerate(launches) if launch["env"].get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"]
    fsdp = [i for i, (_, plan, _) in enumerate(cases) if plan["zero_stage"] >= 2]
    assert needs_one and fsdp
    ones = [dict(launches[i], env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) for i in fsdp]
    refused = fp.run_megatron(checkout, [bare[i] for i in needs_one] + ones)
    assert all("CUDA_DEVICE_MAX_CONNECTIONS" in v for v in refused), refused


# ---- torchtitan ------------------------------------------------------------------------------
@pytest.mark.skipif(not _installed("torchtitan"), reason=f"torchtitan is not installed (the parsers extra: {EXTRA})")
@pytest.mark.parametrize("space", SPACES_OF["torchtitan"])
def test_torchtitan_config_manager_takes_every_export(space, tmp_path):
    model, _ = SPACES[space]
    for plan, text in _exports("torchtitan", space):
        args = fp.run_torchtitan(text, tmp_path, _world(plan))
        assert args.n_layers == model.layers and args.dim == model.hidden and args.vocab_size == model.vocab
        if type(args).__name__ == "TransformerModelArgs":  # llama3: its FeedForward derives the width
            import torch
            from torchtitan.models.llama3.model.model import FeedForward

            with torch.device("meta"):
                ffn = FeedForward(args.dim, 4 * args.dim, args.multiple_of, args.ffn_dim_multiplier)
            assert ffn.w1.out_features == model.ffn_hidden


# ---- DeepSpeed -------------------------------------------------------------------------------
@pytest.mark.skipif(not _installed("deepspeed"), reason=f"DeepSpeed is not installed (the parsers extra: {EXTRA})")
@pytest.mark.parametrize("space", SPACES_OF["deepspeed"])
def test_deepspeed_config_takes_every_export_with_its_mpu(space):
    from deepspeed import comm
    from deepspeed.runtime.config import DeepSpeedConfig

    seen_mpu_plan = False
    for seed in (7, 8):
        for plan, text in _exports("deepspeed", space, seed=seed):
            cfg = fp.run_deepspeed(text)
            assert cfg.train_batch_size == plan["global_batch"] and cfg.world_size == plan["dp"]
            assert cfg.gradient_accumulation_steps * plan["micro_batch"] * plan["dp"] == plan["global_batch"]
            la = json.loads(text)["launcher"]
            if plan["tp"] > 1 and plan["pp"] == 1:
                seen_mpu_plan = True
                assert la["mpu"].startswith("required: deepspeed.initialize(..., mpu=")
                # and the mpu is needed: without one DeepSpeed counts every rank as data parallel
                saved, world = (comm.get_rank, comm.get_world_size), _world(plan)
                comm.get_rank, comm.get_world_size = (lambda *a, **k: 0), (lambda *a, w=world, **k: w)
                try:
                    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
                        DeepSpeedConfig(json.loads(text)["ds_config"], mpu=None)
                finally:
                    comm.get_rank, comm.get_world_size = saved
    assert seen_mpu_plan
