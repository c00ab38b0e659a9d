"""Per-layer costs of a user's model, measured the way PyTorch 2.15's pipelining runtime runs them.

    from tightpipe.torch import measure_layers
    torch.set_num_threads(1)          # measure with the threads each pipeline rank will use
    table = measure_layers(model, tokens, loss_fn=loss_fn, target=targets, out="layers.json")

`measure_layers` times each top-level module's forward (F), input-gradient backward (I) and
weight-gradient backward (W) on one microbatch on one device, and counts its parameter,
gradient, optimizer and activation bytes. I and W run through PyTorch's own split backward
(`torch.distributed.pipelining._backward.stage_backward_input` and `stage_backward_weight`, what
the runtime's `I` and `W` actions call), never as B / 2. Each module gets its real output
gradient: the gradient of the loss with respect to that module's output, from one backward of
the whole chain. The result is the JSON `tightpipe tune --layers FILE` reads
(format "tightpipe-layers/1", seconds and bytes; see `measure_layers`).

What PyTorch does, and so what is recorded:
* The last module's F includes `loss_fn` (the runtime computes the loss inside the last stage's
  F action); its I and W start from the loss.
* The first module: PyTorch's runtime runs no input backward on the pipeline's first stage
  (`PipelineStage.backward_one_chunk` skips it; its input, the tokens, needs no gradient) and runs
  the stage's whole backward (`stage_backward`, fused) in its W action. So module 0 gets i = 0.0,
  w = the time of `stage_backward` on it, and act_after_i_bytes = act_bytes. On a real stage 0
  holding modules 0..k this holds for the whole stage: its I is empty and its W is the whole
  backward of modules 0..k, the sum of their b; a cost model reads that off the split, not off
  this table.
* Modules 1.. are each timed as one stage of their own: `stage_backward_input` on the module's
  output with its output gradient and its input (a leaf that requires grad), then
  `stage_backward_weight` with the parameter groups that I returned.
* B, the whole backward as one autograd pass (`stage_backward`: what the runtime runs for a
  schedule's whole-backward action, and for W on the first stage), is timed too, on its own
  forward: one pass is cheaper than I then W (5-9% for a transformer block of d = 384 on a Zen 3
  core, docs/torch.md section 7), so a schedule without the split is not costed as i + w.
  Module 0's b is its w.

Threads are the caller's business: `torch.set_num_threads` as the pipeline's ranks will run.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)

from tightpipe.torch.launch import malloc_mode

FORMAT = "tightpipe-layers/1"

# The keys of each entry of "layers", in the order they are written.
LAYER_KEYS = (
    "name",
    "f",
    "i",
    "w",
    "b",
    "act_bytes",
    "act_after_i_bytes",
    "input_bytes",
    "output_bytes",
    "param_bytes",
    "grad_bytes",
    "optimizer_bytes",
    "params",
)


def top_level_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's top-level children in order, as (fully qualified name, module); a child that
    is an nn.ModuleList or nn.ModuleDict (torchtitan's `layers`) expands into its entries,
    `layers.0`, `layers.1`, ... as torchtitan's `module_fqns_per_model_part` names them."""
    out: list[tuple[str, nn.Module]] = []
    for name, child in model.named_children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            out.extend((f"{name}.{sub}", m) for sub, m in child.named_children())
        else:
            out.append((name, child))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shape(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"Tensor{tuple(t.shape)} {t.dtype}"
    return type(t).__name__


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _check_args(
    modules: Any,
    example_input: Any,
    loss_fn: Any,
    names: Any,
    reps: Any,
    warmup: Any,
    optimizer_bytes_per_param: Any,
    out: Any,
) -> tuple[list[str], list[nn.Module]]:
    """The (names, modules) to measure; TypeError / ValueError naming the bad argument."""
    if isinstance(modules, nn.Module):
        pairs = top_level_modules(modules)
        if not pairs:
            raise ValueError(
                f"modules={type(modules).__name__}: a module without children; "
                "hint: pass the model whose top-level children are its layers, or "
                "a list of modules"
            )
        default_names, mods = [n for n, _ in pairs], [m for _, m in pairs]
    elif isinstance(modules, Sequence) and not isinstance(modules, (str, bytes)):
        mods = list(modules)
        if not mods:
            raise ValueError(
                "modules=[]: no module to measure; hint: the model's top-level "
                "modules in order, e.g. [tok_embeddings, *layers, norm, output]"
            )
        for k, m in enumerate(mods):
            if not isinstance(m, nn.Module):
                raise TypeError(
                    f"modules[{k}] is a {type(m).__name__}, not an nn.Module; hint: "
                    "a list of the model's top-level modules"
                )
        default_names = [str(k) for k in range(len(mods))]
    else:
        raise TypeError(
            f"modules is a {type(modules).__name__}; hint: an nn.Module (its "
            "top-level children are measured) or a list of nn.Module"
        )
    if names is None:
        names = default_names
    else:
        if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
            raise TypeError(
                f"names={names!r}: not a list of str; hint: one module name (FQN) per module"
            )
        names = list(names)
        if len(names) != len(mods):
            raise ValueError(
                f"names has {len(names)} entries for {len(mods)} modules; hint: one "
                "name per module, in order"
            )
        for k, n in enumerate(names):
            if not isinstance(n, str) or not n:
                raise TypeError(
                    f"names[{k}]={n!r}: not a non-empty str; hint: the module's "
                    "fully qualified name, e.g. 'layers.0'"
                )
        seen: dict[str, int] = {}
        for k, n in enumerate(names):
            if n in seen:
                raise ValueError(
                    f"names[{k}]={n!r} repeats names[{seen[n]}]; hint: module names are unique FQNs"
                )
            seen[n] = k
    if not isinstance(example_input, torch.Tensor):
        raise TypeError(
            f"example_input is a {type(example_input).__name__}, not a Tensor; hint: "
            "one microbatch of the first module's input, e.g. tokens (B, T)"
        )
    if not callable(loss_fn):
        raise TypeError(
            f"loss_fn={loss_fn!r} is not callable; hint: loss_fn(output, target) "
            "returning a scalar tensor, as the pipeline runtime's loss_fn"
        )
    if not _is_int(reps) or reps < 1:
        raise ValueError(
            f"reps={reps!r}: must be an int >= 1; hint: e.g. reps=5 (the median of "
            "that many timed repetitions)"
        )
    if not _is_int(warmup) or warmup < 0:
        raise ValueError(f"warmup={warmup!r}: must be an int >= 0; hint: e.g. warmup=1")
    obp = optimizer_bytes_per_param
    if (
        isinstance(obp, bool)
        or not isinstance(obp, (int, float))
        or not math.isfinite(obp)
        or obp < 0
    ):
        raise ValueError(
            f"optimizer_bytes_per_param={obp!r}: must be a finite number >= 0; "
            "hint: 8 for Adam's fp32 m and v, 0 for SGD without momentum"
        )
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(
            f"out={out!r}: not a path; hint: a file name such as 'layers.json', or None"
        )
    return names, mods


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    """(data pointer, bytes) of the tensor's storage; a tensor without one counts its own."""
    try:
        st = t.untyped_storage()
        return st.data_ptr(), st.nbytes()
    except (RuntimeError, NotImplementedError):
        return id(t), _nbytes(t)


class _Saved:
    """What autograd keeps for one tensor saved in F (via saved_tensors_hooks): alive exactly
    as long as the graph node that saved it, so a weak reference tells whether it is held."""

    __slots__ = ("t", "__weakref__")

    def __init__(self, t: torch.Tensor):
        self.t = t


class _SavedRecorder:
    """saved_tensors_hooks that wrap each saved tensor in a `_Saved` and note its storage."""

    def __init__(self) -> None:
        self.saved: list[tuple[weakref.ref[Any], tuple[int, int]]] = []

    def pack(self, t: torch.Tensor) -> _Saved:
        # Detached: a saved output would otherwise hold its own grad_fn through this wrapper, a
        # cycle through autograd's C++ graph that keeps the node alive after I.
        s = _Saved(t.detach())
        self.saved.append((weakref.ref(s), _storage_key(t)))
        return s

    @staticmethod
    def unpack(s: _Saved) -> torch.Tensor:
        return s.t

    def bytes(self, exclude: set[int], alive_only: bool = False) -> tuple[int, set[int]]:
        """Bytes of the distinct storages saved (still held, with alive_only), leaving out the
        storages in `exclude` (parameters, buffers); and the storage pointers counted."""
        counted: dict[int, int] = {}
        for ref, (ptr, n) in self.saved:
            if ptr in exclude or ptr == 0 or (alive_only and ref() is None):
                continue
            counted[ptr] = max(n, counted.get(ptr, 0))
        return sum(counted.values()), set(counted)


def _leaf(x: torch.Tensor) -> torch.Tensor:
    """A module's input as the runtime holds a received activation: detached, requiring grad when
    it is floating point."""
    x = x.detach()
    if x.is_floating_point() or x.is_complex():
        x.requires_grad_(True)
    return x


def _forward(
    k: int,
    names: list[str],
    mod: nn.Module,
    x: torch.Tensor,
    last: bool,
    loss_fn: Callable[..., Any],
    target: Any,
) -> tuple[Any, torch.Tensor | None]:
    """Module k on x (and the loss when last); ValueError naming the modules on failure."""
    try:
        y = mod(x)
    except Exception as e:  # noqa: BLE001 (any failure of user code becomes one line)
        src = "example_input" if k == 0 else f"the output of module '{names[k - 1]}'"
        raise ValueError(
            f"module '{names[k]}' (modules[{k}]) cannot take {src} ({_shape(x)}): "
            f"{_first_line(e)}; hint: each module's input is the previous "
            "module's output, in the order given"
        ) from None
    if not isinstance(y, torch.Tensor):
        raise TypeError(
            f"module '{names[k]}' (modules[{k}]) returned a {type(y).__name__}, not "
            "a Tensor; hint: measure_layers chains modules that take and return "
            "one tensor each"
        )
    if not last:
        return y, None
    try:
        loss = loss_fn(y, target)
    except Exception as e:  # noqa: BLE001
        raise ValueError(
            f"loss_fn cannot take the output of the last module '{names[k]}' "
            f"({_shape(y)}) and target ({_shape(target)}): {_first_line(e)}; hint: "
            "loss_fn(output, target) as the pipeline runtime calls it"
        ) from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ValueError(
            f"loss_fn returned {_shape(loss)}, not a scalar tensor; hint: reduce "
            "the loss to one number, e.g. its mean"
        )
    return y, loss


def _output_grads(
    names: list[str],
    mods: list[nn.Module],
    example_input: torch.Tensor,
    loss_fn: Callable[..., Any],
    target: Any,
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor | None]]:
    """Each module's input (as a leaf), its output, and the loss's gradient with respect to that
    output (None for the last module, whose backward starts at the loss), from one forward and
    one backward of the whole chain, module by module."""
    n = len(mods)
    inputs, outputs = [], []
    x = example_input
    loss = None
    for k, mod in enumerate(mods):
        inp = x.detach() if k == 0 else _leaf(x)
        y, loss = _forward(k, names, mod, inp, k == n - 1, loss_fn, target)
        inputs.append(inp)
        outputs.append(y)
        x = y
    assert loss is not None
    grads: list[torch.Tensor | None] = [None] * n
    root: torch.Tensor = loss
    root_grad: torch.Tensor | None = None
    for k in range(n - 1, 0, -1):
        inp = inputs[k]
        if not inp.requires_grad:
            raise ValueError(
                f"module '{names[k - 1]}' returns {_shape(outputs[k - 1])}: no "
                f"gradient can flow back from '{names[k]}'; hint: measure_layers "
                "needs floating point activations between modules"
            )
        (g,) = torch.autograd.grad(
            [root],
            [inp],
            grad_outputs=None if root_grad is None else [root_grad],
            allow_unused=True,
        )
        grads[k - 1] = torch.zeros_like(inp) if g is None else g.detach()
        root, root_grad = outputs[k - 1], grads[k - 1]
    return [i.detach() for i in inputs], [o.detach() for o in outputs], grads


class _Case(NamedTuple):
    """Module k of n, with its input x and its output's gradient, as measure_layers times it."""

    k: int
    n: int
    names: list[str]
    mod: nn.Module
    x: torch.Tensor
    grad: Any
    loss_fn: Callable[..., Any]
    target: Any

    @property
    def last(self) -> bool:
        return self.k == self.n - 1

    def input(self) -> torch.Tensor:
        """A fresh input: module 0's needs no gradient (the runtime's first stage)."""
        return self.x.detach() if self.k == 0 else _leaf(self.x)

    def forward(self, inp: torch.Tensor) -> tuple[Any, Any]:
        return _forward(self.k, self.names, self.mod, inp, self.last, self.loss_fn, self.target)


def _one_pass(
    case: _Case,
    recorder: _SavedRecorder | None = None,
    exclude: set[int] | None = None,
) -> tuple[float, float, float, int]:
    """One F, I, W of module k as the runtime runs them: the three durations in seconds and,
    with a recorder, the bytes still held between I and W (0 for module 0, whose I is empty)."""
    k, mod, grad, last = case.k, case.mod, case.grad, case.last
    inp = case.input()
    held = 0
    t0 = time.perf_counter()
    if recorder is None:
        y, loss = case.forward(inp)
    else:
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
            y, loss = case.forward(inp)
    t1 = time.perf_counter()
    roots = [loss] if last else [y]
    out_grads = None if last else [grad]
    if k == 0:
        # PyTorch's runtime on the first stage: I does nothing, W is the whole backward.
        t2 = time.perf_counter()
        stage_backward(roots[0], None if last else grad, [inp])
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, held
    _, param_groups = stage_backward_input(roots, out_grads, [inp], mod.parameters())
    t2 = time.perf_counter()
    if recorder is not None:
        del y, loss, roots
        gc.collect()
        held, counted = recorder.bytes(exclude or set(), alive_only=True)
        # The gradients I captured at each parameter group's intermediates wait for W too.
        for group in param_groups:
            for grads_tuple in group.get("grads") or []:
                for g in grads_tuple or ():
                    if isinstance(g, torch.Tensor):
                        ptr, nb = _storage_key(g)
                        if ptr not in counted and ptr not in (exclude or set()) and ptr != 0:
                            counted.add(ptr)
                            held += nb
    stage_backward_weight(mod.parameters(), param_groups)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, held


def _fused_backward(case: _Case) -> float:
    """Module k's whole backward as one autograd pass (stage_backward: what the runtime runs for
    a B, and for W on the first stage), seconds; its forward is run first, untimed."""
    inp = case.input()
    y, loss = case.forward(inp)
    t0 = time.perf_counter()
    stage_backward(loss if case.last else y, None if case.last else case.grad, [inp])
    return time.perf_counter() - t0


def measure_layers(
    modules: nn.Module | Sequence[nn.Module],
    example_input: torch.Tensor,
    *,
    loss_fn: Callable[..., Any],
    target: Any,
    names: Sequence[str] | None = None,
    reps: int = 5,
    warmup: int = 1,
    optimizer_bytes_per_param: float = 8,
    out: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Each module's F, I, W and B seconds (median of `reps` after `warmup`) and bytes, on one
    microbatch `example_input` (module 0's input; each module's input is the previous one's
    output; the last one's output goes through loss_fn(output, target)). The passes run in
    rounds over all modules (`warmup + reps` rounds, each timing every module once), so a slow
    stretch of the machine moves every module's times alike.

    `modules`: a list of nn.Module in order (names default to "0", "1", ...), or an nn.Module
    whose top-level children are taken in order (`top_level_modules`: `layers.0`, ...). Returns,
    and writes to `out` when given, {"format": "tightpipe-layers/1", "time_unit": "s",
    "microbatch_input_shape", "threads", "torch", "device", "malloc" (launch.malloc_mode():
    'steady' when steady_malloc() ran in this process first), "layers": [{"name", "f", "i", "w",
    "b", "act_bytes", "act_after_i_bytes", "input_bytes", "output_bytes", "param_bytes",
    "grad_bytes", "optimizer_bytes", "params"}, ...]}. Per module:
    * act_bytes: the distinct storages autograd saves in F for the backward (counted through
      torch.autograd.graph.saved_tensors_hooks), leaving out parameters and buffers. The
      module's output is not added unless autograd saves it: the runtime keeps a stage's output
      only at a stage boundary (until its WAIT_SEND_F), where output_bytes gives it.
    * act_after_i_bytes: measured: the saved storages still held by the graph after
      stage_backward_input (those of the nodes W will run again), plus the gradients I captured
      for W (stage_backward_input's param_groups "grads"). Module 0: act_bytes (its I is empty).
    * input_bytes / output_bytes: numel * element size of its input / output.
    * param_bytes, params: its parameters (each counted once within the module; a parameter
      shared by two modules counts in both); grad_bytes: those that require grad;
      optimizer_bytes: optimizer_bytes_per_param * numel of those that require grad.
    Parameter gradients already present are put back afterwards; the modules are left in the
    train/eval mode they were in. Raises TypeError / ValueError naming the argument."""
    names_l, mods = _check_args(
        modules, example_input, loss_fn, names, reps, warmup, optimizer_bytes_per_param, out
    )
    n = len(mods)
    all_params = {id(p): p for m in mods for p in m.parameters()}
    saved_grads = {pid: p.grad for pid, p in all_params.items()}
    try:
        for p in all_params.values():
            p.grad = None
        inputs, outputs, grads = _output_grads(names_l, mods, example_input, loss_fn, target)
        cases = [
            _Case(k, n, names_l, mod, inputs[k], grads[k], loss_fn, target)
            for k, mod in enumerate(mods)
        ]
        # The bytes first, one recorded pass per module.
        bytes_of: list[tuple[int, int]] = []
        for k, case in enumerate(cases):
            exclude = {_storage_key(p)[0] for p in case.mod.parameters()}
            exclude |= {_storage_key(b)[0] for b in case.mod.buffers()}
            rec = _SavedRecorder()
            _, _, _, held = _one_pass(case, rec, exclude)
            act, _ = rec.bytes(exclude)
            bytes_of.append((act, act if k == 0 else held))
        # The times in rounds over all modules (each round one F, I, W and fused B of every
        # module), so that a slow stretch of the machine falls on every module alike instead of
        # on the few timed during it.
        times: list[dict[str, list[float]]] = [{"f": [], "i": [], "w": [], "b": []} for _ in cases]
        for r in range(warmup + reps):
            for k, case in enumerate(cases):
                f, i, w, _ = _one_pass(case)
                # module 0's W is its whole backward already (the runtime's first stage)
                b = w if k == 0 else _fused_backward(case)
                if r >= warmup:
                    for key, v in (("f", f), ("i", i), ("w", w), ("b", b)):
                        times[k][key].append(v)
        layers: list[dict[str, Any]] = []
        for k, mod in enumerate(mods):
            params = list(mod.parameters())
            act, held = bytes_of[k]
            fs, is_, ws, bs = (times[k][key] for key in ("f", "i", "w", "b"))
            numel = sum(p.numel() for p in params)
            trainable = sum(p.numel() for p in params if p.requires_grad)
            layers.append(
                {
                    "name": names_l[k],
                    "f": statistics.median(fs),
                    "i": 0.0 if k == 0 else statistics.median(is_),
                    "w": statistics.median(ws),
                    "b": statistics.median(bs),
                    "act_bytes": act,
                    "act_after_i_bytes": held,
                    "input_bytes": _nbytes(inputs[k]),
                    "output_bytes": _nbytes(outputs[k]),
                    "param_bytes": sum(_nbytes(p) for p in params),
                    "grad_bytes": sum(_nbytes(p) for p in params if p.requires_grad),
                    "optimizer_bytes": int(round(optimizer_bytes_per_param * trainable)),
                    "params": numel,
                }
            )
    finally:
        for pid, p in all_params.items():
            p.grad = saved_grads[pid]
    for entry in layers:
        for key in LAYER_KEYS[1:]:
            v = float(entry[key])
            assert math.isfinite(v) and v >= 0, (entry["name"], key, v)
    table = {
        "format": FORMAT,
        "time_unit": "s",
        "microbatch_input_shape": list(example_input.shape),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__.split("+")[0],
        "device": example_input.device.type,
        "malloc": malloc_mode(),
        "layers": layers,
    }
    if out is not None:
        with open(out, "w") as fh:
            json.dump(table, fh, indent=1)
            fh.write("\n")
    return table
