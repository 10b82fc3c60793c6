/* kernelkit's CUDA launch without a Python frame (``_backends/cuda/native.py`` builds and
 * loads this file; nothing else uses it).
 *
 * launch(driver_launch, function, last, entry, fallback, params, stream, geometry)
 *
 *   driver_launch  address of the driver's cuLaunchKernel (or anything with its signature)
 *   function       the CUfunction, as an int
 *   last           a list whose item 0 becomes ``entry`` after a launch that succeeded (the
 *                  name a later device fault is reported against)
 *   fallback       called as fallback(params, stream, geometry) when the launch returns an
 *                  error: the Python launcher, which retries under the device's context and
 *                  raises the error kernelkit reports; its result is returned
 *   params         address of the kernel's argument pointer array
 *   stream         CUstream handle as an int (0: the legacy default stream)
 *   geometry       (gx, gy, gz, bx, by, bz, shared bytes), each fitting 32 bits
 *
 * The driver is called without the GIL: a launch can wait for room in a full queue.
 *
 * Call(driver_launch, function, last, entry, fallback, next, inputs_type, ins, outs, has_out,
 *      alias_ok, check, expected, stream, geometry, blob, offsets[, geometries])
 *
 *   A kernel call repeated in C (``_pipeline/repeat.py`` makes them): called with a call's 12
 *   arguments (``key.CallArgs``' order), it launches the kernel when the call is like the one
 *   it was made from, else returns ``next(*args)``. "Like" means: ``inputs`` of the class
 *   ``inputs_type`` (list or tuple) and its length; ``check(*arrays)`` true for the array
 *   inputs, then the ``out=`` arrays (a check the arrays' framework makes in C: class, dtype,
 *   device, shape, strides); each scalar input and each ``expected`` (index, value) argument
 *   matching (``kk_matches``); ``out`` None, or a list or tuple of the outputs' number when
 *   ``has_out``; ``stream`` None (then ``stream()`` gives it) or an int; and ``out=`` arrays
 *   that meet no input and no other output (``alias_ok``: an output may be exactly an input).
 *
 *   ins       per input: (0, pointer, offset, span) for an array (``pointer(x)`` its address,
 *             written at ``offset`` in the block; ``span``: the bytes it may touch), or
 *             (1, value) for a scalar whose converted value the block already holds
 *   outs      per output: (pointer, offset, span, allocate, source): ``allocate`` None with
 *             ``out=``, else ``allocate(inputs[source])`` (source >= 0),
 *             ``allocate(output_shapes[j])`` (-1) or, with source -2 and ``allocate`` a tuple
 *             (make, fallback, *conditions), ``fallback()`` where every ``condition()`` is
 *             true, else ``make()`` (an allocation of the output's fixed shape, strides, dtype
 *             and device) makes it
 *   blob      a bytearray: the whole argument block of the call it was made from (shapes,
 *             strides, scalars), copied per call before the pointers are written in
 *   offsets   per kernel parameter, where its value starts in ``blob``
 *   geometries  optional: ``geometries(grid, threadgroup, shared_memory)`` gives the geometry
 *             of a call whose arguments 3, 4 or 11 (in ``expected``) differ from the call's it
 *             was made from (the argument block does not depend on them); an error from it
 *             hands the call on. Without it they are compared as any ``expected`` argument
 *   bounds    optional, with ``geometries``: 13 ints, the limits ``Geometries.quick`` checks
 *             (threads a block, block dims, grid dims in blocks, cluster dims, the most shared
 *             memory), the default shared memory size and the most that needs no raised limit;
 *             a geometry of int tuples within them is computed here (``kk_quick``), anything
 *             else asked of ``geometries``
 *
 *   Nothing of a call is kept: the block is copied onto the stack, so threads may share one.
 *   ``retry(trial, every)``: of the calls it hands on, one in ``every`` goes to ``trial``
 *   instead of ``next`` (the last Call of a chain: ``next`` the generated run, ``trial`` the
 *   Python side that makes a new Call); ``served`` counts its launches.
 *
 * Front(kernel, miss)
 *
 *   ``Kernel.__call__`` without a Python frame (a kernel's ``__call__`` is a property that gives
 *   its Front once one of its plans launches through this module). Called with
 *   ``Kernel.__call__``'s arguments, it calls ``last`` (settable; the kernel's ``_last``) with
 *   the 12 ``CallArgs`` and returns its result, or, when that is ``miss``,
 *   ``kernel._call_other(args, False)`` with the 12 as a tuple. A call it cannot lay out so
 *   (``verbose=`` or ``timeout=`` given, an unknown or repeated keyword, no ``inputs``, more
 *   than 7 positional arguments) goes whole to ``kernel._call``, which checks it and names what
 *   is wrong. It holds the kernel by a weak reference: a kernel and its Front make no cycle.
 *
 * Guards(fields, arrays)
 *
 *   ``check(*arrays)``: a check in C that arrays are like ``arrays`` (their exact classes and
 *   the values of attribute paths, ``fields``), the ``check`` a Call takes for frameworks
 *   without one of their own (CuPy: dtype, shape, strides, data.device_id). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>

typedef int (*kk_driver_launch)(void *function, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                void *stream, void **params, void **extra);

static int kk_geometry(PyObject *geometry, unsigned g[7]) {
  if (!PyTuple_Check(geometry) || PyTuple_GET_SIZE(geometry) != 7) {
    PyErr_SetString(PyExc_TypeError, "[launch] geometry must be a tuple of 7 ints");
    return -1;
  }
  for (int i = 0; i < 7; i++) {
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(geometry, i));
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v > UINT_MAX) {
      PyErr_SetString(PyExc_OverflowError, "[launch] a geometry value exceeds 32 bits");
      return -1;
    }
    g[i] = (unsigned)v;
  }
  return 0;
}

static PyObject *kk_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 8) {
    PyErr_Format(PyExc_TypeError, "[launch] takes 8 arguments, got %zd", nargs);
    return NULL;
  }
  void *ptr[4]; /* driver_launch, function, params, stream */
  const int at[4] = {0, 1, 5, 6};
  for (int i = 0; i < 4; i++) { /* one conversion at a time: none runs with an error set */
    ptr[i] = PyLong_AsVoidPtr(args[at[i]]);
    if (ptr[i] == NULL && PyErr_Occurred()) return NULL;
  }
  kk_driver_launch driver = (kk_driver_launch)ptr[0];
  void *function = ptr[1], *params = ptr[2], *stream = ptr[3];
  unsigned g[7];
  if (kk_geometry(args[7], g) < 0) return NULL;
  if (driver == NULL || function == NULL || params == NULL || !PyList_Check(args[2]) ||
      PyList_GET_SIZE(args[2]) < 1) {
    PyErr_SetString(PyExc_ValueError, "[launch] null driver, function or parameters, or no list");
    return NULL;
  }
  int err;
  Py_BEGIN_ALLOW_THREADS
  err = driver(function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream, (void **)params, NULL);
  Py_END_ALLOW_THREADS
  if (err != 0) return PyObject_Vectorcall(args[4], args + 5, 3, NULL);
  Py_INCREF(args[3]);
  if (PyList_SetItem(args[2], 0, args[3]) < 0) return NULL; /* steals the new reference */
  Py_RETURN_NONE;
}

/* ---- Call: a kernel call repeated in C (see the top of this file) ---- */

#include <stddef.h>
#include <string.h>

#define KK_MAX_BLOB 4096  /* bytes of one argument block (``repeat.py`` makes none larger) */
#define KK_MAX_PARAMS 512 /* kernel parameters */
#define KK_MAX_ARRAYS 64  /* arrays of one call, inputs and outputs */

typedef struct {
  int scalar;              /* 1: a scalar input (``value``), 0: an array */
  PyObject *pointer;       /* array: pointer(x) -> its address */
  PyObject *value;         /* scalar: the value the block holds */
  PyObject *allocate;      /* output: allocate(source) -> new array, or NULL with out= */
  Py_ssize_t offset;       /* array: where its pointer goes in the block */
  Py_ssize_t source;       /* output: the input passed to allocate, -1: output_shapes[j],
                            * -2: nothing (allocate() makes the fixed layout) */
  Py_ssize_t at;           /* array input: its place among the call's arrays */
  unsigned long long span; /* array: bytes from its pointer it may touch */
} kk_arg;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  kk_driver_launch driver;
  void *function;
  PyObject *last, *entry, *fallback, *next, *check, *expected, *stream, *geometry;
  PyObject *geometries;      /* geometries(grid, threadgroup, shared_memory), or NULL */
  long long bounds[13];      /* ``bounds`` (``kk_quick``), with ``has_bounds`` */
  int has_bounds;
  PyObject *shapes;          /* the expected output_shapes (a tuple in ``expected``), or NULL */
  Py_ssize_t n_expected, expected_at[12]; /* ``expected``'s pairs, read once: index and value */
  PyObject *expected_value[12];           /* (borrowed from ``expected``) */
  unsigned char *blob;       /* the argument block, copied at construction (PyMem) */
  Py_ssize_t blob_size;
  PyTypeObject *inputs_type;
  kk_arg *ins, *outs;
  Py_ssize_t n_in, n_out, n_arrays, n_params, *offsets;
  int has_out, alias_ok;
  unsigned g[7];
  unsigned long long served; /* calls it launched */
  PyObject *trial;           /* called in place of ``next`` once every ``every`` calls it hands on */
  unsigned long long every, count;
} kk_call;

/* Whether a call's argument ``a`` matches ``e``, a value from the call the Call was made from:
 * None, bool and anything else not below by identity; int and str of the same exact type and
 * equal; float of the same bits (0.0 and -0.0 differ, as their converted values do); tuple
 * against a list, tuple or tuple subclass (torch.Size) of the same length whose items match,
 * read from its storage; a NumPy scalar of the same type and bytes. Never runs Python code. */
static int kk_matches(PyObject *a, PyObject *e) {
  if (a == e) return 1;
  PyTypeObject *t = Py_TYPE(e);
  if (t == &PyTuple_Type) {
    if (!PyTuple_Check(a) && !PyList_CheckExact(a)) return 0; /* torch.Size is a tuple */
    Py_ssize_t n = PyTuple_GET_SIZE(e);
    if (Py_SIZE(a) != n) return 0;
    PyObject **items = PySequence_Fast_ITEMS(a);
    for (Py_ssize_t i = 0; i < n; i++) {
      if (!kk_matches(items[i], PyTuple_GET_ITEM(e, i))) return 0;
    }
    return 1;
  }
  if (Py_TYPE(a) != t) return 0;
  if (t == &PyFloat_Type) {
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(e);
    return memcmp(&x, &y, sizeof x) == 0;
  }
  if (t == &PyLong_Type || t == &PyUnicode_Type) {
    int r = PyObject_RichCompareBool(a, e, Py_EQ); /* exact int or str: no Python code */
    if (r < 0) PyErr_Clear();
    return r > 0;
  }
  if (PyObject_CheckBuffer(e)) { /* a NumPy scalar (``repeat.py`` lets no other through): */
    Py_buffer x, y;             /* the same type and the same bytes */
    if (PyObject_GetBuffer(a, &x, PyBUF_SIMPLE) < 0) {
      PyErr_Clear();
      return 0;
    }
    if (PyObject_GetBuffer(e, &y, PyBUF_SIMPLE) < 0) {
      PyErr_Clear();
      PyBuffer_Release(&x);
      return 0;
    }
    int same = x.len == y.len && memcmp(x.buf, y.buf, (size_t)x.len) == 0;
    PyBuffer_Release(&x);
    PyBuffer_Release(&y);
    return same;
  }
  return 0;
}

/* A tuple of 1 to 3 positive ints as 3 dims (missing ones 1); 0 for anything else. */
static int kk_dims(PyObject *x, long long d[3]) {
  if (!PyTuple_CheckExact(x) || PyTuple_GET_SIZE(x) < 1 || PyTuple_GET_SIZE(x) > 3) return 0;
  d[0] = d[1] = d[2] = 1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(x); i++) {
    PyObject *v = PyTuple_GET_ITEM(x, i);
    if (!PyLong_CheckExact(v)) return 0; /* (not a bool) */
    int overflow;
    d[i] = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || d[i] < 1) return 0;
  }
  return 1;
}

/* ``Geometries.quick`` in C: the launch geometry of (grid in threads, threadgroup, shared
 * memory) within ``bounds``; 0 where it cannot say (not int tuples, a limit passed, a shared
 * size that would need the kernel's limit raised): ``geometries`` then decides, and names what
 * is wrong. Never runs Python code, never sets an error. */
static int kk_quick(kk_call *self, PyObject *grid, PyObject *group, PyObject *shared,
                    unsigned g[7]) {
  long long gd[3], td[3], nbytes, *b = self->bounds;
  if (!self->has_bounds || !kk_dims(grid, gd) || !kk_dims(group, td)) return 0;
  if (shared == Py_None) {
    nbytes = b[11];
  } else if (PyLong_CheckExact(shared)) {
    int overflow;
    nbytes = PyLong_AsLongLongAndOverflow(shared, &overflow);
    if (overflow) return 0;
  } else {
    return 0;
  }
  if (nbytes < 0 || nbytes > b[10] || nbytes > b[12]) return 0;
  long long threads;
  if (__builtin_mul_overflow(td[0], td[1], &threads) ||
      __builtin_mul_overflow(threads, td[2], &threads) || threads > b[0])
    return 0;
  for (int i = 0; i < 3; i++) {
    long long block = td[i] < gd[i] ? td[i] : gd[i], blocks = (gd[i] - 1) / block + 1;
    if (td[i] > b[1 + i] || blocks > b[4 + i] || blocks % b[7 + i]) return 0;
    g[i] = (unsigned)blocks;
    g[3 + i] = (unsigned)block;
  }
  g[6] = (unsigned)nbytes;
  return 1;
}

/* A -2 output's ``allocate``: (make, fallback, *conditions): ``fallback()`` where every
 * ``condition()`` is true, else ``make()``; NULL with an error set */
static PyObject *kk_fixed_alloc(PyObject *spec) {
  Py_ssize_t n = PyTuple_GET_SIZE(spec);
  int all = n > 2;
  for (Py_ssize_t i = 2; all > 0 && i < n; i++) {
    PyObject *r = PyObject_CallNoArgs(PyTuple_GET_ITEM(spec, i));
    if (r == NULL) return NULL;
    all = PyObject_IsTrue(r);
    Py_DECREF(r);
  }
  if (all < 0) return NULL;
  return PyObject_CallNoArgs(PyTuple_GET_ITEM(spec, all ? 1 : 0));
}

/* An address from ``pointer(x)``; 0 with an error set when it gives none. */
static int kk_address(PyObject *pointer, PyObject *x, unsigned long long *out) {
  PyObject *r = PyObject_Vectorcall(pointer, &x, 1, NULL);
  if (r == NULL) return -1;
  *out = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  return (*out == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *kk_call_next(kk_call *self, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
  PyObject *next = self->next;
  if (self->trial != NULL && ++self->count >= self->every) { /* the chain's end tries again */
    self->count = 0;
    next = self->trial;
  }
  Py_INCREF(next); /* the chain may be cut while it runs */
  PyObject *r = PyObject_Vectorcall(next, args, PyVectorcall_NARGS(nargsf), kwnames);
  Py_DECREF(next);
  return r;
}

static PyObject *kk_call_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames) {
  kk_call *self = (kk_call *)callable;
  if (self->check == NULL) { /* cleared by the collector while still reachable */
    PyErr_SetString(PyExc_RuntimeError, "[Call] called after it was cleared");
    return NULL;
  }
  PyObject *arrays[KK_MAX_ARRAYS], *made[KK_MAX_ARRAYS];
  PyObject *geometry = NULL; /* another geometry's tuple, from ``geometries`` */
  Py_ssize_t n_arrays = 0, n_made = 0;
  int regeo = 0;
  unsigned long long address[KK_MAX_ARRAYS];
  PyObject *result = NULL;
  if (PyVectorcall_NARGS(nargsf) != 12 || kwnames != NULL) goto miss;
  for (Py_ssize_t i = 0; i < self->n_expected; i++) {
    Py_ssize_t at = self->expected_at[i];
    if (!kk_matches(args[at], self->expected_value[i])) {
      if (self->geometries == NULL || !(at == 3 || at == 4 || at == 11)) goto miss;
      regeo = 1; /* grid, threadgroup or shared memory: another geometry */
    }
  }
  unsigned g[7];
  memcpy(g, self->g, sizeof g);
  if (regeo && !kk_quick(self, args[3], args[4], args[11], g)) {
    /* Python code: before anything of the caller's lists is read */
    PyObject *geo_args[3] = {args[3], args[4], args[11]};
    geometry = PyObject_Vectorcall(self->geometries, geo_args, 3, NULL);
    if (geometry == NULL || kk_geometry(geometry, g) < 0) goto miss_clear;
  }
  PyObject *inputs = args[0], *out = args[8], *stream_arg = args[7];
  if (Py_TYPE(inputs) != self->inputs_type || Py_SIZE(inputs) != self->n_in) goto miss_clear;
  if (self->has_out) {
    if ((!PyList_CheckExact(out) && !PyTuple_CheckExact(out)) || Py_SIZE(out) != self->n_out)
      goto miss_clear;
  } else if (out != Py_None) {
    goto miss_clear;
  }
  if (stream_arg != Py_None && !PyLong_CheckExact(stream_arg)) goto miss_clear;
  PyObject **in = PySequence_Fast_ITEMS(inputs);
  for (Py_ssize_t i = 0; i < self->n_in; i++) { /* scalars first: nothing held yet */
    if (self->ins[i].scalar && !kk_matches(in[i], self->ins[i].value)) goto miss_clear;
  }
  for (Py_ssize_t i = 0; i < self->n_in; i++) {
    if (!self->ins[i].scalar) {
      Py_INCREF(in[i]); /* held: a pointer getter may run Python code */
      arrays[n_arrays++] = in[i];
    }
  }
  if (self->has_out) {
    PyObject **o = PySequence_Fast_ITEMS(out);
    for (Py_ssize_t j = 0; j < self->n_out; j++) {
      Py_INCREF(o[j]);
      arrays[n_arrays++] = o[j];
    }
  }
  PyObject *check = Py_NewRef(self->check); /* a check may run Python code (attribute getters) */
  PyObject *ok = PyObject_Vectorcall(check, arrays, n_arrays, NULL);
  Py_DECREF(check);
  if (ok == NULL) goto miss_clear;
  Py_DECREF(ok);
  if (ok != Py_True) goto miss_clear;
  void *stream;
  if (stream_arg == Py_None) {
    PyObject *s = PyObject_CallNoArgs(self->stream);
    if (s == NULL) goto miss_clear;
    stream = PyLong_AsVoidPtr(s);
    Py_DECREF(s);
  } else {
    stream = PyLong_AsVoidPtr(stream_arg);
  }
  if (stream == NULL && PyErr_Occurred()) goto miss_clear;
  Py_ssize_t k = 0; /* the arrays' addresses, inputs then outputs, in ``arrays``' order */
  for (Py_ssize_t i = 0; i < self->n_in; i++) {
    if (self->ins[i].scalar) continue;
    if (kk_address(self->ins[i].pointer, arrays[k], &address[k]) < 0) goto miss_clear;
    k++;
  }
  if (self->has_out) {
    Py_ssize_t first_out = k;
    for (Py_ssize_t j = 0; j < self->n_out; j++, k++) {
      if (kk_address(self->outs[j].pointer, arrays[k], &address[k]) < 0) goto miss_clear;
      unsigned long long p = address[k], e = p + self->outs[j].span;
      if (p == e) continue;
      for (Py_ssize_t m = first_out; m < k; m++) { /* another output */
        if (address[m] < e && p < address[m] + self->outs[m - first_out].span) goto miss_clear;
      }
      Py_ssize_t a = 0;
      for (Py_ssize_t i = 0; i < self->n_in; i++) { /* an input */
        if (self->ins[i].scalar) continue;
        unsigned long long q = address[a++], f = q + self->ins[i].span;
        if (q < e && p < f && !(self->alias_ok && q == p && f == e)) goto miss_clear;
      }
    }
  } else {
    for (Py_ssize_t j = 0; j < self->n_out; j++) {
      kk_arg *o = &self->outs[j];
      /* the input it is made like, held here, or the shape the Call was made with (the
       * caller's own list may have changed since it matched) */
      PyObject *y;
      if (o->source == -2) {
        y = kk_fixed_alloc(o->allocate);
      } else {
        PyObject *source = o->source >= 0 ? arrays[self->ins[o->source].at]
                                          : PyTuple_GET_ITEM(self->shapes, j);
        Py_INCREF(source);
        y = PyObject_Vectorcall(o->allocate, &source, 1, NULL);
        Py_DECREF(source);
      }
      if (y == NULL) goto miss_clear; /* the checked path allocates again and says why */
      made[n_made++] = y;
      if (kk_address(o->pointer, y, &address[k++]) < 0) goto miss_clear;
    }
  }
  /* the block: copied, then every array's address written in */
  _Alignas(16) unsigned char block[KK_MAX_BLOB];
  void *params[KK_MAX_PARAMS];
  memcpy(block, self->blob, (size_t)self->blob_size);
  k = 0;
  for (Py_ssize_t i = 0; i < self->n_in; i++) {
    if (!self->ins[i].scalar) memcpy(block + self->ins[i].offset, &address[k++], 8);
  }
  for (Py_ssize_t j = 0; j < self->n_out; j++) memcpy(block + self->outs[j].offset, &address[k++], 8);
  for (Py_ssize_t i = 0; i < self->n_params; i++) params[i] = block + self->offsets[i];
  int err;
  Py_BEGIN_ALLOW_THREADS
  err = self->driver(self->function, g[0], g[1], g[2], g[3], g[4], g[5], g[6], stream, params,
                     NULL);
  Py_END_ALLOW_THREADS
  if (err != 0) { /* the Python launcher retries under the device's context, or raises */
    if (regeo && geometry == NULL) /* computed here: the fallback is given it as a tuple */
      geometry = Py_BuildValue("(IIIIIII)", g[0], g[1], g[2], g[3], g[4], g[5], g[6]);
    PyObject *fargs[3] = {PyLong_FromVoidPtr(params), PyLong_FromVoidPtr(stream),
                          regeo ? geometry : self->geometry};
    PyObject *r = NULL;
    if (fargs[0] != NULL && fargs[1] != NULL && fargs[2] != NULL)
      r = PyObject_Vectorcall(self->fallback, fargs, 3, NULL);
    Py_XDECREF(fargs[0]);
    Py_XDECREF(fargs[1]);
    if (r == NULL) goto done;
    Py_DECREF(r);
  } else {
    Py_INCREF(self->entry);
    if (PyList_SetItem(self->last, 0, self->entry) < 0) goto done;
  }
  self->served++;
  result = PyList_New(self->n_out);
  if (result == NULL) goto done;
  for (Py_ssize_t j = 0; j < self->n_out; j++) {
    PyObject *y = self->has_out ? arrays[n_arrays - self->n_out + j] : made[j];
    Py_INCREF(y);
    PyList_SET_ITEM(result, j, y);
  }
done:
  for (Py_ssize_t i = 0; i < n_arrays; i++) Py_DECREF(arrays[i]);
  for (Py_ssize_t i = 0; i < n_made; i++) Py_DECREF(made[i]);
  Py_XDECREF(geometry);
  return result;
miss_clear:
  for (Py_ssize_t i = 0; i < n_arrays; i++) Py_DECREF(arrays[i]);
  for (Py_ssize_t i = 0; i < n_made; i++) Py_DECREF(made[i]);
  Py_XDECREF(geometry);
  if (PyErr_Occurred()) { /* the checked path meets an Exception again and reports it */
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL; /* KeyboardInterrupt & co. */
    PyErr_Clear();
  }
miss:
  return kk_call_next(self, args, nargsf, kwnames);
}

static int kk_call_traverse(kk_call *self, visitproc visit, void *arg) {
  Py_VISIT(self->last);
  Py_VISIT(self->entry);
  Py_VISIT(self->fallback);
  Py_VISIT(self->next);
  Py_VISIT(self->trial);
  Py_VISIT(self->check);
  Py_VISIT(self->expected);
  Py_VISIT(self->stream);
  Py_VISIT(self->geometry);
  Py_VISIT(self->geometries);
  Py_VISIT(self->inputs_type);
  for (Py_ssize_t i = 0; self->ins && i < self->n_in; i++) {
    Py_VISIT(self->ins[i].pointer);
    Py_VISIT(self->ins[i].value);
  }
  for (Py_ssize_t j = 0; self->outs && j < self->n_out; j++) {
    Py_VISIT(self->outs[j].pointer);
    Py_VISIT(self->outs[j].allocate);
  }
  return 0;
}

static int kk_call_clear(kk_call *self) {
  Py_CLEAR(self->last);
  Py_CLEAR(self->entry);
  Py_CLEAR(self->fallback);
  Py_CLEAR(self->next);
  Py_CLEAR(self->trial);
  Py_CLEAR(self->check);
  Py_CLEAR(self->expected);
  Py_CLEAR(self->stream);
  Py_CLEAR(self->geometry);
  Py_CLEAR(self->geometries);
  Py_CLEAR(self->inputs_type);
  for (Py_ssize_t i = 0; self->ins && i < self->n_in; i++) {
    Py_CLEAR(self->ins[i].pointer);
    Py_CLEAR(self->ins[i].value);
  }
  for (Py_ssize_t j = 0; self->outs && j < self->n_out; j++) {
    Py_CLEAR(self->outs[j].pointer);
    Py_CLEAR(self->outs[j].allocate);
  }
  return 0;
}

static void kk_call_dealloc(kk_call *self) {
  PyObject_GC_UnTrack(self);
  kk_call_clear(self);
  PyMem_Free(self->ins);
  PyMem_Free(self->outs);
  PyMem_Free(self->offsets);
  PyMem_Free(self->blob);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int kk_fail(const char *what) {
  PyErr_Format(PyExc_ValueError, "[Call] bad %s", what);
  return -1;
}

/* ``ins``/``outs`` tuples into ``kk_arg``s (the constructor's checks: every offset inside the
 * block, 8 bytes from it). */
static int kk_parse_args(PyObject *items, int outputs, Py_ssize_t blob_size, kk_arg **into) {
  Py_ssize_t n = PyTuple_GET_SIZE(items);
  *into = PyMem_Calloc(n ? (size_t)n : 1, sizeof(kk_arg));
  if (*into == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = PyTuple_GET_ITEM(items, i);
    kk_arg *a = &(*into)[i];
    a->source = -1;
    if (!PyTuple_Check(t)) return kk_fail("argument entry");
    if (!outputs && PyTuple_GET_SIZE(t) == 2) { /* (1, value) */
      a->scalar = 1;
      a->value = Py_NewRef(PyTuple_GET_ITEM(t, 1));
      continue;
    }
    PyObject *pointer, *allocate = Py_None;
    Py_ssize_t offset, source = -1;
    unsigned long long span;
    if (outputs) {
      if (!PyArg_ParseTuple(t, "OnKOn", &pointer, &offset, &span, &allocate, &source)) return -1;
    } else {
      int zero;
      if (!PyArg_ParseTuple(t, "iOnK", &zero, &pointer, &offset, &span)) return -1;
    }
    if (offset < 0 || offset + 8 > blob_size || offset % 8) return kk_fail("array offset");
    a->pointer = Py_NewRef(pointer);
    a->allocate = allocate == Py_None ? NULL : Py_NewRef(allocate);
    a->offset = offset;
    a->source = source;
    a->span = span;
  }
  return 0;
}

static PyObject *kk_call_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  PyObject *driver, *function, *last, *entry, *fallback, *next, *inputs_type, *ins, *outs;
  PyObject *check, *expected, *stream, *geometry, *blob, *offsets, *geometries = Py_None;
  PyObject *bounds = Py_None;
  int has_out, alias_ok;
  if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
    PyErr_SetString(PyExc_TypeError, "[Call] takes positional arguments only");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "OOO!OOOO!O!O!ppOO!OO!O!O!|OO", &driver, &function,
                        &PyList_Type, &last, &entry, &fallback, &next, &PyType_Type,
                        &inputs_type, &PyTuple_Type, &ins, &PyTuple_Type, &outs, &has_out,
                        &alias_ok, &check, &PyTuple_Type, &expected, &stream, &PyTuple_Type,
                        &geometry, &PyByteArray_Type, &blob, &PyTuple_Type, &offsets,
                        &geometries, &bounds))
    return NULL;
  if (geometries != Py_None && !PyCallable_Check(geometries)) {
    PyErr_SetString(PyExc_TypeError, "[Call] geometries must be callable or None");
    return NULL;
  }
  kk_call *self = PyObject_GC_New(kk_call, type);
  if (self == NULL) return NULL;
  memset((char *)self + sizeof(PyObject), 0, sizeof(kk_call) - sizeof(PyObject));
  self->vectorcall = kk_call_vectorcall;
  self->last = Py_NewRef(last);
  self->entry = Py_NewRef(entry);
  self->fallback = Py_NewRef(fallback);
  self->next = Py_NewRef(next);
  self->check = Py_NewRef(check);
  self->expected = Py_NewRef(expected);
  self->stream = Py_NewRef(stream);
  self->geometry = Py_NewRef(geometry);
  self->geometries = geometries == Py_None ? NULL : Py_NewRef(geometries);
  if (bounds != Py_None) {
    if (!PyTuple_Check(bounds) || PyTuple_GET_SIZE(bounds) != 13 || geometries == Py_None) {
      kk_fail("bounds (13 ints, with geometries)");
      goto fail;
    }
    for (int i = 0; i < 13; i++) {
      self->bounds[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(bounds, i));
      if (self->bounds[i] == -1 && PyErr_Occurred()) goto fail;
      if (self->bounds[i] < (i >= 7 && i <= 9 ? 1 : 0)) { /* cluster dims divide: >= 1 */
        kk_fail("bounds (negative, or a cluster dim under 1)");
        goto fail;
      }
    }
    self->has_bounds = 1;
  }
  self->inputs_type = (PyTypeObject *)Py_NewRef(inputs_type);
  self->has_out = has_out;
  self->alias_ok = alias_ok;
  self->n_in = PyTuple_GET_SIZE(ins);
  self->n_out = PyTuple_GET_SIZE(outs);
  self->n_params = PyTuple_GET_SIZE(offsets);
  PyObject_GC_Track(self);
  Py_ssize_t size = PyByteArray_GET_SIZE(blob);
  if (kk_parse_args(ins, 0, size, &self->ins) < 0 || kk_parse_args(outs, 1, size, &self->outs) < 0)
    goto fail;
  Py_ssize_t arrays = 0;
  for (Py_ssize_t i = 0; i < self->n_in; i++) {
    if (!self->ins[i].scalar) self->ins[i].at = arrays++;
  }
  arrays += self->n_out;
  self->n_arrays = arrays;
  for (Py_ssize_t j = 0; j < self->n_out; j++) {
    int allocates = self->outs[j].allocate != NULL;
    PyObject *spec = self->outs[j].allocate;
    if (allocates == has_out || self->outs[j].source >= self->n_in ||
        self->outs[j].source < -2 ||
        (self->outs[j].source == -2 && (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 2)) ||
        (self->outs[j].source >= 0 && self->ins[self->outs[j].source].scalar)) {
      kk_fail("output entry");
      goto fail;
    }
  }
  if (inputs_type != (PyObject *)&PyList_Type && inputs_type != (PyObject *)&PyTuple_Type) {
    kk_fail("inputs type (list or tuple)");
    goto fail;
  }
  if (size > KK_MAX_BLOB || self->n_params > KK_MAX_PARAMS || arrays > KK_MAX_ARRAYS ||
      arrays == 0) {
    kk_fail("size (block, parameters or arrays over the limits, or no array)");
    goto fail;
  }
  self->offsets = PyMem_Calloc(self->n_params ? (size_t)self->n_params : 1, sizeof(Py_ssize_t));
  if (self->offsets == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t i = 0; i < self->n_params; i++) {
    Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, i));
    if (at == -1 && PyErr_Occurred()) goto fail;
    if (at < 0 || at >= size) { /* every parameter is at least a byte */
      kk_fail("parameter offset");
      goto fail;
    }
    self->offsets[i] = at;
  }
  if (PyTuple_GET_SIZE(expected) > 12) {
    kk_fail("expected arguments (more than 12)");
    goto fail;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(expected); i++) {
    PyObject *pair = PyTuple_GET_ITEM(expected, i);
    Py_ssize_t at;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
        (at = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0))) < 1 || at > 11 || at == 7 ||
        at == 8) {
      PyErr_Clear();
      kk_fail("expected argument (index 1-11, not stream or out)");
      goto fail;
    }
    self->expected_at[i] = at;
    self->expected_value[i] = PyTuple_GET_ITEM(pair, 1);
    if (at == 1) self->shapes = self->expected_value[i]; /* output_shapes, if given */
  }
  self->n_expected = PyTuple_GET_SIZE(expected);
  void *ptr[2];
  PyObject *from[2] = {driver, function};
  for (int i = 0; i < 2; i++) {
    ptr[i] = PyLong_AsVoidPtr(from[i]);
    if (ptr[i] == NULL) {
      if (!PyErr_Occurred()) kk_fail("driver or function (null)");
      goto fail;
    }
  }
  self->driver = (kk_driver_launch)ptr[0];
  self->function = ptr[1];
  if (kk_geometry(geometry, self->g) < 0) goto fail;
  if (PyList_GET_SIZE(last) < 1) {
    kk_fail("last (an empty list)");
    goto fail;
  }
  for (Py_ssize_t j = 0; j < self->n_out; j++) {
    if (!has_out && self->outs[j].source == -1 &&
        (self->shapes == NULL || !PyTuple_Check(self->shapes) ||
         PyTuple_GET_SIZE(self->shapes) != self->n_out)) {
      kk_fail("output shapes (a tuple of one shape an output, for an output made by shape)");
      goto fail;
    }
  }
  self->blob = PyMem_Malloc(size ? (size_t)size : 1);
  if (self->blob == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  memcpy(self->blob, PyByteArray_AS_STRING(blob), (size_t)size);
  self->blob_size = size;
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}

static PyObject *kk_call_get_next(kk_call *self, void *closure) {
  (void)closure;
  return Py_NewRef(self->next);
}

static int kk_call_set_next(kk_call *self, PyObject *value, void *closure) {
  (void)closure;
  if (value == NULL || !PyCallable_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "[Call] next must be callable");
    return -1;
  }
  Py_SETREF(self->next, Py_NewRef(value));
  return 0;
}

static PyObject *kk_call_get_served(kk_call *self, void *closure) {
  (void)closure;
  return PyLong_FromUnsignedLongLong(self->served);
}

static PyObject *kk_call_get_trial(kk_call *self, void *closure) {
  (void)closure;
  return Py_NewRef(self->trial ? self->trial : Py_None);
}

/* retry(trial, every): once every ``every`` calls it hands on, call ``trial`` in place of
 * ``next`` (None: always ``next``) */
static PyObject *kk_call_retry(kk_call *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || (args[0] != Py_None && !PyCallable_Check(args[0]))) {
    PyErr_SetString(PyExc_TypeError, "[Call] retry(trial callable or None, every)");
    return NULL;
  }
  unsigned long long every = PyLong_AsUnsignedLongLong(args[1]);
  if (every == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  if (every < 1) {
    PyErr_SetString(PyExc_ValueError, "[Call] every must be at least 1");
    return NULL;
  }
  Py_XSETREF(self->trial, args[0] == Py_None ? NULL : Py_NewRef(args[0]));
  self->every = every;
  self->count = 0;
  Py_RETURN_NONE;
}

static PyMethodDef kk_call_methods[] = {
    {"retry", (PyCFunction)(void (*)(void))kk_call_retry, METH_FASTCALL,
     "retry(trial, every): call trial in place of next once every `every` hand-ons"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef kk_call_getset[] = {
    {"next", (getter)kk_call_get_next, (setter)kk_call_set_next, "called when a call differs", NULL},
    {"served", (getter)kk_call_get_served, NULL, "calls it launched", NULL},
    {"trial", (getter)kk_call_get_trial, NULL, "what retry set, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject kk_call_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kk_launch.Call",
    .tp_basicsize = sizeof(kk_call),
    .tp_dealloc = (destructor)kk_call_dealloc,
    .tp_vectorcall_offset = offsetof(kk_call, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a kernel call repeated in C (see kk_launch.c)",
    .tp_traverse = (traverseproc)kk_call_traverse,
    .tp_clear = (inquiry)kk_call_clear,
    .tp_getset = kk_call_getset,
    .tp_methods = kk_call_methods,
    .tp_new = kk_call_new,
};

/* Guards(fields, arrays): a check made in C that later arrays are like ``arrays``, for a
 * framework whose arrays describe themselves through attributes (CuPy: dtype, shape, strides,
 * data.device_id). ``fields`` is a tuple of attribute paths, each a tuple of names
 * (("data", "device_id") reads x.data.device_id). ``check(*arrays)`` is True when there are as
 * many arrays, each of exactly the class its counterpart had and with every field matching the
 * value it had (``kk_matches``: ints and tuples of ints equal, anything else the same object,
 * so an equal dtype that is another object fails the check and the caller's slower path
 * serves the call). An attribute that cannot be read fails the check; only an error that is
 * not an Exception (KeyboardInterrupt) propagates. One array passed twice passes (a Call
 * compares out= against the inputs by address). The values kept must be immutable atoms that
 * own nothing (dtypes, ints, tuples of ints): the type is not tracked by the collector, and a
 * value is matched by identity first. */
typedef struct {
  PyObject_HEAD
  PyObject *fields;  /* tuple of tuples of str */
  Py_ssize_t n_arrays, n_fields;
  PyTypeObject **types;
  PyObject **values; /* n_arrays * n_fields, row by row */
} kk_guards;

/* x's attribute path ``path`` (a new reference), or NULL with an error set */
static PyObject *kk_field(PyObject *x, PyObject *path) {
  PyObject *v = Py_NewRef(x);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(path) && v != NULL; i++) {
    PyObject *next = PyObject_GetAttr(v, PyTuple_GET_ITEM(path, i));
    Py_DECREF(v);
    v = next;
  }
  return v;
}

static void kk_guards_dealloc(kk_guards *self) {
  if (self->values != NULL) {
    for (Py_ssize_t i = 0; i < self->n_arrays * self->n_fields; i++) Py_XDECREF(self->values[i]);
    PyMem_Free(self->values);
  }
  if (self->types != NULL) {
    for (Py_ssize_t i = 0; i < self->n_arrays; i++) Py_XDECREF((PyObject *)self->types[i]);
    PyMem_Free(self->types);
  }
  Py_XDECREF(self->fields);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *kk_guards_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  PyObject *fields, *arrays;
  if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
    PyErr_SetString(PyExc_TypeError, "[Guards] takes no keyword arguments");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &fields, &PyTuple_Type, &arrays)) return NULL;
  Py_ssize_t nf = PyTuple_GET_SIZE(fields), na = PyTuple_GET_SIZE(arrays);
  if (na > KK_MAX_ARRAYS) {
    PyErr_Format(PyExc_ValueError, "[Guards] at most %d arrays", KK_MAX_ARRAYS);
    return NULL;
  }
  for (Py_ssize_t f = 0; f < nf; f++) {
    PyObject *path = PyTuple_GET_ITEM(fields, f);
    int ok = PyTuple_Check(path) && PyTuple_GET_SIZE(path) > 0;
    for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(path); i++)
      ok = PyUnicode_CheckExact(PyTuple_GET_ITEM(path, i));
    if (!ok) {
      PyErr_SetString(PyExc_TypeError, "[Guards] each field is a non-empty tuple of str");
      return NULL;
    }
  }
  kk_guards *self = (kk_guards *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->fields = Py_NewRef(fields);
  self->n_arrays = na;
  self->n_fields = nf;
  self->types = PyMem_Calloc(na ? (size_t)na : 1, sizeof(PyTypeObject *));
  self->values = PyMem_Calloc(na * nf ? (size_t)(na * nf) : 1, sizeof(PyObject *));
  if (self->types == NULL || self->values == NULL) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t a = 0; a < na; a++) {
    PyObject *x = PyTuple_GET_ITEM(arrays, a);
    self->types[a] = (PyTypeObject *)Py_NewRef((PyObject *)Py_TYPE(x));
    for (Py_ssize_t f = 0; f < nf; f++) {
      PyObject *v = kk_field(x, PyTuple_GET_ITEM(fields, f));
      if (v == NULL) {
        Py_DECREF(self);
        return NULL;
      }
      self->values[a * nf + f] = v;
    }
  }
  return (PyObject *)self;
}

static PyObject *kk_guards_check(kk_guards *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != self->n_arrays) Py_RETURN_FALSE;
  for (Py_ssize_t a = 0; a < nargs; a++) {
    if (Py_TYPE(args[a]) != self->types[a]) Py_RETURN_FALSE;
  }
  for (Py_ssize_t a = 0; a < nargs; a++) {
    for (Py_ssize_t f = 0; f < self->n_fields; f++) {
      PyObject *v = kk_field(args[a], PyTuple_GET_ITEM(self->fields, f));
      if (v == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL; /* KeyboardInterrupt & co. */
        PyErr_Clear();
        Py_RETURN_FALSE;
      }
      int same = kk_matches(v, self->values[a * self->n_fields + f]);
      Py_DECREF(v);
      if (!same) Py_RETURN_FALSE;
    }
  }
  Py_RETURN_TRUE;
}

static PyMethodDef kk_guards_methods[] = {
    {"check", (PyCFunction)(void (*)(void))kk_guards_check, METH_FASTCALL,
     "check(*arrays): whether they are like the arrays these guards were made from"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject kk_guards_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kk_launch.Guards",
    .tp_basicsize = sizeof(kk_guards),
    .tp_dealloc = (destructor)kk_guards_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "arrays' classes and attribute values, checked in C (see kk_launch.c)",
    .tp_methods = kk_guards_methods,
    .tp_new = kk_guards_new,
};

/* ---- Front: Kernel.__call__ in C (see the top of this file) ---- */

typedef struct {
  PyObject_HEAD
  PyObject *last, *kernel, *miss; /* kernel: a weak reference (no cycle keeps it alive) */
} kk_front;

/* ``Kernel.__call__``'s keywords in ``CallArgs``' order (``verbose`` and ``timeout`` are not
 * among them: a call that gives them goes to ``_call``), interned by the module's init, and
 * the names of the kernel's methods the Front calls */
static const char *const kk_front_names[12] = {
    "inputs",   "output_shapes", "output_dtypes", "grid",  "threadgroup", "template",
    "init_value", "stream",      "out",           "backend", "check",     "shared_memory",
};
static PyObject *kk_front_keys[12], *kk_front_call_name, *kk_front_other_name;

/* The CallArgs position of keyword ``name``, or -1 */
static int kk_front_slot(PyObject *name) {
  for (int i = 0; i < 12; i++) {
    if (name == kk_front_keys[i]) return i;
  }
  for (int i = 0; i < 12; i++) { /* a name built at run time: not the interned object */
    if (PyUnicode_Check(name) && PyUnicode_Compare(name, kk_front_keys[i]) == 0) return i;
  }
  return -1;
}

/* The kernel (a new reference), or NULL with an error set */
static PyObject *kk_front_kernel(kk_front *self) {
  if (self->kernel == NULL) { /* cleared by the collector while still reachable */
    PyErr_SetString(PyExc_RuntimeError, "[Front] called after it was cleared");
    return NULL;
  }
  PyObject *kernel;
#if PY_VERSION_HEX >= 0x030D0000 /* PyWeakref_GetObject is deprecated from 3.13 */
  if (PyWeakref_GetRef(self->kernel, &kernel) < 0) return NULL;
#else
  kernel = PyWeakref_GetObject(self->kernel); /* borrowed */
  if (kernel == NULL) return NULL;
  kernel = kernel == Py_None ? NULL : Py_NewRef(kernel);
#endif
  if (kernel == NULL) PyErr_SetString(PyExc_ReferenceError, "[Front] its kernel no longer exists");
  return kernel;
}

/* ``last`` with the 12 ``slot``s (NULL: not given, None), else ``kernel._call_other`` with
 * them as a tuple and False */
static PyObject *kk_front_run(kk_front *self, PyObject *slot[12]) {
  if (self->last == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "[Front] called after it was cleared");
    return NULL;
  }
  for (Py_ssize_t i = 1; i < 12; i++) {
    if (slot[i] == NULL) slot[i] = Py_None; /* every default but verbose's is None */
  }
  PyObject *last = Py_NewRef(self->last); /* it may be replaced while it runs */
  PyObject *r = PyObject_Vectorcall(last, slot, 12, NULL);
  Py_DECREF(last);
  if (r != self->miss) return r;
  Py_DECREF(r);
  PyObject *kernel = kk_front_kernel(self);
  if (kernel == NULL) return NULL;
  PyObject *t = PyTuple_New(12);
  if (t == NULL) {
    Py_DECREF(kernel);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < 12; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(slot[i]));
  PyObject *margs[3] = {kernel, t, Py_False};
  r = PyObject_VectorcallMethod(kk_front_other_name, margs, 3, NULL);
  Py_DECREF(t);
  Py_DECREF(kernel);
  return r;
}

/* Positional arguments into ``slot``; 0 where the call goes to ``_call`` */
static int kk_front_positional(PyObject *const *args, Py_ssize_t n, PyObject *slot[12]) {
  if (n > 7) return 0; /* the 8th positional parameter is verbose */
  for (Py_ssize_t i = 0; i < 12; i++) slot[i] = i < n ? args[i] : NULL;
  return 1;
}

/* Keyword ``name`` into ``slot``; 0 where the call goes to ``_call`` (verbose, timeout, an
 * unknown name, a parameter also given by position) */
static int kk_front_keyword(PyObject *name, PyObject *value, PyObject *slot[12]) {
  int at = kk_front_slot(name);
  if (at < 0 || slot[at] != NULL) return 0;
  slot[at] = value;
  return 1;
}

/* ``kernel(...)``: Python calls a heap type's ``__call__`` (the property giving this Front)
 * with a tuple and a dict, read here as they are */
static PyObject *kk_front_call(PyObject *callable, PyObject *args, PyObject *kwargs) {
  kk_front *self = (kk_front *)callable;
  PyObject *slot[12], *name, *value;
  int ok = kk_front_positional(&PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), slot);
  Py_ssize_t pos = 0;
  while (ok && kwargs != NULL && PyDict_Next(kwargs, &pos, &name, &value))
    ok = kk_front_keyword(name, value, slot);
  if (ok && slot[0] != NULL) return kk_front_run(self, slot);
  PyObject *kernel = kk_front_kernel(self); /* no inputs, or anything above: checked there */
  if (kernel == NULL) return NULL;
  PyObject *method = PyObject_GetAttr(kernel, kk_front_call_name);
  Py_DECREF(kernel);
  if (method == NULL) return NULL;
  PyObject *r = PyObject_Call(method, args, kwargs);
  Py_DECREF(method);
  return r;
}

static PyObject *kk_front_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  PyObject *kernel, *miss;
  if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
    PyErr_SetString(PyExc_TypeError, "[Front] takes no keyword arguments");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "OO", &kernel, &miss)) return NULL;
  PyObject *ref = PyWeakref_NewRef(kernel, NULL);
  if (ref == NULL) return NULL;
  kk_front *self = (kk_front *)type->tp_alloc(type, 0);
  if (self == NULL) {
    Py_DECREF(ref);
    return NULL;
  }
  self->kernel = ref;
  self->miss = Py_NewRef(miss);
  self->last = Py_NewRef(miss); /* not callable: set ``last`` before the first call */
  return (PyObject *)self;
}

static int kk_front_traverse(kk_front *self, visitproc visit, void *arg) {
  Py_VISIT(self->last);
  Py_VISIT(self->kernel);
  Py_VISIT(self->miss);
  return 0;
}

static int kk_front_clear(kk_front *self) {
  Py_CLEAR(self->last);
  Py_CLEAR(self->kernel);
  Py_CLEAR(self->miss);
  return 0;
}

static void kk_front_dealloc(kk_front *self) {
  PyObject_GC_UnTrack(self);
  kk_front_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *kk_front_get_last(kk_front *self, void *closure) {
  (void)closure;
  return Py_NewRef(self->last ? self->last : Py_None);
}

static int kk_front_set_last(kk_front *self, PyObject *value, void *closure) {
  (void)closure;
  if (value == NULL || !PyCallable_Check(value)) {
    PyErr_SetString(PyExc_TypeError, "[Front] last must be callable");
    return -1;
  }
  Py_XSETREF(self->last, Py_NewRef(value));
  return 0;
}

static PyGetSetDef kk_front_getset[] = {
    {"last", (getter)kk_front_get_last, (setter)kk_front_set_last,
     "called first with the 12 CallArgs", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject kk_front_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kk_launch.Front",
    .tp_basicsize = sizeof(kk_front),
    .tp_dealloc = (destructor)kk_front_dealloc,
    .tp_call = kk_front_call, /* no vectorcall: Python would unpack the dict it built */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Kernel.__call__ in C (see kk_launch.c)",
    .tp_traverse = (traverseproc)kk_front_traverse,
    .tp_clear = (inquiry)kk_front_clear,
    .tp_getset = kk_front_getset,
    .tp_new = kk_front_new,
};

static PyMethodDef kk_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))kk_launch, METH_FASTCALL,
     "launch(driver_launch, function, last, entry, fallback, params, stream, geometry)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kk_module = {
    PyModuleDef_HEAD_INIT, "kk_launch", "kernelkit's CUDA launch without a Python frame", -1,
    kk_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_kk_launch(void) {
  if (PyType_Ready(&kk_call_type) < 0 || PyType_Ready(&kk_guards_type) < 0 ||
      PyType_Ready(&kk_front_type) < 0)
    return NULL;
  for (int i = 0; i < 12; i++) {
    if (kk_front_keys[i] == NULL &&
        (kk_front_keys[i] = PyUnicode_InternFromString(kk_front_names[i])) == NULL)
      return NULL;
  }
  if ((kk_front_call_name == NULL &&
       (kk_front_call_name = PyUnicode_InternFromString("_call")) == NULL) ||
      (kk_front_other_name == NULL &&
       (kk_front_other_name = PyUnicode_InternFromString("_call_other")) == NULL))
    return NULL;
  PyObject *module = PyModule_Create(&kk_module);
  if (module == NULL) return NULL;
  if (PyModule_AddObjectRef(module, "Call", (PyObject *)&kk_call_type) < 0 ||
      PyModule_AddObjectRef(module, "Guards", (PyObject *)&kk_guards_type) < 0 ||
      PyModule_AddObjectRef(module, "Front", (PyObject *)&kk_front_type) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
