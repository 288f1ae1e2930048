// Derivative-free minimisation (Nelder & Mead 1965, standard coefficients:
// reflect 1, expand 2, contract 1/2, shrink 1/2). Used by the Burst-Gap fit in
// log-parameter space, where the objective is piecewise smooth (max/min kinks).
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace xstage::burstgap {

struct NelderMeadOptions {
  int max_evals = 4000;        // per run, restarts included
  double initial_step = 0.5;   // simplex edge along each axis
  double x_tol = 1e-7;         // stop when the simplex is this small (max |x_i - x_best|)...
  double f_tol = 1e-12;        // ...and the values differ by at most this
  int restarts = 2;            // fresh simplices around the best point after convergence
};

struct NelderMeadResult {
  std::vector<double> x;
  double f = 0;
  int evals = 0;
};

NelderMeadResult nelder_mead(const std::function<double(std::span<const double>)>& f, std::vector<double> x0,
                             const NelderMeadOptions& options = {});

}  // namespace xstage::burstgap
