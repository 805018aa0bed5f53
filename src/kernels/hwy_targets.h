// The one place that chooses which Highway targets the kernels are compiled for. Include it
// before any Highway header in a kernels .cc: it enables AVX3_DL (Ice Lake and later: AVX-512
// VNNI, which Highway 1.0.3 only compiles on request) next to the default set.
#pragma once

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
