// Timeline files: one JSON object per event per line (`timeline_rank<R>.jsonl`, written by
// `tightpipe train --out-dir` and read by `tightpipe report`). Fields: name, kind, lane, stage, mb,
// step, start, end, peer, bytes (docs/trace_format.md).
#pragma once

#include <string>
#include <string_view>

#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe {

std::string event_to_json(const TimelineEvent& event);
// Errors name `where` (e.g. "timeline_rank2.jsonl:17") and the bad field.
Result<TimelineEvent> event_from_json(std::string_view line, std::string_view where);
// A whole rank file; a truncated last line is Corruption naming the file and line.
Result<RankTimeline> read_rank_timeline(const std::string& path, int32_t rank);
// The events of a rank as a JSON array (for gathering the ranks' timelines over a transport).
std::string events_to_json_array(const RankTimeline& timeline);
Result<RankTimeline> events_from_json_array(std::string_view text, int32_t rank);

}  // namespace tightpipe
