// libFuzzer target over the native reader (reader.hpp), built with ASan and
// UBSan by bench/fuzz_native.py:
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined native/fuzz_reader.cpp native/reader.cpp
// Each input is read as one run of events with the report's arg specs
// (hta_report.load.parse.report_parser_config), and, where it is taken, the
// columns are checked for consistency: every column holds one row per event,
// every code indexes its table, every kind is one of reader.hpp's.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "reader.hpp"

using namespace hta_native;

static void check_column(const Column& c, size_t n) {
  if (c.kind.size() != n || c.i64.size() != n || c.f64.size() != n || c.code.size() != n) abort();
  for (size_t i = 0; i < n; i++) {
    if (c.kind[i] > K_TEXT) abort();
    if (c.kind[i] == K_STR && (c.code[i] < 0 || static_cast<size_t>(c.code[i]) >= c.strs.size())) abort();
    if (c.kind[i] == K_TEXT && (c.code[i] < 0 || static_cast<size_t>(c.code[i]) >= c.texts.size())) abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ArgSpec> specs = {
      {"stream", false}, {"correlation", false}, {"bytes", false}, {"Input Dims", true},
      {"Input type", true}, {"blocks per SM", false}, {"est. achieved occupancy %", false}, {"warps per SM", false},
  };
  static Result kept;  // reused from input to input, as the extension reuses one per thread
  Result fresh;
  Result& r = size % 2 ? kept : fresh;
  if (read_events(reinterpret_cast<const char*>(data), size, specs, &r)) {
    if (r.n == 0 || r.ph_x.size() != r.n) abort();
    for (const Column* c : {&r.cat, &r.name, &r.pid, &r.tid, &r.ts, &r.dur}) check_column(*c, r.n);
    for (const Column& c : r.args) check_column(c, r.n);
  }
  return 0;
}
