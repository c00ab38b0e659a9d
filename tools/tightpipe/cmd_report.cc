// tightpipe report RUN_DIR | TRACE...: the bubble report of a training run of ours (report.h,
// docs/report.md) or of another engine's GPU run from its profiler traces (gpu_trace.h,
// docs/gpu_trace.md). The inputs are told apart by their content.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "commands.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/input_file.h"
#include "tightpipe/output_file.h"
#include "tightpipe/report.h"

namespace tightpipe::cli {

namespace {

// The traces' measured step and per-rank bubble beside a prediction made before the run: a
// tune.json ("prediction": step_s, ranks[].bubble_ratio) or a simulate --json / prediction.json
// (makespan, per_rank[].bubble_ratio). The measured ones: the pipeline's measured step (the
// median over steps of the longest rank window) and each rank's median step bubble (idle /
// window, docs/gpu_trace.md). Returns (the text, the JSON).
Result<std::pair<std::string, std::string>> prediction_check(const GpuTraceReport& rep,
                                                             const std::string& path) {
  auto text = read_input_file("--prediction", path, input_kind::kConfig);
  if (!text.ok()) return text.status();
  const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
  const auto bad = [&](std::string_view why) {
    return Status::invalid_argument(fmt::format(
        "--prediction {}: {}; hint: the tune.json of `tightpipe tune --out`, or `tightpipe "
        "simulate --json` output",
        printable(path), why));
  };
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  const nlohmann::json& p = doc.contains("prediction") ? doc["prediction"] : doc;
  const char* step_key = p.contains("step_s") ? "step_s" : "makespan";
  const char* ranks_key = p.contains("ranks") && p["ranks"].is_array() ? "ranks" : "per_rank";
  if (!p.contains(step_key) || !p[step_key].is_number()) return bad("no predicted step");
  if (!p.contains(ranks_key) || !p[ranks_key].is_array()) return bad("no per-rank prediction");
  const double predicted_step = p[step_key].get<double>();
  std::vector<double> predicted;
  for (const auto& r : p[ranks_key]) {
    if (!r.is_object() || !r.contains("bubble_ratio") || !r["bubble_ratio"].is_number()) {
      return bad("a rank without bubble_ratio");
    }
    predicted.push_back(r["bubble_ratio"].get<double>());
  }
  if (predicted.size() != rep.ranks.size()) {
    return bad(fmt::format("{} ranks predicted, {} traced", predicted.size(), rep.ranks.size()));
  }
  if (!rep.pipeline || rep.pipeline->measured_step_s <= 0) {
    return Status::invalid_argument(
        "--prediction needs the pipeline analysis of the traces; hint: give --pp and "
        "--schedule-file as the run ran");
  }
  const double measured_step = rep.pipeline->measured_step_s;
  std::string out = fmt::format(
      "\nmeasured against the prediction made before the run ({}):\n  step {:.4g} ms measured, "
      "{:.4g} ms predicted ({:+.1f}%)\n",
      printable(path), 1e3 * measured_step, 1e3 * predicted_step,
      100 * (predicted_step / measured_step - 1));
  nlohmann::json j;
  j["prediction"] = path;
  j["measured_step_s"] = measured_step;
  j["predicted_step_s"] = predicted_step;
  j["ranks"] = nlohmann::json::array();
  for (size_t r = 0; r < rep.ranks.size(); ++r) {
    std::vector<double> b;
    for (const GpuStepReport& st : rep.ranks[r].steps) b.push_back(st.usage.bubble_ratio);
    if (b.empty()) b.push_back(rep.ranks[r].usage.bubble_ratio);
    std::sort(b.begin(), b.end());
    const double measured = b[b.size() / 2];
    out += fmt::format("  rank {}: bubble {:.1f}% measured, {:.1f}% predicted\n", r, 100 * measured,
                       100 * predicted[r]);
    j["ranks"].push_back({{"rank", r},
                          {"measured_bubble_ratio", measured},
                          {"predicted_bubble_ratio", predicted[r]}});
  }
  return std::pair{out, j.dump(2) + "\n"};
}

}  // namespace

int cmd_report(int argc, char** argv) {
  CLI::App app(
      "Bubble report of a training run: a `tightpipe train --out-dir` directory (idle time per "
      "rank and cause, measured vs predicted, what-if schedules), or another engine's GPU run "
      "from its PyTorch profiler traces (.json, .json.gz) or Nsight Systems SQLite exports, one "
      "file per rank (window, busy, idle, compute, communication, exposed communication per rank "
      "and ProfilerStep). Writes report.html, report.json and report-trace.json.",
      "tightpipe report");
  std::vector<std::string> inputs;
  std::string out_dir, what_if;
  bool quiet = false;
  GpuPipelineSpec pipe;
  app.add_option("INPUT", inputs,
                 "a directory written by `tightpipe train --out-dir`, or trace files (one per "
                 "rank)")
      ->required();
  app.add_option("--out", out_dir,
                 "where to write report.html, report.json, report-trace.json (default: RUN_DIR; "
                 "required for trace files)");
  app.add_option("--what-if", what_if,
                 "re-simulate the measured costs under other schedules, e.g. "
                 "zb-h1,zb-v,interleaved:2 (name:v sets the chunks); for a run directory also "
                 "zb-auto, zb-1p, zb-2p, zb-v-auto (built from the run's costs) and NAME@auto (the "
                 "layer split --pipeline-layout auto would choose)");
  app.add_option("--pp,--pipeline-model-parallel-size", pipe.pp,
                 "trace files: the run was pipelined over this many ranks (the traces are its "
                 "stages in rank order): fill, drain and dependency wait, and the what-if");
  app.add_option("--schedule", pipe.schedule,
                 "trace files: the schedule that ran (1f1b, interleaved, gpipe, zb-h1...)");
  app.add_option("--vpp,--virtual-pipeline-model-parallel-size", pipe.vpp,
                 "trace files: model chunks per rank (interleaved schedules)");
  app.add_option("--num-microbatches", pipe.microbatches, "trace files: microbatches per step");
  app.add_option("--schedule-file", pipe.schedule_file,
                 "trace files: the schedule that ran as a CSV (instead of --schedule, --vpp, "
                 "--num-microbatches)");
  std::string prediction_path;
  app.add_option("--prediction", prediction_path,
                 "trace files: the tune.json (tightpipe tune --out) or prediction.json the run "
                 "was predicted by: its step and per-rank bubble beside the measured ones");
  app.add_flag("--quiet", quiet, "no terminal table");
  std::string engine = "tightpipe";
  add_engine_flag(app, engine, "the what-if (tightpipe: as the run ran)");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto en = parse_engine(engine);
  if (!en.ok()) return report_error("report", en.status());
  pipe.engine = *en;

  auto kind = detect_report_input(inputs.front());
  if (!kind.ok()) return report_error("report", kind.status());
  if (*kind == ReportInput::kRunDir) {
    if (inputs.size() > 1) {
      return report_error("report", Status::invalid_argument(fmt::format(
                                        "report: '{}' is a run directory and more inputs follow; "
                                        "hint: report one run directory at a time",
                                        inputs.front())));
    }
    if (pipe.pp > 0 || !pipe.schedule.empty() || !pipe.schedule_file.empty()) {
      return report_error(
          "report", Status::invalid_argument(
                        "report: --pp, --schedule, --schedule-file describe trace files; a run "
                        "directory already says what ran; hint: drop them"));
    }
    const std::string& run_dir = inputs.front();
    ReportOptions opt;
    opt.engine = *en;
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
    std::printf("\nwrote %s/report.html, %s/report.json, %s/report-trace.json%s\n", out_dir.c_str(),
                out_dir.c_str(), out_dir.c_str(),
                rep->run.costs ? fmt::format(", {}/report-costs.json", out_dir).c_str() : "");
    return kExitOk;
  }

  // Trace files.
  if (out_dir.empty()) {
    return report_error("report", Status::invalid_argument(
                                      "report: --out is required with trace files; hint: --out "
                                      "DIR (created if missing)"));
  }
  if (!what_if.empty()) pipe.what_if = split(what_if, ',');
  auto rep = build_gpu_trace_report(inputs, pipe);
  if (!rep.ok()) return report_error("report", rep.status());
  if (Status st = write_gpu_trace_report(*rep, out_dir); !st.ok()) {
    return report_error("report", st);
  }
  if (!quiet) std::fputs(format_gpu_trace_text(*rep).c_str(), stdout);
  if (!prediction_path.empty()) {
    auto check = prediction_check(*rep, prediction_path);
    if (!check.ok()) return report_error("report", check.status());
    std::fputs(check->first.c_str(), stdout);
    const std::string path = out_dir + "/report-prediction.json";
    if (Status st = write_output_file(path, check->second); !st.ok()) {
      return report_error("report", st);
    }
    std::printf("wrote %s\n", path.c_str());
  }
  std::printf("\nwrote %s/report.html, %s/report.json, %s/report-trace.json\n", out_dir.c_str(),
              out_dir.c_str(), out_dir.c_str());
  return kExitOk;
}

}  // namespace tightpipe::cli
