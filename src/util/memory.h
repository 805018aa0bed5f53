// The process's resident memory, as the kernel counts it (/proc/self/statm): what a user compares
// with the machine's RAM after loading a model.
#pragma once

#include <cstdint>

namespace dspark {

// Resident bytes of this process (file-backed pages included: a mapped model counts once it is
// read), or 0 where /proc is not available.
uint64_t ResidentBytes();

}  // namespace dspark
