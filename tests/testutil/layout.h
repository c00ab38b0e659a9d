#pragma once
// The tests' own reading of a --pipeline-layout string, independent of nn::partition_layers.
#include <string>
#include <vector>

#include "tightpipe/base.h"

namespace tightpipe::testutil {

// Blocks per stage of "E,t*3|t|t*2,L" (3, 1, 2); empty unless the first stage opens with E and
// the last one ends with L.
inline std::vector<int> layout_blocks(const std::string& layout) {
  const std::vector<std::string> parts = split(layout, '|');
  if (parts.empty() || parts.front().rfind("E", 0) != 0) return {};
  if (parts.back().empty() || parts.back().back() != 'L') return {};
  std::vector<int> out;
  for (const std::string& stage : parts) {
    int n = 0;
    for (const std::string& item : split(stage, ',')) {
      if (item == "t") n += 1;
      if (item.rfind("t*", 0) == 0) n += std::stoi(item.substr(2));
    }
    out.push_back(n);
  }
  return out;
}

}  // namespace tightpipe::testutil
