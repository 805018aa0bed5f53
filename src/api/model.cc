// dspark::api: errors, logging, version, Tokenizer and Model.
#include <atomic>
#include <mutex>

#include "api/internal.h"
#include "gguf/gguf.h"
#include "kernels/cpu_target.h"
#include "util/log.h"

#ifndef DSPARK_VERSION
#define DSPARK_VERSION "0.0.0"
#endif

namespace dspark::api {

// ---------------------------------------------------------------------------------------------
// Errors

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
Error::~Error() = default;  // the key function: Error's vtable and typeinfo live in the library

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kDataLoss: return "data loss";
    case ErrorCode::kUnimplemented: return "unimplemented";
    case ErrorCode::kOutOfRange: return "out of range";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace detail {

[[noreturn]] void Throw(const ::dspark::Status& status) {
  ErrorCode code = ErrorCode::kInternal;
  switch (status.code()) {
    case StatusCode::kInvalidArgument: code = ErrorCode::kInvalidArgument; break;
    case StatusCode::kNotFound: code = ErrorCode::kNotFound; break;
    case StatusCode::kDataLoss: code = ErrorCode::kDataLoss; break;
    case StatusCode::kUnimplemented: code = ErrorCode::kUnimplemented; break;
    case StatusCode::kOutOfRange: code = ErrorCode::kOutOfRange; break;
    case StatusCode::kResourceExhausted: code = ErrorCode::kResourceExhausted; break;
    case StatusCode::kUnavailable: code = ErrorCode::kUnavailable; break;
    case StatusCode::kCancelled: code = ErrorCode::kCancelled; break;
    case StatusCode::kOk:
    case StatusCode::kInternal: break;
  }
  throw Error(code, status.message());
}

namespace {
std::atomic<bool> g_log_level_set{false};
std::once_flag g_default_logging;
}  // namespace

void EnsureLogging() {
  std::call_once(g_default_logging, [] {
    if (!g_log_level_set.load()) ::dspark::SetLogLevel(::dspark::LogLevel::kWarn);
  });
}

::dspark::SamplingParams ToInternal(const SamplingConfig& s) {
  ::dspark::SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.order = s.temperature_last ? SamplerOrder::kTemperatureLast : SamplerOrder::kTemperatureFirst;
  return p;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Library-wide

const char* Version() { return DSPARK_VERSION; }

std::string CpuTarget() { return ::dspark::kernels::CpuTargetName(); }

void SetLogLevel(LogLevel level) {
  detail::g_log_level_set.store(true);
  switch (level) {
    case LogLevel::kDebug: ::dspark::SetLogLevel(::dspark::LogLevel::kDebug); break;
    case LogLevel::kInfo: ::dspark::SetLogLevel(::dspark::LogLevel::kInfo); break;
    case LogLevel::kWarn: ::dspark::SetLogLevel(::dspark::LogLevel::kWarn); break;
    case LogLevel::kError: ::dspark::SetLogLevel(::dspark::LogLevel::kError); break;
    case LogLevel::kOff: ::dspark::SetLogLevel(::dspark::LogLevel::kOff); break;
  }
}

std::vector<float> SamplingDistribution(const float* logits, int n_vocab, const SamplingConfig& sampling) {
  if (logits == nullptr || n_vocab <= 0)
    throw Error(ErrorCode::kInvalidArgument, "SamplingDistribution: no logits (n_vocab " + std::to_string(n_vocab) + ")");
  const ::dspark::SamplingParams p = detail::ToInternal(sampling);
  detail::Check(ValidateSamplingParams(p));
  std::vector<float> probs;
  ComputeProbs(logits, n_vocab, p, &probs);
  return probs;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::Load(const std::string& gguf_path) {
  detail::EnsureLogging();
  auto file = detail::Unwrap(gguf::File::Open(gguf_path));
  std::shared_ptr<const ::dspark::Tokenizer> tok = detail::Unwrap(::dspark::Tokenizer::FromGguf(*file));
  return detail::Access::MakeTokenizer(std::move(tok));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos, bool parse_special) const {
  EncodeOptions o;
  o.add_bos = add_bos;
  o.add_eos = false;
  o.parse_special = parse_special;
  return impl_->tok->Encode(text, o);
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool render_special) const {
  return impl_->tok->Decode(ids, render_special);
}

std::string Tokenizer::TokenToPiece(int32_t id, bool render_special) const {
  return impl_->tok->TokenToPiece(id, render_special);
}

int32_t Tokenizer::n_vocab() const { return impl_->tok->n_vocab(); }
int32_t Tokenizer::bos_id() const { return impl_->tok->bos_id(); }
int32_t Tokenizer::eos_id() const { return impl_->tok->eos_id(); }
std::vector<int32_t> Tokenizer::eog_ids() const { return impl_->tok->eog_ids(); }
bool Tokenizer::IsEog(int32_t id) const { return impl_->tok->IsEog(id); }

// ---------------------------------------------------------------------------------------------
// Model

Model::Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Model Model::Load(const std::string& path, const ModelOptions& options) {
  detail::EnsureLogging();
  std::shared_ptr<const gguf::File> file = detail::Unwrap(gguf::File::Open(path));
  const std::string arch = detail::Unwrap(file->GetStringOr("general.architecture", ""));
  if (arch == "dflash")
    throw Error(ErrorCode::kInvalidArgument,
                path + " is a DSpark/DFlash block drafter (general.architecture 'dflash'), not a model that runs "
                       "alone: load the target and pass this file as EngineOptions::drafter.model");
  auto impl = std::make_shared<Impl>(path, detail::Access::MakeTokenizer(nullptr));
  ::dspark::ModelOptions mo;
  mo.repack = options.repack;
  impl->model = std::shared_ptr<::dspark::Model>(detail::Unwrap(::dspark::Model::FromFile(file, mo)));
  std::shared_ptr<const ::dspark::Tokenizer> tok = detail::Unwrap(::dspark::Tokenizer::FromGguf(*file));
  const ModelConfig& c = impl->model->config();
  if (tok->n_vocab() != c.n_vocab)
    throw Error(ErrorCode::kInvalidArgument, path + ": the tokenizer has " + std::to_string(tok->n_vocab()) +
                                                 " tokens but the embedding table has " + std::to_string(c.n_vocab) +
                                                 " rows");
  impl->tokenizer = detail::Access::MakeTokenizer(std::move(tok));
  ModelInfo& info = impl->info;
  info.arch = c.arch;
  info.name = c.name;
  info.n_vocab = c.n_vocab;
  info.n_ctx_train = c.n_ctx_train;
  info.n_embd = c.n_embd;
  info.n_layer = c.n_layer;
  info.n_head = c.n_head;
  info.n_head_kv = c.n_head_kv;
  for (const gguf::TensorInfo& t : file->tensors()) info.n_params += t.NumElements();
  return detail::Access::MakeModel(std::move(impl));
}

const ModelInfo& Model::info() const { return impl_->info; }
const std::string& Model::path() const { return impl_->path; }
Tokenizer Model::tokenizer() const { return impl_->tokenizer; }

}  // namespace dspark::api
