// Reading a run directory written by `tightpipe train --out-dir` (report.h).
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "tightpipe/base.h"
#include "tightpipe/input_file.h"
#include "tightpipe/json_int.h"
#include "tightpipe/report.h"
#include "tightpipe/timeline_io.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

// A rank timeline, tolerant of a truncated last line (a run killed mid-write): that line is
// dropped with a warning. Any other bad line makes the whole file unreadable (an error).
Result<RankTimeline> read_timeline_lenient(const std::string& path, int32_t rank,
                                           std::vector<std::string>& warnings) {
  TP_ASSIGN_OR_RETURN(std::string text, read_input_file("timeline", path, input_kind::kTimeline));
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

// OK when `dir` is a directory; else an error for a file (naming the run directory above it when
// there is one) or for nothing there.
Status check_run_dir(const std::string& dir) {
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
  return OkStatus();
}

// The highest R of the directory's timeline_rank<R>.jsonl files; an error when there is none.
Result<int32_t> max_timeline_rank(const std::string& dir) {
  std::error_code ec;
  std::regex re(R"(timeline_rank(\d+)\.jsonl)");
  int32_t max_rank = -1;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::smatch m;
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, m, re)) continue;
    const auto r = parse_int(m[1].str());
    if (r.ok() && *r < kMaxRanks) max_rank = std::max(max_rank, static_cast<int32_t>(*r));
  }
  if (ec) {
    return Status::io_error(
        fmt::format("run directory '{}': cannot list it: {}; hint: check its "
                    "permissions",
                    printable(dir, 200), ec.message()));
  }
  if (max_rank < 0) {
    return Status::not_found(
        fmt::format("run directory '{}' holds no timeline_rank<R>.jsonl (expected e.g. "
                    "'{}/timeline_rank0.jsonl'); "
                    "hint: it is written by `tightpipe train --out-dir {}`",
                    dir, dir, dir));
  }
  return max_rank;
}

// Fills a RunData from the files of a run directory, one file at a time. What is missing or
// unreadable becomes a warning in the RunData (and never an error).
class RunLoader {
 public:
  explicit RunLoader(const std::string& dir) : dir_(dir) { run_.dir = dir; }

  // summary.json, then P: summary.json's pp, else from the timeline files.
  void read_summary(int32_t max_rank);
  // timeline_rank<R>.jsonl for R < P; a rank whose file is missing, bad or empty is absent.
  void read_rank_timelines();
  void read_metrics();
  // costs.json and schedule.csv (the prediction needs both).
  void read_costs();
  void read_schedule();

  const RunData& run() const { return run_; }
  RunData take() { return std::move(run_); }

 private:
  void read_summary_fields(const nlohmann::json& j, const std::string& path);

  std::string dir_;
  RunData run_;
};

void RunLoader::read_summary(int32_t max_rank) {
  const std::string summary_path = dir_ + "/summary.json";
  std::error_code ec;
  if (fs::exists(fs::symlink_status(summary_path, ec))) {
    auto text = read_input_file("summary", summary_path, input_kind::kRunFile);
    nlohmann::json j;
    std::string why;
    if (!text.ok()) {
      why = text.status().message();
    } else {
      try {
        j = nlohmann::json::parse(*text);
        if (!j.is_object()) why = fmt::format("{}: not a JSON object", summary_path);
      } catch (const nlohmann::json::exception& ex) {
        why = fmt::format("{}: {} (truncated?)", summary_path, json_error_text(ex));
      }
    }
    if (!why.empty()) {
      run_.warnings.push_back(fmt::format("{}; ranks taken from the timeline files", why));
    } else {
      read_summary_fields(j, summary_path);
    }
  } else {
    run_.warnings.push_back(
        fmt::format("{} is missing (the run did not finish?); ranks taken from the timeline files",
                    summary_path));
  }
  if (run_.num_ranks <= 0) run_.num_ranks = max_rank + 1;
  if (max_rank + 1 > run_.num_ranks) {
    run_.warnings.push_back(fmt::format("{}: timeline_rank{}.jsonl is beyond pp = {}; ignored",
                                        dir_, max_rank, run_.num_ranks));
  }
}

void RunLoader::read_summary_fields(const nlohmann::json& j, const std::string& path) {
  try {
    run_.has_summary = true;
    run_.num_ranks = json_int<int32_t>(j, "pp", 0);
    if (run_.num_ranks < 0 || run_.num_ranks > kMaxRanks) {  // schedule.h's limit
      run_.warnings.push_back(
          fmt::format("{}: \"pp\" {} is outside [1, {}]; ranks taken from the timeline files", path,
                      run_.num_ranks, kMaxRanks));
      run_.num_ranks = 0;
    }
    run_.schedule_name = j.value("schedule", std::string());
    run_.vpp = json_int<int32_t>(j, "vpp", 1);
    run_.microbatches = json_int<int32_t>(j, "microbatches", 0);
    run_.transport = j.value("transport", std::string());
    run_.compute = j.value("compute", std::string());
    run_.overlap_p2p = j.value("overlap_p2p", true);
    // Out-of-range values (a damaged file) fall back to one replica, one bucket per 2^20 values.
    const int32_t dp = json_int<int32_t>(j, "data_parallel_size", 1);
    run_.data_parallel_size = dp >= 1 && dp <= 65536 ? dp : 1;
    run_.overlap_grad_reduce = j.value("overlap_grad_reduce", false);
    const int64_t bucket = json_int<int64_t>(j, "bucket_size", int64_t{1} << 20);
    run_.bucket_size = bucket >= 1 && bucket <= (int64_t{1} << 30) ? bucket : int64_t{1} << 20;
    run_.warmup_steps_excluded = json_int<int64_t>(j, "warmup_steps_excluded", 1);
    if (j.contains("model") && j["model"].is_object()) {
      const auto& m = j["model"];
      nn::GptConfig c;
      c.num_layers = json_int(m, "num_layers", c.num_layers);
      c.hidden_size = json_int(m, "hidden_size", c.hidden_size);
      c.num_heads = json_int(m, "num_attention_heads", c.num_heads);
      c.seq_length = json_int(m, "seq_length", c.seq_length);
      c.micro_batch_size = json_int(m, "micro_batch_size", c.micro_batch_size);
      c.vocab_size = json_int(m, "vocab_size", c.vocab_size);
      // Runs before --bf16 wrote no precision: they trained in fp32.
      if (auto p = nn::parse_precision(m.value("precision", std::string("fp32"))); p.ok())
        c.precision = *p;
      if (c.validate().ok()) run_.model = c;
      run_.layout = j.value("layout", std::string());
    }
    if (j.contains("cpu") && j["cpu"].is_object()) {
      const auto& c = j["cpu"];
      run_.cores = json_int<int32_t>(c, "cores", 0);
      run_.busy_threads = json_int<int32_t>(c, "busy_threads", 0);
      run_.rank_threads = json_int<int32_t>(c, "rank_threads", 0);
      run_.oversubscribed = c.value("oversubscribed", false);
      run_.cpu_note = c.value("note", std::string());
    }
    if (j.contains("measured_peak_activation_bytes_per_rank"))
      run_.measured_peak_act_bytes =
          j["measured_peak_activation_bytes_per_rank"].get<std::vector<double>>();
  } catch (const nlohmann::json::exception& ex) {
    run_.has_summary = false;
    run_.warnings.push_back(fmt::format("{}: bad field: {}", path, json_error_text(ex)));
  }
}

void RunLoader::read_rank_timelines() {
  const int32_t P = run_.num_ranks;
  run_.ranks.resize(P);
  run_.rank_present.assign(P, false);
  for (int32_t r = 0; r < P; ++r) {
    run_.ranks[r].rank = r;
    const std::string path = fmt::format("{}/timeline_rank{}.jsonl", dir_, r);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) {
      run_.warnings.push_back(fmt::format("rank {} missing: {} does not exist", r, path));
      continue;
    }
    auto tl = read_timeline_lenient(path, r, run_.warnings);
    if (!tl.ok()) {
      run_.warnings.push_back(fmt::format("rank {} missing: {}", r, tl.status().message()));
      continue;
    }
    if (tl->events.empty()) {
      run_.warnings.push_back(fmt::format("rank {} missing: {} is empty", r, path));
      continue;
    }
    run_.ranks[r] = std::move(*tl);
    run_.rank_present[r] = true;
  }
}

void RunLoader::read_metrics() {
  const std::string metrics_path = dir_ + "/metrics.jsonl";
  auto text = read_input_file("metrics", metrics_path, input_kind::kTimeline);
  if (!text.ok()) {
    run_.warnings.push_back(text.status().code() == StatusCode::kNotFound
                                ? fmt::format("{} is missing: no loss curve", metrics_path)
                                : fmt::format("{}; no loss curve", text.status().message()));
    return;
  }
  size_t line_no = 0;
  for (const std::string& line : split(*text, '\n')) {
    ++line_no;
    if (trim(line).empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      MetricPoint p;
      p.step = json_int<int64_t>(j.at("step"));
      p.loss = j.at("loss").get<double>();
      p.step_time_s = j.value("step_time_s", 0.0);
      run_.metrics.push_back(p);
    } catch (const nlohmann::json::exception&) {
      run_.warnings.push_back(
          fmt::format("{}:{}: bad metrics line skipped", metrics_path, line_no));
    }
  }
}

void RunLoader::read_costs() {
  const std::string costs_path = dir_ + "/costs.json";
  auto text = read_input_file("costs", costs_path, input_kind::kCostTable);
  if (!text.ok()) {
    run_.warnings.push_back(
        text.status().code() == StatusCode::kNotFound
            ? fmt::format("{} is missing: costs are taken from the timelines", costs_path)
            : fmt::format("{}; costs are taken from the timelines", text.status().message()));
    return;
  }
  auto cm = parse_cost_table(*text, costs_path);
  if (cm.ok()) {
    run_.costs = std::move(*cm);
  } else {
    run_.warnings.push_back(
        fmt::format("no prediction from the run's costs: {}", cm.status().message()));
  }
}

// The lowered schedule that ran; its chunks and microbatches override summary.json's.
void RunLoader::read_schedule() {
  const std::string sched_path = dir_ + "/schedule.csv";
  auto text = read_input_file("schedule file", sched_path, input_kind::kSchedule);
  if (!text.ok()) {
    run_.warnings.push_back(text.status().code() == StatusCode::kNotFound
                                ? fmt::format("{} is missing: no prediction", sched_path)
                                : fmt::format("{}; no prediction", text.status().message()));
    return;
  }
  auto s = parse_csv(*text, sched_path);
  if (s.ok() && s->num_ranks != run_.num_ranks) {
    run_.warnings.push_back(fmt::format("{}: {} ranks but the run has {}; no prediction",
                                        sched_path, s->num_ranks, run_.num_ranks));
  } else if (s.ok()) {
    if (run_.schedule_name.empty()) run_.schedule_name = s->name;
    s->name = run_.schedule_name;
    run_.schedule = std::move(*s);
    run_.vpp = run_.schedule->chunks();
    run_.microbatches = run_.schedule->num_microbatches;
  } else {
    run_.warnings.push_back(fmt::format("no prediction: {}", s.status().message()));
  }
}

}  // namespace

Result<RunData> load_run(const std::string& dir) {
  TP_RETURN_IF_ERROR(check_run_dir(dir));
  TP_ASSIGN_OR_RETURN(const int32_t max_rank, max_timeline_rank(dir));
  RunLoader loader(dir);
  loader.read_summary(max_rank);
  loader.read_rank_timelines();
  const RunData& run = loader.run();
  if (std::none_of(run.rank_present.begin(), run.rank_present.end(), [](bool b) { return b; })) {
    std::string why;
    for (const auto& w : run.warnings) why += "\n  " + w;
    return Status::corruption(
        fmt::format("run directory '{}': no rank timeline could be read:{}", dir, why));
  }
  loader.read_metrics();
  loader.read_costs();
  loader.read_schedule();
  return loader.take();
}

}  // namespace tightpipe
