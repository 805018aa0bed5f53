#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "gguf/gguf.h"
#include "util/testing/temp_dir.h"

namespace dspark::gguf {
namespace {

// Removed with the process's temp directory at exit.
std::string TempPath(const std::string& name) { return dspark::testing::TempPath(name + ".gguf"); }

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Writer SampleWriter() {
  Writer w;
  w.SetString("general.architecture", "qwen3");
  w.Set("u8", Value::U8(200));
  w.Set("i8", [] { Value v; v.type = ValueType::kI8; v.i = -5; return v; }());
  w.Set("u16", [] { Value v; v.type = ValueType::kU16; v.u = 65000; return v; }());
  w.Set("i16", [] { Value v; v.type = ValueType::kI16; v.i = -30000; return v; }());
  w.SetU32("u32", 4000000000u);
  w.SetI32("i32", -7);
  w.Set("u64", Value::U64(1ull << 40));
  w.Set("i64", Value::I64(-(1ll << 40)));
  w.SetF32("f32", 0.25f);
  w.Set("f64", Value::F64(1e-300));
  w.SetBool("flag", true);
  w.Set("names", Value::StringArray({"a", "", "ünïcode"}));
  w.Set("scores", Value::F32Array({1.5f, -2.0f}));
  w.Set("nested", Value::Array(ValueType::kArray, {Value::I32Array({1, 2}), Value::I32Array({})}));
  std::vector<uint8_t> data(4 * 6);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k);
  EXPECT_TRUE(w.AddTensor("w", DType::kF32, {3, 2}, data).ok());
  EXPECT_TRUE(w.AddTensor("b", DType::kQ8_0, {32}, std::vector<uint8_t>(34, 7)).ok());
  return w;
}

TEST(Gguf, RoundTripsEveryValueType) {
  const std::string path = TempPath("roundtrip");
  ASSERT_TRUE(SampleWriter().WriteFile(path).ok());
  auto f = File::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  File& file = **f;
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(*file.GetString("general.architecture"), "qwen3");
  EXPECT_EQ(*file.GetInt("u8"), 200);
  EXPECT_EQ(*file.GetInt("i8"), -5);
  EXPECT_EQ(*file.GetInt("u16"), 65000);
  EXPECT_EQ(*file.GetInt("i16"), -30000);
  EXPECT_EQ(*file.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(*file.GetInt("i32"), -7);
  EXPECT_EQ(*file.GetInt("u64"), 1ll << 40);
  EXPECT_EQ(*file.GetInt("i64"), -(1ll << 40));
  EXPECT_EQ(*file.GetFloat("f32"), 0.25);
  EXPECT_EQ(*file.GetFloat("f64"), 1e-300);
  EXPECT_TRUE(*file.GetBool("flag"));
  EXPECT_EQ(*file.GetStringArray("names"), (std::vector<std::string>{"a", "", "ünïcode"}));
  EXPECT_EQ(*file.GetFloatArray("scores"), (std::vector<double>{1.5, -2.0}));
  const Value* nested = file.Find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elems.size(), 2u);
  EXPECT_EQ(nested->elems[0].elems[1].i, 2);
  EXPECT_TRUE(nested->elems[1].elems.empty());

  const TensorInfo* w = file.FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(w->data[5], 5);
  EXPECT_EQ(w->file_offset % 32, 0u);
  const TensorInfo* b = file.FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, DType::kQ8_0);
  EXPECT_EQ(b->data[33], 7);

  // Re-writing what was read reproduces the file byte for byte.
  Writer again;
  again.CopyMetadataFrom(file);
  for (const TensorInfo& t : file.tensors())
    ASSERT_TRUE(again.AddTensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.nbytes)).ok());
  EXPECT_EQ(again.Serialize(), SampleWriter().Serialize());
}

TEST(Gguf, ReadsVersion2AndCustomAlignment) {
  Writer w(64);
  w.set_version(2);
  w.SetU32("x", 1);
  ASSERT_TRUE(w.AddTensor("t", DType::kF16, {4}, std::vector<uint8_t>(8, 1)).ok());
  const std::string path = TempPath("v2");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = File::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->FindTensor("t")->file_offset % 64, 0u);
}

TEST(Gguf, ReleasedPagesReadBackTheSameBytes) {
  Writer w;
  std::vector<uint8_t> data(5 * 4096 + 100);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 31 + 7);
  ASSERT_TRUE(w.AddTensor("big", DType::kF32, {static_cast<int64_t>(data.size() / 4)}, data).ok());
  const std::string path = TempPath("release");
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = File::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const TensorInfo* t = (*f)->FindTensor("big");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), data);
  (*f)->ReleasePages(t->data, t->nbytes);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), data);
  // Ranges outside the mapping are ignored.
  (*f)->ReleasePages(data.data(), data.size());
  (*f)->ReleasePages(t->data, (*f)->file_size() + 1);
  EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->nbytes), data);
}

TEST(Gguf, TypedGettersNameTheProblem) {
  const std::string path = TempPath("getters");
  ASSERT_TRUE(SampleWriter().WriteFile(path).ok());
  auto f = File::Open(path);
  ASSERT_TRUE(f.ok());
  auto missing = (*f)->GetInt("nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
  auto wrong = (*f)->GetString("u32");
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("u32"), std::string::npos);
  EXPECT_EQ(*(*f)->GetIntOr("nope", 9), 9);
}

Status OpenBytes(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  WriteBytes(path, bytes);
  return File::Open(path).status();
}

TEST(Gguf, RejectsWrongMagic) {
  std::vector<uint8_t> bytes = SampleWriter().Serialize();
  std::memcpy(bytes.data(), "GGML", 4);
  Status s = OpenBytes("magic", bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a GGUF file"), std::string::npos) << s.message();
}

TEST(Gguf, RejectsUnsupportedVersion) {
  std::vector<uint8_t> bytes = SampleWriter().Serialize();
  bytes[4] = 7;
  Status s = OpenBytes("version", bytes);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("version 7"), std::string::npos) << s.message();
}

TEST(Gguf, EveryTruncationIsAClearError) {
  const std::vector<uint8_t> bytes = SampleWriter().Serialize();
  // The padding after the last tensor's data is optional; every byte before its end is needed.
  const std::string full = TempPath("full");
  WriteBytes(full, bytes);
  auto f = File::Open(full);
  ASSERT_TRUE(f.ok());
  const TensorInfo& last = (*f)->tensors().back();
  const size_t needed = last.file_offset + last.nbytes;
  for (size_t len = 0; len < needed; len += (len < 600 ? 1 : 13)) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + len);
    Status s = OpenBytes("trunc", cut);
    ASSERT_FALSE(s.ok()) << "length " << len;
    ASSERT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument) << s.message();
  }
  Status s = OpenBytes("trunc", std::vector<uint8_t>(bytes.begin(), bytes.end() - 40));
  EXPECT_NE(s.message().find("outside the file"), std::string::npos) << s.message();
}

TEST(Gguf, RejectsUnknownTensorTypeAndHugeCounts) {
  Writer w;
  ASSERT_TRUE(w.AddTensor("t", DType::kF32, {4}, std::vector<uint8_t>(16, 0)).ok());
  std::vector<uint8_t> bytes = w.Serialize();
  // header (24) + name (8 + 1) + n_dims (4) + dim (8) => type field
  const size_t type_at = 24 + 9 + 4 + 8;
  bytes[type_at] = 99;
  Status s = OpenBytes("type", bytes);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("unknown tensor type 99"), std::string::npos) << s.message();

  std::vector<uint8_t> huge = w.Serialize();
  const uint64_t lots = 1ull << 60;
  std::memcpy(huge.data() + 16, &lots, 8);  // metadata count
  s = OpenBytes("huge", huge);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
}

TEST(Gguf, MissingFileIsNotFound) {
  auto f = File::Open("/nonexistent/model.gguf");
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dspark::gguf
