// Whole numbers read from JSON files (timelines, summary.json, data_position.json, cost samples).
// nlohmann's get<int32_t>() converts 2.7 to 2 and 1e300 with undefined behaviour, and 2^40 wraps;
// json_int<T>() takes only a JSON integer within T's range. Anything else throws the exception
// get<T>() throws for a wrong type (nlohmann::json::type_error / out_of_range, both
// nlohmann::json::exception), so a reader that already catches those reports it as a bad field.
// json_error_text() words nlohmann's exceptions for a message. Header-only; pure functions.
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tightpipe/base.h"

namespace tightpipe {

// REQUIRES: nothing; throws nlohmann::json::exception for anything but an integer in T's range.
template <std::integral T>
T json_int(const nlohmann::json& v) {
  if (!v.is_number_integer()) {
    throw nlohmann::json::type_error::create(
        302, fmt::format("{} is not a whole number", printable(v.dump())), &v);
  }
  using L = std::numeric_limits<T>;
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(L::max())
                        : v.get<int64_t>() >= static_cast<int64_t>(L::min()) &&
                              (static_cast<uint64_t>(L::max()) >= uint64_t{INT64_MAX} ||
                               v.get<int64_t>() <= static_cast<int64_t>(L::max()));
  if (!fits) {
    throw nlohmann::json::out_of_range::create(
        406, fmt::format("{} is outside [{}, {}]", v.dump(), L::min(), L::max()), &v);
  }
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>())
                                : static_cast<T>(v.get<int64_t>());
}

// obj[key] as json_int<T>(), or `fallback` when obj has no such key (nlohmann's value()).
template <std::integral T>
T json_int(const nlohmann::json& obj, const char* key, T fallback) {
  const auto it = obj.find(key);
  return it == obj.end() ? fallback : json_int<T>(*it);
}

// A nlohmann exception in our words, for a message that names the file first: its
// "[json.exception.parse_error.101]" tag dropped; a parse error reads "not valid JSON at line L,
// column C: <what the parser saw>", any other the reason alone ("type must be number, but is
// string", "number overflow parsing '1e999'"). Every reader that catches one words it with this.
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string_view w = e.what();
  if (w.starts_with("[json.exception.")) {
    if (const size_t close = w.find("] "); close != std::string_view::npos)
      w.remove_prefix(close + 2);
  }
  if (const auto* pe = dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
    constexpr std::string_view kAt = "parse error at ";
    std::string where = fmt::format("byte {}", pe->byte);
    if (const size_t colon = w.find(": "); w.starts_with(kAt) && colon != std::string_view::npos) {
      where = std::string(w.substr(kAt.size(), colon - kAt.size()));
      w.remove_prefix(colon + 2);
    } else if (w.starts_with("parse error: ")) {
      w.remove_prefix(13);
    }
    return fmt::format("not valid JSON at {}: {}", where, printable(w, 160));
  }
  return printable(w, 200);
}

}  // namespace tightpipe
