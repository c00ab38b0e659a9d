// The verdict of a bench's check, one rule for every bench (issue 49): a figure is judged against
// its tolerance only where the machine's own noise lets it be. The noise is the spread of
// identical runs, max / min - 1 (spread()). Where it is larger than the tolerance, an error within
// the tolerance could be luck and one beyond it could be the machine: the check could not be
// judged, the bench says so (the spread, the tolerance, what to do) and exits kExitCouldNotJudge,
// never PASS with a tolerance widened to the noise. A check measured once has no known noise and
// cannot be judged either. Figures computed without noise (the simulator on published costs, the
// closed forms) pass noise 0 and are judged by their error alone.
//
// Exit codes of a bench that judges: kExitPass, kExitFail, kExitUsage (bench_cli.h: a bad flag),
// kExitCouldNotJudge. Free functions on values; thread-safe.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tightpipe::bench {

enum class Verdict { kPass, kFail, kCouldNotJudge };

inline constexpr int kExitPass = 0;
inline constexpr int kExitFail = 1;
inline constexpr int kExitCouldNotJudge = 3;  // 2 is kExitUsage (bench_cli.h)

// The noise of identical runs: max / min - 1 of their figures; nullopt with fewer than two (one
// run says nothing of the noise). REQUIRES: every figure > 0.
std::optional<double> spread(std::span<const double> identical_runs);

// `error` (relative, either sign) against `tolerance` (>= 0) given `noise`: the identical runs'
// spread (0 for a figure computed without noise; nullopt when unknown). COULD NOT JUDGE when the
// noise is unknown or larger than the tolerance; else PASS when |error| <= tolerance, else FAIL.
Verdict judge(double error, double tolerance, std::optional<double> noise);

// Why judge() could not judge, for the bench's output: "identical runs spread 14.2%, above the
// tolerance 10.0%; hint: ..." with `hint` (what to do in that bench's flags) appended; "" when the
// noise allows a verdict.
std::string could_not_judge_reason(std::optional<double> noise, double tolerance,
                                   std::string_view hint);

// Several verdicts as one: FAIL when any failed (a judged miss stands, whatever else could not be
// judged), else COULD NOT JUDGE when any could not, else PASS.
Verdict combine(Verdict a, Verdict b);

// The machine a judged figure comes from, for the bench's header: "CPU AMD EPYC (family 25, model
// 1), 2 online; load average 1.95 1.76 2.08" (the fields lscpu prints, from /proc/cpuinfo, and
// /proc/loadavg); "?" for what cannot be read.
std::string machine_line();

std::string_view verdict_name(Verdict verdict);  // "PASS", "FAIL", "COULD NOT JUDGE"
int exit_code(Verdict verdict);                  // kExitPass, kExitFail, kExitCouldNotJudge

}  // namespace tightpipe::bench
