// Shared by the subcommands that take a schedule: a registry name with a shape, or a CSV/JSON
// file of the user's own.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tightpipe/schedule.h"

namespace tightpipe::cli {

struct ScheduleFlags {
  std::string schedule = "1f1b";  // registry name, or a .csv / .json file
  int32_t pp = 4;                 // pipeline ranks
  int32_t microbatches = 8;       // microbatches per step
  int32_t vpp = 0;                // chunks per rank (0: the schedule's default)
  int32_t group_size = 0;         // interleaved microbatch group size (0: --pp)
};

// Adds --schedule, --pp, --microbatches, --vpp, --microbatch-group-size with Megatron's
// spellings as aliases.
void add_schedule_flags(CLI::App& app, ScheduleFlags& flags);

// Generates (or loads and validates) the compute-only schedule the flags name.
Result<Schedule> load_schedule(const ScheduleFlags& flags);

}  // namespace tightpipe::cli
