/*
 * app.client.producer._native: the producer's per-record work in C.
 *
 * What lives here and why (see app/client/producer/_speedups.py, which wraps it and
 * provides the pure-Python equivalent used where this extension is not built):
 *
 *   murmur2(key)            Kafka's murmur2 (seed 0x9747b28c) as a signed Java int, the
 *                           same function as app.common.partitioner.murmur2.
 *   RecordBuffer            the records of one RecordBatch v2 being filled: each append
 *                           encodes one record (zig-zag varints, Kafka's layout) into one
 *                           growing buffer, with no Python object per record; it also keeps
 *                           the batch's delivery callbacks as a C array and runs them in one
 *                           loop when the batch is answered (run_callbacks).  The batch
 *                           header, CRC and compression are per-batch work, done in Python.
 *   FastSend                Producer.send's common case (no explicit partition, no headers,
 *                           bytes key/value): one call from the caller's loop that takes
 *                           the accumulator's lock, picks the partition (sticky batch, or
 *                           murmur2(key) % partitions), appends to the partition's open
 *                           batch and returns the DeliveryFuture.  Anything else (no open
 *                           batch, a full batch, unknown topic, other arguments) is handed
 *                           to the Python send unchanged, which does the rest.  A keyed
 *                           send finds its batch with the TopicPartition's hash kept for
 *                           the last keyed topic, and reuses freed futures (a free list).
 *   build_plain_many        several uncompressed batches built into one request body in
 *                           one copy; big batches' CRC and copy run without the GIL.
 *
 * Concurrency: every function runs with the GIL held and releases it only inside the
 * lock's acquire() and for a sealed batch's CRC and copy (build_plain, build_plain_many: the
 * buffer is marked built first, so nothing can append to it meanwhile); FastSend appends only while holding the accumulator's lock, as the
 * Python paths do.  A RecordBuffer is appended to under that lock and answered on the
 * sender's thread after the batch left the open set, so the two never overlap.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "_kafka_wire.h"

#define HEADER_SIZE 61

/* ------------------------------------------------------------------ murmur2 */

static PyObject *
py_murmur2(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int32_t h = kafka_murmur2((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)h);
}

/* ------------------------------------------------------------------ varints */

static inline char *
write_varint(char *out, int64_t value)
{
    return out + kafka_put_varint((unsigned char *)out, value);
}

/* ------------------------------------------------------------------ Lock */

/*
 * The accumulator's lock: threading.Lock's interface (acquire(blocking=True, timeout=-1),
 * release(), locked(), a context manager; usable by threading.Condition), plus an acquire
 * from C (FastSend) that costs a compare-and-swap when uncontended instead of a Python call
 * with argument parsing.  Blocking waits release the GIL, as threading.Lock's do.
 */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char locked;
} Lock;

static PyTypeObject LockType;

static PyObject *
lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Lock *self = (Lock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    self->locked = 0;
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
lock_dealloc(Lock *self)
{
    if (self->lock != NULL) {
        if (self->locked)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1 acquired, 0 timed out, -1 error (a signal handler raised). timeout_us < 0: forever. */
static int
lock_acquire_raw(Lock *self, PY_TIMEOUT_T timeout_us)
{
    PyLockStatus r = PyThread_acquire_lock_timed(self->lock, 0, 0);
    if (r == PY_LOCK_FAILURE && timeout_us != 0) {
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            r = PyThread_acquire_lock_timed(self->lock, timeout_us, 1);
            Py_END_ALLOW_THREADS
            if (r != PY_LOCK_INTR)
                break;
            if (Py_MakePendingCalls() < 0)
                return -1;
            /* Interrupted: wait again (the full timeout; good enough for a producer lock). */
        }
    }
    if (r == PY_LOCK_ACQUIRED) {
        self->locked = 1;
        return 1;
    }
    return 0;
}

static inline void
lock_release_raw(Lock *self)
{
    self->locked = 0;
    PyThread_release_lock(self->lock);
}

static PyObject *
lock_acquire(Lock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd", kwlist, &blocking, &timeout))
        return NULL;
    PY_TIMEOUT_T us;
    if (!blocking) {
        if (timeout != -1) {
            PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
            return NULL;
        }
        us = 0;
    } else if (timeout < 0) {
        if (timeout != -1) {
            PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
            return NULL;
        }
        us = -1;
    } else {
        double t = timeout * 1e6;
        if (t >= (double)PY_TIMEOUT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
            return NULL;
        }
        us = (PY_TIMEOUT_T)t;
    }
    int r = lock_acquire_raw(self, us);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *
lock_release(Lock *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->locked) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    lock_release_raw(self);
    Py_RETURN_NONE;
}

static PyObject *
lock_exit(Lock *self, PyObject *args)
{
    return lock_release(self, NULL);
}

static PyObject *
lock_locked(Lock *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(self->locked);
}

static PyMethodDef lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool"},
    {"release", (PyCFunction)lock_release, METH_NOARGS, "release()"},
    {"locked", (PyCFunction)lock_locked, METH_NOARGS, "locked() -> bool"},
    {"__enter__", (PyCFunction)(void (*)(void))lock_acquire, METH_VARARGS | METH_KEYWORDS,
     NULL},
    {"__exit__", (PyCFunction)lock_exit, METH_VARARGS, NULL},
    {NULL}};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.client.producer._native.Lock",
    .tp_basicsize = sizeof(Lock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Lock(): threading.Lock's interface, also acquired from C by FastSend",
    .tp_new = lock_new,
    .tp_dealloc = (destructor)lock_dealloc,
    .tp_methods = lock_methods,
};

/* ------------------------------------------------------------------ RecordBuffer */

typedef struct {
    int32_t index;
    int64_t timestamp;
    PyObject *callback;
} CallbackEntry;

typedef struct {
    PyObject_HEAD
    char *buf;            /* HEADER_SIZE bytes for the header, then the records; NULL once built */
    Py_ssize_t len;       /* bytes of records (after the header space) */
    int built;
    Py_ssize_t cap;
    Py_ssize_t batch_size;
    int32_t count;
    int compression;
    int64_t first_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int32_t producer_epoch;
    int32_t base_sequence;
    int transactional;    /* the attributes' transactional bit (0x10), set with the producer state */
    CallbackEntry *callbacks;
    Py_ssize_t ncallbacks;
    Py_ssize_t callbacks_cap;
} RecordBuffer;

static PyTypeObject RecordBufferType;
static void pool_put(char *buf, Py_ssize_t cap);

static int
rb_init(RecordBuffer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"batch_size", "compression", NULL};
    Py_ssize_t batch_size;
    int compression = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|i", kwlist, &batch_size, &compression))
        return -1;
    if (batch_size < 1) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be >= 1");
        return -1;
    }
    self->batch_size = batch_size;
    self->compression = compression;
    self->producer_id = -1;
    self->producer_epoch = -1;
    self->base_sequence = -1;
    return 0;
}

static int
rb_traverse(RecordBuffer *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < self->ncallbacks; i++)
        Py_VISIT(self->callbacks[i].callback);
    return 0;
}

static int
rb_clear(RecordBuffer *self)
{
    Py_ssize_t n = self->ncallbacks;
    CallbackEntry *cbs = self->callbacks;
    self->ncallbacks = 0;
    self->callbacks = NULL;
    self->callbacks_cap = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(cbs[i].callback);
    PyMem_Free(cbs);
    return 0;
}

static void
rb_dealloc(RecordBuffer *self)
{
    PyObject_GC_UnTrack(self);
    rb_clear(self);
    pool_put(self->buf, self->cap);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A key or value: bytes, or anything with the buffer protocol; NULL/None is a null. */
typedef struct {
    const char *data;
    Py_ssize_t len; /* -1: null */
    Py_buffer view;
    int has_view;
} Blob;

static int
blob_get(PyObject *obj, Blob *b, const char *what)
{
    b->has_view = 0;
    if (obj == NULL || obj == Py_None) {
        b->data = NULL;
        b->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        b->data = PyBytes_AS_STRING(obj);
        b->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyByteArray_Check(obj) || PyMemoryView_Check(obj) || PyBytes_Check(obj)) {
        if (PyObject_GetBuffer(obj, &b->view, PyBUF_SIMPLE) < 0)
            return -1;
        b->has_view = 1;
        b->data = (const char *)b->view.buf;
        b->len = b->view.len;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "Not supported type for %s: %R", what,
                 (PyObject *)Py_TYPE(obj));
    return -1;
}

static void
blob_release(Blob *b)
{
    if (b->has_view)
        PyBuffer_Release(&b->view);
}

/*
 * Batch buffers are ~batch_size (1 MB by default) and live for one batch: fresh ones from
 * malloc are fresh pages from the kernel, zeroed and faulted in one at a time, which cost
 * more than encoding the records into them did.  A few freed buffers are kept for the next
 * batches (at most POOL_SIZE, under the GIL).
 */
#define POOL_SIZE 8
#define POOL_MIN_CAP (64 * 1024)
static char *pool_buf[POOL_SIZE];
static Py_ssize_t pool_cap[POOL_SIZE];
static int pool_n;

static void
pool_put(char *buf, Py_ssize_t cap)
{
    if (buf == NULL)
        return;
    if (cap >= POOL_MIN_CAP && pool_n < POOL_SIZE) {
        pool_buf[pool_n] = buf;
        pool_cap[pool_n] = cap;
        pool_n++;
        return;
    }
    PyMem_Free(buf);
}

static int
rb_reserve(RecordBuffer *self, Py_ssize_t extra)
{
    if (self->built) {
        PyErr_SetString(PyExc_RuntimeError, "the batch is already built");
        return -1;
    }
    Py_ssize_t need = HEADER_SIZE + self->len + extra;
    if (need <= self->cap)
        return 0;
    if (self->buf == NULL && pool_n > 0) {
        pool_n--;
        self->buf = pool_buf[pool_n];
        self->cap = pool_cap[pool_n];
        if (need <= self->cap)
            return 0;
    }
    Py_ssize_t cap = self->cap ? self->cap : 4096;
    while (cap < need)
        cap *= 2;
    char *buf = PyMem_Realloc(self->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buf = buf;
    self->cap = cap;
    return 0;
}

/*
 * Append one record.  1: appended; 0: the batch is full (nothing written); -1: error.
 * ``headers`` is NULL or a sequence of (str, bytes | None) pairs.  The first record is
 * always accepted (an oversized record makes an oversized batch), as aiokafka's builder.
 */
static int
rb_append_raw(RecordBuffer *self, int64_t timestamp, const Blob *key, const Blob *value,
              PyObject *headers)
{
    int64_t delta = self->count ? timestamp - self->first_timestamp : 0;
    Py_ssize_t nh = 0;
    PyObject *hseq = NULL;
    Py_ssize_t body = 1 + kafka_varint_size(delta) + kafka_varint_size(self->count);
    body += key->len < 0 ? 1 : kafka_varint_size(key->len) + key->len;
    body += value->len < 0 ? 1 : kafka_varint_size(value->len) + value->len;
    if (headers != NULL && headers != Py_None) {
        hseq = PySequence_Fast(headers, "headers must be a sequence of (str, bytes) pairs");
        if (hseq == NULL)
            return -1;
        nh = PySequence_Fast_GET_SIZE(hseq);
        for (Py_ssize_t i = 0; i < nh; i++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(hseq, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
                !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
                Py_DECREF(hseq);
                PyErr_SetString(PyExc_TypeError, "a header is a (str, bytes | None) tuple");
                return -1;
            }
            Py_ssize_t klen;
            if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &klen) == NULL) {
                Py_DECREF(hseq);
                return -1;
            }
            body += kafka_varint_size(klen) + klen;
            PyObject *hv = PyTuple_GET_ITEM(pair, 1);
            if (hv == Py_None) {
                body += 1;
            } else if (PyBytes_Check(hv)) {
                body += kafka_varint_size(PyBytes_GET_SIZE(hv)) + PyBytes_GET_SIZE(hv);
            } else {
                Py_DECREF(hseq);
                PyErr_Format(PyExc_TypeError, "Not supported type for header value: %R",
                             (PyObject *)Py_TYPE(hv));
                return -1;
            }
        }
    }
    body += kafka_varint_size(nh);
    Py_ssize_t required = body + kafka_varint_size(body);
    /* Full once the batch would reach batch_size (aiokafka's compiled builder's rule). */
    if (self->count > 0 && HEADER_SIZE + self->len + required >= self->batch_size) {
        Py_XDECREF(hseq);
        return 0;
    }
    if (rb_reserve(self, required) < 0) {
        Py_XDECREF(hseq);
        return -1;
    }
    char *out = self->buf + HEADER_SIZE + self->len;
    out = write_varint(out, body);
    *out++ = 0; /* attributes */
    out = write_varint(out, delta);
    out = write_varint(out, self->count);
    if (key->len < 0) {
        out = write_varint(out, -1);
    } else {
        out = write_varint(out, key->len);
        memcpy(out, key->data, (size_t)key->len);
        out += key->len;
    }
    if (value->len < 0) {
        out = write_varint(out, -1);
    } else {
        out = write_varint(out, value->len);
        memcpy(out, value->data, (size_t)value->len);
        out += value->len;
    }
    out = write_varint(out, nh);
    for (Py_ssize_t i = 0; i < nh; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(hseq, i);
        Py_ssize_t klen;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), &klen);
        out = write_varint(out, klen);
        memcpy(out, k, (size_t)klen);
        out += klen;
        PyObject *hv = PyTuple_GET_ITEM(pair, 1);
        if (hv == Py_None) {
            out = write_varint(out, -1);
        } else {
            Py_ssize_t vlen = PyBytes_GET_SIZE(hv);
            out = write_varint(out, vlen);
            memcpy(out, PyBytes_AS_STRING(hv), (size_t)vlen);
            out += vlen;
        }
    }
    Py_XDECREF(hseq);
    self->len = out - (self->buf + HEADER_SIZE);
    if (self->count == 0) {
        self->first_timestamp = timestamp;
        self->max_timestamp = timestamp;
    } else if (timestamp > self->max_timestamp) {
        self->max_timestamp = timestamp;
    }
    self->count++;
    return 1;
}

/* A timestamp argument: int, or a float truncated toward zero as int() does. */
static int
get_timestamp(PyObject *obj, int64_t *out)
{
    if (PyFloat_CheckExact(obj)) {
        double d = PyFloat_AS_DOUBLE(obj);
        if (!(d > -9.2e18 && d < 9.2e18)) {
            PyErr_SetString(PyExc_ValueError, "timestamp out of range");
            return -1;
        }
        *out = (int64_t)d;
        return 0;
    }
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static int
rb_add_callback_raw(RecordBuffer *self, int32_t index, int64_t ts, PyObject *cb)
{
    if (self->ncallbacks == self->callbacks_cap) {
        Py_ssize_t cap = self->callbacks_cap ? self->callbacks_cap * 2 : 64;
        CallbackEntry *cbs = PyMem_Realloc(self->callbacks, (size_t)cap * sizeof(CallbackEntry));
        if (cbs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->callbacks = cbs;
        self->callbacks_cap = cap;
    }
    Py_INCREF(cb);
    CallbackEntry *e = &self->callbacks[self->ncallbacks++];
    e->index = index;
    e->timestamp = ts;
    e->callback = cb;
    return 0;
}

/* append(timestamp, key, value, headers=None) -> True, or None once the batch is full */
static PyObject *
rb_append(RecordBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "append(timestamp, key, value, headers=None)");
        return NULL;
    }
    int64_t ts;
    if (get_timestamp(args[0], &ts) < 0)
        return NULL;
    Blob key, value;
    if (blob_get(args[1], &key, "key") < 0)
        return NULL;
    if (blob_get(args[2], &value, "value") < 0) {
        blob_release(&key);
        return NULL;
    }
    int r = rb_append_raw(self, ts, &key, &value, nargs == 4 ? args[3] : NULL);
    blob_release(&key);
    blob_release(&value);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    Py_RETURN_TRUE;
}

/*
 * append_values(iterator, timestamp) -> (appended, full, carry): null-key records from
 * ``iterator`` until it ends or the batch is full; ``carry`` is the value that did not fit
 * (``full`` True) and must start the next batch.
 */
static PyObject *
rb_append_values(RecordBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "append_values(iterator, timestamp)");
        return NULL;
    }
    int64_t ts;
    if (get_timestamp(args[1], &ts) < 0)
        return NULL;
    PyObject *it = args[0];
    Py_ssize_t n = 0;
    Blob nokey = {NULL, -1};
    nokey.has_view = 0;
    PyObject *item;
    while ((item = PyIter_Next(it)) != NULL) {
        Blob value;
        if (blob_get(item, &value, "value") < 0) {
            Py_DECREF(item);
            return NULL;
        }
        int r = rb_append_raw(self, ts, &nokey, &value, NULL);
        blob_release(&value);
        if (r < 0) {
            Py_DECREF(item);
            return NULL;
        }
        if (r == 0) {
            PyObject *out = Py_BuildValue("(nON)", n, Py_True, item);
            return out;
        }
        Py_DECREF(item);
        n++;
    }
    if (PyErr_Occurred())
        return NULL;
    return Py_BuildValue("(nOO)", n, Py_False, Py_None);
}

static PyObject *
rb_add_callback(RecordBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add_callback(index, timestamp, callback)");
        return NULL;
    }
    long index = PyLong_AsLong(args[0]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    int64_t ts;
    if (get_timestamp(args[1], &ts) < 0)
        return NULL;
    if (rb_add_callback_raw(self, (int32_t)index, ts, args[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/*
 * run_callbacks(topic, partition, base_offset, log_append_time, error, metadata_type,
 * on_error): call every callback once, in the order they were added, with
 * ``metadata_type(topic, partition, offset, timestamp)`` and None, or None and ``error``;
 * then forget them.  A callback raising an Exception goes to ``on_error(exc)`` and the
 * others still run; a BaseException (KeyboardInterrupt) propagates at once.
 *
 * ``metadata_type`` is a tuple subclass without instance dict (RecordMetadata, a
 * NamedTuple): instances are allocated directly, the cost of a tuple.
 */
static PyObject *
rb_run_callbacks(RecordBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "run_callbacks(topic, partition, base_offset, log_append_time, error, "
                        "metadata_type, on_error)");
        return NULL;
    }
    PyObject *topic = args[0], *partition = args[1], *error = args[4];
    PyObject *on_error = args[6];
    PyTypeObject *mtype = (PyTypeObject *)args[5];
    long long base_offset = PyLong_AsLongLong(args[2]);
    if (base_offset == -1 && PyErr_Occurred())
        return NULL;
    long long append_time = PyLong_AsLongLong(args[3]);
    if (append_time == -1 && PyErr_Occurred())
        return NULL;
    if (!PyType_Check(mtype) || !PyType_IsSubtype(mtype, &PyTuple_Type) ||
        mtype->tp_basicsize != PyTuple_Type.tp_basicsize || mtype->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "metadata_type must be a NamedTuple class");
        return NULL;
    }
    /* Take them out first: a callback that adds one (add_done_callback) must not loop. */
    Py_ssize_t n = self->ncallbacks;
    CallbackEntry *cbs = self->callbacks;
    self->ncallbacks = 0;
    self->callbacks = NULL;
    self->callbacks_cap = 0;
    PyObject *fail = NULL;
    PyObject *noffset = NULL, *append_ts = NULL;
    if (error == Py_None && base_offset < 0) {
        noffset = PyLong_FromLong(-1);
        if (noffset == NULL)
            goto done;
    }
    if (error == Py_None && append_time >= 0) {
        append_ts = PyLong_FromLongLong(append_time);
        if (append_ts == NULL)
            goto done;
    }
    /* The metadata tuple is reused while no callback kept it (refcount back to 1), as
     * CPython's own zip() and dict iterators reuse their result tuples: nobody can see the
     * change.  The timestamp int is shared by neighbours with the same millisecond. */
    PyObject *meta = NULL, *last_ts = NULL;
    int64_t last_ts_value = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        CallbackEntry *e = &cbs[i];
        PyObject *callargs[2];
        if (error == Py_None) {
            PyObject *offset, *ts;
            if (noffset != NULL) {
                offset = Py_NewRef(noffset);
            } else {
                offset = PyLong_FromLongLong(base_offset + e->index);
                if (offset == NULL)
                    break;
            }
            if (append_ts != NULL) {
                ts = Py_NewRef(append_ts);
            } else {
                if (last_ts == NULL || last_ts_value != e->timestamp) {
                    Py_XDECREF(last_ts);
                    last_ts = PyLong_FromLongLong(e->timestamp);
                    if (last_ts == NULL) {
                        Py_DECREF(offset);
                        break;
                    }
                    last_ts_value = e->timestamp;
                }
                ts = Py_NewRef(last_ts);
            }
            if (meta != NULL && Py_REFCNT(meta) == 1) {
                Py_SETREF(((PyTupleObject *)meta)->ob_item[2], offset);
                Py_SETREF(((PyTupleObject *)meta)->ob_item[3], ts);
            } else {
                Py_XDECREF(meta);
                meta = mtype->tp_alloc(mtype, 4);
                if (meta == NULL) {
                    Py_DECREF(offset);
                    Py_DECREF(ts);
                    break;
                }
                PyTuple_SET_ITEM(meta, 0, Py_NewRef(topic));
                PyTuple_SET_ITEM(meta, 1, Py_NewRef(partition));
                PyTuple_SET_ITEM(meta, 2, offset);
                PyTuple_SET_ITEM(meta, 3, ts);
            }
            callargs[0] = meta;
            callargs[1] = Py_None;
        } else {
            callargs[0] = Py_None;
            callargs[1] = error;
        }
        PyObject *r = PyObject_Vectorcall(e->callback, callargs, 2, NULL);
        if (r != NULL) {
            Py_DECREF(r);
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            break;
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyErr_NormalizeException(&type, &val, &tb);
        if (tb != NULL && val != NULL)
            PyException_SetTraceback(val, tb);
        PyObject *hr = PyObject_CallOneArg(on_error, val ? val : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(val);
        Py_XDECREF(tb);
        if (hr == NULL)
            break;
        Py_DECREF(hr);
    }
    Py_XDECREF(meta);
    Py_XDECREF(last_ts);
    if (i == n)
        fail = Py_None;
done:
    Py_XDECREF(noffset);
    Py_XDECREF(append_ts);
    for (Py_ssize_t j = 0; j < n; j++)
        Py_DECREF(cbs[j].callback);
    PyMem_Free(cbs);
    if (fail == NULL)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
rb_set_producer_state(RecordBuffer *self, PyObject *args)
{
    long long pid;
    int epoch, seq, transactional = 0;
    if (!PyArg_ParseTuple(args, "Lii|p", &pid, &epoch, &seq, &transactional))
        return NULL;
    self->producer_id = pid;
    self->producer_epoch = epoch;
    self->base_sequence = seq;
    self->transactional = transactional;
    Py_RETURN_NONE;
}

static PyObject *
rb_size(RecordBuffer *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(HEADER_SIZE + self->len);
}

static PyObject *
rb_records(RecordBuffer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->built) {
        PyErr_SetString(PyExc_RuntimeError, "the batch is already built");
        return NULL;
    }
    return PyBytes_FromStringAndSize(self->buf ? self->buf + HEADER_SIZE : "", self->len);
}

/* Give the buffer back (to the pool): the batch is built, its bytes are elsewhere. */
static PyObject *
rb_release(RecordBuffer *self, PyObject *Py_UNUSED(ignored))
{
    self->built = 1;
    pool_put(self->buf, self->cap);
    self->buf = NULL;
    self->cap = 0;
    Py_RETURN_NONE;
}

/* ---- CRC-32C (Castagnoli), with the SSE4.2 instruction where the CPU has it */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_CRC 1
__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(const unsigned char *p, size_t n)
{
    uint64_t crc = 0xffffffffu;
    while (n && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8((uint32_t)crc, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = _mm_crc32_u8((uint32_t)crc, *p++);
    return (uint32_t)crc ^ 0xffffffffu;
}
static int
hw_crc_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#else
#define HAVE_HW_CRC 0
static uint32_t
crc32c_hw(const unsigned char *p, size_t n)
{
    return 0;
}
static int
hw_crc_available(void)
{
    return 0;
}
#endif
static int hw_crc;
/* Batches at least this big are checksummed and copied with the GIL released. */
#define BUILD_NOGIL_MIN (64 * 1024)

static inline void
put_be16(char *p, uint16_t v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
}
static inline void
put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}
static inline void
put_be64(char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

/*
 * build_plain() -> bytes: the whole uncompressed batch (header, CRC-32C, records), byte
 * for byte as aiokafka's builder makes it, in one copy; the buffer goes back to the pool.
 * None where this CPU has no CRC-32C instruction (the caller builds it in Python).
 */
/* The batch header (all but the CRC) into the buffer's first HEADER_SIZE bytes; its size. */
static Py_ssize_t
rb_put_header(RecordBuffer *self)
{
    char *h = self->buf;
    Py_ssize_t total = HEADER_SIZE + self->len;
    put_be64(h, 0);                                        /* baseOffset */
    put_be32(h + 8, (uint32_t)(total - 12));               /* batchLength */
    put_be32(h + 12, (uint32_t)-1);                        /* partitionLeaderEpoch */
    h[16] = 2;                                             /* magic */
    put_be16(h + 21, self->transactional ? 0x10 : 0);     /* attributes */
    put_be32(h + 23, (uint32_t)(self->count - 1));         /* lastOffsetDelta */
    put_be64(h + 27, (uint64_t)self->first_timestamp);     /* baseTimestamp */
    put_be64(h + 35, (uint64_t)self->max_timestamp);       /* maxTimestamp */
    put_be64(h + 43, (uint64_t)self->producer_id);
    put_be16(h + 51, (uint16_t)self->producer_epoch);
    put_be32(h + 53, (uint32_t)self->base_sequence);
    put_be32(h + 57, (uint32_t)self->count);
    return total;
}

/* CRC-32C of a headed buffer into its header, then the whole batch to dst (no GIL needed). */
static void
crc_and_copy(char *h, Py_ssize_t total, char *dst)
{
    put_be32(h + 17, crc32c_hw((const unsigned char *)h + 21, (size_t)(total - 21)));
    memcpy(dst, h, (size_t)total);
}

/*
 * build_plain() -> bytes: the whole uncompressed batch (header, CRC-32C, records), byte
 * for byte as aiokafka's builder makes it, in one copy; the buffer goes back to the pool.
 * None where this CPU has no CRC-32C instruction (the caller builds it in Python).
 */
static PyObject *
rb_build_plain(RecordBuffer *self, PyObject *Py_UNUSED(ignored))
{
    if (!hw_crc)
        Py_RETURN_NONE;
    if (self->built) {
        PyErr_SetString(PyExc_RuntimeError, "the batch is already built");
        return NULL;
    }
    if (self->buf == NULL && rb_reserve(self, 0) < 0)
        return NULL;
    Py_ssize_t total = rb_put_header(self);
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *h = self->buf, *dst = PyBytes_AS_STRING(out);
    /* Sealed: nothing appends any more (and "built" makes any append fail meanwhile).  A big
     * batch's CRC and copy run without the GIL, so the caller's thread goes on sending while
     * the sender's thread does them (1 MB: ~0.3 ms, more with the page faults of the copy). */
    self->built = 1;
    if (total >= BUILD_NOGIL_MIN) {
        Py_BEGIN_ALLOW_THREADS
        crc_and_copy(h, total, dst);
        Py_END_ALLOW_THREADS
    } else {
        crc_and_copy(h, total, dst);
    }
    rb_release(self, NULL);
    return out;
}

/*
 * build_plain_many(buffers) -> bytes | None: the uncompressed batches of ``buffers`` (a list
 * of RecordBuffer) one after the other, as b"".join(b.build_plain() for b in buffers) makes
 * them, in one copy instead of two; every buffer goes back to the pool.  None (and nothing
 * built) where this CPU has no CRC-32C instruction, or a buffer is compressed or not a
 * RecordBuffer (the pure-Python one).
 */
static PyObject *
py_build_plain_many(PyObject *module, PyObject *arg)
{
    if (!PyList_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "build_plain_many(list of RecordBuffer)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg), total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(arg, i);
        if (!PyObject_TypeCheck(item, &RecordBufferType))
            Py_RETURN_NONE; /* a pure-Python buffer: the caller builds them one by one */
        RecordBuffer *rb = (RecordBuffer *)item;
        if (rb->built) {
            PyErr_SetString(PyExc_RuntimeError, "the batch is already built");
            return NULL;
        }
        for (Py_ssize_t j = 0; j < i; j++) {
            if (PyList_GET_ITEM(arg, j) == item) {
                PyErr_SetString(PyExc_ValueError, "build_plain_many: a buffer given twice");
                return NULL;
            }
        }
        if (rb->compression)
            Py_RETURN_NONE;
        total += HEADER_SIZE + rb->len;
    }
    if (!hw_crc)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    /* The list may change once the GIL is released: keep the buffers' pointers here. */
    char **bufs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(char *));
    Py_ssize_t *sizes = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    PyObject **items = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(PyObject *));
    if (bufs == NULL || sizes == NULL || items == NULL) {
        PyMem_Free(bufs);
        PyMem_Free(sizes);
        PyMem_Free(items);
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Every buffer allocated before any is marked built: a failure leaves none built. */
        RecordBuffer *rb = (RecordBuffer *)PyList_GET_ITEM(arg, i);
        if (rb->buf == NULL && rb_reserve(rb, 0) < 0) {
            PyMem_Free(bufs);
            PyMem_Free(sizes);
            PyMem_Free(items);
            Py_DECREF(out);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        RecordBuffer *rb = (RecordBuffer *)PyList_GET_ITEM(arg, i);
        sizes[i] = rb_put_header(rb);
        bufs[i] = rb->buf;
        rb->built = 1;
        items[i] = Py_NewRef(rb); /* alive while their bytes are read without the GIL */
    }
    char *dst = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        crc_and_copy(bufs[i], sizes[i], dst);
        dst += sizes[i];
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        rb_release((RecordBuffer *)items[i], NULL);
        Py_DECREF(items[i]);
    }
    PyMem_Free(items);
    PyMem_Free(bufs);
    PyMem_Free(sizes);
    return out;
}

static PyObject *
rb_callback_count(RecordBuffer *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(self->ncallbacks);
}

static PyMethodDef rb_methods[] = {
    {"append", (PyCFunction)(void (*)(void))rb_append, METH_FASTCALL,
     "append(timestamp, key, value, headers=None) -> True, or None once full"},
    {"append_values", (PyCFunction)(void (*)(void))rb_append_values, METH_FASTCALL,
     "append_values(iterator, timestamp) -> (appended, full, carry)"},
    {"add_callback", (PyCFunction)(void (*)(void))rb_add_callback, METH_FASTCALL,
     "add_callback(index, timestamp, callback)"},
    {"run_callbacks", (PyCFunction)(void (*)(void))rb_run_callbacks, METH_FASTCALL,
     "run_callbacks(topic, partition, base_offset, log_append_time, error, metadata_type, "
     "on_error)"},
    {"set_producer_state", (PyCFunction)rb_set_producer_state, METH_VARARGS,
     "set_producer_state(producer_id, producer_epoch, base_sequence, transactional=False)"},
    {"size", (PyCFunction)rb_size, METH_NOARGS, "header + records bytes, uncompressed"},
    {"records", (PyCFunction)rb_records, METH_NOARGS, "the encoded records section"},
    {"release", (PyCFunction)rb_release, METH_NOARGS, "built: give the buffer back"},
    {"build_plain", (PyCFunction)rb_build_plain, METH_NOARGS,
     "the whole uncompressed batch, or None without a CRC-32C instruction"},
    {"callback_count", (PyCFunction)rb_callback_count, METH_NOARGS,
     "callbacks waiting for the answer"},
    {NULL}};

static PyMemberDef rb_members[] = {
    {"count", T_INT, offsetof(RecordBuffer, count), READONLY, "records appended"},
    {"compression", T_INT, offsetof(RecordBuffer, compression), READONLY, NULL},
    {"batch_size", T_PYSSIZET, offsetof(RecordBuffer, batch_size), READONLY, NULL},
    {"first_timestamp", T_LONGLONG, offsetof(RecordBuffer, first_timestamp), READONLY, NULL},
    {"max_timestamp", T_LONGLONG, offsetof(RecordBuffer, max_timestamp), READONLY, NULL},
    {"producer_id", T_LONGLONG, offsetof(RecordBuffer, producer_id), READONLY, NULL},
    {"producer_epoch", T_INT, offsetof(RecordBuffer, producer_epoch), READONLY, NULL},
    {"base_sequence", T_INT, offsetof(RecordBuffer, base_sequence), READONLY, NULL},
    {"transactional", T_INT, offsetof(RecordBuffer, transactional), READONLY, NULL},
    {NULL}};

static PyTypeObject RecordBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.client.producer._native.RecordBuffer",
    .tp_basicsize = sizeof(RecordBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RecordBuffer(batch_size, compression=0): the records of one batch being filled",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)rb_init,
    .tp_dealloc = (destructor)rb_dealloc,
    .tp_traverse = (traverseproc)rb_traverse,
    .tp_clear = (inquiry)rb_clear,
    .tp_methods = rb_methods,
    .tp_members = rb_members,
};

/* ------------------------------------------------------------------ FutureBase */

/* The state of a DeliveryFuture: its batch, its index in it, its timestamp (ms). */
typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
    int64_t timestamp;
} FutureBase;

static int
fb_init(FutureBase *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"batch", "index", "timestamp", NULL};
    PyObject *batch, *ts;
    Py_ssize_t index;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnO", kwlist, &batch, &index, &ts))
        return -1;
    int64_t t;
    if (get_timestamp(ts, &t) < 0)
        return -1;
    Py_XSETREF(self->batch, Py_NewRef(batch));
    self->timestamp = t;
    self->index = index;
    return 0;
}

/*
 * Freed futures of the one future type FastSend makes (DeliveryFuture), kept for its next
 * sends: a future is made per record and mostly dropped at once, and malloc, zeroing and
 * GC bookkeeping were a sixth of a keyed send.  Under the GIL; a kept one is untracked
 * (subtype_dealloc untracked it), holds no reference, and its type's reference was dropped
 * by subtype_dealloc after this dealloc (fs_send takes one again when it reuses it).
 */
#define FUTURE_FREELIST 256
static PyObject *future_free[FUTURE_FREELIST];
static int future_nfree;
static PyTypeObject *future_free_type; /* the type whose freed futures are kept (strong) */

static void
fb_dealloc(FutureBase *self)
{
    Py_CLEAR(self->batch);
    if (Py_TYPE(self) == future_free_type && future_nfree < FUTURE_FREELIST) {
        future_free[future_nfree++] = (PyObject *)self;
        return;
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A new future of ``type`` (a FutureBase subclass without dict): reused where one is kept. */
static FutureBase *
fb_alloc(PyTypeObject *type)
{
    if (type == future_free_type && future_nfree > 0) {
        PyObject *obj = future_free[--future_nfree];
        Py_INCREF(type); /* an instance of a heap type owns a reference to it */
        _Py_NewReference(obj);
        PyObject_GC_Track(obj);
        return (FutureBase *)obj;
    }
    return (FutureBase *)type->tp_alloc(type, 0);
}

static PyMemberDef fb_members[] = {
    {"_batch", T_OBJECT, offsetof(FutureBase, batch), READONLY, NULL},
    {"_index", T_PYSSIZET, offsetof(FutureBase, index), READONLY, NULL},
    {"_timestamp", T_LONGLONG, offsetof(FutureBase, timestamp), READONLY, NULL},
    {NULL}};

/*
 * No GC: a future refers to its batch, and nothing a batch holds refers to a future
 * (DeliveryFuture.add_done_callback's lambda does, through the batch's callbacks, but
 * that cycle runs through the batch, which is collected, and is broken when it runs).
 */
static PyTypeObject FutureBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.client.producer._native.FutureBase",
    .tp_basicsize = sizeof(FutureBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "FutureBase(batch, index, timestamp): what a DeliveryFuture refers to",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fb_init,
    .tp_dealloc = (destructor)fb_dealloc,
    .tp_members = fb_members,
};

/* ------------------------------------------------------------------ FastSend */

typedef struct {
    PyObject_HEAD
    Lock *lock;            /* the accumulator's lock when it is a Lock, else NULL */
    PyObject *acquire;     /* the accumulator lock's bound acquire / release */
    PyObject *release;
    PyObject *sticky;      /* dict: topic -> the open batch of its sticky partition */
    PyObject *open;        /* dict: TopicPartition -> open batch */
    PyObject *counts;      /* dict: topic -> partition count (the sender's) */
    PyObject *tps;         /* dict: topic -> tuple of TopicPartition, one per partition */
    PyObject *tp_make;     /* (topic, partition) -> TopicPartition: the accumulator's _tp */
    PyTypeObject *future_type; /* DeliveryFuture, a FutureBase subclass without dict */
    PyObject *slow;        /* the Python send: everything this does not take */
    PyTypeObject *batch_type;  /* ProducerBatch, whose __slots__ member "builder" is read */
    Py_ssize_t builder_offset; /* ... straight from the object (0: with getattr) */
    /* The last keyed topic's TopicPartitions and their hashes: a keyed send then finds its
     * open batch with one known-hash dict lookup instead of hashing a (topic, partition)
     * tuple per record.  hot_hashes[p] is -1 until first needed. */
    PyObject *hot_topic;
    PyObject *hot_tps;     /* tuple of TopicPartition, hot_n of them (the tps dict's) */
    Py_hash_t *hot_hashes;
    long hot_n;
} FastSend;

static void fs_forget_hot(FastSend *self);
static PyObject *str_builder;
static PyObject *kw_value, *kw_key, *kw_partition, *kw_timestamp, *kw_headers, *kw_on_delivery;

static int
fs_init(FastSend *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"lock", "sticky", "open", "counts", "tp_make", "future_type",
                             "slow", "batch_type", NULL};
    PyObject *lock, *sticky, *open, *counts, *tp_make, *future_type, *slow;
    PyObject *batch_type = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!O!O!OOO|O", kwlist, &lock, &PyDict_Type,
                                     &sticky, &PyDict_Type, &open, &PyDict_Type, &counts,
                                     &tp_make, &future_type, &slow, &batch_type))
        return -1;
    if (!PyType_Check(future_type) ||
        !PyType_IsSubtype((PyTypeObject *)future_type, &FutureBaseType) ||
        ((PyTypeObject *)future_type)->tp_basicsize != FutureBaseType.tp_basicsize ||
        ((PyTypeObject *)future_type)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "future_type: a FutureBase subclass with __slots__ = ()");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    if (acquire == NULL)
        return -1;
    PyObject *release = PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_DECREF(acquire);
        return -1;
    }
    PyObject *tps = PyDict_New();
    if (tps == NULL) {
        Py_DECREF(acquire);
        Py_DECREF(release);
        return -1;
    }
    Py_XSETREF(self->lock, PyObject_TypeCheck(lock, &LockType) ? (Lock *)Py_NewRef(lock) : NULL);
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_XSETREF(self->sticky, Py_NewRef(sticky));
    Py_XSETREF(self->open, Py_NewRef(open));
    Py_XSETREF(self->counts, Py_NewRef(counts));
    Py_XSETREF(self->tps, tps);
    fs_forget_hot(self);
    Py_XSETREF(self->tp_make, Py_NewRef(tp_make));
    Py_XSETREF(self->future_type, (PyTypeObject *)Py_NewRef(future_type));
    /* Only a GC heap type whose dealloc is subtype_dealloc ending in fb_dealloc, as a
     * Python subclass with __slots__ = () is (checked above: no dict, FutureBase's size). */
    if (future_free_type == NULL && PyType_HasFeature((PyTypeObject *)future_type, Py_TPFLAGS_HEAPTYPE) &&
        PyType_IS_GC((PyTypeObject *)future_type) &&
        ((PyTypeObject *)future_type)->tp_weaklistoffset == 0)
        future_free_type = (PyTypeObject *)Py_NewRef(future_type);
    Py_XSETREF(self->slow, Py_NewRef(slow));
    /* The batch's record buffer is the "builder" slot of ProducerBatch: its offset comes
     * from the member descriptor, as Python's own attribute lookup would find it. */
    Py_CLEAR(self->batch_type);
    self->builder_offset = 0;
    if (batch_type != Py_None) {
        if (!PyType_Check(batch_type)) {
            PyErr_SetString(PyExc_TypeError, "batch_type must be a class");
            return -1;
        }
        PyObject *descr = PyObject_GetAttr(batch_type, str_builder);
        if (descr == NULL)
            return -1;
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY)) {
                self->batch_type = (PyTypeObject *)Py_NewRef(batch_type);
                self->builder_offset = member->offset;
            }
        }
        Py_DECREF(descr);
    }
    return 0;
}

static int
fs_traverse(FastSend *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lock);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->sticky);
    Py_VISIT(self->open);
    Py_VISIT(self->counts);
    Py_VISIT(self->tps);
    Py_VISIT(self->tp_make);
    Py_VISIT(self->future_type);
    Py_VISIT(self->slow);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->hot_topic);
    Py_VISIT(self->hot_tps);
    return 0;
}

static void
fs_forget_hot(FastSend *self)
{
    Py_CLEAR(self->hot_topic);
    Py_CLEAR(self->hot_tps);
    PyMem_Free(self->hot_hashes);
    self->hot_hashes = NULL;
    self->hot_n = 0;
}

static int
fs_clear(FastSend *self)
{
    Py_CLEAR(self->lock);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->open);
    Py_CLEAR(self->counts);
    Py_CLEAR(self->tps);
    Py_CLEAR(self->tp_make);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->batch_type);
    fs_forget_hot(self);
    return 0;
}

static void
fs_dealloc(FastSend *self)
{
    PyObject_GC_UnTrack(self);
    fs_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int
kw_is(PyObject *name, PyObject *interned)
{
    return name == interned || PyUnicode_Compare(name, interned) == 0;
}

/* The TopicPartition of (topic, p), from a per-topic tuple made once per partition count. */
static PyObject *
fs_topic_partition(FastSend *self, PyObject *topic, long n, long p)
{
    PyObject *tps = PyDict_GetItemWithError(self->tps, topic);
    if (tps == NULL) {
        if (PyErr_Occurred())
            return NULL;
    } else if (PyTuple_GET_SIZE(tps) == n) {
        return PyTuple_GET_ITEM(tps, p); /* borrowed */
    }
    /* The accumulator's own TopicPartition objects where it has them: the open dict then
     * finds its keys by identity, without comparing tuples. */
    PyObject *made = PyTuple_New(n);
    if (made == NULL)
        return NULL;
    for (long i = 0; i < n; i++) {
        PyObject *tp = PyObject_CallFunction(self->tp_make, "Ol", topic, i);
        if (tp == NULL) {
            Py_DECREF(made);
            return NULL;
        }
        PyTuple_SET_ITEM(made, i, tp);
    }
    int r = PyDict_SetItem(self->tps, topic, made);
    Py_DECREF(made);
    if (r < 0)
        return NULL;
    return PyTuple_GET_ITEM(made, p); /* borrowed: the dict holds the tuple */
}

/*
 * The open batch of partition p (of n) of a keyed topic, borrowed; NULL with no exception
 * when there is none.  The topic's TopicPartition hashes are kept for the last keyed topic.
 */
static PyObject *
fs_keyed_batch(FastSend *self, PyObject *topic, long n, long p)
{
    if ((self->hot_topic != topic || self->hot_n != n) &&
        !(self->hot_topic != NULL && self->hot_n == n &&
          PyUnicode_GET_LENGTH(topic) == PyUnicode_GET_LENGTH(self->hot_topic) &&
          PyUnicode_Compare(topic, self->hot_topic) == 0)) {
        PyObject *tp = fs_topic_partition(self, topic, n, p);
        if (tp == NULL)
            return NULL;
        PyObject *tps = PyDict_GetItemWithError(self->tps, topic); /* made just now */
        if (tps == NULL || PyTuple_GET_SIZE(tps) != n)
            return PyErr_Occurred() ? NULL : PyDict_GetItemWithError(self->open, tp);
        Py_hash_t *hashes = PyMem_Malloc((size_t)n * sizeof(Py_hash_t));
        if (hashes == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (long i = 0; i < n; i++)
            hashes[i] = -1;
        fs_forget_hot(self);
        self->hot_topic = Py_NewRef(topic);
        self->hot_tps = Py_NewRef(tps);
        self->hot_hashes = hashes;
        self->hot_n = n;
    }
    PyObject *tp = PyTuple_GET_ITEM(self->hot_tps, p);
    Py_hash_t h = self->hot_hashes[p];
    if (h == -1) {
        h = PyObject_Hash(tp);
        if (h == -1)
            return NULL;
        self->hot_hashes[p] = h;
    }
    return _PyDict_GetItem_KnownHash(self->open, tp, h);
}

static inline int
fs_acquire(FastSend *self)
{
    if (self->lock != NULL)
        return lock_acquire_raw(self->lock, -1) == 1 ? 0 : -1;
    PyObject *r = PyObject_CallNoArgs(self->acquire);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static inline int
fs_release(FastSend *self)
{
    if (self->lock != NULL) {
        lock_release_raw(self->lock);
        return 0;
    }
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static inline int64_t
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/*
 * send(topic, value=None, key=None, *, partition=None, timestamp=None, headers=None,
 *      on_delivery=None) -> DeliveryFuture
 */
static PyObject *
fs_send(FastSend *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *topic = NULL, *value = Py_None, *key = Py_None, *timestamp = Py_None;
    PyObject *on_delivery = Py_None;
    if (nargs < 1 || nargs > 3)
        goto slow;
    topic = args[0];
    if (nargs > 1)
        value = args[1];
    if (nargs > 2)
        key = args[2];
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            PyObject *arg = args[nargs + i];
            if (kw_is(name, kw_key) && nargs < 3)
                key = arg;
            else if (kw_is(name, kw_on_delivery))
                on_delivery = arg;
            else if (kw_is(name, kw_value) && nargs < 2)
                value = arg;
            else if (kw_is(name, kw_timestamp))
                timestamp = arg;
            else if ((kw_is(name, kw_partition) || kw_is(name, kw_headers)) && arg == Py_None)
                continue;
            else
                goto slow;
        }
    }
    if (!PyUnicode_CheckExact(topic) || !(value == Py_None || PyBytes_CheckExact(value)) ||
        !(key == Py_None || PyBytes_CheckExact(key)))
        goto slow;
    int64_t ts;
    if (timestamp == Py_None) {
        ts = now_ms();
    } else if (PyLong_CheckExact(timestamp)) {
        if (get_timestamp(timestamp, &ts) < 0)
            return NULL;
    } else {
        goto slow;
    }

    if (fs_acquire(self) < 0)
        return NULL;
    /* From here on, every exit releases the lock. */
    PyObject *batch; /* borrowed from the dicts, which only change under the lock */
    if (key == Py_None) {
        batch = PyDict_GetItemWithError(self->sticky, topic);
    } else {
        batch = NULL;
        PyObject *count = PyDict_GetItemWithError(self->counts, topic);
        if (count != NULL) {
            long n = PyLong_AsLong(count);
            if (n > 0) {
                int32_t h = kafka_murmur2((const unsigned char *)PyBytes_AS_STRING(key),
                                          PyBytes_GET_SIZE(key));
                long p = (long)((uint32_t)h & 0x7fffffffu) % n;
                batch = fs_keyed_batch(self, topic, n, p);
            }
        }
    }
    if (batch == NULL) {
        if (PyErr_Occurred())
            goto error_locked;
        goto slow_locked;
    }
    PyObject *builder;
    if (self->builder_offset && Py_IS_TYPE(batch, self->batch_type)) {
        builder = *(PyObject **)((char *)batch + self->builder_offset);
        if (builder == NULL)
            goto slow_locked;
        Py_INCREF(builder);
    } else {
        builder = PyObject_GetAttr(batch, str_builder);
        if (builder == NULL)
            goto error_locked;
    }
    if (!PyObject_TypeCheck(builder, &RecordBufferType) || ((RecordBuffer *)builder)->count == 0) {
        /* An empty open batch (its first record failed to encode): the slow path checks
         * the record's size against max_request_size before accepting it. */
        Py_DECREF(builder);
        goto slow_locked;
    }
    RecordBuffer *rb = (RecordBuffer *)builder;
    Blob kb, vb;
    kb.has_view = vb.has_view = 0;
    if (key == Py_None) {
        kb.data = NULL;
        kb.len = -1;
    } else {
        kb.data = PyBytes_AS_STRING(key);
        kb.len = PyBytes_GET_SIZE(key);
    }
    if (value == Py_None) {
        vb.data = NULL;
        vb.len = -1;
    } else {
        vb.data = PyBytes_AS_STRING(value);
        vb.len = PyBytes_GET_SIZE(value);
    }
    int32_t index = rb->count;
    int r = rb_append_raw(rb, ts, &kb, &vb, NULL);
    if (r <= 0) {
        Py_DECREF(builder);
        if (r < 0)
            goto error_locked;
        goto slow_locked; /* full: the Python send seals it and opens the next */
    }
    if (on_delivery != Py_None && rb_add_callback_raw(rb, index, ts, on_delivery) < 0) {
        /* The record is in; only its callback could not be kept (out of memory). */
        Py_DECREF(builder);
        goto error_locked;
    }
    Py_DECREF(builder);
    Py_INCREF(batch); /* keep it past the lock for the future */
    if (fs_release(self) < 0) {
        Py_DECREF(batch);
        return NULL;
    }
    FutureBase *fut = fb_alloc(self->future_type);
    if (fut == NULL) {
        Py_DECREF(batch);
        return NULL;
    }
    fut->batch = batch;
    fut->index = index;
    fut->timestamp = ts;
    return (PyObject *)fut;

error_locked : {
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    if (fs_release(self) < 0)
        PyErr_Clear();
    PyErr_Restore(type, val, tb);
    return NULL;
}
slow_locked:
    if (fs_release(self) < 0)
        return NULL;
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
fs_forget(FastSend *self, PyObject *topic)
{
    fs_forget_hot(self);
    if (PyDict_DelItem(self->tps, topic) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static PyMethodDef fs_methods[] = {
    {"send", (PyCFunction)(void (*)(void))fs_send, METH_FASTCALL | METH_KEYWORDS,
     "send(topic, value=None, key=None, *, partition=None, timestamp=None, headers=None, "
     "on_delivery=None) -> DeliveryFuture"},
    {"forget", (PyCFunction)fs_forget, METH_O, "drop a topic's cached TopicPartitions"},
    {NULL}};

static PyTypeObject FastSendType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.client.producer._native.FastSend",
    .tp_basicsize = sizeof(FastSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "FastSend(lock, sticky, open, counts, tp_make, future_type, slow, batch_type=None)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fs_init,
    .tp_dealloc = (destructor)fs_dealloc,
    .tp_traverse = (traverseproc)fs_traverse,
    .tp_clear = (inquiry)fs_clear,
    .tp_methods = fs_methods,
};


/* ------------------------------------------------------------------ LatencyRecorder */

/*
 * A delivery callback for load tests (``logbus perf produce``): called as
 * ``recorder(metadata, error)``, it keeps ``now - metadata.timestamp`` in ms (wall clock,
 * the record's timestamp being the wall clock when send took it) or the error.  In C, so
 * the tool measures the producer rather than its own callback.
 */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    double *values;
    Py_ssize_t n;
    Py_ssize_t cap;
    PyObject *errors;
} LatencyRecorder;

static PyObject *
lr_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    LatencyRecorder *self = (LatencyRecorder *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "recorder(metadata, error)");
        return NULL;
    }
    PyObject *meta = args[0];
    if (meta == Py_None) {
        if (PyList_Append(self->errors, args[1]) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) < 4) {
        PyErr_SetString(PyExc_TypeError, "metadata must be a RecordMetadata");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(PyTuple_GET_ITEM(meta, 3));
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double now = (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 1 << 16;
        double *values = PyMem_Realloc(self->values, (size_t)cap * sizeof(double));
        if (values == NULL)
            return PyErr_NoMemory();
        self->values = values;
        self->cap = cap;
    }
    self->values[self->n++] = now - (double)ts;
    Py_RETURN_NONE;
}

static PyObject *
lr_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "LatencyRecorder() takes no arguments");
        return NULL;
    }
    LatencyRecorder *self = (LatencyRecorder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = lr_vectorcall;
    self->errors = PyList_New(0);
    if (self->errors == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
lr_traverse(LatencyRecorder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->errors);
    return 0;
}

static int
lr_clear(LatencyRecorder *self)
{
    Py_CLEAR(self->errors);
    return 0;
}

static void
lr_dealloc(LatencyRecorder *self)
{
    PyObject_GC_UnTrack(self);
    lr_clear(self);
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
lr_latencies(LatencyRecorder *self, PyObject *Py_UNUSED(ignored))
{
    return PyBytes_FromStringAndSize((const char *)self->values,
                                     self->n * (Py_ssize_t)sizeof(double));
}

static PyObject *
lr_get_errors(LatencyRecorder *self, void *closure)
{
    return Py_NewRef(self->errors);
}

static PyMethodDef lr_methods[] = {
    {"latencies", (PyCFunction)lr_latencies, METH_NOARGS,
     "the latencies (ms) recorded so far, as native doubles (array('d').frombytes)"},
    {NULL}};

static PyGetSetDef lr_getset[] = {{"errors", (getter)lr_get_errors, NULL, "errors received", NULL},
                                  {NULL}};

static PyTypeObject LatencyRecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.client.producer._native.LatencyRecorder",
    .tp_basicsize = sizeof(LatencyRecorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "LatencyRecorder(): a delivery callback keeping now - record timestamp (ms)",
    .tp_new = lr_new,
    .tp_dealloc = (destructor)lr_dealloc,
    .tp_traverse = (traverseproc)lr_traverse,
    .tp_clear = (inquiry)lr_clear,
    .tp_vectorcall_offset = offsetof(LatencyRecorder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = lr_methods,
    .tp_getset = lr_getset,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"murmur2", py_murmur2, METH_O, "Kafka's murmur2 of a bytes-like key, as a signed int"},
    {"build_plain_many", py_build_plain_many, METH_O,
     "build_plain_many(buffers) -> bytes | None: uncompressed batches, built into one bytes"},
    {NULL}};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "app.client.producer._native",
    "The producer's per-record work in C (see _speedups.py).", -1, module_methods};

PyMODINIT_FUNC
PyInit__native(void)
{
    if (PyType_Ready(&LockType) < 0 || PyType_Ready(&RecordBufferType) < 0 || PyType_Ready(&FutureBaseType) < 0 ||
        PyType_Ready(&FastSendType) < 0 || PyType_Ready(&LatencyRecorderType) < 0)
        return NULL;
    hw_crc = hw_crc_available();
    str_builder = PyUnicode_InternFromString("builder");
    kw_value = PyUnicode_InternFromString("value");
    kw_key = PyUnicode_InternFromString("key");
    kw_partition = PyUnicode_InternFromString("partition");
    kw_timestamp = PyUnicode_InternFromString("timestamp");
    kw_headers = PyUnicode_InternFromString("headers");
    kw_on_delivery = PyUnicode_InternFromString("on_delivery");
    if (!str_builder || !kw_value || !kw_key || !kw_partition || !kw_timestamp || !kw_headers ||
        !kw_on_delivery)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Lock", (PyObject *)&LockType) < 0 ||
        PyModule_AddObjectRef(m, "RecordBuffer", (PyObject *)&RecordBufferType) < 0 ||
        PyModule_AddObjectRef(m, "FutureBase", (PyObject *)&FutureBaseType) < 0 ||
        PyModule_AddObjectRef(m, "FastSend", (PyObject *)&FastSendType) < 0 ||
        PyModule_AddObjectRef(m, "LatencyRecorder", (PyObject *)&LatencyRecorderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
