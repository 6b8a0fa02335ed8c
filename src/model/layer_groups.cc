#include "model/layer_groups.h"

#include <charconv>

#include "base/error.h"

namespace specd {
namespace {

int ParseLayer(std::string_view text, const std::string& spec) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  SPECD_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
              "layer groups '", spec, "': '", std::string(text), "' is not a layer number");
  return value;
}

}  // namespace

LayerGroups LayerGroups::Make(int n_layer, int size, Strategy strategy) {
  SPECD_CHECK(size >= 1, "layer-parallel group size must be at least 1, got ", size);
  LayerGroups plan;
  if (size == 1) return plan;
  const int last = n_layer - 2;  // the last layer that may be grouped
  int first = 1;
  while (first <= last) {
    const int end = strategy == Strategy::kAligned ? (first / size + 1) * size : first + size;
    const int count = std::min(end, last + 1) - first;
    plan.groups.emplace_back(first, count);
    first += count;
  }
  return plan;
}

LayerGroups LayerGroups::Parse(const std::string& spec, int n_layer, int size) {
  if (spec.empty() || spec == "packed") return Make(n_layer, size, Strategy::kPacked);
  if (spec == "aligned") return Make(n_layer, size, Strategy::kAligned);
  LayerGroups plan;
  std::string_view rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t dash = item.find('-');
    const int first = ParseLayer(item.substr(0, dash), spec);
    const int last =
        dash == std::string_view::npos ? first : ParseLayer(item.substr(dash + 1), spec);
    SPECD_CHECK(last >= first, "layer groups '", spec, "': range ", first, "-", last, " is empty");
    plan.groups.emplace_back(first, last - first + 1);
  }
  plan.Validate(n_layer);
  return plan;
}

int LayerGroups::FuzzyLayers() const {
  int n = 0;
  for (const auto& [first, count] : groups) n += count > 1 ? count : 0;
  return n;
}

void LayerGroups::Validate(int n_layer) const {
  int next_free = 0;
  for (const auto& [first, count] : groups) {
    SPECD_CHECK(first >= next_free && count >= 1 && first + count <= n_layer, "layer groups ",
                ToString(), ": group ", first, "-", first + count - 1,
                " overlaps another, is out of order or outside the model's ", n_layer, " layers");
    next_free = first + count;
  }
}

std::string LayerGroups::ToString() const {
  std::string s;
  for (const auto& [first, count] : groups) {
    if (!s.empty()) s += ",";
    s += std::to_string(first) + "-" + std::to_string(first + count - 1);
  }
  return s.empty() ? "none" : s;
}

}  // namespace specd
