"""Emulated layers: each layer's F, I and W sleep their measured durations, with real (small)
tensors and real gradients, so that a pipeline of p = 4 or 8 processes runs on 2 cores and its
step is read free of CPU load, while PyTorch's own split backward still decides what runs in I
and what in W.

    table = measure_layers(model, tokens, loss_fn=loss_fn, target=targets)   # or a JSON file
    layers = emulated_modules(table, vocab=64)       # one EmulatedLayer per measured layer
    stage0 = nn.Sequential(*layers[:3])              # cut into stages as the real model would be

How each phase sleeps (PyTorch 2.15, torch/distributed/pipelining/_backward.py):
* F: `forward` sleeps f.
* I: the input path goes through `SleepBackward` (an autograd.Function whose backward sleeps i);
  `stage_backward_input` computes the gradient of the stage input and runs it.
* W: a one-element-per-channel parameter `scale` goes through its own `SleepBackward` (sleeping
  w) on the parameter-only path before it multiplies the activation. `stage_backward_input`'s
  parameter groups stop at that multiplication (the node where the parameter path joins the
  input path), so the input backward never runs the parameter's sleep, and
  `stage_backward_weight` runs it from there.
* The pipeline's first stage: PyTorch's runtime runs no input backward there and the whole
  backward in W, so there its I is empty and its W sleeps the stage's i + w (as for real layers).
`time.sleep` releases the GIL and the core: 8 sleeping processes do not contend for 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn


class _Sleeper:
    """Sleeps that last what they are asked, on average: `time.sleep` overshoots by the timer's
    slack plus the wait for a core (on this project's 2-core KVM machine about 0.14 ms alone and
    0.4-0.5 ms with 8 pipeline processes), which would add an emulation error to every layer.
    Each process keeps its mean overshoot (a running correction, the integral of the errors) and
    sleeps that much less. A correction is at most MAX_BIAS and each error counts at most
    MAX_BIAS, so a stall of the machine (a sleep overrunning by a second) does not make the next
    sleeps short; a sleep is never shortened by more than half."""

    MAX_BIAS = 0.002  # seconds

    def __init__(self) -> None:
        self.bias = 0.0

    def __call__(self, seconds: float) -> None:
        t0 = time.perf_counter()
        time.sleep(seconds - min(self.bias, 0.5 * seconds))
        err = time.perf_counter() - t0 - seconds
        err = min(max(err, -self.MAX_BIAS), self.MAX_BIAS)
        self.bias = min(max(0.0, self.bias + 0.25 * err), self.MAX_BIAS)


_sleep = _Sleeper()


class SleepBackward(torch.autograd.Function):
    """Identity forward (a copy); the backward sleeps `seconds`, then passes the gradient on."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.seconds > 0:
            _sleep(ctx.seconds)
        return grad, None


def _seconds(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(
            f"EmulatedLayer: {name}={v!r} must be a finite number of seconds >= 0; "
            "hint: the layer's measured duration, e.g. from measure_layers"
        )
    return float(v)


class EmulatedLayer(nn.Module):
    """A layer whose forward sleeps `f` seconds, whose input-gradient backward sleeps `i` and
    whose weight-gradient backward sleeps `w`. Activations are real tensors of `shape`
    (e.g. (B, T, 8)); gradients are real.

    first: the layer takes the model's input (integer tokens of shape shape[:-1]) and maps it to
    the activation through an embedding table of `vocab` rows (tokens taken modulo vocab).
    last: the layer returns logits (*shape[:-1], vocab) through a (C, vocab) matrix, for a
    cross-entropy loss on the tokens (tightpipe.torch.gpt.loss_fn); otherwise it returns the
    activation."""

    def __init__(
        self,
        f: float,
        i: float,
        w: float,
        shape: Sequence[int],
        *,
        first: bool = False,
        last: bool = False,
        vocab: int = 64,
        name: str = "",
    ):
        super().__init__()
        self.f, self.i, self.w = _seconds("f", f), _seconds("i", i), _seconds("w", w)
        if (
            isinstance(shape, (str, bytes))
            or not isinstance(shape, Sequence)
            or not shape
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in shape)
        ):
            raise ValueError(
                f"EmulatedLayer: shape={shape!r} must be a non-empty sequence of "
                "ints >= 1; hint: the activation's shape, e.g. (B, T, 8)"
            )
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
            raise ValueError(
                f"EmulatedLayer: vocab={vocab!r} must be an int >= 1; hint: the "
                "model's vocabulary, e.g. 64"
            )
        self.shape = tuple(shape)
        self.first, self.last = bool(first), bool(last)
        self.vocab = vocab
        self.name = name
        c = self.shape[-1]
        g = torch.Generator().manual_seed(len(name) + 7 * c)
        self.table = nn.Parameter(torch.randn(vocab, c, generator=g) * 0.1) if first else None
        self.scale = nn.Parameter(torch.ones(c))
        self.out = nn.Parameter(torch.randn(c, vocab, generator=g) * 0.1) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.table is not None:
            if tuple(x.shape) != self.shape[:-1] or x.is_floating_point():
                raise ValueError(
                    f"EmulatedLayer '{self.name}': input {tuple(x.shape)} "
                    f"{x.dtype}, expected integer tokens {self.shape[:-1]}; hint: "
                    "the first layer takes the model's input"
                )
            h = self.table[x.long().remainder(self.table.shape[0])]
        else:
            if tuple(x.shape) != self.shape:
                raise ValueError(
                    f"EmulatedLayer '{self.name}': input {tuple(x.shape)}, expected "
                    f"{self.shape}; hint: every layer of one emulated model has the "
                    "same activation shape"
                )
            h = x
        if self.f > 0:
            _sleep(self.f)
        h = SleepBackward.apply(h, self.i)  # input path: runs in I
        s = SleepBackward.apply(self.scale, self.w)  # parameter-only path: runs in W
        y = h * s
        if self.out is not None:
            y = y @ self.out  # (*shape[:-1], vocab)
        out: torch.Tensor = y
        return out

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, f={self.f}, i={self.i}, w={self.w}, shape={self.shape}, "
            f"first={self.first}, last={self.last}, vocab={self.vocab}"
        )


def emulated_modules(
    layers_json: Mapping[str, Any] | str | os.PathLike[str], *, width: int = 8, vocab: int = 64
) -> list[nn.Module]:
    """One EmulatedLayer per entry of a tightpipe-layers/1 table (measure_layers' result or
    the file it wrote), sleeping its f, i and w. Activations are (*microbatch_input_shape,
    width); the first layer takes the tokens (< vocab), the last returns logits over `vocab`.
    The names are the table's, on each layer's `name`."""
    if isinstance(layers_json, (str, os.PathLike)):
        path = os.fspath(layers_json)
        try:
            with open(path) as f:
                table = json.load(f)
        except OSError as e:
            raise ValueError(
                f"layers_json='{path}': {e.strerror or e}; hint: the file "
                "measure_layers(..., out=) wrote"
            ) from None
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(
                f"layers_json='{path}': not JSON ({str(e).splitlines()[0]}); hint: "
                "the file measure_layers(..., out=) wrote"
            ) from None
        src = f"layers_json='{path}'"
    elif isinstance(layers_json, Mapping):
        table, src = layers_json, "layers_json"
    else:
        raise TypeError(
            f"layers_json is a {type(layers_json).__name__}; hint: the dict "
            "measure_layers returns or the path of the file it wrote"
        )
    if not isinstance(table, Mapping) or table.get("format") != "tightpipe-layers/1":
        got = table.get("format") if isinstance(table, Mapping) else type(table).__name__
        raise ValueError(
            f"{src}: format {got!r}, expected 'tightpipe-layers/1'; hint: the "
            "output of measure_layers"
        )
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width={width!r} must be an int >= 1; hint: e.g. width=8")
    shape_in = table.get("microbatch_input_shape")
    layers = table.get("layers")
    if (
        not isinstance(shape_in, list)
        or not shape_in
        or not all(isinstance(n, int) and n >= 1 for n in shape_in)
    ):
        raise ValueError(
            f"{src}: microbatch_input_shape={shape_in!r}, expected a list of ints "
            ">= 1; hint: the output of measure_layers"
        )
    if not isinstance(layers, list) or not layers:
        raise ValueError(f"{src}: no layers; hint: the output of measure_layers")
    if table.get("time_unit") != "s":
        raise ValueError(
            f"{src}: time_unit={table.get('time_unit')!r}, expected 's'; hint: "
            "the output of measure_layers"
        )
    shape = (*shape_in, width)
    n = len(layers)
    mods: list[nn.Module] = []
    for k, entry in enumerate(layers):
        if not isinstance(entry, Mapping) or any(
            key not in entry for key in ("name", "f", "i", "w")
        ):
            raise ValueError(
                f"{src}: layers[{k}] lacks name, f, i or w; hint: the output of measure_layers"
            )
        try:
            mods.append(
                EmulatedLayer(
                    entry["f"],
                    entry["i"],
                    entry["w"],
                    shape,
                    first=k == 0,
                    last=k == n - 1,
                    vocab=vocab,
                    name=str(entry["name"]),
                )
            )
        except ValueError as err:
            raise ValueError(f"{src}: layers[{k}] ('{entry['name']}'): {err}") from None
    return mods
