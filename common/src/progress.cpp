#include "common/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace common {

ProgressBar::ProgressBar(std::string label, std::size_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::tick(std::size_t n) {
  // This tick's own count: of ticks racing to the end only the one that completes the work
  // sees it complete.
  const std::size_t done = done_.fetch_add(n) + n;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  // Terminals redraw ~10 Hz and show the full bar at once; logs get a line every 10 s and
  // the completed line from finish() only.
  const auto period = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(10000);
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  if (done >= total_ ? !tty_ : now - last_draw_ < period) return;
  last_draw_ = now;
  draw(false);
}

void ProgressBar::set_status(std::string status) {
  std::lock_guard lock(mu_);
  status_ = std::move(status);
}

void ProgressBar::finish() {
  std::lock_guard lock(mu_);
  if (finished_ || !enabled_) return;
  finished_ = true;
  draw(true);
}

void ProgressBar::draw(bool final) {
  const std::size_t done = std::min(done_.load(), total_);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const double eta = (done > 0 && done < total_) ? secs / static_cast<double>(done) * static_cast<double>(total_ - done) : 0.0;
  constexpr int kWidth = 28;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  const std::string line = fmt::format("{} [{}] {}/{} {:3.0f}% {:.1f}s{}{}", label_, bar, done, total_, frac * 100,
                                       secs, final ? "" : fmt::format(" eta {:.0f}s", eta),
                                       status_.empty() ? "" : "  " + status_);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace common
