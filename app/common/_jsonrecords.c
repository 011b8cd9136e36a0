/*
 * app.common._jsonrecords: a JSON produce's per-record work in C (the broker side).
 *
 * plain_records(records, num_partitions, now_ms, dumps, sticky) takes the parsed records
 * of a JSON produce body, tuples (key, value, headers, partition, timestamp) as
 * app/api/produce_body.py makes them, and for the usual body (no headers, partition or
 * timestamp on any record; json keys and values) does in one C loop what
 * app/api/routers/records.py's Python loop did per record: encode the key and the value
 * with ``dumps`` (orjson.dumps: the same bytes), place the record (Kafka's murmur2 of the
 * encoded key modulo the partition count, or the request's one sticky partition,
 * ``sticky()`` called at most once, for a null key), and write it in RecordBatch v2's
 * record layout into its partition's batch (zig-zag varints; timestamp delta 0: every
 * record is stamped ``now_ms``; offset delta its index in its partition's batch), then
 * each batch's header (base offset 0, uncompressed, no producer, partition leader epoch
 * -1) and its CRC-32C (``crc32c``, the crc32c package's function, called once per batch):
 * the bytes aiokafka's builder gives for the same records (tests compare them).
 *
 * Returns (batches, placed): batches {partition: (RecordBatch v2 bytes, record count)} and placed
 * [(partition, index in its batch, now_ms)] in request order; or None when a record is
 * not plain (the Python loop then judges the body and names the field). An exception
 * raised by dumps (a value it cannot encode) propagates.
 *
 * offsets_json(placed, first) renders the answer's offsets (CreateTime) as orjson would.
 *
 * plain_tuples(records) is app/api/produce_body.py's fast check for the same body: the
 * parsed JSON records, dicts of at most "key" and "value", as that module's tuples.
 *
 * Concurrency: runs with the GIL held, touches no shared state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "_kafka_wire.h"

#define HEADER_SIZE 61
#define CRC_OFFSET 17
#define ATTRIBUTES_OFFSET 21

static inline void
put_be(unsigned char *out, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (unsigned char)v;
        v >>= 8;
    }
}

/* One partition's batch, growing: HEADER_SIZE bytes of header, then the records. */
typedef struct {
    char *buf;
    Py_ssize_t len, cap;
    long count;
} Body;

static int
body_reserve(Body *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *buf = PyMem_Realloc(b->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->buf = buf;
    b->cap = cap;
    return 0;
}

/* Append one record (key/value: bytes or NULL for null) to b. */
static int
body_append(Body *b, PyObject *key, PyObject *value)
{
    Py_ssize_t klen = key ? PyBytes_GET_SIZE(key) : -1;
    Py_ssize_t vlen = value ? PyBytes_GET_SIZE(value) : -1;
    int64_t delta = b->count;
    /* attributes, timestamp delta (0), offset delta, key length, key, value length,
       value, header count (0) */
    Py_ssize_t size = 1 + 1 + kafka_varint_size(delta) + kafka_varint_size(klen) +
                      (klen > 0 ? klen : 0) + kafka_varint_size(vlen) + (vlen > 0 ? vlen : 0) + 1;
    if (b->len == 0) { /* room for the batch header, written when the batch is done */
        if (body_reserve(b, HEADER_SIZE) < 0)
            return -1;
        b->len = HEADER_SIZE;
    }
    if (body_reserve(b, size + 10) < 0)
        return -1;
    unsigned char *start = (unsigned char *)b->buf + b->len, *out = start;
    out += kafka_put_varint(out, size);
    *out++ = 0; /* attributes */
    *out++ = 0; /* timestamp delta */
    out += kafka_put_varint(out, delta);
    out += kafka_put_varint(out, klen);
    if (klen > 0) {
        memcpy(out, PyBytes_AS_STRING(key), (size_t)klen);
        out += klen;
    }
    out += kafka_put_varint(out, vlen);
    if (vlen > 0) {
        memcpy(out, PyBytes_AS_STRING(value), (size_t)vlen);
        out += vlen;
    }
    *out++ = 0; /* header count */
    b->len += out - start;
    b->count++;
    return 0;
}

static PyObject *
encode(PyObject *dumps, PyObject *obj)
{
    if (obj == Py_None)
        return Py_NewRef(Py_None);
    PyObject *out = PyObject_CallOneArg(dumps, obj);
    if (out != NULL && !PyBytes_CheckExact(out)) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_TypeError, "dumps must return bytes");
        return NULL;
    }
    return out;
}

static PyObject *
plain_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "plain_records(records, num_partitions, now_ms, dumps, sticky, crc32c)");
        return NULL;
    }
    PyObject *records = args[0], *dumps = args[3], *sticky_fn = args[4], *crc_fn = args[5];
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list");
        return NULL;
    }
    long parts = PyLong_AsLong(args[1]);
    if (parts == -1 && PyErr_Occurred())
        return NULL;
    if (parts < 1) {
        PyErr_SetString(PyExc_ValueError, "num_partitions out of range");
        return NULL;
    }
    if (parts > 65536) /* a body per partition is allocated: the Python loop takes those */
        Py_RETURN_NONE;
    PyObject *now = args[2];
    long long now_ms = PyLong_AsLongLong(now);
    if (now_ms == -1 && PyErr_Occurred())
        return NULL;
    /* A snapshot that owns its items: sticky() is Python code, and the list is not ours. */
    PyObject *snapshot = PyList_AsTuple(records);
    if (snapshot == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(snapshot);
    /* Plain or not, before any work: nothing is encoded for a body the loop judges. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyTuple_GET_ITEM(snapshot, i);
        if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 5) {
            Py_DECREF(snapshot);
            Py_RETURN_NONE;
        }
        PyObject *headers = PyTuple_GET_ITEM(rec, 2);
        if ((headers != Py_None && PyObject_IsTrue(headers) != 0) ||
            PyTuple_GET_ITEM(rec, 3) != Py_None || PyTuple_GET_ITEM(rec, 4) != Py_None) {
            Py_DECREF(snapshot);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
    }
    Body *bodies = PyMem_Calloc((size_t)parts, sizeof(Body));
    PyObject *placed = PyList_New(n);
    PyObject *result = NULL, *out = NULL;
    long sticky = -1;
    if (bodies == NULL || placed == NULL) {
        if (bodies == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyTuple_GET_ITEM(snapshot, i);
        PyObject *value = encode(dumps, PyTuple_GET_ITEM(rec, 1));
        if (value == NULL)
            goto done;
        PyObject *key = encode(dumps, PyTuple_GET_ITEM(rec, 0));
        if (key == NULL) {
            Py_DECREF(value);
            goto done;
        }
        long p;
        if (key == Py_None) {
            if (sticky < 0) {
                PyObject *chosen = PyObject_CallNoArgs(sticky_fn);
                sticky = chosen ? PyLong_AsLong(chosen) : -1;
                Py_XDECREF(chosen);
                if (sticky < 0 || sticky >= parts) {
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_ValueError, "sticky partition out of range");
                    Py_DECREF(value);
                    Py_DECREF(key);
                    goto done;
                }
            }
            p = sticky;
        } else {
            int32_t h = kafka_murmur2((const unsigned char *)PyBytes_AS_STRING(key),
                                      PyBytes_GET_SIZE(key));
            p = (long)((uint32_t)h & 0x7fffffffu) % parts;
        }
        Body *b = &bodies[p];
        long index = b->count;
        int failed = body_append(b, key == Py_None ? NULL : key, value == Py_None ? NULL : value);
        Py_DECREF(value);
        Py_DECREF(key);
        if (failed < 0)
            goto done;
        PyObject *pp = PyLong_FromLong(p), *jj = PyLong_FromLong(index);
        PyObject *entry = (pp && jj) ? PyTuple_Pack(3, pp, jj, now) : NULL;
        Py_XDECREF(pp);
        Py_XDECREF(jj);
        if (entry == NULL)
            goto done;
        PyList_SET_ITEM(placed, i, entry);
    }
    out = PyDict_New();
    if (out == NULL)
        goto done;
    for (long p = 0; p < parts; p++) {
        if (bodies[p].count == 0)
            continue;
        Body *b = &bodies[p];
        unsigned char *h = (unsigned char *)b->buf;
        put_be(h, 0, 8);                                   /* base offset */
        put_be(h + 8, (uint64_t)(b->len - 12), 4);         /* batch length */
        put_be(h + 12, (uint64_t)(int64_t)-1, 4);          /* partition leader epoch */
        h[16] = 2;                                         /* magic */
        put_be(h + ATTRIBUTES_OFFSET, 0, 2);               /* attributes */
        put_be(h + 23, (uint64_t)(b->count - 1), 4);       /* last offset delta */
        put_be(h + 27, (uint64_t)now_ms, 8);               /* first timestamp */
        put_be(h + 35, (uint64_t)now_ms, 8);               /* max timestamp */
        put_be(h + 43, (uint64_t)(int64_t)-1, 8);          /* producer id */
        put_be(h + 51, (uint64_t)(int64_t)-1, 2);          /* producer epoch */
        put_be(h + 53, (uint64_t)(int64_t)-1, 4);          /* base sequence */
        put_be(h + 57, (uint64_t)b->count, 4);             /* record count */
        PyObject *covered = PyMemoryView_FromMemory(
            b->buf + ATTRIBUTES_OFFSET, b->len - ATTRIBUTES_OFFSET, PyBUF_READ);
        PyObject *crc = covered ? PyObject_CallOneArg(crc_fn, covered) : NULL;
        Py_XDECREF(covered);
        unsigned long crc_value = crc ? PyLong_AsUnsignedLong(crc) : 0;
        Py_XDECREF(crc);
        if (PyErr_Occurred())
            goto done;
        put_be(h + CRC_OFFSET, (uint64_t)crc_value, 4);
        PyObject *k = PyLong_FromLong(p);
        PyObject *v = Py_BuildValue("(y#l)", b->buf, b->len, b->count);
        int failed = (k == NULL || v == NULL) ? -1 : PyDict_SetItem(out, k, v);
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (failed < 0)
            goto done;
    }
    result = PyTuple_Pack(2, out, placed);
done:
    if (bodies != NULL) {
        for (long p = 0; p < parts; p++)
            PyMem_Free(bodies[p].buf);
        PyMem_Free(bodies);
    }
    Py_XDECREF(out);
    Py_XDECREF(placed);
    Py_DECREF(snapshot);
    return result;
}

static PyObject *str_key, *str_value;

/* plain_tuples(records): for a list of dicts each holding at most "key" and "value",
   [(key, value, None, None, None)] (app/api/produce_body.py's ParsedRecord, missing
   fields None); None as soon as an item is anything else (the Python check judges it). */
static PyObject *
plain_tuples(PyObject *self, PyObject *records)
{
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec = PyList_GET_ITEM(records, i);
        if (!PyDict_CheckExact(rec) || PyDict_GET_SIZE(rec) > 2)
            goto not_plain;
        PyObject *key = Py_None, *value = Py_None, *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(rec, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k))
                goto not_plain;
            if (PyUnicode_Compare(k, str_key) == 0)
                key = v;
            else if (PyUnicode_Compare(k, str_value) == 0)
                value = v;
            else
                goto not_plain;
        }
        PyObject *t = PyTuple_Pack(5, key, value, Py_None, Py_None, Py_None);
        if (t == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
not_plain:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* offsets_json(placed, first): a produce answer's offsets array as JSON, the bytes
   orjson.dumps gives for [{"partition": p, "offset": first[p] + j, "timestamp": ts}
   for p, j, ts in placed] (the answer under CreateTime). */
static PyObject *
offsets_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "offsets_json(placed: list, first: dict)");
        return NULL;
    }
    PyObject *placed = args[0], *first = args[1];
    Py_ssize_t n = PyList_GET_SIZE(placed);
    Body b = {NULL, 0, 0, 0};
    PyObject *result = NULL;
    if (body_reserve(&b, 2 + n * 96) < 0)
        return NULL;
    b.buf[b.len++] = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(placed, i);
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 3) {
            PyErr_SetString(PyExc_TypeError, "placed holds (partition, index, timestamp)");
            goto done;
        }
        PyObject *p = PyTuple_GET_ITEM(t, 0);
        PyObject *base = PyDict_GetItemWithError(first, p);
        if (base == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, p);
            goto done;
        }
        long long part = PyLong_AsLongLong(p), off = PyLong_AsLongLong(base);
        long long j = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 1));
        long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 2));
        if (PyErr_Occurred())
            goto done;
        if (body_reserve(&b, 128) < 0)
            goto done;
        b.len += snprintf(b.buf + b.len, 128, "%s{\"partition\":%lld,\"offset\":%lld,\"timestamp\":%lld}",
                          i ? "," : "", part, off + j, ts);
    }
    if (body_reserve(&b, 1) < 0)
        goto done;
    b.buf[b.len++] = ']';
    result = PyBytes_FromStringAndSize(b.buf, b.len);
done:
    PyMem_Free(b.buf);
    return result;
}

static PyObject *
murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int32_t h = kafka_murmur2((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(h);
}

static PyMethodDef methods[] = {
    {"plain_records", (PyCFunction)(void (*)(void))plain_records, METH_FASTCALL,
     "plain_records(records, num_partitions, now_ms, dumps, sticky, crc32c) -> (batches, placed) | None"},
    {"plain_tuples", (PyCFunction)plain_tuples, METH_O,
     "plain_tuples(records) -> [(key, value, None, None, None)] | None"},
    {"offsets_json", (PyCFunction)(void (*)(void))offsets_json, METH_FASTCALL,
     "offsets_json(placed, first) -> bytes: a produce answer's offsets array"},
    {"murmur2", (PyCFunction)murmur2, METH_O, "Kafka's murmur2 as a signed Java int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "app.common._jsonrecords",
    "A JSON produce's per-record work in C (see app/common/_jsonrecords.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__jsonrecords(void)
{
    str_key = PyUnicode_InternFromString("key");
    str_value = PyUnicode_InternFromString("value");
    if (str_key == NULL || str_value == NULL)
        return NULL;
    return PyModule_Create(&module);
}
