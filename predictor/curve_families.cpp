#include "curve_families.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>

namespace modelcast::predictor::detail {
namespace {

// Weighted linear least squares of y on the columns [1, g] (or [g] only); returns false when
// the system is degenerate. Used to turn a guess of the non-linear parameters into a full start.
bool solve_linear(std::span<const double> g, std::span<const double> y, std::span<const double> w,
                  bool with_offset, double& offset, double& scale) {
  const auto n = static_cast<Eigen::Index>(y.size());
  const int cols = with_offset ? 2 : 1;
  Eigen::MatrixXd a(n, cols);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double sw = std::sqrt(w[static_cast<std::size_t>(i)]);
    if (with_offset) {
      a(i, 0) = sw;
      a(i, 1) = sw * g[static_cast<std::size_t>(i)];
    } else {
      a(i, 0) = sw * g[static_cast<std::size_t>(i)];
    }
    b(i) = sw * y[static_cast<std::size_t>(i)];
  }
  if (!a.allFinite() || !b.allFinite()) return false;
  Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
  if (!sol.allFinite()) return false;
  offset = with_offset ? sol(0) : 0.0;
  scale = with_offset ? sol(1) : sol(0);
  return true;
}

// A "separable" family y = offset + scale·g(x; phi) with phi passed through exp() so that
// the shape parameters stay positive. theta = [offset?, scale, log phi...].
struct SeparableShape {
  std::string name;
  bool with_offset;
  bool positive_scale;  // scale parameter stored as log(scale)
  std::function<double(double x, const double* phi)> shape;
  std::vector<std::vector<double>> phi_grid;  // positive values
};

CurveFamily make_separable(const SeparableShape& s) {
  CurveFamily f;
  f.name = s.name;
  const int num_phi = s.phi_grid.empty() ? 0 : static_cast<int>(s.phi_grid.front().size());
  f.num_params = (s.with_offset ? 1 : 0) + 1 + num_phi;
  f.falls_to_zero = !s.with_offset;
  const bool with_offset = s.with_offset;
  const bool positive_scale = s.positive_scale;
  const auto shape = s.shape;
  f.eval = [with_offset, positive_scale, shape, num_phi](double x, const double* theta) {
    const double offset = with_offset ? theta[0] : 0.0;
    const double raw_scale = theta[with_offset ? 1 : 0];
    const double scale = positive_scale ? std::exp(raw_scale) : raw_scale;
    double phi[4];
    for (int k = 0; k < num_phi; ++k) phi[k] = std::exp(theta[(with_offset ? 2 : 1) + k]);
    return offset + scale * shape(x, phi);
  };
  const auto grid = s.phi_grid;
  f.initial_guesses = [with_offset, positive_scale, shape, grid](
                          std::span<const double> x, std::span<const double> y,
                          std::span<const double> w) {
    std::vector<std::pair<double, ParameterVector>> scored;
    std::vector<double> g(x.size());
    for (const auto& phi : grid) {
      for (std::size_t i = 0; i < x.size(); ++i) g[i] = shape(x[i], phi.data());
      double offset = 0, scale = 0;
      if (!solve_linear(g, y, w, with_offset, offset, scale)) continue;
      if (positive_scale && !(scale > 0)) continue;
      double sse = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double r = offset + scale * g[i] - y[i];
        sse += w[i] * r * r;
      }
      if (!std::isfinite(sse)) continue;
      ParameterVector theta;
      if (with_offset) theta.push_back(offset);
      theta.push_back(positive_scale ? std::log(scale) : scale);
      for (double p : phi) theta.push_back(std::log(p));
      scored.emplace_back(sse, std::move(theta));
    }
    std::sort(scored.begin(), scored.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<ParameterVector> out;
    for (auto& [sse, theta] : scored) out.push_back(std::move(theta));
    return out;
  };
  return f;
}

std::vector<std::vector<double>> grid1(std::initializer_list<double> a) {
  std::vector<std::vector<double>> g;
  for (double v : a) g.push_back({v});
  return g;
}
std::vector<std::vector<double>> grid2(std::initializer_list<double> a, std::initializer_list<double> b) {
  std::vector<std::vector<double>> g;
  for (double u : a)
    for (double v : b) g.push_back({u, v});
  return g;
}

// Vapor pressure y = exp(a + b/x + c·ln x): log-linear, so its start is an exact linear fit of ln y.
CurveFamily make_vapor_pressure() {
  CurveFamily f;
  f.name = "vapor_pressure";
  f.num_params = 3;
  f.falls_to_zero = true;  // exp(...) > 0, and -> 0 as the exponent falls
  f.eval = [](double x, const double* t) { return std::exp(t[0] + t[1] / x + t[2] * std::log(x)); };
  f.initial_guesses = [](std::span<const double> x, std::span<const double> y,
                         std::span<const double> w) {
    std::vector<ParameterVector> out;
    const auto n = static_cast<Eigen::Index>(x.size());
    if (n < 3) return out;
    Eigen::MatrixXd a(n, 3);
    Eigen::VectorXd b(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (!(y[k] > 0)) return out;
      const double sw = std::sqrt(w[k]);
      a(i, 0) = sw;
      a(i, 1) = sw / x[k];
      a(i, 2) = sw * std::log(x[k]);
      b(i) = sw * std::log(y[k]);
    }
    Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
    if (sol.allFinite()) out.push_back({sol(0), sol(1), sol(2)});
    out.push_back({std::log(y.back()), 0.0, 0.0});
    return out;
  };
  return f;
}

// Viper's linear family y = a·x + b (no reparameterisation: it may go anywhere, as in Viper).
CurveFamily make_linear() {
  CurveFamily f;
  f.name = "viper_linear";
  f.num_params = 2;
  f.eval = [](double x, const double* t) { return t[0] * x + t[1]; };
  f.initial_guesses = [](std::span<const double> x, std::span<const double> y,
                         std::span<const double> w) {
    double offset = 0, scale = 0;
    std::vector<ParameterVector> out;
    if (solve_linear(x, y, w, true, offset, scale)) out.push_back({scale, offset});
    return out;
  };
  return f;
}

}  // namespace

// The tables are never destroyed: a thread still fitting while the process exits (a Python
// daemon thread inside forecast_curve) read them destroyed by exit() and crashed.
const std::vector<CurveFamily>& standard_families() {
  static const auto* families = new std::vector<CurveFamily>([] {
    std::vector<CurveFamily> v;
    // pow3: c + a·x^(-alpha)
    v.push_back(make_separable({"pow3", true, true,
                                [](double x, const double* p) { return std::pow(x, -p[0]); },
                                grid1({0.1, 0.25, 0.5, 1.0, 2.0})}));
    // pow4: c + a·(x + b)^(-alpha)
    v.push_back(make_separable({"pow4", true, true,
                                [](double x, const double* p) { return std::pow(x + p[0], -p[1]); },
                                grid2({0.001, 0.01, 0.1}, {0.25, 0.5, 1.0, 2.0})}));
    // log-power (Domhan): a / (1 + (x / e^b)^c), no offset
    v.push_back(make_separable({"log_power", false, true,
                                [](double x, const double* p) { return 1.0 / (1.0 + std::pow(x / p[0], p[1])); },
                                grid2({0.001, 0.01, 0.1, 1.0}, {0.1, 0.3, 1.0})}));
    // exp3: c + a·e^(-b x)
    v.push_back(make_separable({"exp3", true, true,
                                [](double x, const double* p) { return std::exp(-p[0] * x); },
                                grid1({0.5, 2.0, 5.0, 10.0, 30.0})}));
    // exp4: c + e^(-a·x^alpha + b)
    v.push_back(make_separable({"exp4", true, true,
                                [](double x, const double* p) { return std::exp(-p[0] * std::pow(x, p[1])); },
                                grid2({1.0, 5.0, 20.0}, {0.3, 0.6, 1.0})}));
    // MMF: alpha - (alpha - beta) / (1 + (kappa x)^delta)
    v.push_back(make_separable({"mmf", true, true,
                                [](double x, const double* p) { return 1.0 / (1.0 + std::pow(p[0] * x, p[1])); },
                                grid2({10.0, 100.0, 1000.0}, {0.3, 0.7, 1.5})}));
    // ilog2: c + a / ln(s·x + e)
    v.push_back(make_separable({"ilog2", true, true,
                                [](double x, const double* p) { return 1.0 / std::log(p[0] * x + M_E); },
                                grid1({1.0, 10.0, 100.0, 1000.0})}));
    v.push_back(make_vapor_pressure());
    // log-linear: c + a·(-ln x), a > 0. The one family that never levels off: a loss that falls
    // by the same amount per doubling of the steps, as language models' do through a run's middle.
    // Every other family saturates, and on a prefix whose newest points happen to lie flat (noise,
    // or a pause before the loss falls again) their fits level off where the run does not.
    v.push_back(make_separable({"log_linear", true, true, [](double x, const double*) { return -std::log(x); },
                                {std::vector<double>{}}}));
    return v;
  }());
  return *families;
}

const std::vector<const CurveFamily*>& ensemble_families() {
  static const auto* families = new std::vector<const CurveFamily*>([] {
    std::vector<const CurveFamily*> v;
    for (const auto& f : standard_families()) v.push_back(&f);
    for (const auto& f : viper_families())
      if (f.name == "viper_exp" || f.name == "viper_linear") v.push_back(&f);
    return v;
  }());
  return *families;
}

const std::vector<CurveFamily>& viper_families() {
  static const auto* families = new std::vector<CurveFamily>([] {
    std::vector<CurveFamily> v;
    // a·e^(-b x)
    v.push_back(make_separable({"viper_exp", false, true,
                                [](double x, const double* p) { return std::exp(-p[0] * x); },
                                grid1({0.1, 0.5, 2.0, 5.0, 10.0})}));
    // a·e^(-b x) + c
    v.push_back(make_separable({"viper_exp_offset", true, true,
                                [](double x, const double* p) { return std::exp(-p[0] * x); },
                                grid1({0.5, 2.0, 5.0, 10.0, 30.0})}));
    v.push_back(make_linear());
    // c - (c - a)·e^(-b x): same function space as exp+offset, Viper's parameterisation
    // (a = value at 0, c = asymptote), kept separate because Viper fits it separately.
    v.push_back(make_separable({"viper_saturating", true, false,
                                [](double x, const double* p) { return std::exp(-p[0] * x); },
                                grid1({0.2, 1.0, 4.0, 16.0})}));
    return v;
  }());
  return *families;
}

CurveFamily affine_shape_family(std::string name, std::function<double(double)> shape) {
  CurveFamily f;
  f.name = std::move(name);
  f.num_params = 2;
  f.eval = [shape](double x, const double* t) { return t[0] + t[1] * shape(x); };
  f.initial_guesses = [shape](std::span<const double> x, std::span<const double> y,
                              std::span<const double> w) {
    std::vector<double> g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) g[i] = shape(x[i]);
    double offset = 0, scale = 0;
    std::vector<ParameterVector> out;
    if (solve_linear(g, y, w, true, offset, scale)) out.push_back({offset, scale});
    out.push_back({0.0, 1.0});
    return out;
  };
  return f;
}

CurveFamily shifted_shape_family(std::string name, std::function<double(double)> shape) {
  CurveFamily f;
  f.name = std::move(name);
  f.num_params = 1;
  f.eval = [shape](double x, const double* t) { return t[0] + shape(x); };
  f.initial_guesses = [shape](std::span<const double> x, std::span<const double> y,
                              std::span<const double> w) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      num += w[i] * (y[i] - shape(x[i]));
      den += w[i];
    }
    return std::vector<ParameterVector>{{den > 0 ? num / den : 0.0}};
  };
  return f;
}

}  // namespace modelcast::predictor::detail
