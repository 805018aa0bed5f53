// Memory-mapped GGUF reader. Every read is bounds-checked against the file size, so a truncated
// or corrupt file yields an error naming what was being read and at which byte, never a crash.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"

namespace dspark::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
// Nesting deeper than this is certainly corrupt and would otherwise recurse without bound.
constexpr int kMaxArrayDepth = 8;

// Sequential, bounds-checked reader over the mapping.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size)
      : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > size_ - pos_) {
      return DataLoss("gguf: {}: file ends at byte {} while reading {} at byte {} (needs {} bytes); "
                      "the file may be truncated or incomplete",
                      path_, size_, what, pos_, n);
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    DSPARK_TRY(Need(sizeof(T), what));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    DSPARK_TRY(Read(&len, what));
    DSPARK_TRY(Need(len, what));
    out->assign(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  const std::string& path() const { return path_; }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Smallest possible encoded size of one value of type t (to reject absurd array counts early).
uint64_t MinEncodedSize(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

bool KnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kF64); }

Status ReadValue(Cursor& c, ValueType type, const std::string& key, int depth, Value* out) {
  out->type = type;
  const std::string what = "value of '" + key + "'";
  switch (type) {
    case ValueType::kU8: { uint8_t v; DSPARK_TRY(c.Read(&v, what)); out->u = v; break; }
    case ValueType::kI8: { int8_t v; DSPARK_TRY(c.Read(&v, what)); out->i = v; break; }
    case ValueType::kU16: { uint16_t v; DSPARK_TRY(c.Read(&v, what)); out->u = v; break; }
    case ValueType::kI16: { int16_t v; DSPARK_TRY(c.Read(&v, what)); out->i = v; break; }
    case ValueType::kU32: { uint32_t v; DSPARK_TRY(c.Read(&v, what)); out->u = v; break; }
    case ValueType::kI32: { int32_t v; DSPARK_TRY(c.Read(&v, what)); out->i = v; break; }
    case ValueType::kU64: { uint64_t v; DSPARK_TRY(c.Read(&v, what)); out->u = v; break; }
    case ValueType::kI64: { int64_t v; DSPARK_TRY(c.Read(&v, what)); out->i = v; break; }
    case ValueType::kF32: { float v; DSPARK_TRY(c.Read(&v, what)); out->f = v; break; }
    case ValueType::kF64: { double v; DSPARK_TRY(c.Read(&v, what)); out->f = v; break; }
    case ValueType::kBool: {
      uint8_t v;
      const uint64_t at = c.pos();
      DSPARK_TRY(c.Read(&v, what));
      if (v > 1) return DataLoss("gguf: {}: bool {} at byte {} holds {}, expected 0 or 1", c.path(), what, at, v);
      out->u = v;
      break;
    }
    case ValueType::kString: DSPARK_TRY(c.ReadString(&out->str, what)); break;
    case ValueType::kArray: {
      if (depth >= kMaxArrayDepth)
        return DataLoss("gguf: {}: arrays nested deeper than {} in '{}' at byte {}", c.path(), kMaxArrayDepth, key, c.pos());
      uint32_t elem_type = 0;
      const uint64_t at = c.pos();
      DSPARK_TRY(c.Read(&elem_type, "array element type of '" + key + "'"));
      if (!KnownValueType(elem_type))
        return DataLoss("gguf: {}: array '{}' at byte {} has unknown element type {}", c.path(), key, at, elem_type);
      uint64_t count = 0;
      DSPARK_TRY(c.Read(&count, "array length of '" + key + "'"));
      const ValueType et = static_cast<ValueType>(elem_type);
      if (count > c.remaining() / MinEncodedSize(et))
        return DataLoss("gguf: {}: array '{}' at byte {} claims {} elements, more than the {} bytes left can hold",
                        c.path(), key, at, count, c.remaining());
      out->elem_type = et;
      out->elems.resize(count);
      for (uint64_t k = 0; k < count; ++k) DSPARK_TRY(ReadValue(c, et, key, depth + 1, &out->elems[k]));
      break;
    }
  }
  return Status::Ok();
}

std::string_view TypeDescription(const Value& v) { return ValueTypeName(v.type); }

int64_t MtimeNs(const struct stat& st) { return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

}  // namespace

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t TensorInfo::Rows() const {
  int64_t n = 1;
  for (size_t k = 1; k < ne.size(); ++k) n *= ne[k];
  return n;
}

std::string TensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t k = 0; k < ne.size(); ++k) s += (k ? ", " : "") + std::to_string(ne[k]);
  return s + "]";
}

Result<std::unique_ptr<File>> File::Open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return NotFound("gguf: cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0) return Internal("gguf: cannot stat '{}': {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return InvalidArgument("gguf: '{}' is a directory, not a GGUF file", path);
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->mtime_ns_ = MtimeNs(st);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, f->fd_, 0);
    if (p == MAP_FAILED) return Internal("gguf: cannot map '{}': {}", path, std::strerror(errno));
    f->base_ = static_cast<const uint8_t*>(p);
  }
  DSPARK_TRY(f->Parse());
  return f;
}

Status File::CheckUnchanged() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Internal("gguf: cannot stat '{}': {}", path_, std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size != size_ || MtimeNs(st) != mtime_ns_)
    return DataLoss("gguf: '{}' changed on disk while it was loading ({} bytes when opened, {} now{}); the model "
                    "read from it is not trustworthy. Load it again once whatever writes it has finished, and "
                    "replace a model a server is using by renaming a complete file over it, not by writing into it",
                    path_, size_, size, size < size_ ? ": cut short" : size == size_ ? ", rewritten" : "");
  return Status::Ok();
}

void File::ReleasePages(const void* p, uint64_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (base_ == nullptr || b < base_ || n > size_ || b + n > base_ + size_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

File::~File() {
  if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

Status File::Parse() {
  Cursor c(path_, base_, size_);
  uint32_t magic = 0;
  DSPARK_TRY(c.Read(&magic, "magic"));
  if (magic != kMagic) {
    char shown[5] = {0};
    std::memcpy(shown, &magic, 4);
    for (char& ch : shown) if (ch != 0 && (ch < 32 || ch > 126)) ch = '?';
    return InvalidArgument("gguf: {}: not a GGUF file: magic at byte 0 is '{}' (0x{:08x}), expected 'GGUF'",
                           path_, shown, magic);
  }
  DSPARK_TRY(c.Read(&version_, "version"));
  if (version_ == 1)
    return Unimplemented("gguf: {}: GGUF version 1 is not supported (byte 4); re-convert the model with a current llama.cpp", path_);
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3)
      return Unimplemented("gguf: {}: big-endian GGUF (version {} byte-swapped at byte 4) is not supported", path_, swapped);
    return Unimplemented("gguf: {}: unsupported GGUF version {} at byte 4 (supported: 2, 3)", path_, version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  DSPARK_TRY(c.Read(&n_tensors, "tensor count"));
  DSPARK_TRY(c.Read(&n_kv, "metadata count"));
  // Each metadata entry takes at least 12 bytes and each tensor record at least 24.
  if (n_kv > c.remaining() / 12)
    return DataLoss("gguf: {}: header claims {} metadata entries, more than its {} bytes can hold; the file may be "
                    "truncated or corrupt", path_, n_kv, size_);
  if (n_tensors > c.remaining() / 24)
    return DataLoss("gguf: {}: header claims {} tensors, more than its {} bytes can hold; the file may be "
                    "truncated or corrupt", path_, n_tensors, size_);

  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = c.pos();
    std::string key;
    DSPARK_TRY(c.ReadString(&key, "metadata key #" + std::to_string(k)));
    uint32_t type = 0;
    DSPARK_TRY(c.Read(&type, "type of '" + key + "'"));
    if (!KnownValueType(type))
      return DataLoss("gguf: {}: metadata '{}' at byte {} has unknown value type {}", path_, key, at, type);
    Value v;
    DSPARK_TRY(ReadValue(c, static_cast<ValueType>(type), key, 0, &v));
    if (kv_index_.count(key)) return DataLoss("gguf: {}: duplicate metadata key '{}' at byte {}", path_, key, at);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const Value* a = Find("general.alignment")) {
    if (!a->IsInteger() || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 20))
      return DataLoss("gguf: {}: general.alignment must be a power of two, got {}", path_, a->ToString());
    alignment_ = a->u;
  }

  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    TensorInfo t;
    const uint64_t at = c.pos();
    DSPARK_TRY(c.ReadString(&t.name, "name of tensor #" + std::to_string(k)));
    uint32_t n_dims = 0;
    DSPARK_TRY(c.Read(&n_dims, "dimension count of '" + t.name + "'"));
    if (n_dims == 0 || n_dims > 4)
      return DataLoss("gguf: {}: tensor '{}' at byte {} has {} dimensions (1 to 4 allowed)", path_, t.name, at, n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t dim = 0;
      DSPARK_TRY(c.Read(&dim, "shape of '" + t.name + "'"));
      if (dim < 0 || (dim > 0 && elements > std::numeric_limits<int64_t>::max() / dim))
        return DataLoss("gguf: {}: tensor '{}' at byte {} has an invalid dimension {}", path_, t.name, at, dim);
      elements *= dim;
      t.ne.push_back(dim);
    }
    uint32_t type = 0;
    DSPARK_TRY(c.Read(&type, "type of '" + t.name + "'"));
    const auto info = GetDTypeInfo(type);
    if (!info)
      return Unimplemented("gguf: {}: tensor '{}' at byte {} has unknown tensor type {}", path_, t.name, at, type);
    t.type = static_cast<DType>(type);
    if (t.ne[0] % info->block_size != 0)
      return DataLoss("gguf: {}: tensor '{}' row length {} is not a multiple of the {} block size {}",
                      path_, t.name, t.ne[0], info->name, info->block_size);
    DSPARK_TRY(c.Read(&t.offset, "data offset of '" + t.name + "'"));
    if (t.offset % alignment_ != 0)
      return DataLoss("gguf: {}: tensor '{}' data offset {} is not aligned to {}", path_, t.name, t.offset, alignment_);
    t.nbytes = static_cast<uint64_t>(elements / info->block_size) * static_cast<uint64_t>(info->block_bytes);
    if (tensor_index_.count(t.name)) return DataLoss("gguf: {}: duplicate tensor name '{}' at byte {}", path_, t.name, at);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (TensorInfo& t : tensors_) {
    t.file_offset = data_offset_ + t.offset;
    if (t.offset > size_ || t.file_offset > size_ || t.nbytes > size_ - t.file_offset) {
      return DataLoss("gguf: {}: tensor '{}' ({} {}, {} bytes at byte {}) lies outside the file of {} bytes; "
                      "the file may be truncated",
                      path_, t.name, Info(t.type).name, t.ShapeString(), t.nbytes, t.file_offset, size_);
    }
    t.data = base_ + t.file_offset;
  }
  return Status::Ok();
}

const Value* File::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status Missing(const std::string& path, std::string_view key) {
  return NotFound("gguf: {}: metadata key '{}' is missing", path, key);
}

Status WrongType(const std::string& path, std::string_view key, std::string_view expected, const Value& v) {
  return InvalidArgument("gguf: {}: metadata '{}' has type {}, expected {}", path, key, TypeDescription(v), expected);
}

Result<int64_t> AsInt(const std::string& path, std::string_view key, const Value& v) {
  if (!v.IsInteger()) return WrongType(path, key, "an integer", v);
  if (IsSignedType(v.type)) return v.i;
  if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return InvalidArgument("gguf: {}: metadata '{}' = {} is too large", path, key, v.u);
  return static_cast<int64_t>(v.u);
}

}  // namespace

Result<std::string> File::GetString(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->type != ValueType::kString) return WrongType(path_, key, "string", *v);
  return v->str;
}

Result<int64_t> File::GetInt(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  return AsInt(path_, key, *v);
}

Result<double> File::GetFloat(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) {
    DSPARK_ASSIGN_OR_RETURN(int64_t i, AsInt(path_, key, *v));
    return static_cast<double>(i);
  }
  return WrongType(path_, key, "a number", *v);
}

Result<bool> File::GetBool(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->type != ValueType::kBool) return WrongType(path_, key, "bool", *v);
  return v->u != 0;
}

Result<std::vector<std::string>> File::GetStringArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->type != ValueType::kArray || v->elem_type != ValueType::kString)
    return WrongType(path_, key, "array of strings", *v);
  std::vector<std::string> out;
  out.reserve(v->elems.size());
  for (const Value& e : v->elems) out.push_back(e.str);
  return out;
}

Result<std::vector<double>> File::GetFloatArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->type != ValueType::kArray) return WrongType(path_, key, "array of numbers", *v);
  std::vector<double> out;
  out.reserve(v->elems.size());
  for (const Value& e : v->elems) {
    if (e.IsFloat()) out.push_back(e.f);
    else if (e.IsInteger()) out.push_back(IsSignedType(e.type) ? static_cast<double>(e.i) : static_cast<double>(e.u));
    else return WrongType(path_, key, "array of numbers", e);
  }
  return out;
}

Result<std::vector<int64_t>> File::GetIntArray(std::string_view key) const {
  const Value* v = Find(key);
  if (!v) return Missing(path_, key);
  if (v->type != ValueType::kArray) return WrongType(path_, key, "array of integers", *v);
  std::vector<int64_t> out;
  out.reserve(v->elems.size());
  for (const Value& e : v->elems) {
    DSPARK_ASSIGN_OR_RETURN(int64_t i, AsInt(path_, key, e));
    out.push_back(i);
  }
  return out;
}

Result<int64_t> File::GetIntOr(std::string_view key, int64_t fallback) const {
  return Has(key) ? GetInt(key) : Result<int64_t>(fallback);
}
Result<double> File::GetFloatOr(std::string_view key, double fallback) const {
  return Has(key) ? GetFloat(key) : Result<double>(fallback);
}
Result<bool> File::GetBoolOr(std::string_view key, bool fallback) const {
  return Has(key) ? GetBool(key) : Result<bool>(fallback);
}
Result<std::string> File::GetStringOr(std::string_view key, std::string fallback) const {
  return Has(key) ? GetString(key) : Result<std::string>(std::move(fallback));
}

}  // namespace dspark::gguf
