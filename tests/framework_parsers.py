"""The frameworks' own parsers run on plansweep's exports, where the frameworks install.

- Megatron-LM: megatron/training/arguments.py's parse_args + validate_args, as pretrain_gpt.py
  calls them. Its training package is not in the megatron-core wheel, so it comes from a
  Megatron-LM checkout: PLANSWEEP_MEGATRON_LM names one or more (os.pathsep between them), or
  megatron.training is importable as installed. Each checkout runs in its own process (every
  release is the package ``megatron``), reading a JSON list of launches on stdin
  (``python tests/framework_parsers.py CHECKOUT``) and writing one verdict per launch: null
  when validate_args accepts it, else its message.
- torchtitan: torchtitan.config.ConfigManager.parse_args on the TOML file, ParallelDims on its
  degrees, and the flavor comment's fields as the model's own args dataclass.
- DeepSpeed: deepspeed.runtime.config.DeepSpeedConfig on ds_config with the mpu the launcher
  section names (PipeModelDataParallelTopology's data-parallel size).

Stubs, each for something a CPU process cannot answer: the GPU's compute capability (Megatron
asks it for grouped GEMMs and for the CUDA_DEVICE_MAX_CONNECTIONS rule: 9, the H100 of the
exported clusters), triton where it is not installed (torchtitan's MoE kernels and Megatron
core_v0.19.0 import it; nothing here runs a kernel), and DeepSpeed's process group (rank 0 of
the launcher's world).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

HOPPER = 9  # compute capability major of the H100 (Megatron's get_device_arch_version)


class _Anything:
    """Stands for any triton object at import time: a decorator, tl.constexpr, a dtype."""

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __getitem__(self, key):
        return _Anything()


class _TritonStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``triton`` and its submodules to the frameworks' modules that import it at load
    time (torchtitan's MoE kernels, Megatron core_v0.19.0's paged stash), but not to torch:
    torch goes on knowing it has no triton and never compiles against the stand-in."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] != "triton" or _imported_by_torch():
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0"  # below every release: version checks take their no-triton path

        def attr(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Anything()

        mod.__getattr__ = attr  # type: ignore[method-assign]
        return mod

    def exec_module(self, module):
        pass


def _imported_by_torch() -> bool:
    """Whether the import statement being served is in torch's own source."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        frame = frame.f_back
    return frame is not None and f"{os.sep}torch{os.sep}" in frame.f_code.co_filename


@contextlib.contextmanager
def triton_stand_in():
    """While the frameworks' modules load, where triton is not installed: torch first answers
    (and caches) that it has no triton and loads its compiler without it; afterwards the
    stand-in is gone from sys.modules, so nothing later finds it."""
    if importlib.util.find_spec("triton") is not None:
        yield
        return
    import torch._inductor.runtime.hints  # noqa: F401
    import torch._inductor.runtime.triton_compat  # noqa: F401
    from torch.utils._triton import has_triton, has_triton_package

    has_triton_package(), has_triton()
    finder = _TritonStandIn()
    sys.meta_path.append(finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] == "triton"]:
            del sys.modules[name]


# ---- Megatron-LM (run in a child process per checkout) -----------------------------------------
def megatron_checkouts() -> list[str]:
    """Megatron-LM checkouts to run (PLANSWEEP_MEGATRON_LM), or [""] where megatron.training is
    importable here, or []."""
    paths = [p for p in os.environ.get("PLANSWEEP_MEGATRON_LM", "").split(os.pathsep) if p]
    if paths:
        return paths
    try:
        return [""] if importlib.util.find_spec("megatron.training") is not None else []
    except ModuleNotFoundError:
        return []


def run_megatron(checkout: str, launches: list[dict]) -> list[str | None]:
    """validate_args' verdict on each launch ({"env": {...}, "world": int, "argv": [...]})."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    if checkout:
        env["PYTHONPATH"] = os.pathsep.join([checkout, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, __file__, checkout or "-"], input=json.dumps(launches), text=True,
                         capture_output=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"Megatron-LM at {checkout or 'site-packages'} did not run:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _megatron_child(launches: list[dict]) -> list[str | None]:
    import typing

    import torch

    if not hasattr(typing, "override"):  # Python 3.12's no-op decorator, which core_v0.19.0 imports
        typing.override = lambda f: f  # type: ignore[attr-defined]
    torch.cuda.get_device_capability = lambda *a, **k: (HOPPER, 0)
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(major=HOPPER, minor=0)
    with triton_stand_in():
        from megatron.training import arguments

    arguments.get_device_arch_version = lambda: HOPPER
    verdicts: list[str | None] = []
    for launch in launches:
        saved = dict(os.environ)
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update(launch["env"], WORLD_SIZE=str(launch["world"]), RANK="0")
        sys.argv = ["pretrain_gpt.py", *launch["argv"]]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                arguments.validate_args(arguments.parse_args())
            verdicts.append(None)
        except (AssertionError, ValueError, RuntimeError, TypeError, KeyError) as exc:
            verdicts.append(f"{type(exc).__name__}: {exc}")
        except SystemExit:  # argparse: an unknown or misread option
            verdicts.append("argparse refused the arguments")
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return verdicts


# ---- torchtitan ------------------------------------------------------------------------------
def run_torchtitan(text: str, tmp: Path, world: int) -> None:
    """ConfigManager.parse_args on the TOML, ParallelDims on its degrees, and the flavor
    comment's fields as the torchtitan model's args dataclass (TypeError on a field it lacks)."""
    from cli._export import torchtitan_model

    with triton_stand_in():
        import torchtitan.models.moe  # noqa: F401
        from torchtitan.config import ConfigManager
        from torchtitan.distributed.parallel_dims import ParallelDims

    path = tmp / "job.toml"
    path.write_text(text)
    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    par = cfg.parallelism
    ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                 cp=par.context_parallel_degree, tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                 ep=par.expert_parallel_degree, etp=par.expert_tensor_parallel_degree, world_size=world)
    return torchtitan_args(torchtitan_model(text))


def torchtitan_args(flavor: dict):
    """The torchtitan model args dataclass of a flavor comment (moe_args_* into MoEArgs)."""
    from torchtitan.models.moe import MoEArgs

    name = flavor.pop("model")
    if name == "llama3":
        from torchtitan.models.llama3.model.args import TransformerModelArgs as cls
    elif name == "qwen3":
        from torchtitan.models.qwen3.model.args import Qwen3ModelArgs as cls
    else:
        from torchtitan.models.deepseek_v3.model.args import DeepSeekV3ModelArgs as cls
    moe = {k.removeprefix("moe_args_"): flavor.pop(k) for k in list(flavor) if k.startswith("moe_args_")}
    return cls(**flavor, **({"moe_args": MoEArgs(**moe)} if moe else {}))


# ---- DeepSpeed -------------------------------------------------------------------------------
class TopologyMpu:
    """The mpu a launcher section names: DeepSpeed's PipeModelDataParallelTopology, read through
    the calls DeepSpeedConfig makes of an mpu (PipelineParallelGrid answers them so on a run)."""

    def __init__(self, topology):
        self.topology = topology

    def get_data_parallel_world_size(self) -> int:
        return self.topology.get_dim("data")

    def get_model_parallel_world_size(self) -> int:
        return self.topology.get_dim("model")

    def get_pipe_parallel_world_size(self) -> int:
        return self.topology.get_dim("pipe")


def run_deepspeed(text: str) -> object:
    """DeepSpeedConfig(ds_config, mpu) in a world of num_nodes x num_gpus ranks, the mpu built
    from launcher.topology as the launch note says; returns the config."""
    from deepspeed import comm
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    doc = json.loads(text)
    la = doc["launcher"]
    world = la["num_nodes"] * la["num_gpus"]
    topo = la["topology"]
    mpu = TopologyMpu(PipeModelDataParallelTopology(num_pp=topo["num_pp"], num_mp=topo["num_mp"],
                                                    num_dp=topo["num_dp"]))
    assert mpu.topology.world_size() == world, (mpu.topology.world_size(), world)
    saved = comm.get_rank, comm.get_world_size
    comm.get_rank, comm.get_world_size = (lambda *a, **k: 0), (lambda *a, **k: world)
    try:
        return DeepSpeedConfig(doc["ds_config"], mpu=mpu)
    finally:
        comm.get_rank, comm.get_world_size = saved


if __name__ == "__main__":
    print(json.dumps(_megatron_child(json.loads(sys.stdin.read()))))
