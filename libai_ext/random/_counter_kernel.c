/* The counter-based permutation of libai_ext/random/counter_spec.py, fused into one loop on the host.
 *
 * Eager CPU ranks draw their dropout masks here: one pass over this rank's slice computes each
 * element's global flat index, its 32 bits and the kept value, with no intermediate tensor (the
 * int32-op path of counter_rng.py, which graphs and GPUs run, launches ~40 kernels instead).
 * The bits are counter_spec.permute's: tests/test_counter_rng.py compares the three.
 *
 * keep_mask(out, terms, keys, threshold, scale)
 *   out:       writable C-contiguous float32 or float64 buffer of the slice (its shape: the terms' lengths)
 *   terms:     per dimension, an int64 buffer: each local position's contribution to the global flat
 *              index (global coordinate times the dimension's stride)
 *   keys:      (C, a, d1, d2, d3) as unsigned 32-bit words
 *   threshold: signed int32; an element is kept where its bits, read as int32, are >= threshold
 *   scale:     what a kept element holds (dropped ones hold 0)
 * bits(out, terms, keys): the bits themselves, into an int32 buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DIMS 16

static const uint32_t HI_MULTIPLIERS[3] = {0x9E3779B1u, 0x85EBCA6Bu, 0xC2B2AE35u};

static inline uint32_t rotate_mix(uint32_t x) { return ((x << 16) | (x >> 16)) - ((x >> 31) << 16); }

static inline uint32_t quadratic(uint32_t x, uint32_t d) { return x * (2u * x - d); }

static inline uint32_t permute(uint64_t index, const uint32_t *keys) {
    uint32_t hi = (uint32_t)(index >> 32);
    uint32_t x = (uint32_t)index * keys[0] - keys[1];
    for (int round = 0; round < 3; round++) {
        x = quadratic(rotate_mix(x), keys[2 + round]);
        x -= hi * HI_MULTIPLIERS[round];
    }
    return x;
}

typedef struct {
    int ndim;
    Py_ssize_t sizes[MAX_DIMS];
    const int64_t *terms[MAX_DIMS];
    Py_buffer views[MAX_DIMS];
} Slice;

static void release_slice(Slice *slice) {
    for (int d = 0; d < slice->ndim; d++) PyBuffer_Release(&slice->views[d]);
    slice->ndim = 0;
}

static int read_slice(PyObject *terms, Slice *slice) {
    slice->ndim = 0;
    PyObject *seq = PySequence_Fast(terms, "terms must be a sequence of int64 buffers");
    if (!seq) return -1;
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(seq);
    if (ndim < 1 || ndim > MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "terms: 1 to %d dimensions, got %zd", MAX_DIMS, ndim);
        return -1;
    }
    for (Py_ssize_t d = 0; d < ndim; d++) {
        Py_buffer *view = &slice->views[d];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, d), view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            release_slice(slice);
            Py_DECREF(seq);
            return -1;
        }
        slice->ndim = (int)d + 1;
        if (view->itemsize != 8 || (view->format && strcmp(view->format, "l") && strcmp(view->format, "q"))) {
            release_slice(slice);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "terms: every buffer must hold int64");
            return -1;
        }
        slice->sizes[d] = view->len / 8;
        slice->terms[d] = (const int64_t *)view->buf;
    }
    Py_DECREF(seq);
    return 0;
}

static Py_ssize_t slice_elements(const Slice *slice) {
    Py_ssize_t count = 1;
    for (int d = 0; d < slice->ndim; d++) count *= slice->sizes[d];
    return count;
}

static int read_keys(PyObject *keys, uint32_t out[5]) {
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence of 5 ints");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != 5) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "keys: (C, a, d1, d2, d3) expected");
        return -1;
    }
    for (int i = 0; i < 5; i++) {
        unsigned long long value = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        out[i] = (uint32_t)value;
    }
    Py_DECREF(seq);
    return 0;
}

/* Calls body(position, bits) for every element of the slice, in C order. */
#define FOR_EACH_ELEMENT(slice, keys, body)                                                       \
    do {                                                                                          \
        int last = (slice).ndim - 1;                                                              \
        Py_ssize_t index[MAX_DIMS] = {0};                                                         \
        Py_ssize_t position = 0;                                                                  \
        Py_ssize_t total = slice_elements(&(slice));                                              \
        while (position < total) {                                                                \
            int64_t base = 0;                                                                     \
            for (int d = 0; d < last; d++) base += (slice).terms[d][index[d]];                    \
            const int64_t *row = (slice).terms[last];                                             \
            for (Py_ssize_t i = 0; i < (slice).sizes[last]; i++, position++) {                    \
                uint32_t bits = permute((uint64_t)(base + row[i]), (keys));                       \
                body;                                                                             \
            }                                                                                     \
            for (int d = last - 1; d >= 0; d--) {                                                 \
                if (++index[d] < (slice).sizes[d]) break;                                         \
                index[d] = 0;                                                                     \
            }                                                                                     \
        }                                                                                         \
    } while (0)

static PyObject *keep_mask(PyObject *self, PyObject *args) {
    PyObject *out_obj, *terms, *keys_obj;
    int threshold;
    double scale;
    if (!PyArg_ParseTuple(args, "OOOid", &out_obj, &terms, &keys_obj, &threshold, &scale)) return NULL;
    uint32_t keys[5];
    if (read_keys(keys_obj, keys) < 0) return NULL;
    Slice slice;
    if (read_slice(terms, &slice) < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        release_slice(&slice);
        return NULL;
    }
    Py_ssize_t total = slice_elements(&slice);
    int is_float = out.format && strcmp(out.format, "f") == 0 && out.itemsize == 4;
    int is_double = out.format && strcmp(out.format, "d") == 0 && out.itemsize == 8;
    if ((!is_float && !is_double) || out.len != total * out.itemsize) {
        PyBuffer_Release(&out);
        release_slice(&slice);
        PyErr_Format(PyExc_ValueError, "out must be a float32 or float64 buffer of %zd elements", total);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_float) {
        float *values = (float *)out.buf;
        float kept = (float)scale;
        FOR_EACH_ELEMENT(slice, keys, values[position] = ((int32_t)bits >= threshold) ? kept : 0.0f);
    } else {
        double *values = (double *)out.buf;
        FOR_EACH_ELEMENT(slice, keys, values[position] = ((int32_t)bits >= threshold) ? scale : 0.0);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    release_slice(&slice);
    Py_RETURN_NONE;
}

static PyObject *bits(PyObject *self, PyObject *args) {
    PyObject *out_obj, *terms, *keys_obj;
    if (!PyArg_ParseTuple(args, "OOO", &out_obj, &terms, &keys_obj)) return NULL;
    uint32_t keys[5];
    if (read_keys(keys_obj, keys) < 0) return NULL;
    Slice slice;
    if (read_slice(terms, &slice) < 0) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release_slice(&slice);
        return NULL;
    }
    Py_ssize_t total = slice_elements(&slice);
    if (out.itemsize != 4 || out.len != total * 4) {
        PyBuffer_Release(&out);
        release_slice(&slice);
        PyErr_Format(PyExc_ValueError, "out must be a 32-bit buffer of %zd elements", total);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    uint32_t *values = (uint32_t *)out.buf;
    FOR_EACH_ELEMENT(slice, keys, values[position] = bits);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    release_slice(&slice);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"keep_mask", keep_mask, METH_VARARGS, "keep_mask(out, terms, keys, threshold, scale): a slice's dropout mask"},
    {"bits", bits, METH_VARARGS, "bits(out, terms, keys): a slice's 32 random bits per element"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_counter_kernel",
                                    "The counter permutation fused into one host loop.", -1, methods};

PyMODINIT_FUNC PyInit__counter_kernel(void) { return PyModule_Create(&module); }
