/*
 * app.common.schemas._avroenc: a typed (Avro) produce's per-value encode in C, the compiled
 * twin of the generated Python encoder (app/common/schemas/_avro_fast.py).
 *
 * Encoder(program, header, fallback) is a callable: encoder(value) -> bytes, ``header``
 * (Confluent's 5-byte frame, or b"") followed by ``value``'s Avro binary. ``program`` is
 * _avro_fast.native_program's flat table of nodes, node 0 the schema's root, children
 * referenced by their index in the table (so a named type used twice is one node; the
 * layout and its checks are in _avroprogram.h, shared with the decoder, _avrodec.c).
 * ("union": a union of null, at branch null_at, and one other type.) It takes exactly the
 * values the generated Python encoder takes, with the same checks (exact types: dict,
 * list, str, int, float, bool, None, bytes; every record field present; ints in the
 * int/long range; known enum symbols; strings that encode to UTF-8; fixed of their size;
 * ints or floats for float/double, packed as struct's "<f"/"<d" do) and writes the bytes
 * fastavro writes for them. Any other value (a missing field, a tuple, an int out of
 * range, ...) is not refused here: the whole value goes to ``fallback(value)`` (the
 * fastavro path, which accepts it or raises with the field's path), whose bytes or
 * exception are the call's. So behaviour, errors and bytes are fastavro's, and this is
 * only an accelerator (tests/unit/common/schemas/test_schtypes_avro_native.py compares
 * the bytes with fastavro's on generated schemas and values).
 *
 * encode_records(records, encode_key, encode_value) is app/api/typed.py's loop: the
 * parsed records (tuples (key, value, headers, partition, timestamp)) with each non-null
 * key / value replaced by encode_key(key) / encode_value(value) (None: left as it is).
 * An exception from an encoder propagates (the caller reruns its Python loop to name the
 * record and field).
 *
 * Concurrency: runs with the GIL held. The encode walks the value without calling Python
 * code on values that are JSON-shaped; a dict with a non-str key of a class with its own
 * __eq__ may run Python code during a field look-up, so every item is held (a reference)
 * while it is encoded, and a map or list whose size changed under the walk goes to the
 * fallback.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_avroprogram.h"

/* The output: a stack buffer first, the heap when a value outgrows it. */
typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    int heap;
} Buf;

#define STACK_BYTES 1024

static int
buf_grow(Buf *b, Py_ssize_t more)
{
    Py_ssize_t cap = b->cap;
    while (cap < b->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *buf;
    if (b->heap) {
        buf = PyMem_Realloc(b->buf, (size_t)cap);
    } else {
        buf = PyMem_Malloc((size_t)cap);
        if (buf != NULL)
            memcpy(buf, b->buf, (size_t)b->len);
    }
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->buf = buf;
    b->cap = cap;
    b->heap = 1;
    return 0;
}

static inline int
buf_reserve(Buf *b, Py_ssize_t more)
{
    return b->len + more <= b->cap ? 0 : buf_grow(b, more);
}

/* Avro's long: zig-zag, then a base-128 varint (at most 10 bytes). */
static inline int
put_long(Buf *b, int64_t value)
{
    if (buf_reserve(b, 10) < 0)
        return -1;
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    unsigned char *out = (unsigned char *)b->buf + b->len;
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    b->len += n;
    return 0;
}

static inline int
put_bytes(Buf *b, const char *data, Py_ssize_t n)
{
    if (put_long(b, n) < 0 || buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->buf + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
put_byte(Buf *b, unsigned char c)
{
    if (buf_reserve(b, 1) < 0)
        return -1;
    b->buf[b->len++] = (char)c;
    return 0;
}

/* The encode's result: written, not this encoder's value (the fallback's), or an error. */
#define OK 0
#define DECLINE 1
#define ERROR -1

static int encode(Buf *b, const Node *n, PyObject *v);

/* A value that the generated encoder would also have refused on a Python exception (an
   int too large for a float, a string with a surrogate): the fallback judges it. */
static int
decline_clearing(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError))
        return ERROR;
    PyErr_Clear();
    return DECLINE;
}

static int
encode_held(Buf *b, const Node *n, PyObject *v)
{
    Py_INCREF(v);
    int r = encode(b, n, v);
    Py_DECREF(v);
    return r;
}

static int
encode_real(Buf *b, int kind, PyObject *v)
{
    double d;
    if (PyFloat_CheckExact(v)) {
        d = PyFloat_AS_DOUBLE(v);
    } else if (PyLong_CheckExact(v)) {
        d = PyLong_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return decline_clearing();
    } else {
        return DECLINE;
    }
    int size = kind == K_FLOAT ? 4 : 8;
    if (buf_reserve(b, size) < 0)
        return ERROR;
    unsigned char *out = (unsigned char *)b->buf + b->len;
    /* struct's "<f" / "<d" (and fastavro's bytes): IEEE 754, little-endian. */
    int packed = kind == K_FLOAT ? PyFloat_Pack4(d, (char *)out, 1) : PyFloat_Pack8(d, (char *)out, 1);
    if (packed < 0)
        return decline_clearing(); /* too large for a float */
    b->len += size;
    return OK;
}

static int
encode(Buf *b, const Node *n, PyObject *v)
{
    switch (n->kind) {
    case K_NULL:
        return v == Py_None ? OK : DECLINE;
    case K_BOOLEAN:
        if (v == Py_True)
            return put_byte(b, 1) < 0 ? ERROR : OK;
        if (v == Py_False)
            return put_byte(b, 0) < 0 ? ERROR : OK;
        return DECLINE;
    case K_INT:
    case K_LONG: {
        if (!PyLong_CheckExact(v))
            return DECLINE; /* bool too: not an exact int */
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return DECLINE;
        if (x == -1 && PyErr_Occurred())
            return decline_clearing();
        if (n->kind == K_INT && (x < INT32_MIN || x > INT32_MAX))
            return DECLINE;
        return put_long(b, (int64_t)x) < 0 ? ERROR : OK;
    }
    case K_FLOAT:
    case K_DOUBLE:
        return encode_real(b, n->kind, v);
    case K_STRING: {
        if (!PyUnicode_CheckExact(v))
            return DECLINE;
        Py_ssize_t size;
        const char *data = PyUnicode_AsUTF8AndSize(v, &size);
        if (data == NULL)
            return decline_clearing(); /* a lone surrogate */
        return put_bytes(b, data, size) < 0 ? ERROR : OK;
    }
    case K_BYTES:
        if (!PyBytes_CheckExact(v))
            return DECLINE;
        return put_bytes(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)) < 0 ? ERROR : OK;
    case K_FIXED:
        if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) != n->size)
            return DECLINE;
        if (buf_reserve(b, n->size) < 0)
            return ERROR;
        memcpy(b->buf + b->len, PyBytes_AS_STRING(v), (size_t)n->size);
        b->len += n->size;
        return OK;
    case K_ENUM: {
        if (!PyUnicode_CheckExact(v))
            return DECLINE;
        PyObject *index = PyDict_GetItemWithError(n->symbols, v);
        if (index == NULL)
            return PyErr_Occurred() ? decline_clearing() : DECLINE;
        long i = PyLong_AsLong(index);
        if (i == -1 && PyErr_Occurred())
            return ERROR;
        return put_long(b, i) < 0 ? ERROR : OK;
    }
    case K_ARRAY: {
        if (!PyList_CheckExact(v))
            return DECLINE;
        Py_ssize_t count = PyList_GET_SIZE(v);
        if (count > 0) {
            if (put_long(b, count) < 0)
                return ERROR;
            for (Py_ssize_t i = 0; i < count; i++) {
                if (PyList_GET_SIZE(v) != count)
                    return DECLINE; /* changed under the walk */
                int r = encode_held(b, n->child, PyList_GET_ITEM(v, i));
                if (r != OK)
                    return r;
            }
            if (PyList_GET_SIZE(v) != count)
                return DECLINE;
        }
        return put_byte(b, 0) < 0 ? ERROR : OK;
    }
    case K_MAP: {
        if (!PyDict_CheckExact(v))
            return DECLINE;
        Py_ssize_t count = PyDict_GET_SIZE(v);
        if (count > 0) {
            if (put_long(b, count) < 0)
                return ERROR;
            Py_ssize_t pos = 0, seen = 0;
            PyObject *key, *item;
            while (PyDict_Next(v, &pos, &key, &item)) {
                if (!PyUnicode_CheckExact(key) || ++seen > count)
                    return DECLINE;
                Py_ssize_t size;
                const char *data = PyUnicode_AsUTF8AndSize(key, &size);
                if (data == NULL)
                    return decline_clearing();
                if (put_bytes(b, data, size) < 0)
                    return ERROR;
                int r = encode_held(b, n->child, item);
                if (r != OK)
                    return r;
            }
            if (seen != count || PyDict_GET_SIZE(v) != count)
                return DECLINE;
        }
        return put_byte(b, 0) < 0 ? ERROR : OK;
    }
    case K_RECORD: {
        if (!PyDict_CheckExact(v))
            return DECLINE;
        for (Py_ssize_t i = 0; i < n->nfields; i++) {
            PyObject *item = PyDict_GetItemWithError(v, n->names[i]);
            if (item == NULL) /* missing: fastavro's rules for defaults decide */
                return PyErr_Occurred() ? decline_clearing() : DECLINE;
            int r = encode_held(b, n->fields[i], item);
            if (r != OK)
                return r;
        }
        return OK;
    }
    case K_UNION:
        if (v == Py_None)
            return put_byte(b, (unsigned char)(2 * n->size)) < 0 ? ERROR : OK; /* zig-zag */
        if (put_byte(b, (unsigned char)(2 * (1 - n->size))) < 0)
            return ERROR;
        return encode(b, n->child, v);
    }
    return DECLINE;
}

/* ---- the Encoder type --------------------------------------------------------------- */

typedef struct {
    PROGRAM_HEAD
    vectorcallfunc vectorcall;
    PyObject *header; /* bytes */
    PyObject *fallback;
} Encoder;

static PyObject *encoder_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames);

static PyObject *
encoder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *program, *header, *fallback;
    static char *kwlist[] = {"program", "header", "fallback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O:Encoder", kwlist, &PyList_Type,
                                     &program, &PyBytes_Type, &header, &fallback))
        return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    Encoder *self = (Encoder *)program_object_new(type, program, NULL);
    if (self == NULL)
        return NULL;
    self->vectorcall = encoder_vectorcall;
    self->header = Py_NewRef(header);
    self->fallback = Py_NewRef(fallback);
    return (PyObject *)self;
}

/* The fallback is usually a closure over the schema object that keeps this encoder (a
   cycle): the type takes part in the cycle collector. */
static int
encoder_traverse(Encoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    return 0;
}

static int
encoder_clear(Encoder *self)
{
    Py_CLEAR(self->fallback);
    return 0;
}

static void
encoder_dealloc(Encoder *self)
{
    PyObject_GC_UnTrack(self);
    encoder_clear(self);
    program_object_free((PyObject *)self);
    Py_XDECREF(self->header);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* value's framed bytes, or NULL: declined (*declined = 1, no exception) or an error. */
static PyObject *
encode_value(Encoder *self, PyObject *value, int *declined)
{
    char stack[STACK_BYTES];
    Buf b = {stack, 0, STACK_BYTES, 0};
    Py_ssize_t hlen = PyBytes_GET_SIZE(self->header);
    PyObject *result = NULL;
    *declined = 0;
    if (buf_reserve(&b, hlen) < 0)
        return NULL;
    memcpy(b.buf, PyBytes_AS_STRING(self->header), (size_t)hlen);
    b.len = hlen;
    int r = encode_held(&b, &self->nodes[0], value);
    if (r == OK)
        result = PyBytes_FromStringAndSize(b.buf, b.len);
    else if (r == DECLINE)
        *declined = 1;
    if (b.heap)
        PyMem_Free(b.buf);
    return result;
}

static PyObject *
encoder_call_one(Encoder *self, PyObject *value)
{
    int declined;
    PyObject *out = encode_value(self, value, &declined);
    if (out == NULL && declined) {
        if (self->fallback == NULL) { /* cleared by the cycle collector */
            PyErr_SetString(PyExc_RuntimeError, "the encoder's fallback is gone");
            return NULL;
        }
        return PyObject_CallOneArg(self->fallback, value);
    }
    return out;
}

static PyObject *
encoder_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Encoder takes one value");
        return NULL;
    }
    return encoder_call_one((Encoder *)self, args[0]);
}

/* fast(value): the bytes this encoder writes itself, or None where it leaves the value to
   the fallback (for tests: which values the C path takes). */
static PyObject *
encoder_fast(PyObject *self, PyObject *value)
{
    int declined;
    PyObject *out = encode_value((Encoder *)self, value, &declined);
    if (out == NULL && declined)
        Py_RETURN_NONE;
    return out;
}

static PyMethodDef encoder_methods[] = {
    {"fast", encoder_fast, METH_O,
     "fast(value) -> bytes | None: this encoder's own bytes, None where the fallback's"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.common.schemas._avroenc.Encoder",
    VECTORCALL_GC_SLOTS(Encoder, encoder_dealloc, encoder_traverse, encoder_clear),
    .tp_doc = "Encoder(program, header, fallback): value -> header + Avro binary",
    .tp_methods = encoder_methods,
    .tp_new = encoder_new,
};

/* ---- encode_records ------------------------------------------------------------------- */

static PyObject *
encode_side(PyObject *encoder, PyObject *obj)
{
    if (encoder == Py_None || obj == Py_None)
        return Py_NewRef(obj);
    if (Py_IS_TYPE(encoder, &EncoderType))
        return encoder_call_one((Encoder *)encoder, obj);
    return PyObject_CallOneArg(encoder, obj);
}

static PyObject *
encode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "encode_records(records: list, encode_key, encode_value)");
        return NULL;
    }
    /* A snapshot that owns its items: the encoders may be Python code. */
    PyObject *snapshot = PyList_AsTuple(args[0]);
    if (snapshot == NULL)
        return NULL;
    PyObject *key_enc = args[1], *value_enc = args[2];
    Py_ssize_t n = PyTuple_GET_SIZE(snapshot);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyTuple_GET_ITEM(snapshot, i);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 5) {
            PyErr_SetString(PyExc_TypeError, "a record is a 5-tuple");
            goto fail;
        }
        PyObject *key = encode_side(key_enc, PyTuple_GET_ITEM(rec, 0));
        if (key == NULL)
            goto fail;
        PyObject *value = encode_side(value_enc, PyTuple_GET_ITEM(rec, 1));
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *t = PyTuple_New(5);
        if (t == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(t, 0, key);
        PyTuple_SET_ITEM(t, 1, value);
        for (int j = 2; j < 5; j++)
            PyTuple_SET_ITEM(t, j, Py_NewRef(PyTuple_GET_ITEM(rec, j)));
        PyList_SET_ITEM(out, i, t);
    }
    Py_DECREF(snapshot);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(snapshot);
    return NULL;
}

static PyMethodDef methods[] = {
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_FASTCALL,
     "encode_records(records, encode_key, encode_value) -> records with keys / values encoded"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "app.common.schemas._avroenc",
    "A typed produce's per-value Avro encode in C (see app/common/schemas/_avroenc.c).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__avroenc(void)
{
    if (PyType_Ready(&EncoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
