// Grow-only, 64-byte-aligned scratch buffers for the kernels: after warm-up no call allocates.
// One instance per thread (thread_local at the use site); not thread-safe itself.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace dspark::kernels {

class ScratchBuffer {
 public:
  // Returns at least `bytes` bytes, 64-byte aligned. Contents are unspecified after growth.
  void* Get(size_t bytes) {
    if (bytes > capacity_) {
      capacity_ = (bytes + bytes / 2 + 63) & ~size_t{63};
      data_.reset(static_cast<unsigned char*>(std::aligned_alloc(64, capacity_)));
    }
    return data_.get();
  }
  template <typename T>
  T* Get(size_t count) {
    return static_cast<T*>(Get(count * sizeof(T)));
  }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> data_;
  size_t capacity_ = 0;
};

inline size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace dspark::kernels
