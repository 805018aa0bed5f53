#include "util/fault_injection.h"

#include <atomic>
#include <new>

namespace dspark {

namespace {
constexpr int kPoints = static_cast<int>(FaultPoint::kCount);
std::atomic<bool> g_any_armed{false};
std::atomic<int> g_armed[kPoints];
std::atomic<int> g_hits[kPoints];
}  // namespace

void ArmFault(FaultPoint point, int times) {
  g_armed[static_cast<int>(point)].store(times, std::memory_order_relaxed);
  g_any_armed.store(true, std::memory_order_release);
}

void DisarmFaults() {
  g_any_armed.store(false, std::memory_order_release);
  for (int i = 0; i < kPoints; ++i) {
    g_armed[i].store(0, std::memory_order_relaxed);
    g_hits[i].store(0, std::memory_order_relaxed);
  }
}

int FaultHits(FaultPoint point) { return g_hits[static_cast<int>(point)].load(std::memory_order_relaxed); }

void MaybeInjectAllocationFailure(FaultPoint point) {
  if (!g_any_armed.load(std::memory_order_relaxed)) return;
  const int i = static_cast<int>(point);
  g_hits[i].fetch_add(1, std::memory_order_relaxed);
  int left = g_armed[i].load(std::memory_order_relaxed);
  while (left > 0) {
    if (g_armed[i].compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) throw std::bad_alloc();
  }
}

}  // namespace dspark
