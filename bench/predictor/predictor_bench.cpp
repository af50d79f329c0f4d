// Evaluation harness for the predictor over real learning curves of several families:
// warm-up at 20 % of the logged points; publish cost c = 0.5/2/8 x the run's median time
// between logged points, delivery d = c/2; offline plan and online replay; regret against the
// exact optimum on the true curve and win rates against the baselines. The hedging strength is
// chosen leave-one-family-out: each family is scored with the variant that did best on the
// other families. With --reference, the runs are scored again with an analogue prior made from
// other records of the same family (a comparable earlier run, where one exists). With
// --lr-schedules, runs whose configured learning-rate schedule is known get it as
// ForecastOptions::lr_schedule (plan and replay); without the flag no run has one. With
// --cross-family-prior (shape, shape-mixture or members), plans made in advance get a prior
// learned on the other families' plan-time forecast errors, strictly leave-one-family-out: for
// each held-out family every run is re-planned with that family's prior, and both the family's
// scores and the choice of its hedge come from those plans (replays never get it). Families read
// with --held-out-data are held out of every choice (the hedge of every family, development ones
// included, is chosen on development families only) and reported in their own rows.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "evaluate_run.h"
#include "parallel_for.h"
#include "report.h"
#include "shape_prior_fit.h"

namespace mp = modelcast::predictor;
namespace mb = modelcast::bench;
using Json = nlohmann::json;

namespace {

struct Source {
  std::string path, family;  // empty family: the file's track column
};


// run,step,lr (header required): each run's learning-rate schedule, piecewise linear between rows.
std::map<std::string, mp::LrSchedule> read_lr_schedules(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::map<std::string, mp::LrSchedule> out;
  std::string line;
  std::size_t n = 0;
  const auto fail = [&](const std::string& what) { return std::runtime_error(path + ":" + std::to_string(n) + ": " + what); };
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (n == 1) {
      if (f != std::vector<std::string>{"run", "step", "lr"}) throw fail("expected the header run,step,lr");
      continue;
    }
    if (f.size() != 3) throw fail("expected run,step,lr");
    std::size_t used = 0;
    std::int64_t step = 0;
    double lr = 0;
    try {
      step = std::stoll(f[1], &used);
      if (used != f[1].size()) throw std::invalid_argument("");
      lr = std::stod(f[2], &used);
      if (used != f[2].size()) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw fail("step or lr is not a number");
    }
    auto& s = out[f[0]];
    if (!s.steps.empty() && step <= s.steps.back()) throw fail("steps of run " + f[0] + " not increasing");
    if (!std::isfinite(lr) || lr < 0) throw fail("lr must be finite and >= 0");
    s.steps.push_back(step);
    s.lr.push_back(lr);
  }
  return out;
}

std::vector<mb::Variant> variants() {
  std::vector<mb::Variant> v;
  mb::Variant before{"before: point forecast, no regime trigger", false, {}, 0, false};
  v.push_back(before);
  if (std::getenv("BENCH_ABLATION")) {
    // One change at a time, online hedge 0.15 / 0.15 (plans: the same options).
    const mp::HedgeOptions h{.change_probability = 0.15, .change_depth = 0.15, .change_times = 4, .band_probability = 0.2,
                             .cap_at_current_level = false, .early_saturation_probability = 0.0};
    mp::HedgeOptions capped = h;
    capped.cap_at_current_level = true;
    v.push_back({"ablation: + band trigger (5 points)", false, {}, 5, false});
    v.push_back({"ablation: + hedge", true, h, 0, false});
    v.push_back({"ablation: + hedge + hindsight", true, h, 0, true});
    v.push_back({"ablation: + hedge + hindsight + band", true, h, 5, true});
    v.push_back({"ablation: + cap at current level", true, capped, 5, true});
    return v;
  }
  // Plans may also choose their schedule by expected or worst-case regret instead of expected CIL
  // (HedgeOptions::plan_choice); the online scheduler plans by expected CIL only.
  const std::pair<mp::PlanChoice, std::string> choices[] = {
      {mp::PlanChoice::kExpectedCil, ""}, {mp::PlanChoice::kExpectedRegret, ", by expected regret"},
      {mp::PlanChoice::kMinimaxRegret, ", by minimax regret"}};
  const std::size_t n_choices = std::getenv("BENCH_PLAN_CHOICE") ? 3 : 1;
  for (std::size_t ci = 0; ci < n_choices; ++ci)
  for (double early : {0.0, 0.15, 0.3})
    for (bool cap : {false, true}) {
      const auto& [choice, choice_name] = choices[ci];
      const std::string suffix = (cap ? ", capped" : "") + (early > 0 ? ", early=" + std::to_string(early).substr(0, 4) : std::string()) + choice_name;
      const bool plan_only = early > 0 || choice != mp::PlanChoice::kExpectedCil;
      mb::Variant none{"hedged p_change=0" + suffix, true, {}, 5};
      none.hedge_options.change_probability = 0.0;
      none.hedge_options.cap_at_current_level = cap;
      none.hedge_options.early_saturation_probability = early;
      none.hedge_options.plan_choice = choice;
      none.plan_only = plan_only;
      v.push_back(none);
      for (double depth : {0.15, 0.3})
        for (double p : {0.15, 0.3, 0.5}) {
          mb::Variant h{"hedged p_change=" + std::to_string(p).substr(0, 4) + " depth=" + std::to_string(depth).substr(0, 4) + suffix,
                        true, {}, 5};
          h.hedge_options.change_probability = p;
          h.hedge_options.change_depth = depth;
          h.hedge_options.cap_at_current_level = cap;
          h.hedge_options.early_saturation_probability = early;
          h.hedge_options.plan_choice = choice;
          h.plan_only = plan_only;
          v.push_back(h);
        }
    }
  {
    // Every hedge above that plans by expected CIL, averaged instead of chosen.
    mb::Variant mixture{"mixture of every hedge", true, {}, 5};
    mixture.plan_only = true;
    for (const auto& x : v)
      if (x.hedge && x.hedge_options.plan_choice == mp::PlanChoice::kExpectedCil) mixture.mixture_of.push_back(x.hedge_options);
    v.push_back(mixture);
  }
  mb::Variant defaults;
  defaults.name = "library defaults";
  defaults.library_defaults = true;
  v.push_back(defaults);
  return v;
}

std::vector<mb::RunEval> evaluate_all(const std::vector<std::pair<const mp::LossLog*, std::string>>& runs,
                                      const mb::EvalSettings& base, bool with_reference,
                                      const std::map<std::string, mb::ReferencePrior>& priors, int threads) {
  std::vector<mb::RunEval> results(runs.size());
  mb::parallel_for(runs.size(), threads, [&](std::size_t i) {
    mb::EvalSettings s = base;
    if (with_reference) s.prior = &priors.at(runs[i].second);
    results[i] = mb::evaluate_run(*runs[i].first, runs[i].second, s);
  });
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelcast predictor benchmark over real learning curves, leave-one-family-out"};
  std::vector<std::string> data, held_out_data;
  int per_family = 24, threads = 2;
  bool json = false, reference = false, hedge_schedule = false;
  double warmup_pct = 20;
  double anneal_noise_prior = std::nan("");
  double member_prior_power = 2.0;
  bool member_prior_replay = false;
  std::string work_mode = "inline";
  std::string json_out, only_family, lr_schedules_path, shape_prior_mode = "off";
  app.add_option("--data", data, "curves file, optionally FILE=FAMILY (default family: the track column); repeatable")->required();
  app.add_option("--held-out-data", held_out_data,
                 "curves file like --data whose families are held out of every choice and reported separately; repeatable");
  // Bounded: a warm-up outside (0, 100) scored nothing and printed nan rows, exit 0.
  app.add_option("--max-runs-per-family", per_family,
                 "deterministic sample, evenly spread over each family's records (0 = all)")
      ->check(CLI::Range(0, 1'000'000));
  app.add_option("--threads", threads, "worker threads (1 to 256)")->check(CLI::Range(1, 256));
  app.add_option("--warmup-pct", warmup_pct, "warm-up, in % of the logged points (1 to 99)")->check(CLI::Range(1.0, 99.0));
  app.add_option("--family", only_family, "evaluate one family only (the others still choose its variant)");
  app.add_option("--lr-schedules", lr_schedules_path,
                 "CSV run,step,lr: the learning-rate schedule each run was configured with; runs listed get it as "
                 "ForecastOptions::lr_schedule in plan and replay (without it: no run has one)");
  app.add_option("--anneal-noise-prior", anneal_noise_prior,
                 "ForecastOptions::anneal_noise_prior for runs with a schedule (default: the library's; 0: no prior)");
  app.add_flag("--hedge-schedule", hedge_schedule,
               "give the schedules to the hedge too (HedgeOptions::lr_schedule: its regime change placed where the rate anneals)");
  app.add_option("--cross-family-prior", shape_prior_mode,
                 "off: plans on the ensemble as fitted (default); shape: plans on the forecast corrected by the (fall, speed) "
                 "shape with the lowest error on the other families' plan-time forecasts; shape-mixture: plans on the mean of the forecast "
                 "under each other-family run's own best correction (each family weighted equally); members: the "
                 "ensemble's members weighted by their extrapolation error on the other families (ForecastOptions::member_prior)")
      ->check(CLI::IsMember({"off", "shape", "shape-mixture", "members"}));
  app.add_option("--member-prior-power", member_prior_power,
                 "with --cross-family-prior members: each member's prior is 1 / E^power (default 2, the back-test weights' form)");
  app.add_flag("--member-prior-replay", member_prior_replay,
               "with --cross-family-prior members: the online scheduler's refits get the member prior too");
  app.add_option("--work-mode", work_mode,
                 "the replays' OnlineOptions::work_mode (inline: the library's default; refits_in_background; "
                 "background: plans too)")
      ->check(CLI::IsMember({"inline", "refits_in_background", "background"}));
  app.add_flag("--reference", reference, "also score with an analogue prior from other records of the same family");
  app.add_flag("--json", json, "print JSON");
  app.add_option("--json-out", json_out, "also write the JSON to this file");
  CLI11_PARSE(app, argc, argv);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<mp::CurveCollection> collections;
  std::vector<std::string> families_of;
  std::vector<bool> held_out_file;
  std::vector<std::string> all_data = data;
  all_data.insert(all_data.end(), held_out_data.begin(), held_out_data.end());
  if (!held_out_data.empty() && shape_prior_mode != "off") {
    // Its fits pool every family but the scored one; they would look at the held-out families.
    std::cerr << "--cross-family-prior cannot be combined with --held-out-data\n";
    return 2;
  }
  for (std::size_t di = 0; di < all_data.size(); ++di) {
    const auto& d = all_data[di];
    held_out_file.push_back(di >= data.size());
    const auto eq = d.find('=');
    Source s{d.substr(0, eq), eq == std::string::npos ? "" : d.substr(eq + 1)};
    std::ifstream in(s.path);
    if (!in) {
      std::cerr << "cannot open " << s.path << "\n";
      return 1;
    }
    collections.push_back(mp::read_curve_collection(in, s.path, "val_loss"));
    families_of.push_back(s.family);
  }
  // Families and their runs, sorted by record, then a deterministic even sample.
  std::map<std::string, std::vector<const mp::LossLog*>> by_family;
  std::map<std::string, std::vector<mp::LossLog>> family_logs;
  mb::FamilyGroups groups;
  std::set<std::string> dev_families;
  for (std::size_t c = 0; c < collections.size(); ++c)
    for (const auto& r : collections[c].runs) {
      if (r.points.size() < 5 || !r.total_steps) continue;
      const auto fam = families_of[c].empty() ? r.track : families_of[c];
      (held_out_file[c] ? groups.held_out : dev_families).insert(fam);
      by_family[fam].push_back(&r);
      family_logs[fam].push_back(r);
    }
  for (const auto& f : groups.held_out)
    if (dev_families.count(f)) {
      std::cerr << "family " << f << " is in both --data and --held-out-data\n";
      return 2;
    }
  // An unknown family evaluated every family, as if --family had not been given.
  if (!only_family.empty() && !by_family.count(only_family)) {
    std::cerr << "--family " << only_family << " is none of the data's families:";
    for (const auto& [fam, runs] : by_family) std::cerr << " " << fam;
    std::cerr << "\n";
    return 2;
  }
  std::vector<std::pair<const mp::LossLog*, std::string>> selected;
  for (auto& [fam, runs] : by_family) {
    std::stable_sort(runs.begin(), runs.end(), [](const auto* a, const auto* b) { return a->record < b->record; });
    const std::size_t take = per_family <= 0 ? runs.size() : std::min<std::size_t>(runs.size(), static_cast<std::size_t>(per_family));
    for (std::size_t i = 0; i < take; ++i) selected.emplace_back(runs[i * runs.size() / take], fam);
  }
  std::map<std::string, mb::ReferencePrior> priors;
  if (reference)
    for (const auto& [fam, logs] : family_logs) priors.emplace(fam, mb::ReferencePrior(logs));

  std::map<std::string, mp::LrSchedule> lr_schedules;
  std::map<std::string, int> with_schedule;  // family -> selected runs given a schedule
  if (!lr_schedules_path.empty()) {
    try {
      lr_schedules = read_lr_schedules(lr_schedules_path);
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
    // Schedules are matched by run id: an id in two data files would be ambiguous.
    std::map<std::string, int> id_count;
    for (const auto& [fam, logs] : family_logs)
      for (const auto& r : logs) ++id_count[r.run];
    for (const auto& [id, s] : lr_schedules) {
      if (id_count[id] > 1) {
        std::cerr << lr_schedules_path << ": run id " << id << " names more than one run\n";
        return 1;
      }
      if (id_count[id] == 0) std::cerr << "note: " << lr_schedules_path << ": no run " << id << " in the data\n";
    }
    for (const auto& [log, fam] : selected)
      if (lr_schedules.count(log->run)) ++with_schedule[fam];
  }

  mb::EvalSettings settings;
  settings.warmup_fraction = warmup_pct / 100.0;
  if (!lr_schedules_path.empty()) settings.lr_schedules = &lr_schedules;
  settings.anneal_noise_prior = anneal_noise_prior;
  settings.hedge_schedule = hedge_schedule;
  settings.work_mode = work_mode == "background"              ? mp::OnlineOptions::WorkMode::kBackground
                      : work_mode == "refits_in_background" ? mp::OnlineOptions::WorkMode::kRefitsInBackground
                                                            : mp::OnlineOptions::WorkMode::kInline;
  settings.variants = variants();
  auto results = evaluate_all(selected, settings, false, priors, threads);
  // Shape prior, leave-one-family-out (plans only; replays do not depend on it).
  Json shape_json = Json::object();
  shape_json["mode"] = shape_prior_mode;
  std::map<std::string, std::vector<mb::RunEval>> selection;
  if (shape_prior_mode != "off") {
    const auto fit = mb::fit_shape_prior(selected, settings, threads);
    mb::MemberPriorFit member_fit;
    if (shape_prior_mode == "members") {
      member_fit = mb::fit_member_prior(selected, settings, threads);
      shape_json["member_error"] = member_fit.error;
    }
    const auto cell_json = [&](std::size_t c, const std::string& held) {
      return Json{{"fall_scale", fit.grid[c].fall_scale}, {"speed", fit.grid[c].speed},
                  {"objective", fit.objective(c, held)}, {"identity_objective", fit.objective(0, held)}};
    };
    shape_json["all_families"] = cell_json(fit.best(""), "");
    for (const auto& g : fit.grid) shape_json["grid"].push_back({g.fall_scale, g.speed});
    for (const auto& [fam, err] : fit.family_error) {
      shape_json["family_runs"][fam] = fit.family_runs.at(fam);
      shape_json["family_error"][fam] = err;  // per grid cell; [0] is without a prior
    }
    std::map<std::string, const mb::RunEval*> base;
    for (const auto& r : results) base[r.family + "/" + r.run] = &r;
    std::set<std::string> fams;
    for (const auto& [log, fam] : selected) fams.insert(fam);
    std::map<std::string, std::vector<mb::RunEval>> per_held;
    for (const auto& held : fams) {
      const std::size_t c = fit.best(held);
      shape_json["held_out"][held] = cell_json(c, held);
      shape_json["held_out"][held]["error_on_held_out_family"] =
          fit.family_error.count(held) ? Json(fit.family_error.at(held)[c]) : Json(nullptr);
      mb::EvalSettings s = settings;
      if (shape_prior_mode == "shape") {
        s.shape_prior = fit.grid[c];
      } else if (shape_prior_mode == "members") {
        s.member_prior = member_fit.prior(held, member_prior_power);
        shape_json["member_prior_power"] = member_prior_power;
        shape_json["member_prior_replay"] = member_prior_replay;
        shape_json["held_out"][held]["member_prior"] = s.member_prior;
      } else {
        for (const auto& [cell, weight] : fit.mixture(held)) {
          s.shape_mixture.emplace_back(fit.grid[cell], weight);
          shape_json["held_out"][held]["mixture"].push_back({fit.grid[cell].fall_scale, fit.grid[cell].speed, weight});
        }
      }
      s.member_prior_replay = member_prior_replay && shape_prior_mode == "members";
      s.skip_replay = !s.member_prior_replay;
      auto res = evaluate_all(selected, s, false, priors, threads);
      for (auto& r : res) {  // replay outcomes from the run without a prior
        if (!r.evaluated || !s.skip_replay) continue;
        const auto& b = *base.at(r.family + "/" + r.run);
        r.replay_seconds = b.replay_seconds;
        for (std::size_t ci = 0; ci < r.outcome.size(); ++ci) r.outcome[ci][1] = b.outcome[ci][1];
      }
      selection[held] = std::move(res);
    }
    // Each family's runs as planned with its own held-out prior.
    for (auto& r : results) {
      const auto& res = selection.at(r.family);
      for (const auto& x : res)
        if (x.run == r.run && x.family == r.family) r = x;
    }
  }
  std::vector<mb::RunEval> with_ref;
  if (reference) {
    mb::EvalSettings rs = settings;
    rs.variants = {settings.variants[0], settings.variants.back()};  // before, and the library defaults
    with_ref = evaluate_all(selected, rs, true, priors, threads);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  Json out = mb::report(results, groups, settings, only_family, selection.empty() ? nullptr : &selection);
  out["cross_family_prior"] = shape_json;
  if (reference) out["with_reference"] = mb::reference_report(with_ref, groups, settings, {"before", "library defaults"});
  out["data"] = data;
  out["held_out_data"] = held_out_data;
  out["warmup_pct"] = warmup_pct;
  out["lr_schedules"] = lr_schedules_path.empty() ? Json(nullptr) : Json(lr_schedules_path);
  out["runs_with_lr_schedule"] = with_schedule;
  out["hedge_lr_schedule"] = !lr_schedules_path.empty() && hedge_schedule;
  out["anneal_noise_prior"] = std::isnan(anneal_noise_prior) ? mp::ForecastOptions{}.anneal_noise_prior : anneal_noise_prior;
  out["max_runs_per_family"] = per_family;
  out["seconds"] = seconds;
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  if (json) std::cout << out.dump(2) << "\n";
  else std::cout << mb::render(out);
  return 0;
}
