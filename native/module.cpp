// The Python face of the native reader (reader.hpp): hta_report.load._native.
//
//   read_events(buf, raw_names, objects) -> dict | str
//
// ``buf``: any bytes-like object holding a JSON array of Kineto events;
// ``raw_names``: the arg keys to keep (tuple of str); ``objects``: for each,
// whether every value is kept as its JSON text. Returns the columns (see
// fastparse_native.py for their layout) or, where the input is not read
// exactly as the Python reader reads it, a str saying why. The GIL is released
// while the bytes are read.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "reader.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

using hta_native::Column;

namespace {

template <typename T>
PyObject* bytes_of(const std::vector<T>& v) {
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

PyObject* strs_of(const hta_native::Interner& in, bool text) {
  PyObject* list = PyList_New(in.size());
  if (!list) return nullptr;
  for (size_t i = 0; i < in.size(); i++) {
    PyObject* s = text ? PyBytes_FromStringAndSize(in.data(i), in.length(i))
                       : PyUnicode_DecodeUTF8(in.data(i), in.length(i), "strict");
    if (!s) {
      Py_DECREF(list);
      return nullptr;
    }
    PyList_SET_ITEM(list, i, s);
  }
  return list;
}

// (kind, i64, f64, codes, strs, texts)
PyObject* column_of(const Column& c) {
  return Py_BuildValue("(NNNNNN)", bytes_of(c.kind), bytes_of(c.i64), bytes_of(c.f64), bytes_of(c.code),
                       strs_of(c.strs, false), strs_of(c.texts, true));
}

int set(PyObject* d, const char* k, PyObject* v) {
  if (!v) return -1;
  int r = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return r;
}

// Appends the arg spec i of the tuples raw_names / objects; false with a Python error set.
bool add_arg_spec(PyObject* names, PyObject* objects, Py_ssize_t i, std::vector<hta_native::ArgSpec>& specs) {
  Py_ssize_t n;
  const char* s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &n);
  if (!s) return false;
  int o = PyObject_IsTrue(PyTuple_GET_ITEM(objects, i));
  if (o < 0) return false;
  specs.push_back({std::string(s, n), o != 0});
  return true;
}

PyObject* read_events(PyObject*, PyObject* args) {
  PyObject *obj, *names, *objects;
  if (!PyArg_ParseTuple(args, "OO!O!", &obj, &PyTuple_Type, &names, &PyTuple_Type, &objects)) return nullptr;
  if (PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(objects)) {
    PyErr_SetString(PyExc_ValueError, "raw_names and objects differ in length");
    return nullptr;
  }
  std::vector<hta_native::ArgSpec> specs;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++)
    if (!add_arg_spec(names, objects, i, specs)) return nullptr;
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return nullptr;
  hta_native::Result* res = new (std::nothrow) hta_native::Result();
  if (!res) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  bool ok;
  Py_BEGIN_ALLOW_THREADS
  ok = hta_native::read_events(static_cast<const char*>(view.buf), view.len, specs, res);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  PyObject* out = nullptr;
  if (!ok) {
    out = PyUnicode_FromString(res->why.c_str());
    delete res;
    return out;
  }
  out = PyDict_New();
  PyObject* keys = out ? PyList_New(0) : nullptr;
  bool good = keys != nullptr;
  for (int f : res->key_order) {
    if (!good) break;
    PyObject* k = PyUnicode_FromString(hta_native::kFieldNames[f]);
    good = k && PyList_Append(keys, k) == 0;
    Py_XDECREF(k);
  }
  PyObject* arglist = good ? PyList_New(res->args.size()) : nullptr;
  good = good && arglist;
  for (size_t i = 0; good && i < res->args.size(); i++) {
    PyObject* c = column_of(res->args[i]);
    if (!c) {
      good = false;
      break;
    }
    PyList_SET_ITEM(arglist, i, c);
  }
  good = good && set(out, "n", PyLong_FromSize_t(res->n)) == 0;
  if (good) {  // set() takes the reference either way
    good = set(out, "keys", keys) == 0;
    keys = nullptr;
  }
  if (good) {
    good = set(out, "args", arglist) == 0;
    arglist = nullptr;
  }
  good = good && set(out, "ph_x", bytes_of(res->ph_x)) == 0 && set(out, "cat", column_of(res->cat)) == 0 &&
         set(out, "name", column_of(res->name)) == 0 && set(out, "pid", column_of(res->pid)) == 0 &&
         set(out, "tid", column_of(res->tid)) == 0 && set(out, "ts", column_of(res->ts)) == 0 &&
         set(out, "dur", column_of(res->dur)) == 0;
  Py_XDECREF(keys);
  Py_XDECREF(arglist);
  delete res;
  if (!good) {
    Py_XDECREF(out);
    return nullptr;
  }
  return out;
}

// ------------------------------------------------------------------ read_piece

using hta_native::Result;

// ``v`` (int64) in the smallest of int8, int16, int32, int64 holding every value (fastparse._small_ints):
// (numpy dtype name, bytes).
PyObject* small_ints(const std::vector<int64_t>& v) {
  int64_t lo = 0, hi = 0;
  if (!v.empty()) lo = hi = v[0];
  for (int64_t x : v) {
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  auto narrow = [&](auto zero, const char* name) -> PyObject* {
    using T = decltype(zero);
    PyObject* b = PyBytes_FromStringAndSize(nullptr, v.size() * sizeof(T));
    if (!b) return nullptr;
    T* out = reinterpret_cast<T*>(PyBytes_AS_STRING(b));
    for (size_t i = 0; i < v.size(); i++) out[i] = static_cast<T>(v[i]);
    return Py_BuildValue("(sN)", name, b);
  };
  if (v.empty()) return narrow(int64_t(0), "int64");
  if (lo >= -128 && hi <= 127) return narrow(int8_t(0), "int8");
  if (lo >= -32768 && hi <= 32767) return narrow(int16_t(0), "int16");
  if (lo >= INT32_MIN && hi <= INT32_MAX) return narrow(int32_t(0), "int32");
  return narrow(int64_t(0), "int64");
}

unsigned kinds_of(const Column& c, const std::vector<int64_t>* rows) {
  unsigned m = 0;
  if (rows) {
    for (int64_t r : *rows) m |= 1u << c.kind[r];
  } else {
    for (uint8_t k : c.kind) m |= 1u << k;
  }
  return m;
}

constexpr unsigned bit(int k) { return 1u << k; }

// (uniques, codes int32) of the strings of ``rows``, in order of first appearance (fastparse._kept_codes);
// nullptr with *missing where a row holds no string.
PyObject* kept_codes(const Column& c, const std::vector<int64_t>& idx, bool* missing) {
  std::vector<int32_t> lut(c.strs.size(), -1), order;
  PyObject* b = PyBytes_FromStringAndSize(nullptr, idx.size() * sizeof(int32_t));
  if (!b) return nullptr;
  int32_t* out = reinterpret_cast<int32_t*>(PyBytes_AS_STRING(b));
  for (size_t i = 0; i < idx.size(); i++) {
    int32_t code = c.code[idx[i]];
    if (c.kind[idx[i]] != hta_native::K_STR || code < 0) {
      *missing = true;
      Py_DECREF(b);
      return nullptr;
    }
    if (lut[code] < 0) {
      lut[code] = static_cast<int32_t>(order.size());
      order.push_back(code);
    }
    out[i] = lut[code];
  }
  PyObject* list = PyList_New(order.size());
  if (!list) {
    Py_DECREF(b);
    return nullptr;
  }
  for (size_t i = 0; i < order.size(); i++) {
    PyObject* s = PyUnicode_DecodeUTF8(c.strs.data(order[i]), c.strs.length(order[i]), "strict");
    if (!s) {
      Py_DECREF(list);
      Py_DECREF(b);
      return nullptr;
    }
    PyList_SET_ITEM(list, i, s);
  }
  return Py_BuildValue("(NN)", list, b);
}

struct Spec {
  int mode;  // 0: no numeric default, 1: int default, 2: float default
  int64_t i;
  double d;
  std::string text;  // the default as JSON text (object args)
};

// One arg column of the kept rows, as fastparse._arg_column builds it, or ("raw", column) where
// Python builds it (mixed kinds).
PyObject* arg_column(const Column& c, const std::vector<int64_t>& idx, const Spec& spec, bool object) {
  using namespace hta_native;
  if (idx.empty()) return Py_BuildValue("(s)", "empty");
  if (object) {
    // every row a text, the default's where absent
    int32_t dcode = -2;
    std::vector<int32_t> codes(idx.size());
    size_t ntexts = c.texts.size();
    for (size_t i = 0; i < idx.size(); i++) {
      int32_t code = c.code[idx[i]];
      if (c.kind[idx[i]] != K_TEXT) {
        if (dcode == -2) {
          dcode = static_cast<int32_t>(ntexts);
          for (size_t j = 0; j < ntexts; j++) {
            if (c.texts.length(j) == spec.text.size() && std::memcmp(c.texts.data(j), spec.text.data(), spec.text.size()) == 0) {
              dcode = static_cast<int32_t>(j);
              break;
            }
          }
        }
        code = dcode;
      }
      codes[i] = code;
    }
    size_t total = ntexts + (dcode == static_cast<int32_t>(ntexts) ? 1 : 0);
    std::vector<int32_t> lut(total, -1);
    for (int32_t code : codes) lut[code] = 0;
    std::vector<int32_t> order;
    bool container = false;
    for (size_t j = 0; j < total; j++) {
      if (lut[j] < 0) continue;
      lut[j] = static_cast<int32_t>(order.size());
      order.push_back(static_cast<int32_t>(j));
      const char* t = j < ntexts ? c.texts.data(j) : spec.text.data();
      size_t len = j < ntexts ? c.texts.length(j) : spec.text.size();
      if (len && (t[0] == '[' || t[0] == '{')) container = true;
    }
    const char* tag = container ? "obj" : "texts";  // texts: the decoded values decide (Python)
    PyObject* list = PyList_New(order.size());
    if (!list) return nullptr;
    for (size_t i = 0; i < order.size(); i++) {
      size_t j = order[i];
      PyObject* t = j < ntexts ? PyBytes_FromStringAndSize(c.texts.data(j), c.texts.length(j))
                               : PyBytes_FromStringAndSize(spec.text.data(), spec.text.size());
      if (!t) {
        Py_DECREF(list);
        return nullptr;
      }
      PyList_SET_ITEM(list, i, t);
    }
    PyObject* b = PyBytes_FromStringAndSize(nullptr, codes.size() * sizeof(int32_t));
    if (!b) {
      Py_DECREF(list);
      return nullptr;
    }
    int32_t* out = reinterpret_cast<int32_t*>(PyBytes_AS_STRING(b));
    for (size_t i = 0; i < codes.size(); i++) out[i] = lut[codes[i]];
    return Py_BuildValue("(sNN)", tag, list, b);
  }
  unsigned kinds = kinds_of(c, &idx);
  bool absent = kinds & bit(K_ABSENT);
  if ((kinds & ~(bit(K_INT) | bit(K_ABSENT))) == 0 && (!absent || spec.mode == 1)) {
    std::vector<int64_t> v(idx.size());
    for (size_t i = 0; i < idx.size(); i++) v[i] = c.kind[idx[i]] == K_ABSENT ? spec.i : c.i64[idx[i]];
    return Py_BuildValue("(sN)", "i8", small_ints(v));
  }
  if ((kinds & ~(bit(K_FLOAT) | bit(K_ABSENT))) == 0 && (!absent || spec.mode == 2)) {
    PyObject* b = PyBytes_FromStringAndSize(nullptr, idx.size() * sizeof(double));
    if (!b) return nullptr;
    double* out = reinterpret_cast<double*>(PyBytes_AS_STRING(b));
    for (size_t i = 0; i < idx.size(); i++) out[i] = c.kind[idx[i]] == K_ABSENT ? spec.d : c.f64[idx[i]];
    return Py_BuildValue("(sN)", "f8", b);
  }
  if ((kinds & ~(bit(K_INT) | bit(K_FLOAT) | bit(K_ABSENT))) == 0 && (!absent || spec.mode == 1 || spec.mode == 2)) {
    // ints and floats (the default one or the other): "f8i", the floats and, for an object
    // column, each row's int or float (fastparse._infer's values)
    PyObject* f = PyBytes_FromStringAndSize(nullptr, idx.size() * sizeof(double));
    PyObject* iv = PyBytes_FromStringAndSize(nullptr, idx.size() * sizeof(int64_t));
    PyObject* isint = PyBytes_FromStringAndSize(nullptr, idx.size());
    if (!f || !iv || !isint) {
      Py_XDECREF(f);
      Py_XDECREF(iv);
      Py_XDECREF(isint);
      return nullptr;
    }
    double* fo = reinterpret_cast<double*>(PyBytes_AS_STRING(f));
    int64_t* io = reinterpret_cast<int64_t*>(PyBytes_AS_STRING(iv));
    char* ko = PyBytes_AS_STRING(isint);
    for (size_t i = 0; i < idx.size(); i++) {
      uint8_t k = c.kind[idx[i]];
      bool as_int = k == K_INT || (k == K_ABSENT && spec.mode == 1);
      io[i] = k == K_INT ? c.i64[idx[i]] : (k == K_ABSENT && spec.mode == 1 ? spec.i : 0);
      fo[i] = k == K_ABSENT ? (spec.mode == 1 ? static_cast<double>(spec.i) : spec.d)
                            : (k == K_INT ? static_cast<double>(c.i64[idx[i]]) : c.f64[idx[i]]);
      ko[i] = as_int;
    }
    return Py_BuildValue("(sNNN)", "f8i", f, iv, isint);
  }
  return Py_BuildValue("(sN)", "raw", column_of(c));
}

// ts or dur: tag, and whether a value beyond 2**53 (fastparse's check, as numpy computes it) is there.
const char* time_tag(const Column& c, bool* beyond) {
  using namespace hta_native;
  unsigned kinds = kinds_of(c, nullptr);
  if (kinds == bit(K_ABSENT)) return "null";
  const double limit = 9007199254740992.0;
  if (kinds == bit(K_INT)) {
    int64_t m = 0;
    for (int64_t x : c.i64) {
      int64_t a = x < 0 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x)) : x;  // numpy's abs wraps at -2**63
      m = a > m ? a : m;
    }
    *beyond = static_cast<double>(m) > limit;
    return "i8";
  }
  double m = 0;
  for (size_t i = 0; i < c.f64.size(); i++) {
    if (c.kind[i] != K_ABSENT) m = std::fabs(c.f64[i]) > m ? std::fabs(c.f64[i]) : m;
  }
  *beyond = m > limit;
  return (kinds & bit(K_INT)) ? "f8i" : "f8";
}

PyObject* int64_bytes(const std::vector<int64_t>& v) { return bytes_of(v); }

PyObject* time_column(const Column& c, const char* tag, const std::vector<int64_t>& idx) {
  using namespace hta_native;
  if (std::strcmp(tag, "null") == 0) return Py_BuildValue("(s)", "null");
  if (std::strcmp(tag, "i8") == 0) {
    std::vector<int64_t> v(idx.size());
    for (size_t i = 0; i < idx.size(); i++) v[i] = c.i64[idx[i]];
    return Py_BuildValue("(sN)", "i8", small_ints(v));
  }
  PyObject* b = PyBytes_FromStringAndSize(nullptr, idx.size() * sizeof(double));
  if (!b) return nullptr;
  double* out = reinterpret_cast<double*>(PyBytes_AS_STRING(b));
  for (size_t i = 0; i < idx.size(); i++) out[i] = c.f64[idx[i]];
  return Py_BuildValue("(sN)", "f8", b);
}

// read_piece(buf, raw_names, objects, defaults) -> dict | str
// defaults: per arg spec (mode, int, float, text bytes); see fastparse.native_piece.
PyObject* read_piece(PyObject*, PyObject* args) {
  using namespace hta_native;
  PyObject *obj, *names, *objects, *defaults;
  if (!PyArg_ParseTuple(args, "OO!O!O!", &obj, &PyTuple_Type, &names, &PyTuple_Type, &objects, &PyTuple_Type, &defaults))
    return nullptr;
  Py_ssize_t na = PyTuple_GET_SIZE(names);
  if (PyTuple_GET_SIZE(objects) != na || PyTuple_GET_SIZE(defaults) != na) {
    PyErr_SetString(PyExc_ValueError, "raw_names, objects and defaults differ in length");
    return nullptr;
  }
  std::vector<ArgSpec> specs;
  std::vector<Spec> dspecs;
  for (Py_ssize_t i = 0; i < na; i++) {
    if (!add_arg_spec(names, objects, i, specs)) return nullptr;
    Spec d;
    const char* text;
    Py_ssize_t tlen;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(defaults, i), "iLdy#", &d.mode, &d.i, &d.d, &text, &tlen)) return nullptr;
    d.text.assign(text, tlen);
    dspecs.push_back(d);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return nullptr;
  // one Result per thread, reused: its columns' memory is not faulted in again for each run
  // (a run of 8 MB: ~10 MB of columns); dropped after a run of more than 4 Mi events
  static thread_local std::unique_ptr<Result> kept;
  std::unique_ptr<Result> res = std::move(kept);
  if (!res) res.reset(new (std::nothrow) Result());
  if (!res) {
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
  }
  struct Keep {
    std::unique_ptr<Result>* slot;
    std::unique_ptr<Result>* res;
    ~Keep() {
      if (*res && (*res)->capacity() <= (static_cast<size_t>(1) << 22)) *slot = std::move(*res);
    }
  } keep_for_next{&kept, &res};
  bool ok;
  const char* why = nullptr;
  const char *ts_tag = nullptr, *dur_tag = nullptr;
  std::vector<int64_t> idx, trace_rows;
  bool ts_null_any = false, end_null_any = false;
  Py_BEGIN_ALLOW_THREADS
  ok = read_events(static_cast<const char*>(view.buf), view.len, specs, res.get());
  if (ok) {
    bool b1 = false, b2 = false;
    dur_tag = time_tag(res->dur, &b1);
    ts_tag = time_tag(res->ts, &b2);
    if (b1 || b2) why = "a ts or dur beyond 2**53 us";
    int32_t trace = -1;
    for (size_t j = 0; j < res->cat.strs.size(); j++) {
      if (res->cat.strs.length(j) == 5 && std::memcmp(res->cat.strs.data(j), "Trace", 5) == 0) trace = static_cast<int32_t>(j);
    }
    idx.reserve(res->n);
    for (size_t r = 0; !why && r < res->n; r++) {
      bool dur_null = res->dur.kind[r] == K_ABSENT, ts_null = res->ts.kind[r] == K_ABSENT;
      ts_null_any |= ts_null;
      end_null_any |= ts_null | dur_null;
      if (dur_null && res->ph_x[r]) why = "complete events without dur";
      if (res->cat.kind[r] != K_STR || dur_null) continue;
      (res->cat.code[r] == trace ? trace_rows : idx).push_back(static_cast<int64_t>(r));
    }
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (!ok) return PyUnicode_FromString(res->why.c_str());
  if (why) return PyUnicode_FromString(why);
  bool missing = false;
  PyObject* name = kept_codes(res->name, idx, &missing);
  if (!name) return missing ? PyUnicode_FromString("a name that is not a string") : nullptr;
  PyObject* out = PyDict_New();
  if (!out) {
    Py_DECREF(name);
    return nullptr;
  }
  bool good = set(out, "name", name) == 0;
  good = good && set(out, "cat", kept_codes(res->cat, idx, &missing)) == 0;
  good = good && set(out, "cats", strs_of(res->cat.strs, false)) == 0;
  good = good && set(out, "n", PyLong_FromSize_t(res->n)) == 0;
  good = good && set(out, "keep", int64_bytes(idx)) == 0 && set(out, "trace_rows", int64_bytes(trace_rows)) == 0;
  good = good && set(out, "ts_any_null", PyBool_FromLong(ts_null_any)) == 0 &&
         set(out, "end_any_null", PyBool_FromLong(end_null_any)) == 0;
  PyObject* keys = good ? PyList_New(0) : nullptr;
  PyObject* columns = keys ? PyDict_New() : nullptr;
  good = good && columns;
  for (int f : res->key_order) {
    if (!good) break;
    PyObject* k = PyUnicode_FromString(kFieldNames[f]);
    good = k && PyList_Append(keys, k) == 0;
    Py_XDECREF(k);
    PyObject* col = nullptr;
    if (f == F_TS || f == F_DUR) {
      col = time_column(f == F_TS ? res->ts : res->dur, f == F_TS ? ts_tag : dur_tag, idx);
    } else if (f == F_PID || f == F_TID) {
      const Column& c = f == F_PID ? res->pid : res->tid;
      if (kinds_of(c, nullptr) == bit(K_INT)) {
        std::vector<int64_t> v(idx.size());
        for (size_t i = 0; i < idx.size(); i++) v[i] = c.i64[idx[i]];
        col = Py_BuildValue("(sN)", "i8", small_ints(v));
      } else {
        col = Py_BuildValue("(sN)", "raw", column_of(c));
      }
    } else {
      continue;
    }
    good = good && set(columns, kFieldNames[f], col) == 0;
  }
  if (good) {
    good = set(out, "keys", keys) == 0;
    keys = nullptr;
  }
  if (good) {
    good = set(out, "columns", columns) == 0;
    columns = nullptr;
  }
  PyObject* arglist = good ? PyList_New(na) : nullptr;
  good = good && arglist;
  for (Py_ssize_t i = 0; good && i < na; i++) {
    PyObject* c = arg_column(res->args[i], idx, dspecs[i], specs[i].object);
    if (!c) {
      good = false;
      break;
    }
    PyList_SET_ITEM(arglist, i, c);
  }
  if (good) {
    good = set(out, "args", arglist) == 0;
    arglist = nullptr;
  }
  Py_XDECREF(keys);
  Py_XDECREF(columns);
  Py_XDECREF(arglist);
  if (!good) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

// ------------------------------------------------------------------ find

// find(buf, needle, start, end) -> int: bytes.find's answer for a needle of two bytes or more,
// filtered 16 positions at a time on the needle's first two bytes (a pair rare in JSON such as
// '"[' runs at memory speed where bytes.find checks every '"').
PyObject* find(PyObject*, PyObject* args) {
  PyObject* obj;
  const char* needle;
  Py_ssize_t nlen, start, end;
  if (!PyArg_ParseTuple(args, "Oy#nn", &obj, &needle, &nlen, &start, &end)) return nullptr;
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return nullptr;
  if (end > view.len) end = view.len;
  if (start < 0) start = 0;
  Py_ssize_t found = -1;
  if (nlen < 2) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "a needle of two bytes or more");
    return nullptr;
  }
  const unsigned char* b = static_cast<const unsigned char*>(view.buf);
  Py_BEGIN_ALLOW_THREADS
  Py_ssize_t i = start, last = end - nlen;  // the last position a match may start at
  unsigned char c0 = static_cast<unsigned char>(needle[0]), c1 = static_cast<unsigned char>(needle[1]);
#if defined(__SSE2__)
  __m128i v0 = _mm_set1_epi8(static_cast<char>(c0)), v1 = _mm_set1_epi8(static_cast<char>(c1));
  while (found < 0 && i + 16 <= last + 1 && i + 17 <= end) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + 1));
    unsigned m = static_cast<unsigned>(_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, v0), _mm_cmpeq_epi8(a1, v1))));
    while (m) {
      Py_ssize_t j = i + __builtin_ctz(m);
      if (std::memcmp(b + j, needle, nlen) == 0) {
        found = j;
        break;
      }
      m &= m - 1;
    }
    i += 16;
  }
#endif
  for (; found < 0 && i <= last; i++) {
    if (b[i] == c0 && b[i + 1] == c1 && std::memcmp(b + i, needle, nlen) == 0) found = i;
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  return PyLong_FromSsize_t(found);
}

PyMethodDef methods[] = {
    {"read_events", read_events, METH_VARARGS,
     "read_events(buf, raw_names, objects) -> dict | str: the columns of a JSON array of Kineto events, "
     "or why the Python reader must read it."},
    {"read_piece", read_piece, METH_VARARGS,
     "read_piece(buf, raw_names, objects, defaults) -> dict | str: the piece of a JSON array of Kineto events "
     "(the kept rows' columns), or why the Python reader must read it."},
    {"find", find, METH_VARARGS,
     "find(buf, needle, start, end) -> int: bytes.find(needle, start, end) for a needle of 2 bytes or more."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The native Kineto event reader.", -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
