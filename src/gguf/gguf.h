// GGUF files (llama.cpp's model format, v2 and v3): a memory-mapped reader with typed metadata
// access and a tensor index, and a writer that round-trips everything the reader reads.
// Knows no model architecture: shape checks against hyperparameters live in src/model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/dtype.h"
#include "util/status.h"

namespace dspark::gguf {

// GGUF metadata value types (gguf_type).
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view ValueTypeName(ValueType t);
bool IsSignedType(ValueType t);

// One metadata value. Scalars keep their exact type so the writer can reproduce the file.
struct Value {
  ValueType type = ValueType::kU32;
  uint64_t u = 0;  // unsigned integers and bool
  int64_t i = 0;   // signed integers
  double f = 0;    // f32 / f64
  std::string str;
  ValueType elem_type = ValueType::kU8;  // arrays only
  std::vector<Value> elems;              // arrays only (may nest)

  static Value U8(uint8_t v) { Value x; x.type = ValueType::kU8; x.u = v; return x; }
  static Value U32(uint32_t v) { Value x; x.type = ValueType::kU32; x.u = v; return x; }
  static Value I32(int32_t v) { Value x; x.type = ValueType::kI32; x.i = v; return x; }
  static Value U64(uint64_t v) { Value x; x.type = ValueType::kU64; x.u = v; return x; }
  static Value I64(int64_t v) { Value x; x.type = ValueType::kI64; x.i = v; return x; }
  static Value F32(float v) { Value x; x.type = ValueType::kF32; x.f = v; return x; }
  static Value F64(double v) { Value x; x.type = ValueType::kF64; x.f = v; return x; }
  static Value Bool(bool v) { Value x; x.type = ValueType::kBool; x.u = v ? 1 : 0; return x; }
  static Value String(std::string v) { Value x; x.type = ValueType::kString; x.str = std::move(v); return x; }
  static Value Array(ValueType elem_type, std::vector<Value> elems) {
    Value x; x.type = ValueType::kArray; x.elem_type = elem_type; x.elems = std::move(elems); return x;
  }
  static Value StringArray(const std::vector<std::string>& v);
  static Value F32Array(const std::vector<float>& v);
  static Value I32Array(const std::vector<int32_t>& v);

  bool IsInteger() const;
  bool IsFloat() const { return type == ValueType::kF32 || type == ValueType::kF64; }
  // Human-readable rendering (arrays abbreviated past max_elems) for `dspark info`.
  std::string ToString(size_t max_elems = 8) const;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // dims, innermost (contiguous) first, as ggml's ne[]
  DType type = DType::kF32;
  uint64_t offset = 0;      // relative to the start of the data section
  uint64_t file_offset = 0; // absolute byte offset in the file
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the File lives

  int64_t NumElements() const;
  int64_t Rows() const;  // product of ne[1..]
  std::string ShapeString() const;  // "[4096, 1024]"
};

// A read-only, memory-mapped GGUF file.
class File {
 public:
  // Opens and validates `path`: magic, version, every metadata entry and tensor record, tensor
  // data inside the file, alignment. Errors name the path, what was being read and the offset.
  static Result<std::unique_ptr<File>> Open(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }

  // DataLoss when the file on disk is no longer the one opened: rewritten in place (its size or
  // modification time differ from the open's) or cut short. A model reads its weights from the
  // mapping while it loads, so a file that a copy or download is still writing would load mixed or
  // missing bytes; the loader checks this once it has read them. (A file replaced by rename is
  // not a change here: the mapping keeps the opened one, and it stays the file this reads.)
  Status CheckUnchanged() const;

  // Drops this process's mapping of the whole pages inside [p, p + n) (a range of the file's data,
  // e.g. a tensor whose packed copy replaced it), so they stop counting towards its memory. The
  // mapping stays valid: a later read maps the pages again from the file. No-op outside the file.
  void ReleasePages(const void* p, uint64_t n) const;

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters: NotFound if absent, InvalidArgument naming key and actual type if mistyped.
  // Integer getters accept any integer type whose value fits.
  Result<std::string> GetString(std::string_view key) const;
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;  // f32, f64 or an integer
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  // With defaults when the key is absent (still an error when present with the wrong type).
  Result<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  Result<double> GetFloatOr(std::string_view key, double fallback) const;
  Result<bool> GetBoolOr(std::string_view key, bool fallback) const;
  Result<std::string> GetStringOr(std::string_view key, std::string fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* FindTensor(std::string_view name) const;

 private:
  File() = default;
  Status Parse();

  std::string path_;
  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int64_t mtime_ns_ = 0;  // at open
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file. Metadata keeps insertion order; a key set twice keeps its first slot.
class Writer {
 public:
  explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}

  void Set(const std::string& key, Value value);
  void SetString(const std::string& key, std::string v) { Set(key, Value::String(std::move(v))); }
  void SetU32(const std::string& key, uint32_t v) { Set(key, Value::U32(v)); }
  void SetI32(const std::string& key, int32_t v) { Set(key, Value::I32(v)); }
  void SetF32(const std::string& key, float v) { Set(key, Value::F32(v)); }
  void SetBool(const std::string& key, bool v) { Set(key, Value::Bool(v)); }
  // Copies every metadata entry of `src` (e.g. the tokenizer of a real model).
  void CopyMetadataFrom(const File& src, std::string_view key_prefix = "");

  // `data` must hold exactly RowBytes(type, ne[0]) * rows bytes.
  Status AddTensor(const std::string& name, DType type, std::vector<int64_t> ne,
                   std::vector<uint8_t> data);
  // Data produced at write time, so multi-GB files need not sit in memory: fill(dst) writes
  // exactly the tensor's bytes.
  Status AddTensorLazy(const std::string& name, DType type, std::vector<int64_t> ne,
                       std::function<void(uint8_t* dst)> fill);

  // Writes the file; progress(done_bytes, total_bytes) is called as tensors are written.
  Status WriteFile(const std::string& path,
                   const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;
  // Serialises to memory (tests).
  std::vector<uint8_t> Serialize() const;

  // Test hook: the GGUF version number written into the header (default 3).
  void set_version(uint32_t v) { version_ = v; }

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    std::vector<uint8_t> data;
    std::function<void(uint8_t*)> fill;
  };
  std::vector<uint8_t> HeaderBytes() const;  // everything before the data section, padded

  uint64_t alignment_;
  uint32_t version_ = 3;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace dspark::gguf
