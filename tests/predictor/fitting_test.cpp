// Robust NLS recovers known parameters from noisy synthetic curves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "curve_families.h"
#include "robust_fit.h"

namespace modelcast::predictor::detail {
namespace {

const CurveFamily& family(const std::string& name) {
  for (const auto* list : {&standard_families(), &viper_families()})
    for (const auto& f : *list)
      if (f.name == name) return f;
  throw std::runtime_error("no family " + name);
}

struct Synthetic {
  std::vector<double> x, y, w;
};

Synthetic sample(const std::function<double(double)>& truth, double noise_sd, unsigned seed, int n = 60) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, noise_sd);
  Synthetic s;
  for (int i = 1; i <= n; ++i) {
    const double x = 0.02 + 0.98 * i / n;
    s.x.push_back(x);
    s.y.push_back(truth(x) + noise(rng));
    s.w.push_back(1.0);
  }
  return s;
}

TEST(RobustFit, RecoversPow3Parameters) {
  // y = 3.2 + 0.6 x^-0.5 (theta = [c, log a, log alpha])
  const auto s = sample([](double x) { return 3.2 + 0.6 * std::pow(x, -0.5); }, 0.005, 1);
  const auto fit = robust_fit(family("pow3"), s.x, s.y, s.w, {});
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.theta[0], 3.2, 0.05);
  EXPECT_NEAR(std::exp(fit.theta[1]), 0.6, 0.05);
  EXPECT_NEAR(std::exp(fit.theta[2]), 0.5, 0.05);
  EXPECT_LT(fit.weighted_rmse, 0.01);
}

TEST(RobustFit, RecoversExp3Parameters) {
  // y = 2 + 5 e^(-4x)
  const auto s = sample([](double x) { return 2.0 + 5.0 * std::exp(-4.0 * x); }, 0.01, 2);
  const auto fit = robust_fit(family("exp3"), s.x, s.y, s.w, {});
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.theta[0], 2.0, 0.05);
  EXPECT_NEAR(std::exp(fit.theta[1]), 5.0, 0.2);
  EXPECT_NEAR(std::exp(fit.theta[2]), 4.0, 0.2);
}

TEST(RobustFit, RecoversViperLinearParameters) {
  const auto s = sample([](double x) { return 4.0 - 1.5 * x; }, 0.01, 3);
  const auto fit = robust_fit(family("viper_linear"), s.x, s.y, s.w, {});
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.theta[0], -1.5, 0.03);
  EXPECT_NEAR(fit.theta[1], 4.0, 0.03);
}

TEST(RobustFit, RecoversVaporPressureParameters) {
  // y = exp(1.1 + 0.05/x - 0.1 ln x)
  const auto s = sample([](double x) { return std::exp(1.1 + 0.05 / x - 0.1 * std::log(x)); }, 0.003, 4);
  const auto fit = robust_fit(family("vapor_pressure"), s.x, s.y, s.w, {});
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.theta[0], 1.1, 0.02);
  EXPECT_NEAR(fit.theta[1], 0.05, 0.01);
  EXPECT_NEAR(fit.theta[2], -0.1, 0.02);
}

TEST(RobustFit, HuberWeightsResistSpikes) {
  auto s = sample([](double x) { return 3.2 + 0.6 * std::pow(x, -0.5); }, 0.003, 5);
  // Loss spikes on a few evaluations (e.g. a bad batch): +1.5 on 10 % of the points.
  for (std::size_t i = 3; i < s.y.size(); i += 10) s.y[i] += 1.5;
  RobustFitOptions robust;
  RobustFitOptions plain;
  plain.irls_rounds = 1;
  const auto r = robust_fit(family("pow3"), s.x, s.y, s.w, robust);
  const auto p = robust_fit(family("pow3"), s.x, s.y, s.w, plain);
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(p.ok);
  EXPECT_NEAR(r.theta[0], 3.2, 0.05);
  // The plain fit is pulled up by the spikes; the robust one is much closer to the truth.
  EXPECT_LT(std::abs(r.theta[0] - 3.2), 0.5 * std::abs(p.theta[0] - 3.2));
}

TEST(RobustFit, RefusesFewerPointsThanParameters) {
  const std::vector<double> x{0.1, 0.2}, y{5.0, 4.0}, w{1.0, 1.0};
  EXPECT_FALSE(robust_fit(family("pow3"), x, y, w, {}).ok);
}

TEST(CurveFamilies, AllListedFamiliesExist) {
  for (const char* name : {"pow3", "pow4", "log_power", "exp3", "exp4", "mmf", "ilog2", "vapor_pressure", "log_linear",
                           "viper_exp", "viper_exp_offset", "viper_linear", "viper_saturating"})
    EXPECT_NO_THROW(family(name)) << name;
}

TEST(CurveFamilies, EveryFamilyFitsItsOwnShapeClosely) {
  // Each family, evaluated at one of its own starting points, must be fitted back with a small
  // residual: guards against broken parameterisations.
  const auto s = sample([](double x) { return 3.3 + 0.7 * std::pow(x + 0.01, -0.4); }, 0.0, 6);
  for (const auto* list : {&standard_families(), &viper_families()})
    for (const auto& f : *list) {
      const auto starts = f.initial_guesses(s.x, s.y, s.w);
      ASSERT_FALSE(starts.empty()) << f.name;
      std::vector<double> y;
      for (double x : s.x) y.push_back(f.eval(x, starts.front().data()));
      const auto fit = robust_fit(f, s.x, y, s.w, {});
      ASSERT_TRUE(fit.ok) << f.name;
      EXPECT_LT(fit.weighted_rmse, 1e-3) << f.name;
    }
}

}  // namespace
}  // namespace modelcast::predictor::detail
