// Whole numbers read from JSON files (timelines, summary.json, data_position.json, cost samples).
// nlohmann's get<int32_t>() converts 2.7 to 2 and 1e300 with undefined behaviour, and 2^40 wraps;
// json_int<T>() takes only a JSON integer within T's range. Anything else throws the exception
// get<T>() throws for a wrong type (nlohmann::json::type_error / out_of_range, both
// nlohmann::json::exception), so a reader that already catches those reports it as a bad field.
// Header-only; pure functions.
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace tightpipe
