// Errors as values across module boundaries, and the CHECK macro for invariants.
//
// Contract: functions that can fail on user input (YAML, model files, HTTP bodies, prompts) return
// `Result<T>` (or `Status` when there is no value). Only broken internal invariants abort, through
// ACTORD_CHECK, which prints file and line. Nothing here depends on CAF, so kernels, memory and
// scheduler code may include it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace actord {

enum class Errc {
  invalid_argument,    // bad user input: CLI flag, prompt, request body
  invalid_config,      // topology YAML that does not validate
  not_found,           // missing file, tensor, model folder
  unsupported,         // understood but not implemented (architecture, dtype, topology shape)
  parse_error,         // malformed file contents (JSON, YAML, safetensors header)
  resource_exhausted,  // KV blocks, context length, memory asked for beyond what the machine has
  out_of_memory,       // an allocation failed (std::bad_alloc, a mapping refused) despite the checks before it
  worker_failed,       // a worker actor or process died or reported a failure
  internal,            // a bug: should never reach a user
};

const char* errc_name(Errc code);

struct Error {
  Errc code = Errc::internal;
  std::string message;
};

inline Error make_error(Errc code, std::string message) { return Error{code, std::move(message)}; }

// A value or an Error. Small on purpose: std::expected is C++23 and CAF's expected would drag CAF
// headers into CAF-free code.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}      // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status success() { return {}; }
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "CHECK failed: %s at %s:%d %s\n", expr, file, line, msg ? msg : "");
  std::abort();
}

}  // namespace actord

#define ACTORD_CHECK(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::actord::check_failed(#cond, __FILE__, __LINE__, nullptr); \
  } while (0)

#define ACTORD_CHECK_MSG(cond, msg)                                      \
  do {                                                                   \
    if (!(cond)) ::actord::check_failed(#cond, __FILE__, __LINE__, msg); \
  } while (0)

// Propagates an error from an expression returning Result<T>/Status; binds the value otherwise.
#define ACTORD_TRY_STATUS(expr)             \
  do {                                      \
    auto _st = (expr);                      \
    if (!_st.ok()) return _st.error();      \
  } while (0)
