"""tightpipe's schedules in PyTorch's own pipelining runtime (torch.distributed.pipelining).

`generate` / `load` give a checked `TorchSchedule` (tightpipe.schedule); `build_runtime` makes
PyTorch's `_PipelineScheduleRuntime` run it on this rank's `PipelineStage`s; `profile_step` runs
one step under torch.profiler and writes this rank's Kineto trace, which `tightpipe report` reads;
`measure_layers` times each top-level module's F, I and W through PyTorch's split backward and
counts its bytes (the per-layer costs `tightpipe tune --layers` reads); `emulated_modules` turns
those costs into layers that sleep them (a pipeline of many processes on few cores);
`steady_malloc` keeps what a process frees (no page faults per step: steady costs); `tune` runs
`tightpipe tune` on them and `build_tuned_runtime` applies its split and schedule in one call;
`titan_config` gives torchtitan's config values for the same result.
Tested with PyTorch 2.15.0 (docs/torch.md).
"""

from tightpipe.schedule import TorchSchedule, generate, load
from tightpipe.torch.emulate import EmulatedLayer, emulated_modules
from tightpipe.torch.launch import malloc_mode, steady_malloc
from tightpipe.torch.layers import measure_layers, top_level_modules
from tightpipe.torch.runtime import (
    TESTED_TORCH,
    build_runtime,
    check_actions,
    check_reduce_grads,
    check_stages,
    runtime_action_types,
)
from tightpipe.torch.titan import titan_cli_args, titan_config, titan_snippet
from tightpipe.torch.trace import idle_from_trace, profile_step
from tightpipe.torch.tune import (
    TuneResult,
    build_tuned_runtime,
    cut_stages,
    measure_host_time,
    read_tune,
    tune,
)

__all__ = [
    "EmulatedLayer",
    "TESTED_TORCH",
    "TorchSchedule",
    "TuneResult",
    "build_runtime",
    "build_tuned_runtime",
    "check_actions",
    "check_reduce_grads",
    "check_stages",
    "cut_stages",
    "emulated_modules",
    "generate",
    "idle_from_trace",
    "load",
    "malloc_mode",
    "measure_host_time",
    "measure_layers",
    "profile_step",
    "read_tune",
    "runtime_action_types",
    "steady_malloc",
    "titan_cli_args",
    "titan_config",
    "titan_snippet",
    "top_level_modules",
    "tune",
]
