// A tiny pool of helper threads for the GGUF kernels, built so a busy machine cannot stall a step.
//
// With OpenMP's static split, a product waits at its closing barrier for every thread of the team:
// on a machine where other processes hold the cores, a descheduled helper thread holds the whole
// decode step back for a scheduler time slice (measured: parallel layers averaged 5-7x their median
// time with the machine loaded). Here the calling thread and the helpers claim chunks of work from
// one shared counter, and the caller waits only for chunks a helper has actually claimed: a helper
// that does not get a core in time finds the work done and claims nothing. Between products a helper
// watches for the next one briefly, yielding its core to any other thread that wants it, then
// sleeps (watch_for_next).
//
// The counter packs the job's generation (high 32 bits) with the next chunk index (low 32 bits); a
// claim is a compare-exchange that succeeds only for the current generation and an index below the
// job's chunk count, so a helper that wakes late can never take (or skip) a chunk of a later job.
#pragma once

#include <immintrin.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace radixlm {

class WorkPool {
 public:
  // Runs fn(chunk) for chunk in [0, chunks) on the calling thread and up to `helpers` pool threads.
  void run(int64_t chunks, int helpers, const std::function<void(int64_t)>& fn) {
    if (chunks <= 0) return;
    // one job at a time: a second caller thread (two engines in one process) runs its own alone
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (helpers <= 0 || chunks == 1 || !busy.owns_lock()) {
      for (int64_t c = 0; c < chunks; ++c) fn(c);
      return;
    }
    ensure_threads(helpers);
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gen = ++generation_;
      fn_ = &fn;
      chunks_ = chunks;
      helpers_ = helpers;
      done_.store(0, std::memory_order_relaxed);
      counter_.store(gen << 32, std::memory_order_release);
      published_.store(gen, std::memory_order_release);
    }
    cv_.notify_all();
    int64_t mine = 0;
    for (int64_t c; (c = claim(gen, chunks)) >= 0; ++mine) fn(c);
    const int64_t total = done_.fetch_add(mine, std::memory_order_acq_rel) + mine;
    if (total < chunks) {  // a helper is still on a chunk it claimed
      for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
        if (spins < 4096) _mm_pause(); else std::this_thread::yield();
      }
    }
  }

  static WorkPool& instance() {
    static WorkPool* pool = [] {
      pthread_atfork(nullptr, nullptr, [] { forked_child() = true; });
      return new WorkPool();  // never destroyed: helpers may outlive static destruction
    }();
    return forked_child() ? single_threaded() : *pool;
  }

 private:
  static bool& forked_child() { static bool value = false; return value; }
  static WorkPool& single_threaded() {
    // a forked child has none of the parent's threads: run everything on the caller
    static WorkPool* pool = new WorkPool(/*allow_threads=*/false);
    return *pool;
  }

  explicit WorkPool(bool allow_threads = true) : allow_threads_(allow_threads) {}

  int64_t claim(uint64_t gen, int64_t chunks) {
    uint64_t v = counter_.load(std::memory_order_acquire);
    while ((v >> 32) == (gen & 0xFFFFFFFFu) && static_cast<int64_t>(v & 0xFFFFFFFFu) < chunks) {
      if (counter_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) {
        return static_cast<int64_t>(v & 0xFFFFFFFFu);
      }
    }
    return -1;
  }

  void ensure_threads(int helpers) {
    if (!allow_threads_) return;
    std::lock_guard<std::mutex> lock(mu_);
    while (static_cast<int>(threads_.size()) < helpers) {
      const int id = static_cast<int>(threads_.size());
      threads_.emplace_back([this, id] { helper_loop(id); });
      threads_.back().detach();
    }
  }

  void helper_loop(int id) {
    uint64_t seen = 0;
    Clock::time_point sleep_until{};  // no watching for jobs before then (another thread wanted this core)
    for (;;) {
      const std::function<void(int64_t)>* fn;
      int64_t chunks;
      uint64_t gen;
      watch_for_next(seen, sleep_until);
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = gen = generation_;
        if (id >= helpers_) continue;  // fewer helpers wanted for this job
        fn = fn_;
        chunks = chunks_;
      }
      int64_t mine = 0;
      for (int64_t c; (c = claim(gen, chunks)) >= 0; ++mine) (*fn)(c);
      if (mine) done_.fetch_add(mine, std::memory_order_acq_rel);
    }
  }

  using Clock = std::chrono::steady_clock;

  // Before sleeping, a helper watches for the next job for watch_us() microseconds (0: sleep at
  // once). Waking a sleeping thread costs tens of microseconds on these VMs (an idle vCPU halts and
  // must be woken by the host), as long as a small product; a decode step's products come a few
  // microseconds apart, so a watching helper takes part in every one (default model decode, quiet
  // box: 1.31x, benchmarks/kernels/pool_watch.py). The helper yields its core on each look: where another thread is runnable there,
  // the yield hands it the core, the helper notices the gap on return and sleeps between jobs for
  // a while (kBackoff), so a busy machine sees a sleeping pool as before.
  static int64_t watch_us() {
    static const int64_t value = [] {
      const char* env = std::getenv("RADIXLM_GGUF_SPIN_US");
      return env ? std::max<int64_t>(0, std::atoll(env)) : kDefaultWatchUs;
    }();
    return value;
  }
  static constexpr int64_t kDefaultWatchUs = 300;
  static constexpr auto kTakenGap = std::chrono::microseconds(200);  // a yield this long: core taken
  static constexpr auto kBackoff = std::chrono::milliseconds(20);

  void watch_for_next(uint64_t seen, Clock::time_point& sleep_until) {
    const int64_t budget = watch_us();
    if (budget <= 0) return;
    auto now = Clock::now();
    if (now < sleep_until) return;
    const auto until = now + std::chrono::microseconds(budget);
    while (published_.load(std::memory_order_acquire) == seen && now < until) {
      std::this_thread::yield();
      const auto before = now;
      now = Clock::now();
      if (now - before > kTakenGap) {
        sleep_until = now + kBackoff;
        return;
      }
    }
  }

  const bool allow_threads_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  uint64_t generation_ = 0;  // guarded by mu_, as are the job fields below
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t chunks_ = 0;
  int helpers_ = 0;
  std::atomic<uint64_t> published_{0};  // generation_, readable without the lock
  std::atomic<uint64_t> counter_{0};
  std::atomic<int64_t> done_{0};
};

// fn(row) for row in [0, rows): on the calling thread alone below min_elements values in all
// (waking a helper costs more than it saves there), else with threads - 1 helpers too.
inline void run_rows(int64_t rows, int64_t elements, int64_t threads, int64_t min_elements,
                     const std::function<void(int64_t)>& fn) {
  const int helpers = elements >= min_elements ? static_cast<int>(threads) - 1 : 0;
  WorkPool::instance().run(rows, helpers, fn);
}

}  // namespace radixlm
