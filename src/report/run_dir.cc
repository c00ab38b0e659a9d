// Reading a run directory written by `tightpipe train --out-dir` (report.h).
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tightpipe/base.h"
#include "tightpipe/report.h"
#include "tightpipe/timeline_io.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

// A rank timeline, tolerant of a truncated last line (a run killed mid-write): that line is
// dropped with a warning. Any other bad line makes the whole file unreadable (an error).
Result<RankTimeline> read_timeline_lenient(const std::string& path, int32_t rank,
                                           std::vector<std::string>& warnings) {
  TP_ASSIGN_OR_RETURN(std::string text, read_file(path));
  RankTimeline tl;
  tl.rank = rank;
  const auto lines = split(text, '\n');
  size_t last_nonempty = 0;
  for (size_t k = 0; k < lines.size(); ++k)
    if (!trim(lines[k]).empty()) last_nonempty = k;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (trim(lines[k]).empty()) continue;
    auto e = event_from_json(lines[k], fmt::format("{}:{}", path, k + 1));
    if (!e.ok()) {
      const bool truncated_tail = k == last_nonempty && !text.ends_with('\n');
      if (truncated_tail) {
        warnings.push_back(fmt::format("{}:{}: truncated last line dropped", path, k + 1));
        break;
      }
      return e.status();
    }
    tl.events.push_back(std::move(*e));
  }
  return tl;
}

}  // namespace

Result<RunData> load_run(const std::string& dir) {
  RunData run;
  run.dir = dir;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    const std::string parent = fs::path(dir).parent_path().string();
    const bool parent_is_run =
        fs::exists(fs::path(parent.empty() ? "." : parent) / "timeline_rank0.jsonl", ec);
    return Status::invalid_argument(fmt::format(
        "'{}' is a file, not a run directory; hint: pass the directory `tightpipe train "
        "--out-dir` wrote{}",
        dir,
        parent_is_run ? fmt::format(" ('{}' here)", parent.empty() ? "." : parent)
                      : std::string(" (it holds timeline_rank0.jsonl, summary.json ...)")));
  }
  if (!fs::is_directory(dir, ec)) {
    return Status::not_found(fmt::format(
        "run directory '{}' does not exist; hint: pass the --out-dir of `tightpipe train`", dir));
  }
  // Timeline files present.
  std::regex re(R"(timeline_rank(\d+)\.jsonl)");
  int32_t max_rank = -1;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, re)) max_rank = std::max(max_rank, std::stoi(m[1].str()));
  }
  if (max_rank < 0) {
    return Status::not_found(
        fmt::format("run directory '{}' holds no timeline_rank<R>.jsonl (expected e.g. "
                    "'{}/timeline_rank0.jsonl'); "
                    "hint: it is written by `tightpipe train --out-dir {}`",
                    dir, dir, dir));
  }

  // summary.json
  const std::string summary_path = dir + "/summary.json";
  if (fs::exists(summary_path)) {
    auto text = read_file(summary_path);
    nlohmann::json j;
    bool ok = text.ok();
    if (ok) {
      try {
        j = nlohmann::json::parse(*text);
        ok = j.is_object();
      } catch (const nlohmann::json::exception&) {
        ok = false;
      }
    }
    if (!ok) {
      run.warnings.push_back(fmt::format(
          "{}: unreadable or not JSON (truncated?); ranks taken from the timeline files",
          summary_path));
    } else {
      try {
        run.has_summary = true;
        run.num_ranks = j.value("pp", 0);
        run.schedule_name = j.value("schedule", std::string());
        run.vpp = j.value("vpp", 1);
        run.microbatches = j.value("microbatches", 0);
        run.transport = j.value("transport", std::string());
        run.compute = j.value("compute", std::string());
        run.overlap_p2p = j.value("overlap_p2p", true);
        run.warmup_steps_excluded = j.value("warmup_steps_excluded", int64_t{1});
        if (j.contains("cpu") && j["cpu"].is_object()) {
          const auto& c = j["cpu"];
          run.cores = c.value("cores", 0);
          run.busy_threads = c.value("busy_threads", 0);
          run.rank_threads = c.value("rank_threads", 0);
          run.oversubscribed = c.value("oversubscribed", false);
          run.cpu_note = c.value("note", std::string());
        }
        if (j.contains("measured_peak_activation_bytes_per_rank"))
          run.measured_peak_act_bytes =
              j["measured_peak_activation_bytes_per_rank"].get<std::vector<double>>();
      } catch (const nlohmann::json::exception& ex) {
        run.has_summary = false;
        run.warnings.push_back(fmt::format("{}: bad field: {}", summary_path, ex.what()));
      }
    }
  } else {
    run.warnings.push_back(
        fmt::format("{} is missing (the run did not finish?); ranks taken from the timeline files",
                    summary_path));
  }
  if (run.num_ranks <= 0) run.num_ranks = max_rank + 1;
  if (max_rank + 1 > run.num_ranks) {
    run.warnings.push_back(fmt::format("{}: timeline_rank{}.jsonl is beyond pp = {}; ignored", dir,
                                       max_rank, run.num_ranks));
  }

  // Rank timelines.
  const int32_t P = run.num_ranks;
  run.ranks.resize(P);
  run.rank_present.assign(P, false);
  for (int32_t r = 0; r < P; ++r) {
    run.ranks[r].rank = r;
    const std::string path = fmt::format("{}/timeline_rank{}.jsonl", dir, r);
    if (!fs::exists(path)) {
      run.warnings.push_back(fmt::format("rank {} missing: {} does not exist", r, path));
      continue;
    }
    auto tl = read_timeline_lenient(path, r, run.warnings);
    if (!tl.ok()) {
      run.warnings.push_back(fmt::format("rank {} missing: {}", r, tl.status().message()));
      continue;
    }
    if (tl->events.empty()) {
      run.warnings.push_back(fmt::format("rank {} missing: {} is empty", r, path));
      continue;
    }
    run.ranks[r] = std::move(*tl);
    run.rank_present[r] = true;
  }
  if (std::none_of(run.rank_present.begin(), run.rank_present.end(), [](bool b) { return b; })) {
    std::string why;
    for (const auto& w : run.warnings) why += "\n  " + w;
    return Status::corruption(
        fmt::format("run directory '{}': no rank timeline could be read:{}", dir, why));
  }

  // metrics.jsonl
  const std::string metrics_path = dir + "/metrics.jsonl";
  if (auto text = read_file(metrics_path); text.ok()) {
    size_t line_no = 0;
    for (const std::string& line : split(*text, '\n')) {
      ++line_no;
      if (trim(line).empty()) continue;
      try {
        auto j = nlohmann::json::parse(line);
        MetricPoint p;
        p.step = j.at("step").get<int64_t>();
        p.loss = j.at("loss").get<double>();
        p.step_time_s = j.value("step_time_s", 0.0);
        run.metrics.push_back(p);
      } catch (const nlohmann::json::exception&) {
        run.warnings.push_back(
            fmt::format("{}:{}: bad metrics line skipped", metrics_path, line_no));
      }
    }
  } else {
    run.warnings.push_back(fmt::format("{} is missing: no loss curve", metrics_path));
  }

  // costs.json and schedule.csv (the prediction needs both).
  const std::string costs_path = dir + "/costs.json";
  if (auto text = read_file(costs_path); text.ok()) {
    auto cm = parse_cost_table(*text, costs_path);
    if (cm.ok()) {
      run.costs = std::move(*cm);
    } else {
      run.warnings.push_back(
          fmt::format("no prediction from the run's costs: {}", cm.status().message()));
    }
  } else {
    run.warnings.push_back(
        fmt::format("{} is missing: costs are taken from the timelines", costs_path));
  }
  const std::string sched_path = dir + "/schedule.csv";
  if (auto text = read_file(sched_path); text.ok()) {
    auto s = parse_csv(*text, sched_path);
    if (s.ok() && s->num_ranks != P) {
      run.warnings.push_back(fmt::format("{}: {} ranks but the run has {}; no prediction",
                                         sched_path, s->num_ranks, P));
    } else if (s.ok()) {
      if (run.schedule_name.empty()) run.schedule_name = s->name;
      s->name = run.schedule_name;
      run.schedule = std::move(*s);
    } else {
      run.warnings.push_back(fmt::format("no prediction: {}", s.status().message()));
    }
  } else {
    run.warnings.push_back(fmt::format("{} is missing: no prediction", sched_path));
  }
  if (run.schedule) {
    run.vpp = run.schedule->chunks();
    run.microbatches = run.schedule->num_microbatches;
  }
  return run;
}

}  // namespace tightpipe
