#include "report.h"

#include "bootstrap_interval.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <limits>
#include <tuple>

namespace modelcast::bench {
namespace {

using Json = nlohmann::json;
const char* const kModes[] = {"plan", "replay"};

// variant(family, mode, cost index) -> index into the run's outcomes.
using Selector = std::function<std::size_t(const std::string&, int, int)>;

Json row(const std::vector<RunEval>& results, const FamilyGroups& groups, const std::string& family, int cost, int mode,
         const Selector& pick, std::size_t costs) {
  std::vector<double> regrets, denoised;
  std::map<std::string, int> wins, strict;
  int runs = 0, no_gain = 0;
  // Where the losses come from, over the runs with an achievable gain.
  int more = 0, fewer = 0, earlier = 0, later = 0, with_consecutive = 0, none = 0;
  // Plans against the best evenly spaced schedule (HedgeOptions::depart_confidence): departures
  // (picked "forecast" or "no_publish") that did better or worse than it on the true curve;
  // candidates that differed from it but were held to it, and whether that did better or worse
  // than the candidate; and the plans without the rule (every candidate kept), scored as plans.
  int departs = 0, departs_paid = 0, departs_lost = 0, held = 0, held_paid = 0, held_lost = 0, unruled_every_e = 0;
  std::vector<double> unruled_regrets;
  for (const auto& r : results) {
    if (!r.evaluated || !groups.covers(family, r.family)) continue;
    for (int c = 0; c < static_cast<int>(costs); ++c) {
      if (cost >= 0 && c != cost) continue;
      const auto& o = r.outcome[static_cast<std::size_t>(c)][static_cast<std::size_t>(mode)][pick(r.family, mode, c)];
      if (mode == 0 && !r.plan_choice.empty()) {
        const auto& pc = r.plan_choice[static_cast<std::size_t>(c)][pick(r.family, mode, c)];
        const Outcome& even = pc.evenly_spaced;
        if (pc.picked != "evenly_spaced") {
          ++departs;
          if (o.has_gain) departs_paid += o.regret < even.regret, departs_lost += o.regret > even.regret;
        } else if (!pc.candidate_is_even) {
          ++held;
          if (o.has_gain) held_paid += even.regret < pc.candidate.regret, held_lost += even.regret > pc.candidate.regret;
        }
        if (pc.candidate.has_gain) unruled_regrets.push_back(pc.candidate.regret);
        unruled_every_e += pc.candidate.vs.at("every_e_steps") >= 0;
      }
      ++runs;
      if (o.has_gain) {
        regrets.push_back(o.regret);
        more += o.publishes > o.optimal_publishes, fewer += o.publishes < o.optimal_publishes;
        earlier += o.first_earlier, later += o.first_later, with_consecutive += o.consecutive > 0;
        none += o.publishes == 0 && o.optimal_publishes > 0;
      } else {
        ++no_gain;
      }
      if (o.has_gain_denoised) denoised.push_back(o.regret_denoised);
      for (const auto& [b, v] : o.vs) wins[b] += v >= 0, strict[b] += v > 0;
    }
  }
  Json s;
  s["family"] = family;
  s["mode"] = kModes[mode];
  s["runs"] = runs;
  s["runs_without_achievable_gain"] = no_gain;
  s["against_optimum"] = {{"more_publishes", more}, {"fewer_publishes", fewer}, {"first_earlier", earlier},
                          {"first_later", later}, {"consecutive_publishes", with_consecutive}, {"no_publish", none}};
  if (mode == 0) {
    s["plan_choice"] = {{"departs_from_even_spacing", departs},
                        {"departures_that_paid", departs_paid},
                        {"departures_that_lost", departs_lost},
                        {"held_to_even_spacing", held},
                        {"holds_that_paid", held_paid},
                        {"holds_that_lost", held_lost},
                        {"without_the_rule", {{"median_regret_pct", quantile(unruled_regrets, 0.5)},
                                              {"p90_regret_pct", quantile(unruled_regrets, 0.9)},
                                              {"ties_or_beats_every_e", runs ? static_cast<double>(unruled_every_e) / runs : 0.0}}}};
  }
  s["median_regret_pct"] = quantile(regrets, 0.5);
  s["p90_regret_pct"] = quantile(regrets, 0.9);
  // On the denoised true curve against its own optimum (a second figure, not the target's).
  s["denoised_median_regret_pct"] = quantile(denoised, 0.5);
  s["denoised_p90_regret_pct"] = quantile(denoised, 0.9);
  for (const auto& b : kBaselines) {
    s["win_rate"][b] = runs ? static_cast<double>(wins[b]) / runs : 0.0;
    s["strict_win_rate"][b] = runs ? static_cast<double>(strict[b]) / runs : 0.0;
  }
  return s;
}

Json rows(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
          const std::vector<std::string>& families, const Selector& pick) {
  Json out = Json::array();
  for (const auto& fam : families)
    for (int c = 0; c <= static_cast<int>(settings.cost_multipliers.size()); ++c)
      for (int m = 0; m < 2; ++m) {
        const bool pooled = c == static_cast<int>(settings.cost_multipliers.size());
        auto s = row(results, groups, fam, pooled ? -1 : c, m, pick, settings.cost_multipliers.size());
        s["cost_x_median_interval"] = pooled ? Json("all") : Json(settings.cost_multipliers[static_cast<std::size_t>(c)]);
        out.push_back(std::move(s));
      }
  return out;
}

// A row's publish cost as the tables print it: "0.5x", or "all" for the rows pooled over costs.
std::string cost_label(const Json& row) {
  if (row["cost_x_median_interval"].is_string()) return "all";
  std::ostringstream cost;
  cost << std::setprecision(1) << std::fixed << row["cost_x_median_interval"].get<double>() << "x";
  return cost.str();
}

std::vector<std::string> families_of(const std::vector<RunEval>& results) {
  std::set<std::string> f;
  for (const auto& r : results)
    if (r.evaluated) f.insert(r.family);
  return {f.begin(), f.end()};
}

std::vector<std::string> shown_all(const FamilyGroups& groups, const std::vector<std::string>& families) {
  std::vector<std::string> out = groups.pooled_labels(families);
  out.insert(out.end(), families.begin(), families.end());
  return out;
}

// The runs behind one pooled row at one cost, with the variants `pick` chose, as a target
// counts them.
std::vector<ScoredRun> scored_runs(const std::vector<RunEval>& results, const FamilyGroups& groups, const std::string& label,
                                   int cost, int mode, const Selector& pick) {
  std::vector<ScoredRun> out;
  for (const auto& r : results) {
    if (!r.evaluated || !groups.covers(label, r.family)) continue;
    const auto& o = r.outcome[static_cast<std::size_t>(cost)][static_cast<std::size_t>(mode)][pick(r.family, mode, cost)];
    out.push_back({r.family, o.has_gain, o.regret, o.vs.at("every_e_steps") >= 0});
  }
  return out;
}

Json interval_json(const Interval& i) { return Json::array({i.low, i.high}); }

// The targets the predictor is held to, per group (development, held-out) and publish cost:
// replay median <= 3 % and p90 <= 20 %; plans median <= 5 %, p90 <= 25 % and tie or beat
// publishing every tenth of the run in >= 85 % of cases. A NaN quantile (no run with a gain)
// counts as not met: nothing was shown. Each figure comes with its 90 % bootstrap interval over
// the group's runs (bootstrap_interval.h): "met" is the figure's, the interval says whether
// another sample of runs of the same kinds could well have said otherwise.
Json targets(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
             const std::vector<std::string>& labels, const Selector& pick) {
  Json out = Json::array();
  for (const auto& g : labels)
    for (int c = 0; c < static_cast<int>(settings.cost_multipliers.size()); ++c)
      for (int m = 0; m < 2; ++m) {
        const auto s = row(results, groups, g, c, m, pick, settings.cost_multipliers.size());
        const bool plan = m == 0;
        const double med = s["median_regret_pct"].get<double>(), p90 = s["p90_regret_pct"].get<double>();
        const double every_e = s["win_rate"]["every_e_steps"].get<double>();
        const bool met = plan ? med <= 5.0 && p90 <= 25.0 && every_e >= 0.85 : med <= 3.0 && p90 <= 20.0;
        const auto runs = scored_runs(results, groups, g, c, m, pick);
        const auto ci = bootstrap_target_intervals(runs);
        out.push_back({{"group", g}, {"mode", s["mode"]}, {"cost_x_median_interval", settings.cost_multipliers[static_cast<std::size_t>(c)]},
                       {"runs", s["runs"]}, {"median_regret_pct", med}, {"p90_regret_pct", p90},
                       {"ties_or_beats_every_e", every_e}, {"met", met},
                       {"median_regret_pct_ci90", interval_json(ci.median_regret_pct)},
                       {"p90_regret_pct_ci90", interval_json(ci.p90_regret_pct)},
                       {"ties_or_beats_every_e_ci90", interval_json(ci.ties_or_beats_every_e)}});
      }
  return out;
}

}  // namespace

Json report(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
            const std::string& only_family, const std::map<std::string, std::vector<RunEval>>* selection) {
  const auto families = families_of(results);
  const std::size_t nv = settings.variants.size();
  // Leave-one-family-out: for each scored family and mode, the hedged variant (index >= 1) with
  // the lowest median + p90 regret pooled over the other development families (a held-out
  // family's results never enter any choice, its own or another's). Plans are chosen per
  // publish cost (a plan is made knowing its cost, and few expensive publishes want a different
  // hedge than many cheap ones); the online scheduler's variant is pooled over all costs.
  const int nc = static_cast<int>(settings.cost_multipliers.size());
  std::map<std::tuple<std::string, int, int>, std::size_t> chosen;
  Json lofo = Json::object();
  for (const auto& held : families)
    for (int m = 0; m < 2; ++m)
      for (int c = 0; c < nc; ++c) {
        if (m == 1 && c > 0) {
          chosen[{held, m, c}] = chosen.at({held, m, 0});
          continue;
        }
        double best = std::numeric_limits<double>::infinity();
        std::size_t best_v = 1;
        for (std::size_t v = 1; v < nv; ++v) {
          if (settings.variants[v].library_defaults || (m == 1 && settings.variants[v].plan_only)) continue;
          std::vector<double> regrets;
          const auto& pool = selection && selection->count(held) ? selection->at(held) : results;
          for (const auto& r : pool)
            if (r.evaluated && groups.may_choose_on(r.family, held))
              for (int rc = 0; rc < nc; ++rc) {
                if (m == 0 && rc != c) continue;
                const auto& o = r.outcome[static_cast<std::size_t>(rc)][static_cast<std::size_t>(m)][v];
                if (o.has_gain) regrets.push_back(o.regret);
              }
          const double score = quantile(regrets, 0.5) + quantile(regrets, 0.9);
          if (score < best) best = score, best_v = v;
        }
        chosen[{held, m, c}] = best_v;
        if (m == 0) {
          std::ostringstream cost;
          cost << settings.cost_multipliers[static_cast<std::size_t>(c)] << "x";
          lofo[held][kModes[m]][cost.str()] = settings.variants[best_v].name;
        } else {
          lofo[held][kModes[m]] = settings.variants[best_v].name;
        }
      }
  std::vector<std::string> shown = groups.pooled_labels(families);
  for (const auto& f : families)
    if (only_family.empty() || f == only_family) shown.push_back(f);
  Json out;
  out["held_out_families"] = groups.held_out;
  out["families"] = Json::object();
  for (const auto& f : families) {
    int n = 0;
    for (const auto& r : results) n += r.evaluated && r.family == f;
    out["families"][f] = n;
  }
  out["lofo_variant"] = lofo;
  // Every variant on every family, pooled over costs (what the choice was made from).
  out["variant_summary"] = Json::array();
  out["variant_by_cost"] = Json::array();
  for (std::size_t v = 0; v < nv; ++v)
    for (const auto& f : shown_all(groups, families))
      for (int m = 0; m < 2; ++m)
        for (int c = -1; c < static_cast<int>(settings.cost_multipliers.size()); ++c) {
          auto s = row(results, groups, f, c, m, [v](const std::string&, int, int) { return v; }, settings.cost_multipliers.size());
          s["variant"] = settings.variants[v].name;
          s["cost_x_median_interval"] = c < 0 ? Json("all") : Json(settings.cost_multipliers[static_cast<std::size_t>(c)]);
          out[c < 0 ? "variant_summary" : "variant_by_cost"].push_back(std::move(s));
        }
  out["rows"] = rows(results, groups, settings, shown, [&](const std::string& f, int m, int c) { return chosen.at({f, m, c}); });
  out["before_rows"] = rows(results, groups, settings, shown, [](const std::string&, int, int) { return std::size_t{0}; });
  out["targets"] = targets(results, groups, settings, groups.pooled_labels(families),
                           [&](const std::string& f, int m, int c) { return chosen.at({f, m, c}); });
  // Per run, with the chosen variant: regret % per cost (null: no achievable gain), the publish
  // steps of the plan, the replay, every E and the optimum in hindsight per cost, and per cost
  // how the plan came to be (plan_choice: picked, the candidate's weight of scenarios, its expected
  // margin, and the candidate's and the best even schedule's regret on the true curve); the
  // forecast at each cut (forecast_cuts).
  out["runs"] = Json::array();
  const auto regret_of = [](const Outcome& o) { return o.has_gain ? Json(o.regret) : Json(); };
  for (const auto& r : results) {
    if (!r.evaluated) continue;
    Json j{{"run", r.run}, {"family", r.family}, {"mae", r.mae}};
    for (const auto& cut : r.forecast_cuts)
      j["forecast_cuts"].push_back({{"cut_fraction", cut.cut_fraction}, {"fall_ratio", cut.fall_ratio},
                                    {"path_error", cut.path_error}, {"end_error", cut.end_error}});
    for (const auto& o : r.every_e) {
      j["every_e"].push_back(regret_of(o));
      j["every_e_publish_steps"].push_back(o.publish_steps);
    }
    for (int m = 0; m < 2; ++m)
      for (int c = 0; c < nc; ++c) {
        const std::size_t v = chosen.at({r.family, m, c});
        const auto& o = r.outcome[static_cast<std::size_t>(c)][static_cast<std::size_t>(m)][v];
        j[kModes[m]].push_back(regret_of(o));
        j[std::string(kModes[m]) + "_publish_steps"].push_back(o.publish_steps);
        if (m == 0) j["optimal_publish_steps"].push_back(o.optimal_publish_steps);
        if (m != 0 || r.plan_choice.empty()) continue;
        const auto& pc = r.plan_choice[static_cast<std::size_t>(c)][v];
        j["plan_choice"].push_back({{"picked", pc.picked},
                                    {"win_probability", pc.win_probability},
                                    {"expected_margin_pct", pc.expected_margin_pct},
                                    {"candidate_regret_pct", regret_of(pc.candidate)},
                                    {"evenly_spaced_regret_pct", regret_of(pc.evenly_spaced)}});
      }
    out["runs"].push_back(std::move(j));
  }
  // How far a plan's stated confidence can be trusted: the candidate's share of scenarios in which
  // it does at least as well as the best even schedule (what HedgeOptions::depart_confidence is
  // compared with), binned, against whether it did better or worse than that schedule on the true
  // curve; chosen variants, pooled over costs, ties and runs without a gain left out.
  const std::vector<double> confidence_edges = {0.0, 0.4, 0.6, 0.8, 1.0};
  for (const auto& g : groups.pooled_labels(families))
    for (std::size_t b = 0; b + 1 < confidence_edges.size(); ++b) {
      int cases = 0, better = 0, worse = 0;
      for (const auto& r : results) {
        if (!r.evaluated || r.plan_choice.empty() || !groups.covers(g, r.family)) continue;
        for (int c = 0; c < nc; ++c) {
          const auto& pc = r.plan_choice[static_cast<std::size_t>(c)][chosen.at({r.family, 0, c})];
          // The last bin is closed above, and a share summed from weights may exceed 1 by rounding.
          const bool last_bin = b + 2 == confidence_edges.size();
          if (pc.win_probability < confidence_edges[b] || (!last_bin && pc.win_probability >= confidence_edges[b + 1]))
            continue;
          if (!pc.candidate.has_gain || !pc.evenly_spaced.has_gain) continue;
          ++cases;
          better += pc.candidate.regret < pc.evenly_spaced.regret - 1e-9;
          worse += pc.candidate.regret > pc.evenly_spaced.regret + 1e-9;
        }
      }
      out["plan_confidence"].push_back({{"group", g},
                                        {"win_probability_from", confidence_edges[b]},
                                        {"win_probability_to", confidence_edges[b + 1]},
                                        {"cases", cases},
                                        {"candidate_better", better},
                                        {"candidate_worse", worse}});
    }
  // The floors with the run's trend known (the noise floor of plans made in advance, the replay
  // fed the smoothed curve as its forecast), per family and cost, and pooled over costs (the
  // pooling of the targets).
  const std::size_t ncost = settings.cost_multipliers.size();
  const auto floor_rows = [&](const char* key, std::vector<double> RunEval::*regret, std::vector<int> RunEval::*vs_every_e) {
    for (const auto& f : shown)
      for (std::size_t c = 0; c <= ncost; ++c) {
        std::vector<double> v;
        std::size_t runs = 0, ties_or_beats = 0;  // over every run, as the win rates are
        for (const auto& r : results)
          for (std::size_t rc = 0; rc < ncost; ++rc) {
            if (!r.evaluated || !groups.covers(f, r.family) || (c != ncost && rc != c)) continue;
            ++runs;
            ties_or_beats += (r.*vs_every_e)[rc] >= 0;
            if (!std::isnan((r.*regret)[rc])) v.push_back((r.*regret)[rc]);
          }
        out[key].push_back({{"family", f}, {"cost_x_median_interval", c == ncost ? Json("all") : Json(settings.cost_multipliers[c])},
                            {"median_regret_pct", quantile(v, 0.5)}, {"p90_regret_pct", quantile(v, 0.9)},
                            {"ties_or_beats_every_e", runs ? static_cast<double>(ties_or_beats) / runs : 0.0}});
      }
  };
  floor_rows("smooth_oracle", &RunEval::smooth_oracle_regret, &RunEval::smooth_oracle_vs_every_e);
  floor_rows("trend_known_replay", &RunEval::trend_known_replay_regret, &RunEval::trend_known_replay_vs_every_e);
  // The forecast at cuts through each run (forecast_quality.h), pooled over the cuts of a family's
  // runs: quantiles of the fall ratio (over the cuts where the trend falls) and of the path error.
  for (const auto& f : shown) {
    std::vector<double> fall, path, end;
    for (const auto& r : results) {
      if (!r.evaluated || !groups.covers(f, r.family)) continue;
      for (const auto& cut : r.forecast_cuts) {
        if (!std::isnan(cut.fall_ratio)) fall.push_back(cut.fall_ratio);
        path.push_back(cut.path_error);
        end.push_back(cut.end_error);
      }
    }
    out["forecast_quality"].push_back({{"family", f},
                                       {"cuts", path.size()},
                                       {"cuts_with_fall", fall.size()},
                                       {"fall_ratio_p10", quantile(fall, 0.1)},
                                       {"fall_ratio_median", quantile(fall, 0.5)},
                                       {"fall_ratio_p90", quantile(fall, 0.9)},
                                       {"path_error_median", quantile(path, 0.5)},
                                       {"path_error_p90", quantile(path, 0.9)},
                                       {"end_error_median", quantile(end, 0.5)}});
  }
  double slowest = 0.0;
  for (const auto& r : results) slowest = std::max(slowest, r.replay_seconds);
  out["slowest_replay_s"] = slowest;
  return out;
}

Json reference_report(const std::vector<RunEval>& results, const FamilyGroups& groups, const EvalSettings& settings,
                      const std::vector<std::string>& labels) {
  Json out = Json::object();
  const auto families = families_of(results);
  std::vector<std::string> shown = groups.pooled_labels(families);
  for (const auto& f : families) shown.push_back(f);
  for (std::size_t v = 0; v < labels.size(); ++v)
    out[labels[v]] = rows(results, groups, settings, shown, [v](const std::string&, int, int) { return v; });
  return out;
}

std::string render(const Json& r) {
  std::ostringstream o;
  o << std::fixed;
  o << "families (runs):";
  for (const auto& [f, n] : r["families"].items()) o << " " << f << " (" << n.get<int>() << ")";
  if (r.contains("held_out_families") && !r["held_out_families"].empty()) {
    o << "\nheld out of every choice (scored with what the development families chose):";
    for (const auto& f : r["held_out_families"]) o << " " << f.get<std::string>();
  }
  o << "\nwarm-up " << r["warmup_pct"].get<double>() << " % of the logged points; " << std::setprecision(1)
    << r["seconds"].get<double>() << " s; slowest replay " << std::setprecision(3) << r["slowest_replay_s"].get<double>() << " s\n";
  if (r.contains("lr_schedules") && !r["lr_schedules"].is_null()) {
    o << "learning-rate schedules from " << r["lr_schedules"].get<std::string>() << ", runs given one:";
    for (const auto& [f, n] : r["runs_with_lr_schedule"].items()) o << " " << f << " (" << n.get<int>() << ")";
    o << "\n";
  } else {
    o << "learning-rate schedules: none given\n";
  }
  if (r.contains("cross_family_prior") && r["cross_family_prior"]["mode"] != "off") {
    const auto& sp = r["cross_family_prior"];
    const auto mode = sp["mode"].get<std::string>();
    o << "cross-family prior for plans (" << mode << "), learned leave-one-family-out on plan-time forecast errors:\n";
    for (const auto& [f, c] : sp["held_out"].items()) {
      o << "  " << f << ": " << std::setprecision(2);
      if (mode == "shape") {
        o << "fall x" << c["fall_scale"].get<double>() << ", speed x" << c["speed"].get<double>() << " (other families' error "
          << std::setprecision(3) << c["objective"].get<double>() << ", without " << c["identity_objective"].get<double>() << ")";
      } else if (mode == "shape-mixture") {
        o << c["mixture"].size() << " (fall, speed) corrections mixed";
      } else {
        for (const auto& [m, p] : c["member_prior"].items()) o << m << " " << p.get<double>() << " ";
      }
      o << "\n";
    }
  } else {
    o << "cross-family prior: off\n";
  }
  o << "variant chosen leave-one-family-out:\n";
  for (const auto& [f, v] : r["lofo_variant"].items()) {
    o << "  " << f << ": replay " << v["replay"].get<std::string>() << "\n";
    for (const auto& [cost, name] : v["plan"].items()) o << "    plan at " << cost << ": " << name.get<std::string>() << "\n";
  }
  const auto table = [&o](const Json& rows, const std::string& title) {
    o << "\n" << title << "\nregret % over runs with an achievable gain; win = CIL <= baseline's (ties count), strictly lower in ()\n";
    o << "denoised (dn_): the same schedules on the true curve smoothed by a 5-point running median, against that curve's optimum\n";
    o << "family         cost  mode    runs nogain  med_reg  p90_reg dn_med dn_p90 | every_cand   every_E      viper_fixed  viper_thr\n";
    for (const auto& s : rows) {
      const std::string cost = cost_label(s);
      o << std::left << std::setw(14) << s["family"].get<std::string>() << std::right << std::setw(5) << cost << "  "
        << std::left << std::setw(6) << s["mode"].get<std::string>() << std::right << std::setw(6) << s["runs"].get<int>()
        << std::setw(7) << s["runs_without_achievable_gain"].get<int>() << std::setprecision(2) << std::setw(9)
        << s["median_regret_pct"].get<double>() << std::setw(9) << s["p90_regret_pct"].get<double>() << std::setw(7)
        << s["denoised_median_regret_pct"].get<double>() << std::setw(7) << s["denoised_p90_regret_pct"].get<double>() << " | ";
      for (const auto& b : kBaselines)
        o << std::setprecision(2) << s["win_rate"][b].get<double>() << " (" << s["strict_win_rate"][b].get<double>() << ") ";
      o << "\n";
    }
  };
  if (r.contains("targets")) {
    o << "\ntargets (replay: median <= 3, p90 <= 20; plan: median <= 5, p90 <= 25, ties or beats every E >= 85 %);\n"
      << "in brackets each figure's 90 % bootstrap interval over the group's runs, resampled within each family\n";
    o << "group      mode    cost  runs  median [interval]      p90 [interval]        every_E [interval]  met\n";
    const auto figure = [](const Json& v, double scale, int precision) {
      std::ostringstream f;
      f << std::fixed << std::setprecision(precision);
      if (v.is_number()) f << scale * v.get<double>(); else f << "-";
      return f.str();
    };
    const auto bracket = [&](const Json& ci, double scale, int precision) {
      std::ostringstream b;  // a stream, not operator+: gcc 12 warns falsely (-Wrestrict) on "[" + std::string
      b << "[" << figure(ci[0], scale, precision) << "-" << figure(ci[1], scale, precision) << "]";
      return b.str();
    };
    for (const auto& t : r["targets"]) {
      o << std::left << std::setw(11) << t["group"].get<std::string>() << std::setw(7) << t["mode"].get<std::string>()
        << std::right << std::setprecision(1) << std::setw(5) << t["cost_x_median_interval"].get<double>() << "x"
        << std::setw(6) << t["runs"].get<int>() << std::setw(8) << figure(t["median_regret_pct"], 1.0, 2) << " " << std::left
        << std::setw(14) << bracket(t["median_regret_pct_ci90"], 1.0, 2) << std::right << std::setw(7)
        << figure(t["p90_regret_pct"], 1.0, 2) << " " << std::left << std::setw(15) << bracket(t["p90_regret_pct_ci90"], 1.0, 2)
        << std::right << std::setw(4) << figure(t["ties_or_beats_every_e"], 100.0, 0) << " % " << std::left << std::setw(11)
        << bracket(t["ties_or_beats_every_e_ci90"], 100.0, 0) << std::right << (t["met"].get<bool>() ? "yes" : "NO") << "\n";
    }
  }
  o << "\nagainst the optimum in hindsight (runs with a gain, chosen variants): more / fewer publishes, first publish\n"
    << "earlier / later, publishes at consecutive logged points, no publish at all\n";
  o << "family         cost  mode    gain   more fewer early  late consec  none\n";
  for (const auto& s : r["rows"]) {
    if (!s.contains("against_optimum")) continue;
    const std::string cost = cost_label(s);
    const auto& a = s["against_optimum"];
    o << std::left << std::setw(14) << s["family"].get<std::string>() << std::right << std::setw(5) << cost << "  " << std::left
      << std::setw(6) << s["mode"].get<std::string>() << std::right << std::setw(6)
      << s["runs"].get<int>() - s["runs_without_achievable_gain"].get<int>();
    for (const char* k : {"more_publishes", "fewer_publishes", "first_earlier", "first_later", "consecutive_publishes", "no_publish"})
      o << std::setw(6) << a[k].get<int>();
    o << "\n";
  }
  o << "\nplans against the best evenly spaced schedule (chosen variants; HedgeOptions::depart_confidence): runs; plans\n"
    << "that depart from it, of them better / worse than it on the true curve; candidates held to it, of them the\n"
    << "schedule kept did better / worse than the candidate; the plans without the rule: median / p90 regret %, every E\n";
  o << "family         cost  runs depart  paid  lost  held  paid  lost | without: median     p90  every_E\n";
  for (const auto& s : r["rows"]) {
    if (!s.contains("plan_choice")) continue;
    const std::string cost = cost_label(s);
    const auto& pc = s["plan_choice"];
    o << std::left << std::setw(14) << s["family"].get<std::string>() << std::right << std::setw(5) << cost
      << std::setw(6) << s["runs"].get<int>();
    for (const char* k : {"departs_from_even_spacing", "departures_that_paid", "departures_that_lost", "held_to_even_spacing",
                          "holds_that_paid", "holds_that_lost"})
      o << std::setw(k == std::string("departs_from_even_spacing") ? 7 : 6) << pc[k].get<int>();
    o << " | " << std::setprecision(2) << std::setw(15) << pc["without_the_rule"]["median_regret_pct"].get<double>()
      << std::setw(8) << pc["without_the_rule"]["p90_regret_pct"].get<double>() << std::setprecision(0) << std::setw(7)
      << 100.0 * pc["without_the_rule"]["ties_or_beats_every_e"].get<double>() << " %\n";
  }
  if (r.contains("plan_confidence")) {
    o << "\nplans' stated confidence (the candidate's share of scenarios where it does at least as well as the best\n"
      << "even schedule) against the true curve: cases, of them the candidate better / worse than that schedule\n";
    o << "group       share       cases  better  worse\n";
    for (const auto& c : r["plan_confidence"])
      o << std::left << std::setw(11) << c["group"].get<std::string>() << std::right << std::setprecision(1)
        << c["win_probability_from"].get<double>() << "-" << c["win_probability_to"].get<double>() << std::setw(11)
        << c["cases"].get<int>() << std::setw(8) << c["candidate_better"].get<int>() << std::setw(7)
        << c["candidate_worse"].get<int>() << "\n";
  }
  o << "\nvariants, pooled over costs (median / p90 regret %):\n";
  for (const auto& s : r["variant_summary"])
    o << "  " << std::left << std::setw(36) << s["variant"].get<std::string>() << std::setw(14) << s["family"].get<std::string>()
      << std::setw(7) << s["mode"].get<std::string>() << std::right << std::setprecision(2) << std::setw(8)
      << s["median_regret_pct"].get<double>() << std::setw(9) << s["p90_regret_pct"].get<double>() << "\n";
  const auto floor_lines = [&](const char* title, const char* key) {
    o << title;
    for (const auto& s : r[key]) {
      const std::string cost = cost_label(s);
      o << "  " << std::left << std::setw(14) << s["family"].get<std::string>() << std::right << std::setw(4) << cost
        << "  median " << std::setprecision(2) << s["median_regret_pct"].get<double>() << "  p90 " << s["p90_regret_pct"].get<double>()
        << "  every_E " << std::setprecision(0) << 100.0 * s["ties_or_beats_every_e"].get<double>() << " %\n";
    }
  };
  floor_lines("\nnoise floor: exact plan on the true curve smoothed (5-point running median), scored on the true curve\n",
              "smooth_oracle");
  floor_lines("\nreplay knowing the trend: the online scheduler (library defaults) forecasting with that smoothed curve,\n"
              "fed the logged points one at a time, scored on the true curve\n",
              "trend_known_replay");
  if (r.contains("forecast_quality")) {
    o << "\nthe forecast at 20, 30, ..., 80 % of each run (default forecaster, a plan's options) against the run's trend\n"
      << "(5-point running median): fall = forecast's fall from the trend's level at the cut to the end over the trend's\n"
      << "(cuts where the trend falls by > 3 % of its range; 1 is right, 0 foresees none); path = mean |forecast - trend|\n"
      << "over the rest, end = (forecast - trend) at the end, both in units of the trend's range (end > 0: fall under-predicted)\n";
    o << "family          cuts  fall_p10  fall_med  fall_p90  path_med  path_p90  end_med\n";
    for (const auto& q : r["forecast_quality"]) {
      o << std::left << std::setw(14) << q["family"].get<std::string>() << std::right << std::setw(6) << q["cuts"].get<int>()
        << std::setprecision(2) << std::setw(10) << q["fall_ratio_p10"].get<double>() << std::setw(10)
        << q["fall_ratio_median"].get<double>() << std::setw(10) << q["fall_ratio_p90"].get<double>() << std::setprecision(3)
        << std::setw(10) << q["path_error_median"].get<double>() << std::setw(10) << q["path_error_p90"].get<double>()
        << std::setw(9) << q["end_error_median"].get<double>() << "\n";
    }
  }
  table(r["rows"], "AFTER: hedged plans, regime-change refits (no reference run), variant chosen leave-one-family-out");
  table(r["before_rows"], "BEFORE: plans on the point forecast, no regime-change trigger (no reference run)");
  if (r.contains("with_reference"))
    for (const auto& [label, rows] : r["with_reference"].items())
      table(rows, "WITH A REFERENCE (analogues from other records of the same family), " + label);
  return o.str();
}

}  // namespace modelcast::bench
