#include "util/huge_page_arena.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "util/status.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dspark {

namespace {
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Whether the kernel backs advised ranges with huge pages: its THP mode is "always" or "madvise"
// (with "never", MADV_HUGEPAGE is accepted and does nothing).
bool TransparentHugePagesEnabled() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char buf[128] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  const std::string mode(buf, n);
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}
}  // namespace

HugePageArena::~HugePageArena() {
  for (const Region& r : regions_) {
#if defined(__linux__)
    if (r.mapped) {
      ::munmap(r.mapping, r.mapping_bytes);
      continue;
    }
#endif
    std::free(r.mapping);
  }
}

void HugePageArena::AddRegion(size_t min_bytes) {
  regions_.reserve(regions_.size() + 1);  // a throw below leaves no mapping unrecorded
  Region r;
  const size_t usable = RoundUp(std::max(min_bytes, kRegionBytes), kHugePage);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // One huge page of slack, so the usable range can start on a 2 MiB boundary.
  r.mapping_bytes = usable + kHugePage;
  void* p = ::mmap(nullptr, r.mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    r.mapping = p;
    r.mapped = true;
    r.begin = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(p), kHugePage));
    r.end = r.begin + usable;
    // Advice only: without THP the range stays on small pages and works the same.
    static const bool thp = TransparentHugePagesEnabled();
    if (!thp || ::madvise(r.begin, usable, MADV_HUGEPAGE) != 0) huge_pages_ = false;
  }
#endif
  if (!r.mapped) {
    huge_pages_ = false;
    r.mapping_bytes = usable;
    r.mapping = std::aligned_alloc(kHugePage, usable);
    if (r.mapping == nullptr) throw std::bad_alloc();
    std::memset(r.mapping, 0, usable);  // as an anonymous mapping would be
    r.begin = static_cast<char*>(r.mapping);
    r.end = r.begin + usable;
  }
  regions_.push_back(r);
  cursor_ = r.begin;
  reserved_ += usable;
}

void* HugePageArena::Allocate(size_t n, size_t align) {
  DSPARK_CHECK_MSG(align > 0 && (align & (align - 1)) == 0 && align <= kHugePage,
                   "HugePageArena: alignment must be a power of two up to 2 MiB");
  n = std::max<size_t>(n, 1);
  char* at = regions_.empty() ? nullptr : reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(cursor_), align));
  if (at == nullptr || at + n > regions_.back().end) {
    AddRegion(n);
    at = cursor_;
  }
  cursor_ = at + n;
  allocated_ += n;
  return at;
}

}  // namespace dspark
