// Conversions between the engine and Python for the module `dspark` (binding.h): a Status becomes
// the Python exception a user expects, paths and files are checked as open() checks them, engine
// text becomes str, input_ids become token ids, SpecStats becomes the statistics dict.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "binding.h"

namespace dspark::python {

// ---------------------------------------------------------------------------------------------
// Errors: a Status becomes the Python exception a user expects.

[[noreturn]] void RaiseOsError(PyObject* type, int err, const std::string& message, const std::string& path) {
  py::object cls = py::reinterpret_borrow<py::object>(type);
  py::object exc = path.empty() ? cls(err, message) : cls(err, message, path);
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

// Invalid input (wrong vocabulary, bad options, unsupported file contents) -> ValueError; an
// unreadable file -> FileNotFoundError / PermissionError; a corrupt or truncated file -> OSError;
// anything else -> RuntimeError.
[[noreturn]] void ThrowStatus(const Status& s) {
  const std::string& msg = s.message();
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
    case StatusCode::kOutOfRange:
      throw py::value_error(msg);
    case StatusCode::kNotFound:
      // gguf::File::Open: "gguf: cannot open 'PATH': ..." (paths are checked before, see
      // CheckReadable; this is the race where the file went away). Otherwise a key or tensor
      // missing from a file that opened: the file is not a valid model of that kind.
      if (msg.rfind("gguf: cannot open", 0) == 0) RaiseOsError(PyExc_FileNotFoundError, ENOENT, msg, "");
      throw py::value_error(msg);
    case StatusCode::kDataLoss:
      RaiseOsError(PyExc_OSError, EIO, msg, "");
    default:
      throw std::runtime_error(msg);
  }
}

// os.fspath() of a str / bytes / os.PathLike; TypeError otherwise.
std::string FsPath(const py::handle& obj, const char* what) {
  py::object p;
  try {
    p = py::module_::import("os").attr("fspath")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(std::string(what) + ": expected a path (str or os.PathLike) or a dspark.Model, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  return p.cast<std::string>();  // str, or bytes as they are
}

// FileNotFoundError / PermissionError / IsADirectoryError with errno and filename, as open() raises.
void CheckReadable(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st))
    RaiseOsError(PyExc_FileNotFoundError, ENOENT, std::strerror(ENOENT), path);
  if (std::filesystem::is_directory(st)) RaiseOsError(PyExc_IsADirectoryError, EISDIR, std::strerror(EISDIR), path);
  if (::access(path.c_str(), R_OK) != 0) RaiseOsError(PyExc_PermissionError, EACCES, std::strerror(EACCES), path);
}

// Text the engine produced: UTF-8, but a token may end inside a character (decode() of a partial
// sequence); such bytes become U+FFFD instead of raising.
py::str Utf8(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

std::shared_ptr<const gguf::File> OpenGguf(const std::string& path) {
  CheckReadable(path);
  std::unique_ptr<gguf::File> f;
  {
    py::gil_scoped_release nogil;
    auto r = gguf::File::Open(path);
    if (!r.ok()) {
      py::gil_scoped_acquire gil;
      ThrowStatus(r.status());
    }
    f = std::move(*r);
  }
  return std::shared_ptr<const gguf::File>(std::move(f));
}

std::optional<int32_t> IdOrNone(int32_t id) { return id < 0 ? std::nullopt : std::optional<int32_t>(id); }

// ---------------------------------------------------------------------------------------------
// Statistics

py::dict StatsDict(const SpecStats& s, const std::string& stop_reason) {
  py::dict d;
  d["total_tokens"] = s.generated_tokens;
  d["prompt_tokens"] = s.prompt_tokens;
  d["target_calls"] = s.num_target_calls;
  d["draft_calls"] = s.num_draft_calls;
  d["drafts"] = s.num_drafts;
  d["drafted_tokens"] = s.num_draft_tokens;
  d["accepted_tokens"] = s.num_accepted_tokens;
  d["leaves"] = s.num_leaf_tokens;
  d["leaves_accepted"] = s.num_leaf_accepted;
  d["acceptance_rate"] = s.acceptance_rate();
  d["tau"] = s.tau();
  d["acceptance_per_position"] = s.acceptance_per_position();
  d["steps"] = s.num_steps;
  d["fallbacks"] = s.num_fallbacks;
  d["draft_ms"] = s.draft_ms;
  d["verify_ms"] = s.verify_ms;
  d["sample_ms"] = s.sample_ms;
  d["other_ms"] = s.other_ms;
  d["prompt_ms"] = s.prompt_ms;
  d["decode_ms"] = s.decode_ms;
  d["tokens_per_second"] = s.tokens_per_second();
  d["prompt_tokens_per_second"] = s.prompt_tokens_per_second();
  d["stop_reason"] = stop_reason;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Token ids

// input_ids: a sequence of ints, or a batch of one such sequence (HF's [1, n] tensors; numpy
// arrays and torch tensors iterate as sequences). Sets *batched for the latter.
std::vector<int32_t> ParseIds(const py::handle& input, bool* batched) {
  if (py::isinstance<py::str>(input) || py::isinstance<py::bytes>(input))
    throw py::type_error("input_ids: expected token ids, got text; encode it first: engine.tokenizer.encode(text)");
  if (!py::isinstance<py::iterable>(input)) throw py::type_error("input_ids: expected a sequence of token ids");
  std::vector<py::object> items;
  for (py::handle h : input) items.push_back(py::reinterpret_borrow<py::object>(h));
  *batched = false;
  // Nested: the first item is itself a sequence (a 1-D numpy array has __index__ too, so that
  // cannot tell; numpy's integer scalars are not iterable).
  if (!items.empty() && !PyLong_Check(items[0].ptr()) && py::isinstance<py::iterable>(items[0])) {
    if (items.size() != 1)
      throw py::value_error("input_ids: a batch of " + std::to_string(items.size()) +
                            " sequences; this engine decodes one sequence at a time (dspark serve batches requests)");
    *batched = true;
    std::vector<py::object> inner;
    for (py::handle h : items[0]) inner.push_back(py::reinterpret_borrow<py::object>(h));
    items = std::move(inner);
  }
  std::vector<int32_t> ids;
  ids.reserve(items.size());
  for (const auto& o : items) {
    if (!PyIndex_Check(o.ptr()))
      throw py::type_error("input_ids: token ids must be integers, got " +
                           std::string(py::str(py::type::of(o).attr("__name__"))));
    PyObject* index = PyNumber_Index(o.ptr());
    if (index == nullptr) throw py::error_already_set();
    const long long v = py::reinterpret_steal<py::int_>(index).cast<long long>();
    if (v < INT32_MIN || v > INT32_MAX) throw py::value_error("input_ids: token id " + std::to_string(v) + " is out of range");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw py::value_error("input_ids: the prompt is empty");
  return ids;
}

}  // namespace dspark::python
