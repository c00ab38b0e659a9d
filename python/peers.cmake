# The peer tests (issue 44, docs/peers.md): Megatron-Core's and DeepSpeed's real pipeline
# schedules on CPU processes beside tightpipe's generators, simulator and report. Label `python`;
# python/run-peers-tests.sh exits 77 with a loud line when the environment or the peers are
# missing (ctest: skipped). Each test spawns its engine's processes once per p and loops inside.
function(tp_add_peers_test name)
  add_test(NAME ${name} COMMAND ${CMAKE_CURRENT_LIST_DIR}/run-peers-tests.sh ${ARGN})
  set_tests_properties(${name} PROPERTIES
    LABELS python
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    PROCESSORS 2
    ENVIRONMENT "TIGHTPIPE_BIN=$<TARGET_FILE:tightpipe>")
endfunction()

# No process: bad input refused in one line (cost table, version, schedule, p = 2 batched).
tp_add_peers_test(python_peers_bad_input tests/test_peers_bad_input.py)
# Megatron-Core: orders at p = 2 and 4 (1F1B, interleaved with groups), m = p .. 4p; at p = 4 the
# timed runs: step inside bounds from its own durations, `tightpipe report` vs the harness.
tp_add_peers_test(python_peers_megatron tests/test_peers_orders.py tests/test_peers_timing.py
  -k megatron)
# DeepSpeed: the same for its PipelineEngine (1F1B).
tp_add_peers_test(python_peers_deepspeed tests/test_peers_orders.py tests/test_peers_timing.py
  -k deepspeed)
