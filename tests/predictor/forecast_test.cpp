// Ensemble forecast: accuracy on synthetic curves, use of priors, and the no-NaN guarantee.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include "modelcast/predictor_forecast.h"

namespace modelcast::predictor {
namespace {

std::vector<CurvePoint> synthetic(const std::function<double(std::int64_t)>& loss, std::int64_t total, std::int64_t every,
                                  double noise_sd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, noise_sd);
  std::vector<CurvePoint> pts;
  // Step 0 is the initialisation loss (ln of the vocabulary size for a language model), not on the curve.
  for (std::int64_t s = 0; s <= total; s += every) pts.push_back({s, s ? loss(s) + noise(rng) : 11.0, 0.5 * static_cast<double>(s)});
  return pts;
}

double max_abs_error(const Forecast& f, const std::function<double(std::int64_t)>& loss) {
  double e = 0;
  for (std::size_t i = 0; i < f.steps.size(); ++i) e = std::max(e, std::abs(f.loss[i] - loss(f.steps[i])));
  return e;
}

void expect_finite(const Forecast& f) {
  ASSERT_EQ(f.steps.size(), f.loss.size());
  ASSERT_EQ(f.steps.size(), f.time_s.size());
  for (std::size_t i = 0; i < f.loss.size(); ++i) {
    EXPECT_TRUE(std::isfinite(f.loss[i]) && std::isfinite(f.lower[i]) && std::isfinite(f.upper[i]) && std::isfinite(f.time_s[i]));
    EXPECT_LE(f.lower[i], f.loss[i]);
    EXPECT_GE(f.upper[i], f.loss[i]);
    if (i) {
      EXPECT_GT(f.time_s[i], f.time_s[i - 1]);
    }
  }
}

TEST(Forecast, ExtrapolatesAPowerLawFromItsFirstThird) {
  const auto truth = [](std::int64_t s) { return 3.0 + 2.0 * std::pow(static_cast<double>(s) / 3000.0, -0.4); };
  const auto all = synthetic(truth, 3000, 50, 0.003, 7);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 21);  // steps 0..1000
  ForecastOptions o;
  o.total_steps = 3000;
  const auto f = forecast_curve(prefix, o);
  expect_finite(f);
  EXPECT_FALSE(f.fallback);
  EXPECT_EQ(f.steps.front(), 1050);  // cadence continued
  EXPECT_EQ(f.steps.back(), 3000);
  EXPECT_LT(max_abs_error(f, truth), 0.05);
  // The forecast's predicted times follow the logged 0.5 s/step.
  EXPECT_NEAR(f.time_s.back(), 1500.0, 1.0);
}

// Each forecast path of `shifted` minus `by` against the same path of `base`, largest gap.
double largest_gap(const Forecast& base, const Forecast& shifted, double by) {
  EXPECT_EQ(base.steps, shifted.steps);
  double gap = 0;
  const auto compare = [&](const std::vector<double>& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) gap = std::max(gap, std::abs(b[i] - by - a[i]));
  };
  compare(base.loss, shifted.loss);
  compare(base.lower, shifted.lower);
  compare(base.upper, shifted.upper);
  return gap;
}

TEST(Forecast, ALossWithAConstantInItIsForecastAsTheLossWithoutOnceItsFloorIsStated) {
  // A loss logged with 1000 added (an MSE in offset units, a loss plus a constant regulariser):
  // sized on the level, the band was 1 % of 1000 wide and the fallback fell towards 0.
  const auto truth = [](std::int64_t s) { return 0.4 + 2.0 * std::pow(static_cast<double>(s) / 3000.0, -0.4); };
  const auto plain = synthetic(truth, 3000, 50, 0.01, 11);
  auto offset = plain;
  for (auto& p : offset) p.loss += 1000.0;
  const std::vector<CurvePoint> prefix(plain.begin(), plain.begin() + 21), offset_prefix(offset.begin(), offset.begin() + 21);
  ForecastOptions o;
  o.total_steps = 3000;
  const auto base = forecast_curve(prefix, o);
  EXPECT_EQ(base.loss_floor, 0.0);  // every loss positive
  const auto unstated = forecast_curve(offset_prefix, o);
  EXPECT_GT(largest_gap(base, unstated, 1000.0), 1.0);  // the floor at 0 is no use 1000 below the loss
  o.loss_floor = 1000.0;
  const auto stated = forecast_curve(offset_prefix, o);
  EXPECT_EQ(stated.loss_floor, 1000.0);
  // The same up to the fits' own tolerance: 1000 + loss - 1000 is not loss to the last bit, and
  // the fits stop within a tolerance of their optimum (the run falls by about 3).
  EXPECT_LT(largest_gap(base, stated, 1000.0), 0.01);
  ASSERT_EQ(base.members.size(), stated.members.size());
  for (std::size_t k = 0; k < base.members.size(); ++k) {
    EXPECT_EQ(stated.members[k].family, base.members[k].family);
    EXPECT_NEAR(stated.members[k].loss.back() - 1000.0, base.members[k].loss.back(), 0.02);
  }
  // A loss below the stated floor is refused, naming its step.
  o.loss_floor = offset_prefix.back().loss + 0.01;
  try {
    forecast_curve(offset_prefix, o);
    FAIL() << "a loss below the floor was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("below loss_floor"), std::string::npos) << e.what();
  }
  o.loss_floor = std::numeric_limits<double>::infinity();
  EXPECT_THROW(check_forecast_options(o), Error);
}

TEST(Forecast, ALossWithoutAFloorIsForecastTheSameWhateverConstantItCarries) {
  // A log-likelihood or a negated return has no floor at 0, and no origin: -50 or -5000 added to
  // every loss is the same run. The band and the fallback were sized on |loss|, and the families
  // that level off at 0 joined the ensemble.
  const auto truth = [](std::int64_t s) { return 0.4 + 2.0 * std::pow(static_cast<double>(s) / 3000.0, -0.4); };
  const auto plain = synthetic(truth, 3000, 50, 0.01, 13);
  ForecastOptions o;
  o.total_steps = 3000;
  const auto forecast_shifted = [&](double by, std::size_t points) {
    std::vector<CurvePoint> prefix(plain.begin(), plain.begin() + static_cast<std::ptrdiff_t>(points));
    for (auto& p : prefix) p.loss += by;
    return forecast_curve(prefix, o);
  };
  for (std::size_t points : {2, 21}) {  // the fallback (no shape yet) and the ensemble
    const auto near = forecast_shifted(-50.0, points), far = forecast_shifted(-5000.0, points);
    EXPECT_TRUE(std::isinf(near.loss_floor) && near.loss_floor < 0);
    EXPECT_LT(largest_gap(near, far, -4950.0), 1e-4) << points << " points";
    for (const auto& m : far.members) EXPECT_TRUE(m.family != "log_power" && m.family != "vapor_pressure" && m.family != "viper_exp") << m.family;
  }
  // A positive loss stated to have no floor is forecast as the same loss 50 lower.
  o.loss_floor = -std::numeric_limits<double>::infinity();
  EXPECT_LT(largest_gap(forecast_shifted(-50.0, 21), forecast_shifted(0.0, 21), 50.0), 1e-4);
}

TEST(Forecast, ReferencePriorCarriesTheShapeFromTwoPoints) {
  // Only step 0 and one more point: no family can be fitted, a reference of a comparable run can.
  const auto truth = [](std::int64_t s) {
    const double u = static_cast<double>(s) / 1000.0;
    return s == 0 ? 10.8 : 3.3 + 1.2 * std::pow(u, -0.5) * (1.0 - 0.3 * u);
  };
  ReferenceCurve ref;
  for (int i = 0; i <= 100; ++i) {
    ref.progress.push_back(i / 100.0);
    ref.loss.push_back(truth(i * 10) + 0.1);  // same shape, 0.1 higher
  }
  const std::vector<CurvePoint> prefix{{0, truth(0), 0.0}, {200, truth(200), 10.0}};
  ForecastOptions o;
  o.total_steps = 1000;
  o.future_steps = {400, 600, 800, 1000};
  const auto without = forecast_curve(prefix, o);
  o.reference = ref;
  const auto with = forecast_curve(prefix, o);
  expect_finite(with);
  EXPECT_TRUE(without.fallback);
  EXPECT_FALSE(with.fallback);
  EXPECT_LT(max_abs_error(with, truth), 0.03);
  EXPECT_GT(max_abs_error(without, truth), 0.1);
}

TEST(Forecast, LearningRateScheduleProducesTheDecayDrop) {
  // Constant rate to 60 %, linear decay to 0 at the end; the loss follows the cumulative rate
  // and drops by 0.3 more as the rate anneals (the shape real WSD runs show).
  const std::int64_t total = 2000;
  LrSchedule sched{{0, 1200, 2000}, {1.0, 1.0, 0.0}};
  const auto s1 = [&](std::int64_t s) {
    const double x = static_cast<double>(s);
    if (x <= 1200) return x;
    const double d = x - 1200;
    return 1200 + d - 0.5 * d * d / 800.0;
  };
  const double s1_total = s1(total);
  const auto truth = [&](std::int64_t s) {
    const double anneal = s <= 1200 ? 0.0 : (static_cast<double>(s) - 1200.0) / 800.0;
    return 3.0 + std::pow(s1(s) / s1_total, -0.5) - 0.3 * anneal;
  };
  const auto all = synthetic(truth, total, 50, 0.002, 9);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 21);  // steps 0..1000, before decay
  ForecastOptions o;
  o.total_steps = total;
  const auto plain = forecast_curve(prefix, o);
  o.lr_schedule = sched;
  o.anneal_drop = 0.3;  // known from an earlier run with this schedule
  const auto aware = forecast_curve(prefix, o);
  expect_finite(aware);
  // Without a known drop (and no decay in the prefix) the schedule is set aside, with a note.
  o.anneal_drop = std::nan("");
  const auto unknown = forecast_curve(prefix, o);
  EXPECT_NE(unknown.note.find("lr_schedule not used"), std::string::npos) << unknown.note;
  EXPECT_NEAR(unknown.loss.back(), plain.loss.back(), 1e-12);
  const double plain_err = std::abs(plain.loss.back() - truth(total));
  const double aware_err = std::abs(aware.loss.back() - truth(total));
  EXPECT_LT(aware_err, 0.05);
  EXPECT_GT(plain_err, 0.15);  // blind to the schedule, it misses most of the 0.3 decay drop
}

TEST(Forecast, EstimatesTheAnnealDropWhenThePrefixAlreadyDecays) {
  const std::int64_t total = 2000;
  LrSchedule sched{{0, 1000, 2000}, {1.0, 1.0, 0.0}};
  const auto truth = [&](std::int64_t s) {
    const double x = static_cast<double>(s);
    const double s1 = x <= 1000 ? x : 1000 + (x - 1000) - 0.5 * (x - 1000) * (x - 1000) / 1000.0;
    const double anneal = x <= 1000 ? 0.0 : (x - 1000) / 1000.0;
    return 3.0 + std::pow(s1 / 1500.0, -0.5) - 0.4 * anneal;
  };
  const auto all = synthetic(truth, total, 50, 0.001, 10);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 29);  // to step 1400: some decay seen
  ForecastOptions o;
  o.total_steps = total;
  o.lr_schedule = sched;
  const auto f = forecast_curve(prefix, o);
  EXPECT_LT(std::abs(f.loss.back() - truth(total)), 0.08);
  // Only the schedule's shape counts: the same one in other units forecasts the same. Rates of
  // 1e306 summed to infinity, and the forecast was a flat line its note called another.
  o.lr_schedule = LrSchedule{sched.steps, {1e306, 1e306, 0.0}};
  const auto huge = forecast_curve(prefix, o);
  expect_finite(huge);
  ASSERT_EQ(huge.loss.size(), f.loss.size());
  for (std::size_t i = 0; i < f.loss.size(); ++i) EXPECT_NEAR(huge.loss[i], f.loss[i], 1e-9) << "at step " << f.steps[i];
  EXPECT_EQ(huge.note, f.note);
}

TEST(Forecast, DoesNotTrustADropMeasuredOnBarelyBegunDecay) {
  // Cosine schedule; the loss follows the step axis and has no annealing drop at all, but the
  // first decayed points happen to sit 0.02 below the curve (evaluation noise). At 20 % the
  // rate has annealed by under 10 %: attributing that 0.02 to annealing would extrapolate it
  // more than tenfold. The drop is not measured, so the schedule is set aside.
  const std::int64_t total = 1500;
  LrSchedule sched;
  for (std::int64_t s = 0; s <= total; s += 25) {
    sched.steps.push_back(s);
    sched.lr.push_back(0.5 * (1 + std::cos(M_PI * static_cast<double>(s) / static_cast<double>(total))));
  }
  const auto truth = [&](std::int64_t s) { return 0.4 + 0.3 * std::pow(static_cast<double>(s) / static_cast<double>(total), -0.5); };
  auto all = synthetic(truth, total, 25, 0.0, 12);
  for (auto& p : all)
    if (p.step >= 150 && p.step <= 300) p.loss -= 0.02;
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 13);  // to step 300 (20 %)
  ForecastOptions o;
  o.total_steps = total;
  const auto plain = forecast_curve(prefix, o);
  o.lr_schedule = sched;
  const auto aware = forecast_curve(prefix, o);
  expect_finite(aware);
  EXPECT_NE(aware.note.find("lr_schedule not used"), std::string::npos) << aware.note;
  EXPECT_NEAR(aware.loss.back(), plain.loss.back(), 1e-12);
  EXPECT_GT(aware.loss.back(), truth(total) - 0.1);
}

TEST(Forecast, NoisePriorGivesAnUnmeasuredAnnealDropTheNoiseScale) {
  // Warmup-stable-decay: constant to 80 %, linear decay to 0. No decay in the prefix, so the drop
  // cannot be measured; with anneal_noise_prior = 1 it is the prefix's noise sd.
  const std::int64_t total = 2000;
  LrSchedule sched{{0, 1600, 2000}, {1.0, 1.0, 0.0}};
  const auto truth = [&](std::int64_t s) { return 2.0 + 0.2 * std::pow(static_cast<double>(s) / static_cast<double>(total), -0.3); };
  const auto all = synthetic(truth, total, 40, 0.02, 13);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 11);
  ForecastOptions o;
  o.total_steps = total;
  o.lr_schedule = sched;
  const auto off = forecast_curve(prefix, o);  // default: no prior
  EXPECT_NE(off.note.find("lr_schedule not used"), std::string::npos) << off.note;
  o.anneal_noise_prior = 1.0;
  const auto with_prior = forecast_curve(prefix, o);
  expect_finite(with_prior);
  const auto at = with_prior.note.find("from the noise prior");
  ASSERT_NE(at, std::string::npos) << with_prior.note;
  const double drop = std::stod(with_prior.note.substr(with_prior.note.find("anneal drop ") + 12));
  EXPECT_GT(drop, 0.01);  // the noise sd is 0.02; the median-based estimate from 9 points is rough
  EXPECT_LT(drop, 0.04);  // (and it counts the curve's own curvature as noise: a gentle curve here)
  // The same fit as with a stated drop of 0, lower by the drop once the rate has annealed.
  o.anneal_drop = 0.0;
  const auto zero = forecast_curve(prefix, o);
  EXPECT_NEAR(with_prior.loss.back(), zero.loss.back() - drop, 1e-5);
  EXPECT_NEAR(with_prior.loss.front(), zero.loss.front(), 1e-9);  // before the decay: no drop yet
}

TEST(Forecast, NeverReturnsNaNOnHostileInput) {
  ForecastOptions o;
  o.total_steps = 10000;
  const std::vector<std::vector<CurvePoint>> cases = {
      {{100, 5.0, 1.0}},                                            // one point
      {{0, 11.0, 0.0}, {100, 5.0, 1.0}},                            // init + one point
      {{1, 4.0, 1.0}, {2, 4.0, 2.0}, {3, 4.0, 3.0}, {4, 4.0, 4.0}},  // constant
      {{1, 1.0, 1.0}, {2, 2.0, 2.0}, {3, 4.0, 3.0}, {4, 8.0, 4.0}, {5, 16.0, 5.0}},  // diverging
      {{1, 3.0, 1.0}, {2, 1e9, 2.0}, {3, 2.9, 3.0}, {4, -1e9, 4.0}, {5, 2.8, 5.0}},  // wild spikes
      {{10, 1e-12, 1.0}, {20, 1e-13, 2.0}, {30, 1e-14, 3.0}, {40, 1e-15, 4.0}},        // tiny values
  };
  for (const auto& c : cases) {
    const auto f = forecast_curve(c, o);
    expect_finite(f);
    ASSERT_FALSE(f.loss.empty());
  }
  // A single point gives no shape: the fallback is flagged and explained.
  const auto single = forecast_curve(cases[0], o);
  EXPECT_TRUE(single.fallback);
  EXPECT_FALSE(single.note.empty());
}

TEST(Forecast, WithoutAnyShapeAssumesAGentleDecayAndSaysSo) {
  // Initialisation loss plus one point: nothing to fit. A flat forecast would make the planner
  // never publish; the documented fallback keeps the loss falling slowly (x^-0.05).
  ForecastOptions o;
  o.total_steps = 1000;
  const auto f = forecast_curve(std::vector<CurvePoint>{{0, 11.0, 0.0}, {100, 5.0, 10.0}}, o);
  EXPECT_TRUE(f.fallback);
  EXPECT_NE(f.note.find("gentle decay"), std::string::npos) << f.note;
  for (std::size_t i = 1; i < f.loss.size(); ++i) EXPECT_LT(f.loss[i], f.loss[i - 1]);
  EXPECT_NEAR(f.loss.back(), 5.0 * std::pow(10.0, -0.05), 1e-9);
}

// Every family falls or levels off: on a loss that rose steadily from 2 to 5, the fits missed
// the newest points and the forecast began at 4 from the next step, a gain promised at once that
// the plan spent 24 publishes on.
TEST(Forecast, ALossThatIsRisingIsForecastFlatWhereItIsAndSaysSo) {
  ForecastOptions o;
  o.total_steps = 1000;
  std::vector<CurvePoint> rising;
  for (int i = 0; i <= 30; ++i) rising.push_back({10 * i, 2.0 + 0.1 * i, 0.5 * i});
  const auto f = forecast_curve(rising, o);
  expect_finite(f);
  EXPECT_TRUE(f.fallback);
  EXPECT_NE(f.note.find("the loss is rising"), std::string::npos) << f.note;
  for (double v : f.loss) EXPECT_DOUBLE_EQ(v, 5.0);
  EXPECT_NEAR(f.time_s.back(), 50.0, 1.0);  // the time axis is still forecast
  // A rise within the noise, or a fall, is left to the ensemble: a noisy plateau, and a power law
  // whose newest half flattens under its noise.
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<CurvePoint> plateau;
  for (int i = 0; i <= 30; ++i) plateau.push_back({10 * i, 3.0 + 0.0005 * i + noise(rng), 0.5 * i});
  EXPECT_EQ(forecast_curve(plateau, o).note.find("rising"), std::string::npos);
  const auto power = synthetic([](std::int64_t s) { return 3.0 + 2.0 * std::pow(static_cast<double>(s) / 3000.0, -0.4); }, 1000, 50, 0.003, 7);
  o.total_steps = 3000;
  EXPECT_EQ(forecast_curve(power, o).note.find("rising"), std::string::npos);
}

// A real run whose newest points lie flat for a while before the loss falls again: the first 18
// points of `charlm` run s001 (bench/data/curves/stdlib_val_loss.csv, a character-level language
// model with momentum and a cosine schedule; its loss goes on from 2.89 at step 340 to 2.66 at
// step 1,200, part of it the schedule's anneal, which the forecast is not told of). The back-test on the flat
// stretch favoured the families that level off, and the ensemble (their five best fits, one
// shape in three parameterisations) forecast a fall of 0.03 to the end: waiting for a better
// version then looked worthless, and the online scheduler published at every dip.
TEST(Forecast, APrefixWhoseNewestPointsLieFlatIsNotForecastToLevelOff) {
  const std::vector<CurvePoint> s001 = {
      {0, 4.26853, 0.0}, {20, 3.87881, 0.0025}, {40, 3.46857, 0.0050}, {60, 3.24032, 0.0075},
      {80, 3.16534, 0.0100}, {100, 3.10601, 0.0124}, {120, 3.07812, 0.0149}, {140, 3.04205, 0.0174},
      {160, 3.03010, 0.0199}, {180, 2.96665, 0.0224}, {200, 2.92881, 0.0249}, {220, 2.91609, 0.0274},
      {240, 2.90887, 0.0299}, {260, 2.88959, 0.0323}, {280, 2.91437, 0.0348}, {300, 2.89159, 0.0373},
      {320, 2.87019, 0.0398}, {340, 2.89260, 0.0423}};
  ForecastOptions o;
  o.total_steps = 1200;
  const auto f = forecast_curve(s001, o);
  expect_finite(f);
  ASSERT_FALSE(f.fallback) << f.note;
  const double last = s001.back().loss, true_end = 2.66271;
  EXPECT_LT(f.loss.back(), last - 0.5 * (last - true_end)) << "at least half the fall still ahead";
  EXPECT_GT(f.loss.back(), true_end - 0.5 * (last - true_end)) << "and not far past it";
}

// Members whose back-test errors differ by less than the noise cannot be ranked by them: their
// weights stay close, whichever happened to match the tail's noise best.
TEST(Forecast, MembersWhoseBackTestsDifferByLessThanTheNoiseShareTheWeight) {
  const double sd = 0.02;
  const auto truth = [](std::int64_t s) { return 2.0 + 1.5 * std::pow(static_cast<double>(s) / 3000.0, -0.3); };
  for (unsigned seed : {3u, 4u, 5u}) {
    const auto all = synthetic(truth, 3000, 50, sd, seed);
    const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 25);
    ForecastOptions o;
    o.total_steps = 3000;
    const auto f = forecast_curve(prefix, o);
    ASSERT_GE(f.members.size(), 3u) << seed;
    int compared = 0;
    for (const auto& a : f.members)
      for (const auto& b : f.members) {
        if (&a != &b && std::abs(a.backtest_rmse - b.backtest_rmse) < 0.5 * sd) {
          ++compared;
          EXPECT_LT(a.weight / b.weight, 1.5) << seed << ": " << a.family << " (back-test " << a.backtest_rmse << ") against "
                                              << b.family << " (" << b.backtest_rmse << ")";
        }
      }
    EXPECT_GT(compared, 0) << seed << ": no two members with back-tests within half a noise sd";
  }
}

// Two early points that fall steeply: the x^-0.5 line through them, carried to the end of the
// run, went through the floor, and the fallback forecast 0 from the next step on.
TEST(Forecast, TheFallbackThroughTwoSteepPointsFallsAtMostHalfwayToTheFloor) {
  ForecastOptions o;
  o.total_steps = 2000;
  const auto f = forecast_curve(std::vector<CurvePoint>{{0, 5.0, 0.0}, {10, 4.0, 1.0}, {20, 1.0, 2.0}}, o);
  ASSERT_TRUE(f.fallback);
  EXPECT_NE(f.note.find("at most halfway to the loss floor"), std::string::npos) << f.note;
  ASSERT_FALSE(f.loss.empty());
  // The floor of positive losses is 0: halfway from 1 is 0.5, and the forecast still falls.
  for (double v : f.loss) EXPECT_GE(v, 0.5 - 1e-12);
  EXPECT_LT(f.loss.front(), 1.0);
  EXPECT_NEAR(f.loss.back(), 0.5, 1e-12);
}

TEST(Forecast, ViperPredictsAFlatCurveWhenItCannotFit) {
  ForecastOptions o;
  o.total_steps = 1000;
  const auto f = forecast_viper(std::vector<CurvePoint>{{0, 11.0, 0.0}, {100, 5.0, 10.0}}, o);
  EXPECT_TRUE(f.fallback);
  for (double v : f.loss) EXPECT_DOUBLE_EQ(v, 5.0);
}

// Progress is step / total_steps; [0, 5, 10] (steps given as progress) was taken without a word.
TEST(Forecast, AReferenceWithProgressPastOneIsRefused) {
  ForecastOptions o;
  o.total_steps = 2000;
  o.reference = ReferenceCurve{{0.0, 5.0, 10.0}, {3.0, 2.0, 1.0}, {}};
  try {
    forecast_curve(std::vector<CurvePoint>{{100, 2.0, 1.0}, {200, 1.5, 2.0}, {300, 1.2, 3.0}}, o);
    ADD_FAILURE() << "a reference with progress 5 and 10 was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reference progress must be in [0, 1] (step / total_steps), got 5.000000 at "
                                         "reference point 1"),
              std::string::npos)
        << e.what();
  }
  o.reference = ReferenceCurve{{0.0, 0.5, 1.0}, {3.0, 2.0, 1.0}, {}};
  EXPECT_NO_THROW(forecast_curve(std::vector<CurvePoint>{{100, 2.0, 1.0}, {200, 1.5, 2.0}, {300, 1.2, 3.0}}, o));
}

// An unsorted future_steps lost steps without a word: [1500, 400, 900] forecast 1500 and the end.
TEST(Forecast, UnsortedFutureStepsAreRefusedNamingTheFirstOutOfOrder) {
  ForecastOptions o;
  o.total_steps = 2000;
  o.future_steps = {1500, 400, 900};
  try {
    forecast_curve(std::vector<CurvePoint>{{100, 2.0, 1.0}, {200, 1.5, 2.0}, {300, 1.2, 3.0}}, o);
    ADD_FAILURE() << "unsorted future_steps were taken";
  } catch (const modelcast::Error& e) {
    EXPECT_EQ(e.code(), modelcast::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("future_steps must be strictly increasing: 400 at index 1 follows 1500"),
              std::string::npos)
        << e.what();
  }
  o.future_steps = {400, 900, 1500};
  EXPECT_EQ(forecast_curve(std::vector<CurvePoint>{{100, 2.0, 1.0}, {200, 1.5, 2.0}, {300, 1.2, 3.0}}, o).steps,
            (std::vector<std::int64_t>{400, 900, 1500, 2000}));
}

TEST(Forecast, RejectsBadInput) {
  ForecastOptions o;
  o.total_steps = 100;
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{}, o), modelcast::Error);
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{{10, 1.0, 1.0}, {10, 0.9, 2.0}}, o), modelcast::Error);
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{{10, std::nan(""), 1.0}}, o), modelcast::Error);
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{{100, 1.0, 1.0}}, o), modelcast::Error);  // nothing left
  o.lr_schedule = LrSchedule{{0, 50}, {1.0}};
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{{10, 1.0, 1.0}}, o), modelcast::Error);
  o.lr_schedule.reset();
  // A clock running backwards made the rest of the run take no time at all.
  try {
    forecast_curve(std::vector<CurvePoint>{{10, 1.0, 5.0}, {20, 0.9, 6.0}, {30, 0.8, 2.0}}, o);
    ADD_FAILURE() << "forecast on a clock that runs backwards";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("time at step 30 (2.000000 s) is before the previous point's (6.000000 s)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(forecast_curve(std::vector<CurvePoint>{{10, 1.0, 5.0}, {20, 0.9, INFINITY}}, o), modelcast::Error);
  // A run longer than 2^53 steps: its future grid once overflowed into an endless loop.
  o.total_steps = std::numeric_limits<std::int64_t>::max();
  try {
    forecast_curve(std::vector<CurvePoint>{{10, 1.0, 1.0}, {20, 0.9, 2.0}}, o);
    ADD_FAILURE() << "a total_steps beyond 2^53 was taken";
  } catch (const modelcast::Error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond 2^53"), std::string::npos) << e.what();
  }
  // Settings that gave a NaN band (band_z NaN), a lower edge above the upper (negative), a
  // fallback whatever fitted (no member or no start), or a crash (negative starts).
  const std::vector<CurvePoint> prefix{{10, 1.0, 1.0}, {20, 0.9, 2.0}, {30, 0.85, 3.0}};
  const std::vector<std::pair<std::function<void(ForecastOptions&)>, std::string>> refused = {
      {[](ForecastOptions& f) { f.band_z = std::nan(""); }, "band_z must be finite and >= 0"},
      {[](ForecastOptions& f) { f.band_z = -3; }, "band_z must be finite and >= 0, got -3"},
      {[](ForecastOptions& f) { f.max_members = 0; }, "max_members must be >= 1, got 0"},
      {[](ForecastOptions& f) { f.starts_per_family = -1; }, "starts_per_family must be >= 1, got -1"},
      // Read past the reference curve's end (a NaN or unsorted progress), a NaN forecast (a rate
      // that is zero over the whole run; a prior whose weight overflowed), a future point per
      // step (no bound: 2^40 of them ran out of memory).
      {[](ForecastOptions& f) { f.reference = ReferenceCurve{{0.0, 0.5, std::nan("")}, {5, 3, 2}, {}}; },
       "reference progress must be finite and strictly increasing at reference point 2"},
      {[](ForecastOptions& f) { f.reference = ReferenceCurve{{0.0, 0.5, 0.4}, {5, 3, 2}, {}}; },
       "strictly increasing at reference point 2"},
      {[](ForecastOptions& f) { f.reference = ReferenceCurve{{0.0, 0.5}, {5, 3}, {0.1}}; }, "time_fraction must be empty"},
      {[](ForecastOptions& f) {
         f.lr_schedule = LrSchedule{{2000, 3000}, {0.0, 1.0}};
         f.anneal_drop = 0.1;
       },
       "lr_schedule: the rate is zero over the whole run (steps 0 to 100)"},
      {[](ForecastOptions& f) { f.member_prior["pow3"] = 1e308; }, "member_prior for 'pow3' must be in [0, 1e6]"},
      {[](ForecastOptions& f) { f.max_future_points = 0; }, "max_future_points must be >= 1, got 0"}};
  for (const auto& [change, said] : refused) {
    ForecastOptions bad;
    bad.total_steps = 100;
    change(bad);
    try {
      forecast_curve(prefix, bad);
      ADD_FAILURE() << "taken: " << said;
    } catch (const modelcast::Error& e) {
      EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
    }
  }
}

TEST(Forecast, MemberPriorReweightsTheEnsemblesFamilies) {
  // A noisy power law: several families fit, weighted by their back-test on the prefix's tail.
  const auto truth = [](std::int64_t s) { return 1.0 + 2.0 * std::pow(static_cast<double>(s) / 2000.0, -0.3); };
  const auto all = synthetic(truth, 2000, 50, 0.01, 5);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 13);
  ForecastOptions o;
  o.total_steps = 2000;
  o.max_members = 100;  // keep every sane member, to see the weights move
  const auto plain = forecast_curve(prefix, o);
  ASSERT_GE(plain.members.size(), 3u);
  const auto weight_in = [](const Forecast& f, const std::string& family) {
    for (const auto& m : f.members)
      if (m.family == family) return m.weight;
    return 0.0;
  };
  const std::string top = plain.members.front().family;  // the best back-tested
  const std::string low = plain.members.back().family;
  // A prior of 0 drops a family, and the mean no longer contains it.
  o.member_prior = {{top, 0.0}};
  const auto without_top = forecast_curve(prefix, o);
  EXPECT_EQ(weight_in(without_top, top), 0.0);
  EXPECT_EQ(without_top.members.size(), plain.members.size() - 1);
  EXPECT_NE(without_top.loss.back(), plain.loss.back());
  // A large prior makes a weakly back-tested family the heaviest, and ranks it first.
  o.member_prior = {{low, 1e6}};
  const auto favoured = forecast_curve(prefix, o);
  EXPECT_GT(weight_in(favoured, low), 0.5);
  EXPECT_EQ(favoured.members.front().family, low);
  EXPECT_NEAR(favoured.loss.back(), favoured.members.front().loss.back(), 0.5 * std::abs(plain.loss.back() - favoured.members.front().loss.back()) + 1e-12);
  // Families it does not name keep weight 1: a prior naming no fitted family changes nothing.
  o.member_prior = {{"no_such_family", 5.0}};
  const auto same = forecast_curve(prefix, o);
  EXPECT_EQ(same.loss, plain.loss);
  // Viper's baseline forecaster ignores it.
  o.member_prior = {{top, 0.0}, {"viper_exp", 0.0}, {"viper_exp_offset", 0.0}, {"viper_linear", 0.0}, {"viper_saturating", 0.0}};
  ForecastOptions v;
  v.total_steps = 2000;
  EXPECT_EQ(forecast_viper(prefix, o).loss, forecast_viper(prefix, v).loss);
  // Priors must be finite and non-negative.
  o.member_prior = {{top, -1.0}};
  EXPECT_THROW(forecast_curve(prefix, o), modelcast::Error);
  o.member_prior = {{top, std::nan("")}};
  EXPECT_THROW(forecast_curve(prefix, o), modelcast::Error);
}

TEST(Forecast, ViperKeepsOneOfItsFourFamilies) {
  const auto truth = [](std::int64_t s) { return 2.0 + 3.0 * std::exp(-static_cast<double>(s) / 400.0); };
  const auto all = synthetic(truth, 2000, 50, 0.002, 11);
  const std::vector<CurvePoint> prefix(all.begin(), all.begin() + 15);
  ForecastOptions o;
  o.total_steps = 2000;
  const auto f = forecast_viper(prefix, o);
  ASSERT_EQ(f.members.size(), 1u);
  EXPECT_EQ(f.members[0].family.rfind("viper_", 0), 0u);
  EXPECT_LT(max_abs_error(f, truth), 0.05);
}

// Viper keeps a line that falls through 0 (as the paper does), and its band is at least 1 % of
// the loss's distance from the floor: measured as the height above it, the band vanished once
// the line went below.
TEST(Forecast, ViperKeepsItsBandWhereItsLineFallsBelowTheFloor) {
  std::vector<CurvePoint> prefix;
  for (std::int64_t s = 10; s <= 100; s += 10) prefix.push_back({s, 10.0 - 0.08 * static_cast<double>(s), 0.1 * static_cast<double>(s)});
  ForecastOptions o;
  o.total_steps = 1000;
  const auto f = forecast_viper(prefix, o);
  ASSERT_EQ(f.members.size(), 1u);
  EXPECT_EQ(f.members[0].family, "viper_linear");
  ASSERT_LT(f.loss.back(), -60.0);
  EXPECT_GT(f.upper.back() - f.loss.back(), 0.5);
}

}  // namespace
}  // namespace modelcast::predictor

namespace modelcast::predictor {
namespace {

TEST(Forecast, StepsThatKeepGettingSlowerLengthenThePredictedRun) {
  // Seconds per step grow linearly (a sequence-length ramp): t(s) = 0.01 s + 1e-5 s^2 / 2 after
  // a start-up interval. A constant recent rate would end the run far too early.
  const auto time_at = [](std::int64_t s) { return 5.0 + 0.01 * static_cast<double>(s) + 0.5e-5 * static_cast<double>(s * s); };
  std::vector<CurvePoint> prefix = {{0, 10.0, 0.0}};
  for (std::int64_t s = 125; s <= 750; s += 125) prefix.push_back({s, 5.0 - 0.001 * static_cast<double>(s), time_at(s)});
  ForecastOptions o;
  o.total_steps = 2000;
  const auto f = forecast_curve(prefix, o);
  EXPECT_NEAR(f.time_s.back(), time_at(2000), 0.05 * (time_at(2000) - time_at(750)));

  // Steady steps with jittered timings: no growth is read into the noise.
  std::vector<CurvePoint> steady = {{0, 10.0, 0.0}};
  for (int i = 1; i <= 10; ++i) steady.push_back({i * 100, 5.0 - 0.01 * i, 2.0 + 1.0 * i + (i % 2 ? 0.05 : -0.05)});
  const auto g = forecast_curve(steady, o);
  EXPECT_NEAR(g.time_s.back(), 2.0 + 20.0, 1.0);
}

// A clock that stood still over the newest third of the log (time stalls taken back, a pause
// logged as none): the time forecast fell back to 1e-9 s per step, a rate in the steps' unit,
// so the same log counted in tokens instead of steps was forecast a run 2^36 times longer.
// The whole log's rate is used, and said; the forecast times do not depend on the step's unit.
TEST(Forecast, AClockThatStoodStillLatelyIsForecastAtTheWholeLogsRateWhateverTheStepUnit) {
  std::vector<double> ends;
  for (std::int64_t unit : {std::int64_t{100}, std::int64_t{1} << 36}) {
    std::vector<CurvePoint> prefix;
    for (std::int64_t i = 0; i <= 30; ++i) {
      prefix.push_back({i * unit, 1.0 + 10.0 * std::pow(static_cast<double>(i * 100 + 10), -0.3),
                        10.0 * static_cast<double>(std::min<std::int64_t>(i, 20))});
    }
    ForecastOptions o;
    o.total_steps = 90 * unit;
    const auto f = forecast_curve(prefix, o);
    expect_finite(f);
    EXPECT_NE(f.note.find("training time did not advance over the newest third of the log"), std::string::npos) << f.note;
    ends.push_back(f.time_s.back());
  }
  // 200 s over 30 intervals, 60 intervals more: 400 s on.
  EXPECT_NEAR(ends[0], 200.0 + 60.0 * 200.0 / 30.0, 1.0);
  EXPECT_NEAR(ends[1], ends[0], 1e-6 * ends[0]);
}

// A floor far below the losses: the losses less it keep none of their digits (-1e300 gave a
// forecast of 0 with a note that it was flat "at the last observed loss"). Beyond +-1e100, as
// losses are, it is refused; nearer, where it rounds the losses, it is said.
TEST(Forecast, AFloorSoFarBelowTheLossesThatItEatsTheirDigitsIsRefusedOrSaid) {
  std::vector<CurvePoint> prefix;
  for (std::int64_t s = 0; s <= 290; s += 10) prefix.push_back({s, 2.0 + 0.5 / (1.0 + 0.05 * static_cast<double>(s)), 0.1 * static_cast<double>(s)});
  ForecastOptions o;
  o.total_steps = 1000;
  o.loss_floor = -1e300;
  try {
    forecast_curve(prefix, o);
    ADD_FAILURE() << "a floor of -1e300 taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss_floor must be within +-1e100, got -1e+300"), std::string::npos) << e.what();
  }
  o.loss_floor = -1e12;
  const auto rounded = forecast_curve(prefix, o);
  expect_finite(rounded);
  EXPECT_NE(rounded.note.find("loss_floor -1e+12 lies so far from the losses"), std::string::npos) << rounded.note;
  o.loss_floor = 0.0;
  EXPECT_EQ(forecast_curve(prefix, o).note.find("lies so far"), std::string::npos);
}

// A point whose time is unknown (NaN) says nothing of the clock, and only it: one such point made
// the forecast drop every logged time, count 1 s per step from the step number (a run forecast
// ten times longer here) and say no time was logged.
TEST(Forecast, APointWithoutATimeLeavesTheOthersTimesInUse) {
  std::vector<CurvePoint> prefix;
  for (std::int64_t s = 0; s <= 290; s += 10) prefix.push_back({s, 1.0 + 5.0 / (1.0 + 0.05 * static_cast<double>(s)), 0.1 * static_cast<double>(s)});
  ForecastOptions o;
  o.total_steps = 1000;
  const auto all = forecast_curve(prefix, o);
  for (std::size_t at : {std::size_t{5}, prefix.size() - 1}) {
    auto gap = prefix;
    gap[at].time_s = std::numeric_limits<double>::quiet_NaN();
    const auto f = forecast_curve(gap, o);
    expect_finite(f);
    EXPECT_NEAR(f.time_s.back(), all.time_s.back(), 0.02 * all.time_s.back()) << "NaN time at point " << at;
    EXPECT_NEAR(f.time_s.back(), 100.0, 2.0);
    EXPECT_EQ(f.note.find("no training times logged"), std::string::npos) << f.note;
    EXPECT_NE(f.note.find("1 of 30 points have no training time"), std::string::npos) << f.note;
  }
}

}  // namespace
}  // namespace modelcast::predictor
