#include "config/diagnostics.h"

#include <algorithm>

namespace ferry {

std::string Diagnostic::ToString() const {
  std::string out = source;
  if (line != 0) {
    out += ":" + std::to_string(line) + ":" + std::to_string(column);
  }
  out += ": ";
  if (!key_path.empty()) {
    out += key_path + ": ";
  }
  out += message;
  return out;
}

Error Diagnostics::ToError() const {
  std::string message;
  for (const Diagnostic& d : items_) {
    if (!message.empty()) {
      message += '\n';
    }
    message += d.ToString();
  }
  if (dropped_ > 0) {
    message += "\n... and " + std::to_string(dropped_) + " more errors";
  }
  return InvalidArgument(std::move(message));
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string NearestKey(const std::string& key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  size_t limit = std::max<size_t>(2, key.size() / 3);
  return best_distance <= limit ? best : "";
}

}  // namespace ferry
