"""plansweep's cost core: frozen specs in, whole columns of metrics out.

    model = model_preset("gpt3-175b"); cluster = cluster_preset("h100x1024")
    table = StrategyTable.from_columns(dp=[8, 16], tp=8, pp=[16, 8], global_batch=1536)
    metrics = evaluate(model, cluster, table)   # one numpy column per metric
"""

from typing import TYPE_CHECKING

from costmodel._lazy import lazy_exports

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from costmodel._errors import InputError
    from costmodel._evaluate import evaluate, format_stage_rows, stage_breakdown, stage_rows
    from costmodel._feasibility import REASONS
    from costmodel._frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, Framework, framework_names, framework_preset
    from costmodel._goodput import FailureModel, goodput, plan_goodput
    from costmodel._hardware import (
        EFFICIENCY,
        GPU,
        PRECISIONS,
        Cluster,
        Efficiency,
        cluster_names,
        cluster_preset,
        gpu_names,
        gpu_preset,
        make_cluster,
    )
    from costmodel._hetero_cluster import (
        HeteroCluster,
        Pool,
        as_hetero,
        hetero_from_mapping,
        hetero_names,
        hetero_preset,
        hetero_to_mapping,
        make_hetero,
        make_pool,
    )
    from costmodel._linear import (
        H100_SXM5_SEED001,
        LinearDevice,
        linear_end_of_batch_s,
        linear_fwd_bwd_s,
    )
    from costmodel._memory import memory_screen
    from costmodel._metrics import METRIC_COLUMNS, Metrics
    from costmodel._model_files import from_calculon, from_hf_config, model_from_mapping
    from costmodel._pipeline import PipelineResult, Timeline, simulate
    from costmodel._pipeline_render import chrome_trace, text_timeline
    from costmodel._strategy import COLUMNS, RECOMPUTE, SCHEDULES, StrategyTable, decode, encode
    from costmodel._workloads import MODEL_PRESETS, Transformer, model_preset

# Private module -> the public names it defines. Imported on first use (module __getattr__,
# PEP 562), so that a command importing one part (the command line's InputError) does not
# import every module and numpy with it. tests/test_cli_startup.py holds this table equal
# to the imports above.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "costmodel._errors": ("InputError",),
    "costmodel._evaluate": ("evaluate", "format_stage_rows", "stage_breakdown", "stage_rows"),
    "costmodel._feasibility": ("REASONS",),
    "costmodel._frameworks": (
        "DEFAULT_FRAMEWORK", "FRAMEWORKS", "Framework", "framework_names",
        "framework_preset"
    ),
    "costmodel._goodput": ("FailureModel", "goodput", "plan_goodput"),
    "costmodel._hardware": (
        "EFFICIENCY", "GPU", "PRECISIONS", "Cluster", "Efficiency", "cluster_names",
        "cluster_preset", "gpu_names", "gpu_preset", "make_cluster"
    ),
    "costmodel._hetero_cluster": (
        "HeteroCluster", "Pool", "as_hetero", "hetero_from_mapping", "hetero_names",
        "hetero_preset", "hetero_to_mapping", "make_hetero", "make_pool"
    ),
    "costmodel._linear": ("H100_SXM5_SEED001", "LinearDevice", "linear_end_of_batch_s", "linear_fwd_bwd_s"),
    "costmodel._memory": ("memory_screen",),
    "costmodel._metrics": ("METRIC_COLUMNS", "Metrics"),
    "costmodel._model_files": ("from_calculon", "from_hf_config", "model_from_mapping"),
    "costmodel._pipeline": ("PipelineResult", "Timeline", "simulate"),
    "costmodel._pipeline_render": ("chrome_trace", "text_timeline"),
    "costmodel._strategy": ("COLUMNS", "RECOMPUTE", "SCHEDULES", "StrategyTable", "decode", "encode"),
    "costmodel._workloads": ("MODEL_PRESETS", "Transformer", "model_preset"),
}
__getattr__, __dir__, _MODULE_OF = lazy_exports("costmodel", _EXPORTS, globals())

__version__ = "0.1.0"
# Bumped whenever evaluate() can return different numbers for the same input. 4: megatron-core is the
# default framework (a call or a command line naming none priced generic's before).
COST_MODEL_VERSION = "4"

__all__ = [
    "COLUMNS", "COST_MODEL_VERSION", "Cluster", "EFFICIENCY", "Efficiency", "GPU",
    "H100_SXM5_SEED001", "InputError", "LinearDevice", "METRIC_COLUMNS", "MODEL_PRESETS",
    "Metrics", "PRECISIONS", "RECOMPUTE", "REASONS", "SCHEDULES", "StrategyTable",
    "Transformer", "cluster_names", "cluster_preset", "decode", "encode", "evaluate",
    "gpu_names", "gpu_preset", "linear_end_of_batch_s", "linear_fwd_bwd_s", "make_cluster",
    "model_preset", "PipelineResult", "Timeline", "simulate", "text_timeline", "chrome_trace",
    "HeteroCluster", "Pool", "as_hetero",
    "format_stage_rows", "hetero_from_mapping", "hetero_names", "hetero_preset", "stage_breakdown",
    "hetero_to_mapping", "make_hetero", "make_pool", "stage_rows", "from_calculon", "from_hf_config",
    "model_from_mapping", "FailureModel", "goodput", "plan_goodput", "memory_screen",
    "DEFAULT_FRAMEWORK", "FRAMEWORKS", "Framework", "framework_names", "framework_preset",
]
