#include "tightpipe/timeline_io.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/input_file.h"
#include "tightpipe/json_int.h"

namespace tightpipe {
namespace {

nlohmann::json to_j(const TimelineEvent& e) {
  nlohmann::json j = {{"name", e.name},
                      {"kind", event_kind_name(e.kind)},
                      {"lane", lane_name(e.lane)},
                      {"stage", e.stage},
                      {"mb", e.microbatch},
                      {"step", e.step},
                      {"start", e.start},
                      {"end", e.end},
                      {"peer", e.peer},
                      {"bytes", e.bytes}};
  if (e.cpu_wait > 0) j["cpu_wait"] = e.cpu_wait;
  return j;
}

Result<TimelineEvent> from_j(const nlohmann::json& j, std::string_view where) {
  TimelineEvent e;
  try {
    e.name = j.at("name").get<std::string>();
    const std::string kind = j.at("kind").get<std::string>();
    const std::string lane = j.at("lane").get<std::string>();
    bool kind_ok = false, lane_ok = false;
    for (EventKind k : {EventKind::kForward, EventKind::kBackwardInput, EventKind::kBackwardWeight,
                        EventKind::kBackward, EventKind::kSend, EventKind::kRecv, EventKind::kData,
                        EventKind::kOptimizer, EventKind::kAllReduce, EventKind::kOther}) {
      if (event_kind_name(k) == kind) {
        e.kind = k;
        kind_ok = true;
      }
    }
    for (Lane l : {Lane::kCompute, Lane::kComm, Lane::kData, Lane::kAllReduce}) {
      if (lane_name(l) == lane) {
        e.lane = l;
        lane_ok = true;
      }
    }
    if (!kind_ok || !lane_ok) {
      return Status::corruption(
          fmt::format("{}: unknown kind '{}' or lane '{}'; hint: a timeline tightpipe train wrote",
                      where, printable(kind), printable(lane)));
    }
    e.stage = json_int<int32_t>(j.at("stage"));
    e.microbatch = json_int<int32_t>(j.at("mb"));
    e.step = json_int<int32_t>(j.at("step"));
    e.start = j.at("start").get<double>();
    e.end = j.at("end").get<double>();
    e.peer = json_int<int32_t>(j, "peer", -1);
    e.bytes = json_int<int64_t>(j, "bytes", 0);
    e.cpu_wait = j.value("cpu_wait", 0.0);
  } catch (const nlohmann::json::exception& ex) {
    return Status::corruption(
        fmt::format("{}: bad timeline event: {}; hint: a timeline tightpipe train wrote", where,
                    json_error_text(ex)));
  }
  // Times are seconds from the step's start: a negative start or an end before the start would
  // count more busy time than the step has (a bubble over 100%).
  if (!std::isfinite(e.start) || !std::isfinite(e.end) || e.start < 0 || e.end < e.start ||
      !std::isfinite(e.cpu_wait)) {
    return Status::corruption(fmt::format(
        "{}: event '{}' runs from {} to {}; hint: times are finite seconds from the step's start, "
        "0 <= start <= end",
        where, printable(e.name), e.start, e.end));
  }
  return e;
}

}  // namespace

std::string event_to_json(const TimelineEvent& event) { return to_j(event).dump(); }

Result<TimelineEvent> event_from_json(std::string_view line, std::string_view where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& ex) {  // parse_error, or out_of_range (1e999)
    return Status::corruption(fmt::format(
        "{}: not a JSON event: {}; hint: the file may be truncated (a run killed while writing)",
        where, json_error_text(ex)));
  }
  return from_j(j, where);
}

Result<RankTimeline> read_rank_timeline(const std::string& path, int32_t rank) {
  TP_ASSIGN_OR_RETURN(std::string text, read_input_file("timeline", path, input_kind::kTimeline));
  RankTimeline tl;
  tl.rank = rank;
  size_t line_no = 0;
  for (const std::string& line : split(text, '\n')) {
    ++line_no;
    if (trim(line).empty()) continue;
    TP_ASSIGN_OR_RETURN(TimelineEvent e,
                        event_from_json(line, fmt::format("{}:{}", path, line_no)));
    tl.events.push_back(std::move(e));
  }
  return tl;
}

std::string events_to_json_array(const RankTimeline& timeline) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : timeline.events) arr.push_back(to_j(e));
  return arr.dump();
}

Result<RankTimeline> events_from_json_array(std::string_view text, int32_t rank) {
  RankTimeline tl;
  tl.rank = rank;
  nlohmann::json arr;
  try {
    arr = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& ex) {  // parse_error, or out_of_range (1e999)
    return Status::corruption(
        fmt::format("rank {} timeline: {}; hint: a timeline tightpipe train "
                    "wrote",
                    rank, json_error_text(ex)));
  }
  for (const auto& j : arr) {
    TP_ASSIGN_OR_RETURN(TimelineEvent e, from_j(j, fmt::format("rank {} timeline", rank)));
    tl.events.push_back(std::move(e));
  }
  return tl;
}

}  // namespace tightpipe
