"""Schedules in PyTorch's CSV form, without PyTorch.

`generate` asks the `tightpipe` binary for a schedule (`tightpipe schedule --format torch`);
`load` reads one from a file or text, has `tightpipe schedule --check` verify it (the same rules
PyTorch 2.15's loader applies, and more: every action's dependencies, a dry run, one REDUCE_GRAD per
stage after its last backward) and returns a `TorchSchedule`: the rows, the shape and the placement
read off the actions. A file that is damaged or truncated raises ScheduleFileError here, before
anything reaches PyTorch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from pathlib import Path

from tightpipe import _args, cli
from tightpipe.errors import ArgumentError, ArgumentTypeError, CliError, ScheduleFileError

# PyTorch 2.15's _ComputationType short strings, longest first where one starts another
# (torch/distributed/pipelining/schedules.py, the regex of _Action.from_str).
ACTION_TYPES = (
    "WAIT_REDUCE_GRAD",
    "WAIT_SEND_F",
    "WAIT_SEND_B",
    "REDUCE_GRAD",
    "UNSHARD",
    "RESHARD",
    "SEND_F",
    "RECV_F",
    "SEND_B",
    "RECV_B",
    "F",
    "I",
    "B",
    "W",
)
COMPUTE_TYPES = ("F", "I", "B", "W")
_SIMPLE = re.compile(r"(0|[1-9][0-9]*)(" + "|".join(ACTION_TYPES) + r")(0|[1-9][0-9]*)?")
_PAIR = re.compile(r"\(([^()]*)\)OVERLAP_F_B")


@dataclasses.dataclass(frozen=True)
class Action:
    """One simple action: stage, PyTorch's type string, microbatch (None for UNSHARD etc.)."""

    stage: int
    type: str
    microbatch: int | None

    def __str__(self) -> str:
        mb = "" if self.microbatch is None else str(self.microbatch)
        return f"{self.stage}{self.type}{mb}"


def parse_cell(cell: str, where: str = "") -> tuple[str, list[Action]]:
    """(the cell's type: a simple type or "OVERLAP_F_B", its simple actions); ScheduleFileError
    naming the cell when it is none (PyTorch itself would ignore trailing junk: we do not)."""
    _args.text("cell", cell, "one cell of a schedule row, e.g. '0F3'")
    text = cell.strip()
    pair = _PAIR.fullmatch(text)
    parts = pair.group(1).split(";") if pair else [text]
    actions = []
    for part in parts:
        m = _SIMPLE.fullmatch(part)
        if not m:
            raise ScheduleFileError(
                f"{where}'{cell}' is no action; hint: a cell is the stage, the type, then the "
                "microbatch (e.g. 0F3, 1SEND_B2, 0REDUCE_GRAD), or (a;b)OVERLAP_F_B"
            )
        stage, typ, mb = m.groups()
        actions.append(Action(int(stage), typ, None if mb is None else int(mb)))
    if pair and len(actions) != 2:
        raise ScheduleFileError(
            f"{where}'{cell}' holds {len(actions)} actions; hint: OVERLAP_F_B pairs exactly two"
        )
    return ("OVERLAP_F_B" if pair else actions[0].type), actions


@dataclasses.dataclass
class TorchSchedule:
    """A checked schedule in PyTorch's compute_comms form: `rows[r]` is rank r's list of cells."""

    rows: list[list[str]]
    num_stages: int
    num_microbatches: int
    stage_to_rank: list[int]
    action_types: set[str]
    source: str = "<text>"
    check_output: str = ""

    @property
    def num_ranks(self) -> int:
        return len(self.rows)

    def _rank(self, rank: int) -> int:
        return _args.count(
            "rank", rank, 0, self.num_ranks - 1, f"a rank of this {self.num_ranks}-rank schedule"
        )

    def stages_of(self, rank: int) -> list[int]:
        """The stages rank `rank` holds, in order (the placement: loop or V)."""
        self._rank(rank)
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]

    def text(self) -> str:
        return "".join(",".join(row) + "\n" for row in self.rows)

    def compute_order(self, rank: int) -> list[str]:
        """The rank's compute cells (F, I, B, W, pairs) in order, as written."""
        self._rank(rank)
        out = []
        for cell in self.rows[rank]:
            typ, _ = parse_cell(cell)
            if typ in COMPUTE_TYPES or typ == "OVERLAP_F_B":
                out.append(cell)
        return out


def parse(text: str, source: str = "<text>") -> TorchSchedule:
    """Reads the CSV text without checking it with the binary (see `load`)."""
    _args.text("text", text, "the CSV text; for a file use load(path)")
    _args.text("source", source, "the name errors give the text, e.g. 'zb.csv'")
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise ScheduleFileError(
            f"{source}: empty schedule file; hint: one row per rank, e.g. from "
            "`tightpipe schedule --format torch`"
        )
    rows: list[list[str]] = []
    owner: dict[int, int] = {}
    fwd: dict[int, set[int]] = {}
    types: set[str] = set()
    for r, line in enumerate(lines):
        row = []
        for c, cell in enumerate(line.split(",")):
            if not cell.strip():
                raise ScheduleFileError(
                    f"{source}:{r + 1}:{c + 1}: empty cell; hint: PyTorch's compute_comms form "
                    "has no idle cells (the file may be damaged)"
                )
            typ, actions = parse_cell(cell, f"{source}:{r + 1}:{c + 1}: ")
            types.add(typ)
            for a in actions:
                types.add(a.type)
                if a.type in COMPUTE_TYPES:
                    if a.microbatch is None:  # max() below compared None with ints (TypeError)
                        raise ScheduleFileError(
                            f"{source}:{r + 1}:{c + 1}: '{cell}' has no microbatch; hint: a "
                            f"compute action names it, e.g. {a.stage}{a.type}0"
                        )
                    if owner.setdefault(a.stage, r) != r:
                        raise ScheduleFileError(
                            f"{source}:{r + 1}:{c + 1}: '{cell}' puts stage {a.stage} on rank {r}, "
                            f"but an earlier row put it on rank {owner[a.stage]}; hint: each stage "
                            "lives on exactly one rank"
                        )
                    if a.type == "F":
                        fwd.setdefault(a.stage, set()).add(a.microbatch)
            row.append(cell.strip())
        rows.append(row)
    num_stages = max(owner) + 1 if owner else 0
    missing = [s for s in range(num_stages) if s not in owner]
    if not owner or missing:
        raise ScheduleFileError(
            f"{source}: stages {missing or 'all'} have no compute action; hint: the file may be "
            "truncated"
        )
    num_mb = max(max(v) for v in fwd.values()) + 1
    return TorchSchedule(
        rows=rows,
        num_stages=num_stages,
        num_microbatches=num_mb,
        stage_to_rank=[owner[s] for s in range(num_stages)],
        action_types=types,
        source=source,
    )


def _binary(binary: str | os.PathLike[str] | None) -> str | None:
    """None (find_binary) or an executable file."""
    if binary is None:
        return None
    return _args.executable(
        "binary",
        binary,
        "the tightpipe binary's path, or leave binary out "
        "to use $TIGHTPIPE_BIN, the bundled one or PATH",
    )


def check_text(
    text: str, source: str = "<text>", *, binary: str | os.PathLike[str] | None = None
) -> str:
    """Runs `tightpipe schedule --check` on the text; its stdout, or ScheduleFileError."""
    _args.text("text", text, "the CSV text; for a file use load(path)")
    _args.text("source", source, "the name errors give the text, e.g. 'zb.csv'")
    binary = _binary(binary)
    with tempfile.TemporaryDirectory(prefix="tightpipe-") as tmp:
        path = os.path.join(tmp, Path(source).name if source != "<text>" else "schedule.csv")
        with open(path, "w", newline="") as f:
            f.write(text)
        try:
            return cli.run(["schedule", "--check", path], binary=binary)
        except CliError as e:
            raise ScheduleFileError(
                f"{source}: refused by tightpipe schedule --check: {e}"
            ) from None


def load(
    path_or_text: str | os.PathLike[str], *, binary: str | os.PathLike[str] | None = None
) -> TorchSchedule:
    """Reads a schedule from a file path, or from CSV text (anything holding a newline or a
    comma), and checks it with `tightpipe schedule --check`. Raises ScheduleFileError (a file
    that cannot be read, is not text, or is refused), ArgumentTypeError."""
    if isinstance(path_or_text, bytes):
        raise ArgumentTypeError(
            f"path_or_text {_args.show(path_or_text)}: must be a str or os.PathLike, not bytes; "
            "hint: decode the CSV text first (data.decode()), or pass the file's path"
        )
    s = _args.path(
        "path_or_text",
        path_or_text,
        "a schedule file's path, or its CSV text (from `tightpipe schedule --format torch`)",
    )
    binary = _binary(binary)
    if "\n" in s or "," in s:
        text, source = s, "<text>"
    else:
        hint = "write one with `tightpipe schedule --format torch --out FILE`"
        if not os.path.exists(s):
            raise ScheduleFileError(f"cannot read schedule file '{s}': no such file; hint: {hint}")
        text = _args.read_text(s, "cannot read schedule file", hint, ScheduleFileError)
        source = s
    sched = parse(text, source)
    sched.check_output = check_text(text, source, binary=binary)
    return sched


def generate(
    name: str,
    pp: int,
    microbatches: int,
    *,
    vpp: int | None = None,
    cost: str | None = None,
    costs: str | os.PathLike[str] | None = None,
    memory_limit: float | None = None,
    binary: str | os.PathLike[str] | None = None,
) -> TorchSchedule:
    """`tightpipe schedule --schedule NAME --pp P --microbatches M --format torch` (plus --vpp,
    --cost, --costs, --memory-limit when given), checked and parsed. Its arguments are checked
    here first (ArgumentTypeError, ArgumentError: the binary's limits), then the binary's
    refusals raise CliError."""
    _args.word(
        "name",
        name,
        "a schedule name, e.g. '1f1b', 'zb-h1', 'zb-v', 'interleaved' "
        "(`tightpipe schedule --help` lists them)",
    )
    pp = _args.count("pp", pp, 1, _args.MAX_RANKS, "the number of pipeline ranks, e.g. pp=4")
    microbatches = _args.count(
        "microbatches",
        microbatches,
        1,
        _args.MAX_MICROBATCHES,
        "microbatches per step, e.g. microbatches=8 (at least pp for most schedules)",
    )
    if vpp is not None:
        vpp = _args.count(
            "vpp",
            vpp,
            1,
            _args.MAX_CHUNKS,
            "stages (chunks) per rank, e.g. vpp=2; leave it out for the schedule's default",
        )
        if pp * vpp > _args.MAX_STAGES:
            raise ArgumentError(
                f"pp x vpp {pp} x {vpp}: {pp * vpp} stages, must be at most {_args.MAX_STAGES}; "
                "hint: fewer ranks or fewer chunks per rank"
            )
    if cost is not None:
        _args.word("cost", cost, "uniform costs such as 'f=1,i=1,w=1' (docs/cost_model.md)")
    if costs is not None:
        costs = _args.existing_file(
            "costs", costs, "a per-stage cost table, JSON (docs/cost_model.md)"
        )
    if cost is not None and costs is not None:
        raise ArgumentError(
            f"cost {_args.show(cost)} and costs '{costs}': give one of them; hint: cost= for "
            "uniform costs, costs= for a per-stage table"
        )
    if memory_limit is not None:
        memory_limit = _args.number(
            "memory_limit",
            memory_limit,
            _args.MIN_MEMORY_LIMIT,
            math.inf,
            "whole-rank microbatch activations a rank may hold, e.g. memory_limit=pp (1F1B's "
            "memory); zb-auto and zb-v-auto take it",
        )
    binary = _binary(binary)
    args = ["schedule", "--schedule", name, "--pp", str(pp), "--microbatches", str(microbatches)]
    if vpp is not None:
        args += ["--vpp", str(vpp)]
    if cost is not None:
        args += ["--cost", cost]
    if costs is not None:
        args += ["--costs", os.fspath(costs)]
    if memory_limit is not None:
        args += ["--memory-limit", f"{memory_limit:g}"]
    text = cli.run(args + ["--format", "torch"], binary=binary)
    sched = parse(text, f"{name}-p{pp}-m{microbatches}.csv")
    sched.check_output = check_text(text, sched.source, binary=binary)
    return sched
