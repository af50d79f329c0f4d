// Aggregation of the benchmark's per-run outcomes: leave-one-family-out choice of the hedging
// variant, regret quantiles and win rates per family and cost, and the text rendering.
#pragma once

#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <vector>

#include "evaluate_run.h"
#include "family_groups.h"

namespace modelcast::bench {

// Rows per family ("dev" and "held-out" pool them) x cost ("all" pools them) x mode, each
// family scored with the variant chosen on the OTHER development families (lowest median + p90
// pooled regret; for plans, per publish cost); also the same rows for variant 0 ("before": the
// point forecast, no regime trigger), and the targets per group and cost ("targets").
// selection (optional): per held-out family, the results its variant is chosen on (the other
// families' runs in it); default: results itself.
nlohmann::json report(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
                      const std::string& only_family,
                      const std::map<std::string, std::vector<RunEval>>* selection = nullptr);

// Rows per family x cost x mode for each variant evaluated (no selection).
nlohmann::json reference_report(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
                                 const std::vector<std::string>& variant_labels);

std::string render(const nlohmann::json& report);

}  // namespace modelcast::bench
