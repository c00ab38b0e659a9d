// tightpipe report RUN_DIR: the bubble report of a training run (report.h, docs/report.md).
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "tightpipe/report.h"

namespace tightpipe::cli {

int cmd_report(int argc, char** argv) {
  CLI::App app(
      "Bubble report of a training run (the --out-dir of `tightpipe train`): idle time per rank "
      "and cause, measured vs predicted (the simulator replays the same schedule with the run's "
      "measured costs), what-if schedules; writes report.html, trace.json and costs.json.",
      "tightpipe report");
  std::string run_dir, out_dir, what_if;
  bool quiet = false;
  app.add_option("RUN_DIR", run_dir, "directory written by `tightpipe train --out-dir`")
      ->required();
  app.add_option("--out", out_dir,
                 "where to write report.html, trace.json, costs.json "
                 "(default: RUN_DIR)");
  app.add_option("--what-if", what_if,
                 "re-simulate the measured costs under other schedules, e.g. "
                 "zb-h1,zb-v,interleaved:2 (name:v sets the chunks); zb-auto, zb-1p, zb-2p, "
                 "zb-v-auto are built from the run's costs; NAME@auto costs the candidate with "
                 "the layer split --pipeline-layout auto would choose");
  app.add_flag("--quiet", quiet, "no terminal table");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  ReportOptions opt;
  if (!what_if.empty()) {
    auto w = parse_what_if(what_if);
    if (!w.ok()) return report_error("report", w.status());
    opt.what_if = std::move(*w);
  }
  auto rep = build_report(run_dir, opt);
  if (!rep.ok()) return report_error("report", rep.status());
  if (out_dir.empty()) out_dir = run_dir;
  if (Status st = write_report(*rep, out_dir); !st.ok()) return report_error("report", st);
  if (!quiet) std::fputs(format_report_text(*rep).c_str(), stdout);
  std::printf("\nwrote %s/report.html, %s/report.json, %s/trace.json%s\n", out_dir.c_str(),
              out_dir.c_str(), out_dir.c_str(),
              rep->run.costs ? fmt::format(", {}/costs.json", out_dir).c_str() : "");
  return kExitOk;
}

}  // namespace tightpipe::cli
