// GGUF v3 writer (v2 on request for tests): metadata in insertion order, tensors aligned.
#include <cstdio>
#include <cstring>

#include "gguf/gguf.h"

namespace dspark::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;

class ByteSink {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = buf.size();
    buf.resize(at + sizeof(T));
    std::memcpy(buf.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void PutValue(const Value& v) {
    switch (v.type) {
      case ValueType::kU8: Put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case ValueType::kI8: Put<int8_t>(static_cast<int8_t>(v.i)); break;
      case ValueType::kU16: Put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case ValueType::kI16: Put<int16_t>(static_cast<int16_t>(v.i)); break;
      case ValueType::kU32: Put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case ValueType::kI32: Put<int32_t>(static_cast<int32_t>(v.i)); break;
      case ValueType::kU64: Put<uint64_t>(v.u); break;
      case ValueType::kI64: Put<int64_t>(v.i); break;
      case ValueType::kF32: Put<float>(static_cast<float>(v.f)); break;
      case ValueType::kF64: Put<double>(v.f); break;
      case ValueType::kBool: Put<uint8_t>(v.u ? 1 : 0); break;
      case ValueType::kString: PutString(v.str); break;
      case ValueType::kArray:
        Put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        Put<uint64_t>(v.elems.size());
        for (const Value& e : v.elems) PutValue(e);
        break;
    }
  }
  void PadTo(uint64_t alignment) {
    while (buf.size() % alignment != 0) buf.push_back(0);
  }
  std::vector<uint8_t> buf;
};

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void Writer::Set(const std::string& key, Value value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void Writer::CopyMetadataFrom(const File& src, std::string_view key_prefix) {
  for (const auto& [key, value] : src.metadata()) {
    if (key.rfind(key_prefix, 0) == 0 && key != "general.alignment") Set(key, value);
  }
}

static Status CheckTensor(const std::string& name, DType type, const std::vector<int64_t>& ne, uint64_t* nbytes) {
  if (ne.empty() || ne.size() > 4) return InvalidArgument("gguf writer: tensor '{}' needs 1 to 4 dims", name);
  const DTypeInfo& info = Info(type);
  if (ne[0] % info.block_size != 0)
    return InvalidArgument("gguf writer: tensor '{}' row length {} is not a multiple of {} block size {}", name,
                           ne[0], info.name, info.block_size);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  *nbytes = static_cast<uint64_t>(n / info.block_size * info.block_bytes);
  return Status::Ok();
}

Status Writer::AddTensor(const std::string& name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  uint64_t nbytes = 0;
  DSPARK_TRY(CheckTensor(name, type, ne, &nbytes));
  if (data.size() != nbytes)
    return InvalidArgument("gguf writer: tensor '{}' has {} bytes of data, its shape needs {}", name, data.size(), nbytes);
  tensors_.push_back({name, type, std::move(ne), nbytes, std::move(data), nullptr});
  return Status::Ok();
}

Status Writer::AddTensorLazy(const std::string& name, DType type, std::vector<int64_t> ne,
                             std::function<void(uint8_t*)> fill) {
  uint64_t nbytes = 0;
  DSPARK_TRY(CheckTensor(name, type, ne, &nbytes));
  tensors_.push_back({name, type, std::move(ne), nbytes, {}, std::move(fill)});
  return Status::Ok();
}

std::vector<uint8_t> Writer::HeaderBytes() const {
  ByteSink s;
  s.Put<uint32_t>(kMagic);
  s.Put<uint32_t>(version_);
  s.Put<uint64_t>(tensors_.size());
  const bool custom_alignment = alignment_ != 32;
  s.Put<uint64_t>(kv_.size() + (custom_alignment ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    s.PutString(key);
    s.Put<uint32_t>(static_cast<uint32_t>(value.type));
    s.PutValue(value);
  }
  if (custom_alignment) {
    s.PutString("general.alignment");
    s.Put<uint32_t>(static_cast<uint32_t>(ValueType::kU32));
    s.Put<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    s.PutString(t.name);
    s.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) s.Put<int64_t>(d);
    s.Put<uint32_t>(static_cast<uint32_t>(t.type));
    s.Put<uint64_t>(offset);
    offset = AlignUp(offset + t.nbytes, alignment_);
  }
  s.PadTo(alignment_);
  return std::move(s.buf);
}

std::vector<uint8_t> Writer::Serialize() const {
  std::vector<uint8_t> out = HeaderBytes();
  for (const PendingTensor& t : tensors_) {
    const size_t at = out.size();
    out.resize(at + AlignUp(t.nbytes, alignment_), 0);
    if (t.fill) t.fill(out.data() + at);
    else std::memcpy(out.data() + at, t.data.data(), t.nbytes);
  }
  return out;
}

Status Writer::WriteFile(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return NotFound("gguf writer: cannot create '{}': {}", path, std::strerror(errno));
  const std::vector<uint8_t> header = HeaderBytes();
  uint64_t total = 0;
  for (const PendingTensor& t : tensors_) total += AlignUp(t.nbytes, alignment_);
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  uint64_t done = 0;
  std::vector<uint8_t> scratch;
  for (const PendingTensor& t : tensors_) {
    if (!ok) break;
    const uint64_t padded = AlignUp(t.nbytes, alignment_);
    const uint8_t* src = t.data.data();
    if (t.fill) {
      scratch.assign(padded, 0);
      t.fill(scratch.data());
      src = scratch.data();
      ok = std::fwrite(src, 1, padded, f) == padded;
    } else {
      ok = std::fwrite(src, 1, t.nbytes, f) == t.nbytes;
      static const uint8_t kZeros[64] = {0};
      if (ok && padded > t.nbytes) ok = std::fwrite(kZeros, 1, padded - t.nbytes, f) == padded - t.nbytes;
    }
    done += padded;
    if (progress) progress(done, total);
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return Internal("gguf writer: failed writing '{}': {}", path, std::strerror(errno));
  return Status::Ok();
}

}  // namespace dspark::gguf
