/* The counter-based permutation of libai_ext/random/counter_spec.py, fused into one loop on the host.
 *
 * Eager CPU ranks draw their dropout masks here: one pass over this rank's slice computes each
 * word's 32 bits (counter_spec.mask_permute) once and the keep decisions of the two elements that read it, with no
 * intermediate tensor (the int32-op path of counter_rng.py, which graphs and GPUs run, launches a
 * few dozen kernels instead).  The bits are counter_spec's: tests/test_counter_rng.py compares
 * the three.
 *
 * keep_mask(out, terms, keys, level, columns)
 *   out:     writable C-contiguous 1-byte buffer (bool or uint8) of the slice, read as a matrix whose
 *            last dimension holds the columns (counter_spec.mask_columns; a 1-D mask is given as (n, 1))
 *   terms:   per dimension, an int64 buffer: for the leading dimensions, each local position's
 *            contribution to the index of its row's first word (global row times the words per row);
 *            for the last, each local position's global column
 *   keys:    (C, a, d1, d2, d3) as unsigned 32-bit words
 *   level:   counter_spec.keep_level: an element is kept where its biased 16-bit half is >= level
 *   columns: the global number of columns N; column c < ceil(N/2) reads the high half of word c of
 *            its row, column c >= ceil(N/2) the low half of word c - ceil(N/2)
 * bits(out, terms, keys): 32 random bits per element, of the element's flat global index (terms:
 *   each local position's contribution to it), into an int32 buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "counter_hash.h" /* keyed_op/ */

#define MAX_DIMS 16

/* counter_spec.permute (initial weights and other draws); the masks' rounds, keep decisions and the high word's
 * multipliers are all counter_hash.h's, shared with the keyed-dropout op. */
static inline uint32_t permute(uint64_t index, const uint32_t *keys) { return counter_rounds(index, keys, 1); }

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
    int level;
    long long columns;
    if (!PyArg_ParseTuple(args, "OOOiL", &out_obj, &terms, &keys_obj, &level, &columns)) return NULL;
    uint32_t keys[5];
    if (read_keys(keys_obj, keys) < 0) return NULL;
    Slice slice;
    if (read_slice(terms, &slice) < 0) return NULL;
    if (slice.ndim < 2) {
        release_slice(&slice);
        PyErr_SetString(PyExc_ValueError, "terms: a mask is read as a matrix, at least 2 dimensions");
        return NULL;
    }
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        release_slice(&slice);
        return NULL;
    }
    Py_ssize_t total = slice_elements(&slice);
    int last = slice.ndim - 1;
    const int64_t *column = slice.terms[last];
    Py_ssize_t width = slice.sizes[last];
    if (out.itemsize != 1 || out.len != total) {
        PyBuffer_Release(&out);
        release_slice(&slice);
        PyErr_Format(PyExc_ValueError, "out must be a 1-byte buffer of %zd elements", total);
        return NULL;
    }
    if (width > 0 && (columns < 1 || column[0] < 0 || column[width - 1] >= columns)) {
        PyBuffer_Release(&out);
        release_slice(&slice);
        PyErr_Format(PyExc_ValueError, "columns: the slice's columns must lie in [0, %lld)", columns);
        return NULL;
    }
    int64_t words = (columns + 1) / 2;
    /* A whole row reads each of its words once for both halves; a cut one, per element. */
    int whole_rows = width == columns && (width == 0 || column[0] == 0);
    Py_BEGIN_ALLOW_THREADS
    uint8_t *values = (uint8_t *)out.buf;
    Py_ssize_t index[MAX_DIMS] = {0};
    for (Py_ssize_t position = 0; position < total; position += width) {
        int64_t row_base = 0;
        for (int d = 0; d < last; d++) row_base += slice.terms[d][index[d]];
        uint8_t *row = values + position;
        if (whole_rows) {
            for (int64_t k = 0; k < words; k++) {
                uint32_t word = counter_mask_permute((uint64_t)(row_base + k), keys);
                row[k] = (uint8_t)counter_keep_half(word, 0, level);
                if (k + words < columns) row[k + words] = (uint8_t)counter_keep_half(word, 1, level);
            }
        } else {
            for (Py_ssize_t i = 0; i < width; i++) {
                int low = column[i] >= words;
                int64_t k = low ? column[i] - words : column[i];
                row[i] = (uint8_t)counter_keep_half(counter_mask_permute((uint64_t)(row_base + k), keys), low, level);
            }
        }
        for (int d = last - 1; d >= 0; d--) {
            if (++index[d] < slice.sizes[d]) break;
            index[d] = 0;
        }
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
    {"keep_mask", keep_mask, METH_VARARGS, "keep_mask(out, terms, keys, level, columns): a slice's dropout mask, 1 byte an element"},
    {"bits", bits, METH_VARARGS, "bits(out, terms, keys): a slice's 32 random bits per element"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_counter_kernel",
                                    "The counter permutation fused into one host loop.", -1, methods};

PyMODINIT_FUNC PyInit__counter_kernel(void) { return PyModule_Create(&module); }
