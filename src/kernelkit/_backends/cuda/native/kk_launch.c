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
 * The driver is called without the GIL: a launch can wait for room in a full queue. */
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

static PyMethodDef kk_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))kk_launch, METH_FASTCALL,
     "launch(driver_launch, function, last, entry, fallback, params, stream, geometry)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef kk_module = {
    PyModuleDef_HEAD_INIT, "kk_launch", "kernelkit's CUDA launch without a Python frame", -1,
    kk_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_kk_launch(void) { return PyModule_Create(&kk_module); }
