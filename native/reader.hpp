// The native Kineto event reader: a strict JSON tokenizer that turns one run of
// trace events (the bytes of a JSON array of objects) into per-field arrays.
//
// Pure C++ (no Python): the extension module (module.cpp) and the fuzz target
// (fuzz_reader.cpp) both call read_events(). It accepts only what it can hand
// back exactly as the Python reader (hta_report/load/fastparse.py) reads it;
// anything else (invalid JSON or UTF-8, an integer outside int64, a float out
// of double's range, nesting deeper than kMaxDepth, a key other than Kineto's,
// a duplicate key, a value of an unexpected type) makes it return false, and
// the caller runs the Python reader on the same bytes, which then decides
// (repairs Kineto's unescaped quotes, or raises its own error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hta_native {

constexpr int kMaxDepth = 512;

// Kinds of a value (per event, per field).
enum Kind : uint8_t {
  K_ABSENT = 0, K_INT = 1, K_FLOAT = 2, K_STR = 3, K_TRUE = 4, K_FALSE = 5, K_NULL = 6, K_TEXT = 7,
};

// Distinct byte strings in order of first appearance; intern() gives each its index.
class Interner {
 public:
  int32_t intern(const char* p, size_t n);
  void clear();  // no strings, the memory kept for the next run
  size_t size() const { return offsets_.size(); }
  const char* data(size_t i) const { return arena_.data() + offsets_[i]; }
  size_t length(size_t i) const { return lengths_[i]; }

 private:
  void grow();
  std::string arena_;
  std::vector<size_t> offsets_;
  std::vector<uint32_t> lengths_;
  std::vector<uint64_t> hashes_;
  std::vector<int32_t> slots_;  // open addressing; -1 empty
};

// One field's values over the events: kind, int, float and interned code.
struct Column {
  std::vector<uint8_t> kind;
  std::vector<int64_t> i64;
  std::vector<double> f64;
  std::vector<int32_t> code;  // index into strs (K_STR) or texts (K_TEXT); -1 otherwise
  Interner strs;              // decoded strings
  Interner texts;             // raw JSON texts (arrays, objects; every value of an object arg)
  void resize(size_t n);
  void clear();
};

// The fields of Kineto's events, in fastparse._FIELDS order.
enum Field { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ARGS, F_ID, F_BP, F_S, F_COUNT };
extern const char* const kFieldNames[F_COUNT];

struct ArgSpec {
  std::string raw_name;
  bool object;  // HTA keeps it as a Python object: every value is kept as its JSON text
};

struct Result {
  size_t n = 0;
  std::vector<int> key_order;   // fields in order of first appearance
  std::vector<uint8_t> ph_x;    // 1 where ph is "X"
  Column cat, name, pid, tid, ts, dur;
  std::vector<Column> args;
  std::string why;              // why the input was not taken (for tests and debugging)
  size_t capacity() const { return ph_x.capacity(); }
};

// Read ``len`` bytes at ``buf`` (a JSON array of event objects, whitespace
// around allowed) into ``out`` (cleared first; its memory is reused). True: ``out`` holds the columns. False: the Python reader
// must read it (``out->why`` says why).
bool read_events(const char* buf, size_t len, const std::vector<ArgSpec>& specs, Result* out);

}  // namespace hta_native
