// EasySpec's layer-parallel ("fuzzy") execution plan. In a group of consecutive layers every
// attention block reads the hidden state that enters the group, so the group's attention blocks
// have no data dependence and run at once, one per thread; the residual adds and feed-forward
// blocks then follow in layer order (Algorithm 2 of the paper). The output approximates the
// model's; a draft may run this way because verification decides what is kept.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace specd {

struct LayerGroups {
  // How layers are grouped for a group size N (section 3.1.1); the first and last layer are never
  // grouped (they are the most sensitive to the approximation).
  enum class Strategy {
    kPacked,   // runs of N from layer 1: 1..N, N+1..2N, ... (a shorter run at the end)
    kAligned,  // the paper's: runs start at multiples of N: 1..N-1, N..2N-1, ...
  };

  std::vector<std::pair<int, int>> groups;  // (first layer, number of layers), ascending

  // Groups of `size` layers of an n_layer model by `strategy`; size 1 gives no groups.
  static LayerGroups Make(int n_layer, int size, Strategy strategy);
  // "packed", "aligned", or an explicit list of inclusive layer ranges, "1-2,3-4" (0-based).
  static LayerGroups Parse(const std::string& spec, int n_layer, int size);

  bool empty() const { return groups.empty(); }
  // Layers in groups of more than one (the ones that run approximately).
  int FuzzyLayers() const;
  // Throws an Error unless the groups are in range, ascending and disjoint.
  void Validate(int n_layer) const;
  // "1-2,3-4".
  std::string ToString() const;
};

}  // namespace specd
