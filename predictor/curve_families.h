// Parametric learning-curve families (Domhan et al. 2015 style, plus Viper's four), written in
// an unconstrained parameterisation so that Levenberg-Marquardt cannot leave the valid region.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace modelcast::predictor::detail {

using ParameterVector = std::vector<double>;

struct CurveFamily {
  std::string name;
  int num_params = 0;
  // No offset term: the curve levels off at 0, which means something only for a loss whose floor
  // is 0 (loss_floor.h); fitted to a loss without one it would depend on where the losses sit.
  bool falls_to_zero = false;
  // y(x; theta) for progress x > 0.
  std::function<double(double x, const double* theta)> eval;
  // Data-driven starting points (several; the fitter keeps the best few).
  std::function<std::vector<ParameterVector>(std::span<const double> x, std::span<const double> y,
                                             std::span<const double> w)>
      initial_guesses;
};

// pow3, pow4, log-power, exp3, exp4, MMF, ilog2, vapor pressure, log-linear: no two of them fit
// the same parameterised space (Janoschek was exp4's, and as two members that shape weighed twice).
const std::vector<CurveFamily>& standard_families();
// Viper's four: a·e^(-bx), a·e^(-bx)+c, ax+b, c-(c-a)e^(-bx).
const std::vector<CurveFamily>& viper_families();
// What forecast_curve fits: the standard families and those of Viper's that are not one of them
// reparameterised (a·e^(-bx) and ax+b; a·e^(-bx)+c is exp3, and c-(c-a)e^(-bx) exp3 or its rising
// mirror, which the ensemble does not want).
const std::vector<const CurveFamily*>& ensemble_families();
// y = a + b·g(x) for a fixed shape g (used for the reference-curve prior); b >= 0 is not
// enforced because a reference may be rescaled either way.
CurveFamily affine_shape_family(std::string name, std::function<double(double)> shape);
// y = a + g(x): the reference shifted to the observed level (one parameter).
CurveFamily shifted_shape_family(std::string name, std::function<double(double)> shape);

}  // namespace modelcast::predictor::detail
