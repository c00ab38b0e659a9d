// tightpipe schedule: generate, print, lower and check pipeline schedules.
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "schedule_source.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/schedule_torch.h"

namespace tightpipe::cli {

namespace {

// "makespan 27 (lower bound 27: within 0.0%)   max span 27 (...)   costs f=1,i=1,w=1": the
// schedule simulated under the cost flags (default: uniform) next to its shape's lower bound at
// its memory. Empty when it cannot be simulated (a file whose costs the flags do not cover): the
// grid is still printed. A bound above the makespan (a bug) is an error, never printed.
Result<std::string> summary_line(const Schedule& s, const CostFlags& cf) {
  auto low = s.lowered ? Result<Schedule>(s) : lower(s);
  if (!low.ok()) return std::string();
  SimOptions so;
  so.record_timeline = false;
  auto costs = make_costs(cf, *low, so);
  if (!costs.ok()) return std::string();
  auto r = simulate(*low, costs->model, so);
  auto lb = lower_bound_for(*low, costs->model, so);
  if (!r.ok() || !lb.ok()) return std::string();
  TP_RETURN_IF_ERROR(check_lower_bound(r->makespan, lb->makespan,
                                       fmt::format("makespan of schedule '{}'", s.name)));
  TP_RETURN_IF_ERROR(
      check_lower_bound(r->max_span, lb->span, fmt::format("max span of schedule '{}'", s.name)));
  return fmt::format("makespan {:.6g} {}   max span {:.6g} {}   costs {}\n", r->makespan,
                     format_lower_bound(r->makespan, lb->makespan), r->max_span,
                     format_lower_bound(r->max_span, lb->span), costs->model.source());
}

}  // namespace

int cmd_schedule(int argc, char** argv) {
  CLI::App app(
      "Generate a pipeline schedule and print it as a grid, CSV (PyTorch's layout), "
      "JSON or PyTorch's compute_comms CSV (--format torch); or check a schedule file "
      "of your own (--check). zb-auto, zb-1p, zb-2p and zb-v-auto are built from the "
      "costs (--cost, --costs, --model) under --memory-limit.",
      "tightpipe schedule");
  ScheduleFlags flags;
  add_schedule_flags(app, flags);
  add_cost_flags(app, flags.costs);
  add_zb_auto_flags(app, flags.zb);
  bool lowered = false;
  std::string format = "grid", out, check;
  bool list = false;
  app.add_flag("--lowered", lowered, "insert the SEND/RECV actions (what each rank really runs)");
  app.add_option("--format", format,
                 "output format; torch: the lowered schedule with PyTorch's UNSHARD, RESHARD and "
                 "REDUCE_GRAD, for _PipelineScheduleRuntime._load_csv(f, format=\"compute_comms\")")
      ->check(CLI::IsMember({"grid", "csv", "json", "torch"}))
      ->capture_default_str();
  app.add_option("--out", out, "write to this file instead of standard output");
  app.add_option("--check", check,
                 "validate a schedule file (.csv in PyTorch's layout, compute-only or "
                 "compute_comms, or .json): per-action rules, SEND/RECV matching, UNSHARD/RESHARD/"
                 "REDUCE_GRAD placement, and a dry run proving it cannot deadlock");
  app.add_flag("--list", list, "list the known schedules");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (Status st =
          resolve_chunks(flags.vpp, flags.layers_per_virtual_stage, flags.num_layers, flags.pp);
      !st.ok()) {
    return report_error("schedule", st);
  }

  if (list) {
    for (const auto& g : schedule_generators()) {
      std::printf("%-12s %s\n", g.name.c_str(), g.summary.c_str());
    }
    std::printf("%-12s %s\n", "zb-auto",
                "zero-bubble, v=1, built from the costs under --memory-limit (default p)");
    std::printf("%-12s %s\n", "zb-1p", "zb-auto with --memory-limit p (1F1B's memory)");
    std::printf("%-12s %s\n", "zb-2p", "zb-auto with --memory-limit 2p");
    std::printf("%-12s %s\n", "zb-opt",
                "the optimum by exact search (v=1, I/W split) under --memory-limit (default p), "
                "for --pp <= 4 and --microbatches <= 6");
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
    TorchActionCounts torch;
    auto s = load_schedule_file(check, &torch);
    if (!s.ok()) return report_error("schedule", s.status());
    std::printf(
        "%s: valid %sschedule, %d ranks, %d stages, %d microbatches, %zu actions; dry run "
        "finishes (no deadlock)\n",
        check.c_str(), s->lowered ? "lowered " : "", s->num_ranks, s->num_stages,
        s->num_microbatches, s->size());
    if (torch.total() > 0) {
      std::printf(
          "PyTorch actions: %lld UNSHARD, %lld RESHARD, %lld REDUCE_GRAD, %lld "
          "WAIT_REDUCE_GRAD, %lld WAIT_SEND, each where PyTorch's runtime needs it (tightpipe "
          "runs them as no-ops: docs/schedule_ir.md)\n",
          static_cast<long long>(torch.unshard), static_cast<long long>(torch.reshard),
          static_cast<long long>(torch.reduce_grad), static_cast<long long>(torch.wait_reduce_grad),
          static_cast<long long>(torch.wait_send));
      if (!torch.has_waits() && s->lowered) {
        std::printf(
            "no WAIT_SEND / WAIT_REDUCE_GRAD: the form before PyTorch 2.15, whose loader "
            "refuses it; `--format torch` writes them\n");
      }
    } else if (s->lowered && s->directions == 1) {
      std::printf(
          "no REDUCE_GRAD: PyTorch's runtime would run this as compute_comms without "
          "reducing gradients; `--format torch` writes them\n");
    }
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
  if (format == "torch") {
    auto t = to_torch_csv(s);  // lowers a compute-only schedule itself
    if (!t.ok()) return report_error("schedule", t.status());
    text = std::move(t).value();
  } else if (format == "csv") {
    text = to_csv(s);
  } else if (format == "json") {
    text = to_json(s);
  } else {
    auto summary = summary_line(s, flags.costs);
    if (!summary.ok()) return report_error("schedule", summary.status());
    text = fmt::format("{}: p={} stages={} m={} v={}{}{} ({} actions)\n{}{}", s.name, s.num_ranks,
                       s.num_stages, s.num_microbatches, s.chunks(),
                       s.directions != 1 ? fmt::format(" directions={}", s.directions) : "",
                       s.lowered ? " lowered" : "", s.size(), *summary, format_grid(s));
  }
  if (out.empty()) {
    std::fputs(text.c_str(), stdout);
  } else if (Status st = write_file(out, text); !st.ok()) {
    return report_error("schedule", st.with_context("--out"));
  }
  return kExitOk;
}

}  // namespace tightpipe::cli
