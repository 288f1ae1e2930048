#include "gait/synth/gait_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "common/check.hpp"
#include "gait/motion/mocap_folder.hpp"

namespace gait {

namespace {
constexpr double kPi = 3.14159265358979323846;
constexpr std::size_t kDurationSlot = static_cast<std::size_t>(kCycleFeatures) * kCoefs;

void fourier_fit(const std::vector<double>& f, double* coefs) {
  const std::size_t n = f.size();
  for (int c = 0; c < kCoefs; ++c) coefs[c] = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double ph = 2 * kPi * static_cast<double>(k) / static_cast<double>(n);
    coefs[0] += f[k] / static_cast<double>(n);
    for (int h = 1; h <= kHarmonics; ++h) {
      coefs[2 * h - 1] += 2.0 / static_cast<double>(n) * f[k] * std::cos(h * ph);
      coefs[2 * h] += 2.0 / static_cast<double>(n) * f[k] * std::sin(h * ph);
    }
  }
}

double fourier_eval(const double* coefs, double phase) {
  double v = coefs[0];
  const double ph = 2 * kPi * phase;
  for (int h = 1; h <= kHarmonics; ++h) v += coefs[2 * h - 1] * std::cos(h * ph) + coefs[2 * h] * std::sin(h * ph);
  return v;
}

double dotc(const CycleCode& a, const CycleCode& b) {
  double s = 0;
  for (int i = 0; i < kCodeSize; ++i) s += a.v[i] * b.v[i];
  return s;
}
}  // namespace

double CycleCode::duration_s() const { return std::exp(v[kDurationSlot]); }

CycleCode encode_cycle(const CycleSamples& s) {
  CycleCode c;
  std::vector<double> f(s.dirs.size());
  for (int b = 0; b < kCanonBones; ++b)
    for (int a = 0; a < 3; ++a) {
      for (std::size_t k = 0; k < s.dirs.size(); ++k) {
        const Vec3& d = s.dirs[k][b];
        f[k] = a == 0 ? d.x : a == 1 ? d.y : d.z;
      }
      fourier_fit(f, c.v.data() + (b * 3 + a) * kCoefs);
    }
  fourier_fit(s.sway, c.v.data() + (kCycleFeatures - 1) * kCoefs);
  c.v[kDurationSlot] = std::log(s.duration_s);
  return c;
}

PhasePose evaluate_code(const CycleCode& c, double phase) {
  phase -= std::floor(phase);
  PhasePose p;
  for (int b = 0; b < kCanonBones; ++b) {
    const double* base = c.v.data() + b * 3 * kCoefs;
    p.dirs[b] = normalized({fourier_eval(base, phase), fourier_eval(base + kCoefs, phase),
                            fourier_eval(base + 2 * kCoefs, phase)});
  }
  p.sway = fourier_eval(c.v.data() + (kCycleFeatures - 1) * kCoefs, phase);
  return p;
}

bool instructed_pace(const std::string& description) {
  std::string d = description;
  std::transform(d.begin(), d.end(), d.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"slow", "fast", "brisk", "stride", "jog", "run"})
    if (d.find(word) != std::string::npos) return true;
  return false;
}

namespace {

// Per code: is it in the set that measures a person's walk-to-walk spread? The natural
// ones, except for a person with none (then all of theirs, so every person counts).
std::vector<bool> spread_set(const std::vector<std::string>& persons, const std::vector<bool>& natural) {
  std::vector<bool> in(persons.size(), true);
  if (natural.empty()) return in;
  std::map<std::string, bool> has_natural;
  for (std::size_t i = 0; i < persons.size(); ++i) has_natural[persons[i]] = has_natural[persons[i]] || natural[i];
  for (std::size_t i = 0; i < persons.size(); ++i) in[i] = natural[i] || !has_natural[persons[i]];
  return in;
}

// Weights that give every person the same total over the codes with `in` set.
std::vector<double> person_weights(const std::vector<std::string>& persons, const std::vector<bool>& in) {
  std::map<std::string, std::size_t> count;
  for (std::size_t i = 0; i < persons.size(); ++i)
    if (in[i]) ++count[persons[i]];
  std::vector<double> w(persons.size(), 0.0);
  for (std::size_t i = 0; i < persons.size(); ++i)
    if (in[i]) w[i] = 1.0 / (static_cast<double>(count[persons[i]]) * static_cast<double>(count.size()));
  return w;
}

}  // namespace

GaitModel GaitModel::learn(const std::vector<CycleCode>& codes, const std::vector<std::string>& persons, int components,
                           const std::vector<bool>& natural) {
  XS_ASSERT(codes.size() == persons.size() && codes.size() >= 2, "need at least two gait cycles to learn a model (got {})",
            codes.size());
  XS_ASSERT(natural.empty() || natural.size() == codes.size(), "{} natural-pace flags for {} gait cycles", natural.size(),
            codes.size());
  GaitModel m;
  const std::vector<double> w = person_weights(persons, std::vector<bool>(codes.size(), true));
  const std::vector<bool> spread = spread_set(persons, natural);
  const std::vector<double> ws = person_weights(persons, spread);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    if (spread[i]) m.person_cycles[persons[i]].push_back(codes[i]);
    for (int k = 0; k < kCodeSize; ++k) m.mean.v[k] += w[i] * codes[i].v[k];
  }
  std::vector<CycleCode> x(codes.size());
  double total = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) {
    for (int k = 0; k < kCodeSize; ++k) x[i].v[k] = (codes[i].v[k] - m.mean.v[k]) * std::sqrt(w[i]);
    total += dotc(x[i], x[i]);
  }
  // Within-person residuals (around each person's mean over the spread set), for
  // sequence variation.
  std::map<std::string, CycleCode> pmean;
  for (const auto& [p, cycles] : m.person_cycles)
    for (const auto& c : cycles)
      for (int k = 0; k < kCodeSize; ++k) pmean[p].v[k] += c.v[k] / static_cast<double>(cycles.size());
  // Power iteration with deflation on the implicit covariance X^T X.
  const int comps = std::min<int>(components, static_cast<int>(codes.size()) - 1);
  double kept = 0;
  Rng rng(0x5eed);
  for (int c = 0; c < comps; ++c) {
    CycleCode v;
    for (auto& e : v.v) e = rng.normal();
    double lambda = 0;
    for (int it = 0; it < 300; ++it) {
      for (const auto& b : m.basis) {
        const double d = dotc(v, b);
        for (int k = 0; k < kCodeSize; ++k) v.v[k] -= d * b.v[k];
      }
      CycleCode nv;
      for (const auto& xi : x) {
        const double d = dotc(xi, v);
        for (int k = 0; k < kCodeSize; ++k) nv.v[k] += d * xi.v[k];
      }
      lambda = std::sqrt(dotc(nv, nv));
      if (lambda < 1e-15) break;
      for (int k = 0; k < kCodeSize; ++k) nv.v[k] /= lambda;
      const double change = 1 - std::abs(dotc(nv, v) / std::sqrt(std::max(dotc(v, v), 1e-300)));
      v = nv;
      if (it > 10 && change < 1e-12) break;
    }
    if (lambda < 1e-15) break;
    m.basis.push_back(v);
    m.sd.push_back(std::sqrt(lambda));
    kept += lambda;
    double within = 0;
    for (std::size_t i = 0; i < codes.size(); ++i) {
      if (!spread[i]) continue;
      double d = 0;
      for (int k = 0; k < kCodeSize; ++k) d += (codes[i].v[k] - pmean[persons[i]].v[k]) * v.v[k];
      within += ws[i] * d * d;
    }
    m.sd_within.push_back(std::sqrt(within));
  }
  m.explained = total > 0 ? kept / total : 1.0;
  return m;
}

CycleCode GaitModel::sample_identity(Rng& rng) const {
  CycleCode c = mean;
  for (std::size_t i = 0; i < basis.size(); ++i) {
    const double z = rng.clipped_normal(0, 1, kMaxZ) * sd[i];
    for (int k = 0; k < kCodeSize; ++k) c.v[k] += z * basis[i].v[k];
  }
  return c;
}

CycleCode GaitModel::vary_sequence(const CycleCode& identity, Rng& rng) const {
  CycleCode c = identity;
  for (std::size_t i = 0; i < basis.size(); ++i) {
    const double e = rng.clipped_normal(0, 1, kMaxZ) * sd_within[i] * kSequenceSpread;
    for (int k = 0; k < kCodeSize; ++k) c.v[k] += e * basis[i].v[k];
  }
  return c;
}

std::vector<std::string> GaitModel::persons() const {
  std::vector<std::string> out;
  for (const auto& [p, c] : person_cycles) out.push_back(p);
  return out;
}

MotionLibrary build_motion_library(const std::filesystem::path& dir, int components) {
  MotionLibrary lib;
  const auto clips = load_mocap_folder(dir, lib.problems);
  std::vector<CycleCode> codes;
  std::vector<std::string> persons;
  std::vector<bool> natural;
  double rms = 0;
  std::size_t rms_n = 0;
  for (const auto& clip : clips) {
    ++lib.clips;
    try {
      const CanonMotion m = retarget_to_canonical(clip);
      for (const auto& c : cut_gait_cycles(m)) {
        const CycleSamples s = sample_cycle(m, c, kPhaseSamples);
        const CycleCode code = encode_cycle(s);
        for (int k = 0; k < kPhaseSamples; k += 4) {
          const PhasePose p = evaluate_code(code, static_cast<double>(k) / kPhaseSamples);
          for (int b = 0; b < kCanonBones; ++b) rms += std::pow(norm(p.dirs[b] - s.dirs[k][b]), 2);
          rms_n += kCanonBones;
        }
        codes.push_back(code);
        persons.push_back(clip.person);
        natural.push_back(!instructed_pace(clip.description));
        lib.cycles_instructed += natural.back() ? 0 : 1;
        ++lib.cycles_per_person[clip.person];
      }
    } catch (const common::Error& e) {
      ++lib.clips_failed;
      lib.problems.push_back(e.what());
    }
  }
  lib.cycles = codes.size();
  if (codes.size() < 2) {
    // The reason is usually a file that did not parse: name it, not just the count.
    std::string why;
    if (!lib.problems.empty())
      why = fmt::format("; {}{}", lib.problems.front(),
                        lib.problems.size() > 1 ? fmt::format(" (and {} more problems)", lib.problems.size() - 1) : "");
    throw common::Error(fmt::format("{}: found {} clean gait cycles in {} clips; need at least 2 walking clips{}",
                                    dir.string(), codes.size(), clips.size(), why));
  }
  lib.fourier_rms = rms_n ? std::sqrt(rms / static_cast<double>(rms_n)) : 0;
  lib.model = GaitModel::learn(codes, persons, components, natural);
  return lib;
}

}  // namespace gait
