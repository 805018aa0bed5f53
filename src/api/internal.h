// What the facade's implementation files share: the state behind the public handles, and the
// conversions between the engine's Status / Result and the facade's exceptions.
#pragma once

#include <memory>
#include <string>

#include "dspark/dspark.h"
#include "model/model.h"
#include "sampling/sampling.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace dspark::api {

struct Tokenizer::Impl {
  std::shared_ptr<const ::dspark::Tokenizer> tok;
};

struct Model::Impl {
  Impl(std::string p, Tokenizer t) : path(std::move(p)), tokenizer(std::move(t)) {}
  std::string path;
  ModelInfo info;
  std::shared_ptr<::dspark::Model> model;  // Forward needs a non-const Model; the handle is immutable
  Tokenizer tokenizer;
};

namespace detail {

// The one place that reaches into the handles (friend of Model, Tokenizer and DraftRequest).
struct Access {
  static Tokenizer MakeTokenizer(std::shared_ptr<const ::dspark::Tokenizer> tok) {
    auto impl = std::make_shared<Tokenizer::Impl>();
    impl->tok = std::move(tok);
    return Tokenizer(std::move(impl));
  }
  static const ::dspark::Tokenizer& Internal(const Tokenizer& t) { return *t.impl_->tok; }
  static Model MakeModel(std::shared_ptr<const Model::Impl> impl) { return Model(std::move(impl)); }
  static ::dspark::Model& Internal(const Model& m) { return *m.impl_->model; }
  static const ::dspark::Tokenizer& InternalTokenizer(const Model& m) { return *m.impl_->tokenizer.impl_->tok; }
  static void SetRng(DraftRequest& r, ::dspark::Rng* rng) { r.rng_ = rng; }
  static ::dspark::Rng* GetRng(const DraftRequest& r) { return static_cast<::dspark::Rng*>(r.rng_); }
};

// Throws the Status as an Error with its message and kind.
[[noreturn]] void Throw(const ::dspark::Status& status);

template <typename T>
T Unwrap(::dspark::Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return std::move(r).value();
}

inline void Check(const ::dspark::Status& s) {
  if (!s.ok()) Throw(s);
}

// Logs to stderr at kWarn unless SetLogLevel was called (the engine's default logger would print
// to stdout, which belongs to the program).
void EnsureLogging();

::dspark::SamplingParams ToInternal(const SamplingConfig& s);

}  // namespace detail
}  // namespace dspark::api
