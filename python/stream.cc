// The streaming half of the module `dspark` (binding.h): SpeculativeDecodingEngine.stream() runs
// the engine on a worker thread that never touches Python objects; it queues (id, text) items, and
// the iterator (TokenStream) converts them under the GIL.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "binding.h"

namespace dspark::python {
namespace {

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Streaming: the engine on a worker thread, tokens through a queue.

struct TokenStream::State {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int32_t, std::string>> items;
  bool done = false;
  Status error;
  std::string stop_reason;
  SpecStats stats;
  std::atomic<bool> cancel{false};
};

TokenStream::TokenStream(std::shared_ptr<Core> core, std::vector<int32_t> prompt, GenerateOptions options,
                         bool with_text)
    : core_(std::move(core)), with_text_(with_text), state_(std::make_shared<State>()) {
  worker_ = std::thread([core = core_, state = state_, prompt = std::move(prompt), options = std::move(options)] {
    std::lock_guard<std::mutex> run(core->run_mu);
    Result<GenerateResult> r = Status(StatusCode::kCancelled, "cancelled before it started");
    if (!state->cancel.load()) {
      r = core->engine->GenerateFromIds(prompt, options, [&](const TokenEvent& t) {
        const int32_t id = t.id;
        const std::string_view text = t.text;
        if (state->cancel.load()) return false;
        {
          std::lock_guard<std::mutex> lock(state->mu);
          state->items.emplace_back(id, std::string(text));
        }
        state->cv.notify_one();
        return !state->cancel.load();
      });
    }
    std::lock_guard<std::mutex> lock(state->mu);
    if (r.ok()) {
      core->Record(*r);
      state->stop_reason = r->stop_reason;
      state->stats = r->stats;
      if (r->stop_reason == "error") state->error = Internal("generation failed: {}", r->error);
    } else {
      state->error = r.status();
    }
    state->done = true;
    state->cv.notify_all();
  });
}
TokenStream::~TokenStream() { Close(); }

py::object TokenStream::Next() {
  std::pair<int32_t, std::string> item;
  for (;;) {
    bool have = false, done = false;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !state_->items.empty() || state_->done; });
      if (!state_->items.empty()) {
        item = std::move(state_->items.front());
        state_->items.pop_front();
        have = true;
      } else {
        done = state_->done;
      }
    }
    if (have) {
      if (item.first < 0 && !with_text_) continue;  // the final text flush carries no token
      if (!with_text_) return py::int_(item.first);
      py::object id = item.first < 0 ? py::object(py::none()) : py::object(py::int_(item.first));
      return py::make_tuple(id, Utf8(item.second));
    }
    if (done) {
      Join();
      Status error;
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        error = state_->error;
      }
      if (!error.ok() && !closed_) ThrowStatus(error);
      throw py::stop_iteration();
    }
    if (PyErr_CheckSignals() != 0) {  // Ctrl-C while waiting: stop the generation, then raise
      Close();
      throw py::error_already_set();
    }
  }
}

void TokenStream::Close() {
  if (closed_ && !worker_.joinable()) return;
  closed_ = true;
  state_->cancel.store(true);
  Join();
}

py::object TokenStream::Stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return py::none();
  return StatsDict(state_->stats, state_->stop_reason);
}

py::object TokenStream::StopReason() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return py::none();
  return py::str(state_->stop_reason);
}

void TokenStream::Join() {
  if (!worker_.joinable()) return;
  // The worker never takes the GIL, so joining while holding it cannot deadlock; release it when
  // possible so other Python threads run meanwhile (not while the interpreter shuts down).
  if (PyGILState_Check() && !IsFinalizing()) {
    py::gil_scoped_release nogil;
    worker_.join();
  } else {
    worker_.join();
  }
}

const char* kStreamDoc = R"doc(Generates like generate(), as an iterator (a TokenStream).

An iterator over the generated ids as they are committed (the prompt is not repeated); with
with_text=True it yields (id, text) pairs: the text each token made safe to show (possibly ""
while a UTF-8 character or stop string is pending), and a last (None, text) for held-back text.
Generation runs on a worker thread; leaving the loop early (break, close(), or dropping the
iterator) cancels it at the next token. The keyword arguments are generate()'s. After the last
item, stream.stats / stream.stop_reason (and engine.stats) describe the run.)doc";

void BindTokenStream(py::module_& m) {
  py::class_<TokenStream>(m, "TokenStream", kStreamDoc)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TokenStream::Next)
      .def("close", &TokenStream::Close, "Cancel the generation and wait for it to stop.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](TokenStream& s, py::args) { s.Close(); return false; })
      .def_property_readonly("stats", &TokenStream::Stats, "The run's statistics once it has finished, else None.")
      .def_property_readonly("stop_reason", &TokenStream::StopReason,
                             "eos, stop, length, context or cancelled once finished, else None.");
}

}  // namespace dspark::python
