#include "util/dtype.h"

#include <array>
#include <cctype>

#include "util/status.h"

namespace dspark {

namespace {

struct Entry {
  uint32_t id;
  DTypeInfo info;
};

// Block sizes and byte counts from ggml.c's type_traits table.
constexpr Entry kTable[] = {
    {0, {"f32", 1, 4, false}},        {1, {"f16", 1, 2, false}},
    {2, {"q4_0", 32, 18, true}},      {3, {"q4_1", 32, 20, true}},
    {6, {"q5_0", 32, 22, true}},      {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},      {9, {"q8_1", 32, 36, true}},
    {10, {"q2_K", 256, 84, true}},    {11, {"q3_K", 256, 110, true}},
    {12, {"q4_K", 256, 144, true}},   {13, {"q5_K", 256, 176, true}},
    {14, {"q6_K", 256, 210, true}},   {15, {"q8_K", 256, 292, true}},
    {16, {"iq2_xxs", 256, 66, true}}, {17, {"iq2_xs", 256, 74, true}},
    {18, {"iq3_xxs", 256, 98, true}}, {19, {"iq1_s", 256, 50, true}},
    {20, {"iq4_nl", 32, 18, true}},   {21, {"iq3_s", 256, 110, true}},
    {22, {"iq2_s", 256, 82, true}},   {23, {"iq4_xs", 256, 136, true}},
    {24, {"i8", 1, 1, false}},        {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, false}},       {27, {"i64", 1, 8, false}},
    {28, {"f64", 1, 8, false}},       {29, {"iq1_m", 256, 56, true}},
    {30, {"bf16", 1, 2, false}},      {34, {"tq1_0", 256, 54, true}},
    {35, {"tq2_0", 256, 66, true}},
};

}  // namespace

std::optional<DTypeInfo> GetDTypeInfo(uint32_t type_id) {
  for (const Entry& e : kTable)
    if (e.id == type_id) return e.info;
  return std::nullopt;
}

const DTypeInfo& Info(DType type) {
  for (const Entry& e : kTable)
    if (e.id == static_cast<uint32_t>(type)) return e.info;
  DSPARK_CHECK_MSG(false, "unknown DType");
  __builtin_unreachable();
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const Entry& e : kTable) {
    if (e.info.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size(); ++i)
      same &= std::tolower(static_cast<unsigned char>(name[i])) ==
              std::tolower(static_cast<unsigned char>(e.info.name[i]));
    if (same) return static_cast<DType>(e.id);
  }
  return std::nullopt;
}

}  // namespace dspark
