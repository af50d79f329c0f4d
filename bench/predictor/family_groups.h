// Which curve families the benchmark holds out of every choice it makes, and the pooled rows'
// labels: "dev" pools the development families (the ones choices may look at), "held-out" the
// families nothing is chosen on, which stand in for runs people outside the team will bring.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace modelcast::bench {

inline const std::string kDevGroup = "dev";
inline const std::string kHeldOutGroup = "held-out";

struct FamilyGroups {
  std::set<std::string> held_out;

  bool is_held_out(const std::string& family) const { return held_out.count(family) > 0; }
  // A row label (a group or one family) covers the family.
  bool covers(const std::string& label, const std::string& family) const {
    if (label == kDevGroup) return !is_held_out(family);
    if (label == kHeldOutGroup) return is_held_out(family);
    return label == family;
  }
  // May a choice made for `scored` look at `other`'s results? Never a held-out family's, and
  // never the scored family's own (leave-one-family-out among the development families).
  bool may_choose_on(const std::string& other, const std::string& scored) const {
    return !is_held_out(other) && other != scored;
  }
  // The pooled labels worth a row: "dev", and "held-out" when any family is held out.
  std::vector<std::string> pooled_labels(const std::vector<std::string>& families) const {
    std::vector<std::string> out = {kDevGroup};
    for (const auto& f : families)
      if (is_held_out(f)) return {kDevGroup, kHeldOutGroup};
    return out;
  }
};

}  // namespace modelcast::bench
