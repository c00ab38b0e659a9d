"""The engines' own pipeline schedules run on CPU beside tightpipe's simulator (issue 44).

`tightpipe.peers.megatron` runs Megatron-Core's `forward_backward_pipelining_without_interleaving`
and `..._with_interleaving`; `tightpipe.peers.deepspeed` runs DeepSpeed's
`PipelineEngine.train_batch`. Each spawns p CPU processes over gloo, gives every stage a forward
and a backward of emulated duration from a tightpipe cost table (costs.json), and writes a run
directory (`timeline_rank<R>.jsonl`, `summary.json`, `costs.json`, `schedule.csv`) that
`tightpipe report` reads. docs/peers.md has the layout, the orders and the timings.
"""

from tightpipe.peers.common import CostTable, PeerError, PeerRun, RunSpec, load_costs, make_costs

__all__ = ["CostTable", "PeerError", "PeerRun", "RunSpec", "load_costs", "make_costs"]
