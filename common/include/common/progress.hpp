// A terminal progress bar for long work (sweeps, generation, training).
// Draws to stderr, redraws at most ~10 times a second, and prints plain
// periodic lines instead when stderr is not a terminal (CI logs stay readable).
// Thread-safe: tick() may be called from worker threads.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace common {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::size_t total, bool enabled = true);
  ~ProgressBar();  // finishes the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void tick(std::size_t n = 1);
  // Extra text shown after the counts, e.g. "loss 0.31  512 seq/s".
  void set_status(std::string status);
  void finish();
  std::size_t done() const { return done_.load(); }

 private:
  void draw(bool final);
  std::string label_;
  std::size_t total_;
  bool enabled_, tty_;
  std::atomic<std::size_t> done_{0};
  std::mutex mu_;
  std::string status_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool finished_ = false;
};

}  // namespace common
