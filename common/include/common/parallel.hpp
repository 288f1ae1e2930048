// Work pools for independent items: every thread takes the next unclaimed index from
// a shared counter until none is left. Standard library only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace common {

// Threads for n items: `requested` when > 0, else every core; at most n, at least 1.
inline int worker_count(int requested, std::size_t n) {
  const int want = requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>(static_cast<std::size_t>(want), n)));
}

// Calls fn(i) once for every i in [0, n) on worker_count(requested, n) threads, the
// calling thread among them. fn must be safe to call concurrently for different i.
// If a call throws, no further indices are started and the first exception is rethrown
// once every thread has stopped.
template <class Fn>
void parallel_for(std::size_t n, int requested, Fn&& fn) {
  const int workers = worker_count(requested, n);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first;
  std::mutex mu;
  auto work = [&] {
    for (std::size_t i; !failed.load(std::memory_order_relaxed) && (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace common
