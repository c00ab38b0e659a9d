// tightpipe schedule: generate, print, lower and check pipeline schedules.
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "schedule_source.h"
#include "tightpipe/base.h"

namespace tightpipe::cli {

int cmd_schedule(int argc, char** argv) {
  CLI::App app(
      "Generate a pipeline schedule and print it as a grid, CSV (PyTorch's layout) or "
      "JSON; or check a schedule file of your own (--check). zb-auto, zb-1p, zb-2p and "
      "zb-v-auto are built from the costs (--cost, --costs, --model) under "
      "--memory-limit.",
      "tightpipe schedule");
  ScheduleFlags flags;
  add_schedule_flags(app, flags);
  add_cost_flags(app, flags.costs);
  add_zb_auto_flags(app, flags.zb);
  bool lowered = false;
  std::string format = "grid", out, check;
  bool list = false;
  app.add_flag("--lowered", lowered, "insert the SEND/RECV actions (what each rank really runs)");
  app.add_option("--format", format, "output format")
      ->check(CLI::IsMember({"grid", "csv", "json"}))
      ->capture_default_str();
  app.add_option("--out", out, "write to this file instead of standard output");
  app.add_option("--check", check,
                 "validate a schedule file (.csv in PyTorch's layout, or .json): per-action rules, "
                 "SEND/RECV matching, and a dry run proving it cannot deadlock");
  app.add_flag("--list", list, "list the known schedules");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  if (list) {
    for (const auto& g : schedule_generators()) {
      std::printf("%-12s %s\n", g.name.c_str(), g.summary.c_str());
    }
    std::printf("%-12s %s\n", "zb-auto",
                "zero-bubble, v=1, built from the costs under --memory-limit (default p)");
    std::printf("%-12s %s\n", "zb-1p", "zb-auto with --memory-limit p (1F1B's memory)");
    std::printf("%-12s %s\n", "zb-2p", "zb-auto with --memory-limit 2p");
    std::printf("%-12s %s\n", "zb-v-auto",
                "zero-bubble, V placement (v=2, as zb-v), built from the costs under "
                "--memory-limit (default p)");
    std::printf("%-12s %s\n", "v-half",
                "zb-v-auto with --memory-limit (p+2)/2 (V-Half, Qi et al. 2024)");
    std::printf("%-12s %s\n", "v-min",
                "zb-v-auto with --memory-limit (p+4)/3 (V-Min, Qi et al. 2024)");
    return kExitOk;
  }
  if (!check.empty()) {
    auto s = load_schedule_file(check);
    if (!s.ok()) return report_error("schedule", s.status());
    std::printf(
        "%s: valid %sschedule, %d ranks, %d stages, %d microbatches, %zu actions; dry run "
        "finishes (no deadlock)\n",
        check.c_str(), s->lowered ? "lowered " : "", s->num_ranks, s->num_stages,
        s->num_microbatches, s->size());
    if (!s->lowered) {
      auto low = lower(*s);
      if (!low.ok()) return report_error("schedule", low.status());
      TP_CHECK(validate(*low).ok(), validate(*low).message());
      std::printf("lowering adds %zu SEND/RECV actions; the lowered schedule is valid\n",
                  low->size() - s->size());
    }
    return kExitOk;
  }

  auto sch = load_schedule(flags);
  if (!sch.ok()) return report_error("schedule", sch.status());
  Schedule s = std::move(sch).value();
  if (lowered) {
    auto low = lower(s);
    if (!low.ok()) return report_error("schedule", low.status());
    s = std::move(low).value();
  }
  if (Status st = validate(s); !st.ok()) return report_error("schedule", st);
  std::string text;
  if (format == "csv") {
    text = to_csv(s);
  } else if (format == "json") {
    text = to_json(s);
  } else {
    text = fmt::format("{}: p={} stages={} m={} v={}{}{} ({} actions)\n{}", s.name, s.num_ranks,
                       s.num_stages, s.num_microbatches, s.chunks(),
                       s.directions != 1 ? fmt::format(" directions={}", s.directions) : "",
                       s.lowered ? " lowered" : "", s.size(), format_grid(s));
  }
  if (out.empty()) {
    std::fputs(text.c_str(), stdout);
  } else if (Status st = write_file(out, text); !st.ok()) {
    return report_error("schedule", st.with_context("--out"));
  }
  return kExitOk;
}

}  // namespace tightpipe::cli
