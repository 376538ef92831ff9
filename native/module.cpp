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

#include <new>
#include <vector>

#include "reader.hpp"

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

PyObject* read_events(PyObject*, PyObject* args) {
  PyObject *obj, *names, *objects;
  if (!PyArg_ParseTuple(args, "OO!O!", &obj, &PyTuple_Type, &names, &PyTuple_Type, &objects)) return nullptr;
  if (PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(objects)) {
    PyErr_SetString(PyExc_ValueError, "raw_names and objects differ in length");
    return nullptr;
  }
  std::vector<hta_native::ArgSpec> specs;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
    Py_ssize_t n;
    const char* s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &n);
    if (!s) return nullptr;
    int o = PyObject_IsTrue(PyTuple_GET_ITEM(objects, i));
    if (o < 0) return nullptr;
    specs.push_back({std::string(s, n), o != 0});
  }
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

PyMethodDef methods[] = {
    {"read_events", read_events, METH_VARARGS,
     "read_events(buf, raw_names, objects) -> dict | str: the columns of a JSON array of Kineto events, "
     "or why the Python reader must read it."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The native Kineto event reader.", -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
