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
import os
import re
import tempfile
from pathlib import Path

from tightpipe import cli
from tightpipe.errors import CliError, ScheduleFileError

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

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]

    def text(self) -> str:
        return "".join(",".join(row) + "\n" for row in self.rows)

    def compute_order(self, rank: int) -> list[str]:
        """The rank's compute cells (F, I, B, W, pairs) in order, as written."""
        out = []
        for cell in self.rows[rank]:
            typ, _ = parse_cell(cell)
            if typ in COMPUTE_TYPES or typ == "OVERLAP_F_B":
                out.append(cell)
        return out


def parse(text: str, source: str = "<text>") -> TorchSchedule:
    """Reads the CSV text without checking it with the binary (see `load`)."""
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


def check_text(text: str, source: str = "<text>", *, binary: str | None = None) -> str:
    """Runs `tightpipe schedule --check` on the text; its stdout, or ScheduleFileError."""
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


def load(path_or_text: str | os.PathLike[str], *, binary: str | None = None) -> TorchSchedule:
    """Reads a schedule from a file path, or from CSV text (anything holding a newline or a
    comma), and checks it with `tightpipe schedule --check`. Raises ScheduleFileError."""
    s = os.fspath(path_or_text)
    if "\n" in s or "," in s:
        text, source = s, "<text>"
    else:
        try:
            text = Path(s).read_text()
        except OSError as e:
            raise ScheduleFileError(
                f"cannot read schedule file '{s}': {e.strerror}; hint: write one with "
                "`tightpipe schedule --format torch --out FILE`"
            ) from None
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
    binary: str | None = None,
) -> TorchSchedule:
    """`tightpipe schedule --schedule NAME --pp P --microbatches M --format torch` (plus --vpp,
    --cost, --costs, --memory-limit when given), checked and parsed."""
    args = ["schedule", "--schedule", name, "--pp", str(pp), "--microbatches", str(microbatches)]
    if vpp is not None:
        args += ["--vpp", str(vpp)]
    if cost is not None:
        args += ["--cost", cost]
    if costs is not None:
        args += ["--costs", os.fspath(costs)]
    if memory_limit is not None:
        args += ["--memory-limit", str(memory_limit)]
    text = cli.run(args + ["--format", "torch"], binary=binary)
    sched = parse(text, f"{name}-p{pp}-m{microbatches}.csv")
    sched.check_output = check_text(text, sched.source, binary=binary)
    return sched
