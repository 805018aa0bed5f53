// gguf::Value helpers: constructors for arrays and human-readable rendering.
#include <fmt/format.h>

#include "gguf/gguf.h"

namespace dspark::gguf {

std::string_view ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "?";
}

Value Value::StringArray(const std::vector<std::string>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (const auto& s : v) elems.push_back(String(s));
  return Array(ValueType::kString, std::move(elems));
}

Value Value::F32Array(const std::vector<float>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (float f : v) elems.push_back(F32(f));
  return Array(ValueType::kF32, std::move(elems));
}

Value Value::I32Array(const std::vector<int32_t>& v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (int32_t i : v) elems.push_back(I32(i));
  return Array(ValueType::kI32, std::move(elems));
}

bool Value::IsInteger() const {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool IsSignedType(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 || t == ValueType::kI64;
}

std::string Value::ToString(size_t max_elems) const {
  switch (type) {
    case ValueType::kBool: return u ? "true" : "false";
    case ValueType::kF32: case ValueType::kF64: return fmt::format("{}", f);
    case ValueType::kString: {
      std::string s = str.size() > 120 ? str.substr(0, 117) + "..." : str;
      std::string escaped;
      for (char c : s) {
        if (c == '\n') escaped += "\\n";
        else if (c == '\t') escaped += "\\t";
        else escaped += c;
      }
      return "\"" + escaped + "\"";
    }
    case ValueType::kArray: {
      std::string out = fmt::format("[{} x {}] [", elems.size(), ValueTypeName(elem_type));
      for (size_t k = 0; k < elems.size() && k < max_elems; ++k) {
        if (k) out += ", ";
        out += elems[k].ToString(max_elems);
      }
      if (elems.size() > max_elems) out += ", ...";
      return out + "]";
    }
    default:
      return IsSignedType(type) ? fmt::format("{}", i) : fmt::format("{}", u);
  }
}

}  // namespace dspark::gguf
