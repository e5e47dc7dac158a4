// Rows split by the device that answers for them; see device_parts.h.
#include "reports/common/device_parts.h"

#include <algorithm>

#include "reports/results/cards.h"
#include "reports/results/schema.h"
#include "reports/results/vocab.h"

namespace sweep::reports {

std::optional<std::string> predicted_card(const Row& row) {
  using schema::column;
  if (row.value<Device>() != Device::kEmulated) return std::nullopt;
  if (const auto cell = parse_card_cell(row.at(column("card")))) return cell->name;
  const std::string& name = row.at(column("device_name"));
  return emulated_card_name(name).value_or(name);
}

std::vector<DevicePart> device_parts(const std::vector<Results>& results) {
  std::vector<DevicePart> parts(1);  // parts[0]: the measured rows
  std::vector<std::string> measured_on;
  for (const Results& file : results) {
    for (const Row& row : file.rows) {
      const auto card = predicted_card(row);
      auto part = std::find_if(parts.begin(), parts.end(),
                               [&](const DevicePart& p) { return p.card == card; });
      if (part == parts.end()) {
        parts.push_back({.label = predicted_by(*card), .card = card, .results = {}});
        part = parts.end() - 1;
      }
      if (part->results.empty() || part->results.back().path != file.path)
        part->results.push_back({.path = file.path, .rows = {}, .present = file.present});
      part->results.back().rows.push_back(row);
      const std::string& name = row.at(schema::column("device_name"));
      if (!card && !name.empty() &&
          std::find(measured_on.begin(), measured_on.end(), name) == measured_on.end())
        measured_on.push_back(name);
    }
  }
  if (parts.front().results.empty() && parts.size() > 1) parts.erase(parts.begin());
  for (DevicePart& p : parts) {
    if (p.card) continue;
    std::string names;
    for (const auto& n : measured_on) names += (names.empty() ? "" : ", ") + n;
    p.label = names.empty() ? "measured" : "measured on " + names;
    if (p.results.empty()) p.results = results;  // no rows: one part, as the files are
  }
  return parts;
}

}  // namespace sweep::reports
