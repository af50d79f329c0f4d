#include "robust_fit.h"

#include <Eigen/Dense>
#include <unsupported/Eigen/NonLinearOptimization>
#include <unsupported/Eigen/NumericalDiff>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace modelcast::predictor::detail {
namespace {

// Residual functor in the form Eigen's LM expects (inputs = parameters, values = points).
struct WeightedResiduals {
  using Scalar = double;
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };

  const CurveFamily* family;
  std::span<const double> x, y;
  std::vector<double> sqrt_w;

  int inputs() const { return family->num_params; }
  int values() const { return static_cast<int>(x.size()); }

  int operator()(const Eigen::VectorXd& theta, Eigen::VectorXd& residual) const {
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double r = family->eval(x[i], theta.data()) - y[i];
      // A huge finite residual steers LM away from overflow instead of poisoning it with NaN.
      residual(static_cast<Eigen::Index>(i)) = std::isfinite(r) ? sqrt_w[i] * r : 1e150;
    }
    return 0;
  }
};

double weighted_rmse(const CurveFamily& family, const ParameterVector& theta, std::span<const double> x,
                     std::span<const double> y, std::span<const double> w) {
  double sse = 0, sw = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = family.eval(x[i], theta.data()) - y[i];
    sse += w[i] * r * r;
    sw += w[i];
  }
  const double v = std::sqrt(sse / std::max(sw, 1e-300));
  return std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
}

double median_abs(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

FitResult robust_fit(const CurveFamily& family, std::span<const double> x, std::span<const double> y,
                     std::span<const double> w, const RobustFitOptions& options) {
  FitResult best;
  if (static_cast<int>(x.size()) < family.num_params) return best;
  double y_span = 0.0;
  for (double v : y) y_span = std::max(y_span, std::abs(v - y.back()));
  const double scale_floor = 1e-6 * std::max({y_span, std::abs(y.back()), 1e-12});

  auto starts = family.initial_guesses(x, y, w);
  if (static_cast<int>(starts.size()) > options.max_starts) starts.resize(static_cast<std::size_t>(options.max_starts));
  double best_rmse = std::numeric_limits<double>::infinity();

  for (const auto& start : starts) {
    if (static_cast<int>(start.size()) != family.num_params) continue;
    Eigen::VectorXd theta = Eigen::Map<const Eigen::VectorXd>(start.data(), family.num_params);
    std::vector<double> robust_w(w.begin(), w.end());
    for (int round = 0; round < std::max(1, options.irls_rounds); ++round) {
      WeightedResiduals functor{&family, x, y, {}};
      functor.sqrt_w.resize(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) functor.sqrt_w[i] = std::sqrt(robust_w[i]);
      Eigen::NumericalDiff<WeightedResiduals> numeric(functor);
      Eigen::LevenbergMarquardt<Eigen::NumericalDiff<WeightedResiduals>> lm(numeric);
      // Forecasting needs a few significant digits, not machine precision: looser tolerances
      // and an evaluation cap keep a full refit of the ensemble in the tens of milliseconds.
      lm.parameters.maxfev = 100 * (family.num_params + 1);
      lm.parameters.ftol = 1e-7;
      lm.parameters.xtol = 1e-7;
      lm.minimize(theta);
      if (!theta.allFinite()) break;
      // Huber re-weighting: points far from the fit (spikes, restarts) lose influence.
      std::vector<double> abs_res(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        abs_res[i] = std::abs(family.eval(x[i], theta.data()) - y[i]);
      const double sigma = std::max(1.4826 * median_abs(abs_res), scale_floor);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double u = abs_res[i] / sigma;
        robust_w[i] = w[i] * (u <= options.huber_k ? 1.0 : options.huber_k / u);
      }
    }
    if (!theta.allFinite()) continue;
    ParameterVector fitted(theta.data(), theta.data() + theta.size());
    const double rmse = weighted_rmse(family, fitted, x, y, w);
    if (rmse < best_rmse) {
      best_rmse = rmse;
      best.ok = true;
      best.theta = std::move(fitted);
      best.weighted_rmse = rmse;
    }
  }
  return best;
}

}  // namespace modelcast::predictor::detail
