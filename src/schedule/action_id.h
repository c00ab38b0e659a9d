// Internal to the schedule module: the one reader of a stage or microbatch id in an action's text
// (defined in action.cc; parse_action there and parse_torch_action in io_torch.cc use it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tightpipe::detail {

// A stage or microbatch id: digits only, no leading zero (keeps parsing the inverse of
// to_string), below tightpipe's limit. Returns why `s` is not one (naming which id, its value
// and the limit), or "" with `out` set.
std::string read_action_id(std::string_view s, std::string_view what, int32_t limit, int32_t& out);

}  // namespace tightpipe::detail
