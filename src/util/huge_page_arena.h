// Memory for large, long-lived read-mostly buffers (a model's packed weights), backed by
// transparent huge pages where the OS offers them.
//
// Why: a decode step streams every weight once, so with 4 KiB pages it takes one TLB miss per
// 64 cache lines, and in a VM each miss is a two-level page walk. On 2 MiB pages the stream takes
// a TLB miss per 2 MiB instead (docs/performance.md has what that gained).
//
// Allocations are carved one after another out of regions of at least kRegionBytes, each an
// anonymous mapping aligned to 2 MiB and advised MADV_HUGEPAGE (Linux's default THP mode,
// "madvise", backs only advised ranges). Pages a region never touches cost no memory, so the
// unused tail of the last region is free. Elsewhere, or if mapping fails, regions come from
// std::aligned_alloc. Blocks start zero-filled. Memory is released when the arena is destroyed;
// not thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace dspark {

class HugePageArena {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kRegionBytes = size_t{32} << 20;

  HugePageArena() = default;
  ~HugePageArena();
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;

  // n zero-filled bytes aligned to `align` (a power of two up to kHugePage); never null (throws
  // std::bad_alloc when out of memory, as operator new does, so that a request that cannot get
  // memory fails alone: BatchEngine).
  void* Allocate(size_t n, size_t align = 64);

  // Bytes handed out, and bytes reserved (regions, including their untouched tails).
  size_t allocated() const { return allocated_; }
  size_t reserved() const { return reserved_; }
  // Whether the arena holds memory, every region is advised for huge pages, and the kernel's THP
  // mode backs advised ranges (false without THP, with THP off, or on the aligned_alloc fallback).
  bool huge_pages() const { return !regions_.empty() && huge_pages_; }

 private:
  struct Region {
    void* mapping = nullptr;  // what to release (the mapping, or the aligned_alloc block)
    size_t mapping_bytes = 0;
    bool mapped = false;
    char* begin = nullptr;  // 2 MiB-aligned usable range [begin, end)
    char* end = nullptr;
  };
  void AddRegion(size_t min_bytes);

  std::vector<Region> regions_;
  char* cursor_ = nullptr;
  size_t allocated_ = 0, reserved_ = 0;
  bool huge_pages_ = true;
};

}  // namespace dspark
