// fault_train: a tiny emulated-compute training run (testutil::tiny_emulated_options) through
// run_training with one injected failure (tests/testutil/fault_transport.h), for failure_test to
// launch under mpirun:
//
//   mpirun -np 3 fault_train --transport mpi --pp 3 --fault kill:1:18
//
// Every rank that ends with an error prints one "fault_train: error: ..." line on stderr and
// exits 1 the way tightpipe's main does (fail_launched_job, transport_mpi.h): under mpirun it
// first lingers so that the other survivors report too, and under --enable-recovery it makes
// mpirun exit non-zero.
#include <cstdio>
#include <cstdlib>

#include "bench_cli.h"
#include "fault_transport.h"
#include "tightpipe/trainer.h"
#include "tightpipe/transport_mpi.h"
#include "tiny_train.h"

int main(int argc, char** argv) {
  using namespace tightpipe;
  bench::Flags flags("tiny emulated training run with one injected failure", "fault_train");
  std::string transport = "threads", schedule = "1f1b", fault;
  int32_t pp = 3;
  double timeout_s = 2;
  flags.option("--transport", transport, "threads or mpi").show_default();
  flags.option("--pp", pp, "pipeline ranks").show_default();
  flags.option("--schedule", schedule, "schedule name").show_default();
  flags
      .option("--fault", fault,
              "stall:RANK:SENDS:SECONDS, kill:RANK:SENDS[:EXIT_CODE] or sigkill:RANK:SENDS")
      .required();
  flags.option("--timeout", timeout_s, "seconds a rank waits for a peer").show_default();
  std::string data_path;
  flags.option("--data-path", data_path,
               "real compute of the tiny model on this text file (default: emulated compute)");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;

  auto run = [&]() -> Status {
    TrainOptions o = testutil::tiny_emulated_options(pp, schedule);
    o.exec.timeout_s = timeout_s;
    if (!data_path.empty()) {  // real gradients: data-parallel runs reduce them
      o.exec.emulated = false;
      o.data.path = data_path;
    }
    TP_ASSIGN_OR_RETURN(o.world.kind, parse_transport_kind(transport));
    TP_ASSIGN_OR_RETURN(testutil::FaultOptions f, testutil::parse_fault(fault));
    o.world.wrap = testutil::fault_wrapper(f);
    return run_training(o).status();
  };
  const Status s = run();
  if (s.ok()) {
    std::printf("fault_train: ok\n");
    return 0;
  }
  std::fprintf(stderr, "fault_train: error: %s\n", s.message().c_str());
  std::fflush(stderr);
  const Status launcher = fail_launched_job();
  if (!launcher.ok()) std::fprintf(stderr, "fault_train: note: %s\n", launcher.message().c_str());
  if (ranks_left_running()) std::_Exit(1);  // as tightpipe's main: a stuck rank still runs
  return 1;
}
