/*
 * app.common.schemas._avrodec: a typed (Avro) fetch's per-record decode in C, the read-side
 * twin of the encoder (_avroenc.c), over the same program (_avroprogram.h, made by
 * app/common/schemas/_avro_fast.py's native_program for reading: no logical types).
 *
 * Reader(program, bytes_as_text) is one schema's decoder: reader.read(data, start) -> the
 * value of the Avro binary in ``data`` (any buffer) from ``start`` to its end, as the
 * Python objects fastavro's reader gives (records as dicts in field order, arrays as
 * lists, maps as dicts, enums as their symbol, strings as str, bytes and fixed as bytes,
 * or, with ``bytes_as_text``, as their base64 text: what the JSON answer carries). It is
 * an accelerator, never the reference: for bytes it does not take, it answers DECLINED
 * and the caller decodes them with fastavro, whose value or error is the record's. It
 * reads what fastavro's compiled reader reads, leniencies included (any nonzero boolean
 * byte is true, an int is not range-checked, an enum or union index of -1 is the last
 * symbol or branch, as Python's indexing), so that it declines only bytes on which
 * fastavro raises too, at the same point of the walk: a truncated payload, a negative
 * length or one longer than the bytes left (checked before anything is allocated, so a
 * huge varint never allocates), a string that is not UTF-8 (strict, as fastavro's), an
 * enum or union index out of range; and bytes after the value (fastavro's value, the
 * same, then fails the caller's check). Block counts cost nothing up front: items are
 * appended as they are read, each taking a byte at least, so the bytes bound the walk.
 * Nothing it declines lets fastavro read on: fastavro's two leniencies that would (a
 * varint of more than 64 bits, read with each shift taken modulo 64 as its compiled
 * reader's shift instruction takes it; a block count of -2**63, negated to itself, a
 * block of no items that does not end the array or map) are read here the same way, so
 * the bytes after them are checked here too. The one thing it refuses itself (a
 * ValueError, the record's error): building more values from no bytes than its budget
 * (``zero_width_items`` for one value, default ZERO_WIDTH_ITEMS; a FramedDecoder's
 * ``budget`` for all the records of one fetch answer together) beyond one per byte read.
 * Values built from no bytes are a null, a fixed of size 0, a record (1 plus its
 * fields'), charged where such a run starts: a value's root, a union's branch, a map's
 * value, an array's item (a block of items that take no bytes at once, as its count is
 * read: three bytes can declare 2**62 of them, which fastavro would try to build). One
 * run is bounded when the schema is parsed (_avro_shape.zero_byte_values,
 * schema_registry_max_zero_byte_values); the budget bounds their sum, so that many values
 * each under a bound cannot together build without bound.
 * tests/unit/common/schemas/test_schtypes_avro_decode.py checks, on random schemas,
 * values and byte strings, that a value read here is fastavro's.
 *
 * FramedDecoder(fallback) is a typed fetch's per-record call: decoder(data) -> value for
 * one Confluent-framed record (magic byte 0, 4-byte schema id, payload). A record whose
 * first five bytes are the header it targets (decoder.target(header, reader)) and that
 * its reader decodes is answered here, with no Python frame; None is None; anything else
 * (another id, a short or unframed record, bytes the reader declines or refuses) is
 * ``fallback(data)``'s answer (app/api/typed.py: says why, and may retarget this decoder
 * at the record's id).
 *
 * Concurrency: runs with the GIL held, calls no Python code while decoding (only the
 * fallback, after); a FramedDecoder is used by one answer's walk at a time.
 */
#include "_avroprogram.h"
#include <structmember.h>

#define OK 0
#define DECLINE 1 /* not judged here: the fallback (fastavro) decides */
#define REFUSE 2  /* refused here: a ValueError is set, its message is the record's error */
#define ERROR -1  /* an exception (memory) */

/* Array items that take no bytes, per value (see the top): Reader's default; the broker
   passes its setting (LOGBUS_TYPED_RECORDS_MAX_ZERO_WIDTH_ITEMS). */
#define ZERO_WIDTH_ITEMS (1 << 20)

typedef struct {
    const unsigned char *p, *end;
    Py_ssize_t zero_width_left, zero_width_limit;
    int bytes_as_text;
} In;

/* Values a run that reads no byte builds (n->weight: a record and its null fields, ...),
   charged against what is left of the budget (see the top). */
static inline int
charge(In *in, Py_ssize_t weight)
{
    if (weight > in->zero_width_left) {
        PyErr_Format(PyExc_ValueError,
                     "Avro payload does not decode: it builds more values from no bytes (records, "
                     "nulls, zero-size fixed) than the %zd its answer may, beyond one per byte "
                     "it reads (LOGBUS_TYPED_RECORDS_MAX_ZERO_WIDTH_ITEMS)",
                     in->zero_width_limit);
        return REFUSE;
    }
    in->zero_width_left -= weight;
    return OK;
}

/* Avro's long: a base-128 varint, then zig-zag. Past 64 bits (not Avro, but what a producer
   may send), as fastavro's compiled reader reads it: it keeps going, each group shifted by
   its bit offset modulo 64 (x86-64's and AArch64's shift instructions take the count
   modulo 64), so its value is fastavro's and the bytes after it are read here, checked,
   not left to fastavro (where a zero-width bomb after it would be built). */
static inline int
get_long(In *in, int64_t *out)
{
    uint64_t v = 0;
    unsigned shift = 0;
    for (;;) {
        if (in->p >= in->end)
            return DECLINE;
        unsigned char b = *in->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift = (shift + 7) & 63;
    }
    *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
    return OK;
}

/* A length (string, bytes, map key) that the bytes left hold. */
static inline int
get_length(In *in, Py_ssize_t *out)
{
    int64_t n;
    int r = get_long(in, &n);
    if (r != OK)
        return r;
    if (n < 0 || n > in->end - in->p)
        return DECLINE;
    *out = (Py_ssize_t)n;
    return OK;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64.b64encode(data).decode("ascii"). */
static PyObject *
base64_text(const unsigned char *data, Py_ssize_t n)
{
    if (n > (PY_SSIZE_T_MAX / 4) * 3 - 3)
        return PyErr_NoMemory();
    PyObject *s = PyUnicode_New(((n + 2) / 3) * 4, 127);
    if (s == NULL)
        return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(s);
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t t = ((uint32_t)data[i] << 16) | ((uint32_t)data[i + 1] << 8) | data[i + 2];
        *o++ = (Py_UCS1)B64[t >> 18];
        *o++ = (Py_UCS1)B64[(t >> 12) & 63];
        *o++ = (Py_UCS1)B64[(t >> 6) & 63];
        *o++ = (Py_UCS1)B64[t & 63];
    }
    if (n - i == 1) {
        uint32_t t = (uint32_t)data[i] << 16;
        *o++ = (Py_UCS1)B64[t >> 18];
        *o++ = (Py_UCS1)B64[(t >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        uint32_t t = ((uint32_t)data[i] << 16) | ((uint32_t)data[i + 1] << 8);
        *o++ = (Py_UCS1)B64[t >> 18];
        *o++ = (Py_UCS1)B64[(t >> 12) & 63];
        *o++ = (Py_UCS1)B64[(t >> 6) & 63];
        *o++ = '=';
    }
    return s;
}

static int decode(In *in, const Node *n, PyObject **out);

/* A str (strict UTF-8, as fastavro's reader); DECLINE for bytes that are not UTF-8. */
static int
get_string(In *in, PyObject **out)
{
    Py_ssize_t len;
    int r = get_length(in, &len);
    if (r != OK)
        return r;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)in->p, len, NULL);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return ERROR;
        PyErr_Clear();
        return DECLINE;
    }
    in->p += len;
    *out = s;
    return OK;
}

static int
get_raw(In *in, Py_ssize_t len, PyObject **out)
{
    if (len > in->end - in->p)
        return DECLINE;
    PyObject *v = in->bytes_as_text ? base64_text(in->p, len)
                                    : PyBytes_FromStringAndSize((const char *)in->p, len);
    if (v == NULL)
        return ERROR;
    in->p += len;
    *out = v;
    return OK;
}

/* A block's item count (the absolute value of a negative one, its byte size skipped, as
   fastavro does); 0 ends the array or map. -1 for a count of -2**63: fastavro negates it
   to itself, reads its byte size and loops over no items, and the array goes on (so this
   reads on too, rather than leave the rest to fastavro unchecked). Items that take no
   bytes (min_size 0) are counted against the value's bound, each as its ``weight`` (what
   it builds: a record of 100 nulls is 101 objects and entries, not 1); others are bounded
   by the bytes left as they are read. */
static int
get_count(In *in, Py_ssize_t min_size, Py_ssize_t weight, Py_ssize_t *out)
{
    int64_t count;
    int r = get_long(in, &count);
    if (r != OK)
        return r;
    if (count < 0) {
        int64_t size;
        r = get_long(in, &size);
        if (r != OK)
            return r;
        if (count == INT64_MIN) {
            *out = -1;
            return OK;
        }
        count = -count;
    }
    if (min_size == 0 && count > 0) {
        /* weight >= 1; count * weight <= zero_width_left: no overflow */
        if (count > in->zero_width_left / weight) {
            PyErr_Format(PyExc_ValueError,
                         "Avro payload does not decode: an array block of %lld items that take "
                         "no bytes (a fetch answer's values may hold at most %zd such items "
                         "beyond one per byte they read, a record of them counting 1 plus its "
                         "fields)",
                         (long long)count, in->zero_width_limit);
            return REFUSE;
        }
        in->zero_width_left -= (Py_ssize_t)count * weight;
    }
    *out = (Py_ssize_t)count;
    return OK;
}

/* One item of an array's or map's block, read into ``into`` (its list or dict). */
typedef int (*ReadItem)(In *in, const Node *n, PyObject *into);

/* An array's or map's blocks, each item read by ``read_item`` into ``into``: ``*out`` takes
   ``into`` at the block of count 0; any other outcome frees it. ``min_size`` and ``weight``:
   an item's, for get_count. */
static inline int
decode_blocks(In *in, const Node *n, PyObject *into, Py_ssize_t min_size, Py_ssize_t weight,
              ReadItem read_item, PyObject **out)
{
    for (;;) {
        Py_ssize_t count;
        int r = get_count(in, min_size, weight, &count);
        if (r == OK && count == 0) {
            *out = into;
            return OK;
        }
        for (Py_ssize_t i = 0; r == OK && i < count; i++)
            r = read_item(in, n, into);
        if (r != OK) {
            Py_DECREF(into);
            return r;
        }
    }
}

static int
array_item(In *in, const Node *n, PyObject *list)
{
    /* Items that take bytes are charged one by one (their count is not bounded by the
       bytes left until they are read); those that take none were, as their block's
       count was read. */
    Py_ssize_t each = n->child->min_size > 0 ? n->child->weight : 0;
    PyObject *item;
    int r = each > 0 ? charge(in, each) : OK;
    if (r == OK)
        r = decode(in, n->child, &item);
    if (r == OK) {
        r = PyList_Append(list, item) < 0 ? ERROR : OK;
        Py_DECREF(item);
    }
    return r;
}

static int
decode_array(In *in, const Node *n, PyObject **out)
{
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return ERROR;
    return decode_blocks(in, n, list, n->child->min_size, n->child->weight, array_item, out);
}

static int
map_entry(In *in, const Node *n, PyObject *dict)
{
    PyObject *key, *item;
    int r = get_string(in, &key);
    if (r != OK)
        return r;
    if (n->child->weight > 0)
        r = charge(in, n->child->weight);
    if (r == OK)
        r = decode(in, n->child, &item);
    if (r == OK) {
        r = PyDict_SetItem(dict, key, item) < 0 ? ERROR : OK;
        Py_DECREF(item);
    }
    Py_DECREF(key);
    return r;
}

static int
decode_map(In *in, const Node *n, PyObject **out)
{
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return ERROR;
    /* An entry takes at least its key's length byte. */
    return decode_blocks(in, n, dict, n->child->min_size + 1, 1, map_entry, out);
}

static int
decode(In *in, const Node *n, PyObject **out)
{
    switch (n->kind) {
    case K_NULL:
        *out = Py_NewRef(Py_None);
        return OK;
    case K_BOOLEAN: {
        if (in->p >= in->end)
            return DECLINE;
        *out = Py_NewRef(*in->p++ ? Py_True : Py_False); /* any nonzero byte, as fastavro */
        return OK;
    }
    case K_INT:
    case K_LONG: {
        int64_t v;
        int r = get_long(in, &v);
        if (r != OK)
            return r;
        /* An int outside 32 bits: fastavro returns it as it is (no range check). */
        *out = PyLong_FromLongLong((long long)v);
        return *out == NULL ? ERROR : OK;
    }
    case K_FLOAT:
    case K_DOUBLE: {
        int size = n->kind == K_FLOAT ? 4 : 8;
        if (in->end - in->p < size)
            return DECLINE;
        /* struct's "<f" / "<d", as fastavro reads them. */
        double d = size == 4 ? PyFloat_Unpack4((const char *)in->p, 1)
                             : PyFloat_Unpack8((const char *)in->p, 1);
        if (d == -1.0 && PyErr_Occurred())
            return ERROR;
        in->p += size;
        *out = PyFloat_FromDouble(d);
        return *out == NULL ? ERROR : OK;
    }
    case K_STRING:
        return get_string(in, out);
    case K_BYTES: {
        Py_ssize_t len;
        int r = get_length(in, &len);
        return r != OK ? r : get_raw(in, len, out);
    }
    case K_FIXED:
        return get_raw(in, n->size, out);
    case K_ENUM: {
        int64_t i;
        int r = get_long(in, &i);
        if (r != OK)
            return r;
        Py_ssize_t count = PyTuple_GET_SIZE(n->by_index);
        if (i < 0)
            i += count; /* fastavro indexes its symbol list: -1 is the last */
        if (i < 0 || i >= count)
            return DECLINE;
        *out = Py_NewRef(PyTuple_GET_ITEM(n->by_index, (Py_ssize_t)i));
        return OK;
    }
    case K_ARRAY:
        return decode_array(in, n, out);
    case K_MAP:
        return decode_map(in, n, out);
    case K_RECORD: {
        PyObject *dict = PyDict_New();
        if (dict == NULL)
            return ERROR;
        for (Py_ssize_t i = 0; i < n->nfields; i++) {
            PyObject *item;
            int r = decode(in, n->fields[i], &item);
            if (r == OK) {
                r = PyDict_SetItem(dict, n->names[i], item) < 0 ? ERROR : OK;
                Py_DECREF(item);
            }
            if (r != OK) {
                Py_DECREF(dict);
                return r;
            }
        }
        *out = dict;
        return OK;
    }
    case K_UNION: {
        int64_t i;
        int r = get_long(in, &i);
        if (r != OK)
            return r;
        if (i < 0)
            i += 2; /* fastavro indexes its branch list: -1 is the last */
        if (i == n->size) { /* a null: 1 value, paid for by its index byte as any other */
            *out = Py_NewRef(Py_None);
            return OK;
        }
        if (i != 1 - n->size)
            return DECLINE;
        if (n->child->weight > 0 && (r = charge(in, n->child->weight)) != OK)
            return r;
        return decode(in, n->child, out);
    }
    }
    return DECLINE;
}

/* ---- the Reader type: one schema's compiled program ---------------------------------- */

typedef struct {
    PROGRAM_HEAD
    int bytes_as_text;
    Py_ssize_t zero_width_items;
} Reader;

static PyObject *DECLINED; /* the sentinel read() answers for bytes it leaves to fastavro */

#define SIZE_CAP (PY_SSIZE_T_MAX / 4)

/* The fewest bytes a value of node ``n`` takes (capped), memoized in n->min_size (-1: not
   yet known): a named type used many times is computed once. The program is acyclic. */
static Py_ssize_t
min_size(Node *n)
{
    if (n->min_size >= 0)
        return n->min_size;
    Py_ssize_t size;
    switch (n->kind) {
    case K_NULL:
        size = 0;
        break;
    case K_FLOAT:
        size = 4;
        break;
    case K_DOUBLE:
        size = 8;
        break;
    case K_FIXED:
        size = n->size > SIZE_CAP ? SIZE_CAP : n->size; /* a map adds its key's byte */
        break;
    case K_RECORD:
        size = 0;
        for (Py_ssize_t i = 0; i < n->nfields; i++) {
            Py_ssize_t m = min_size(n->fields[i]);
            size = m > SIZE_CAP - size ? SIZE_CAP : size + m;
        }
        break;
    default: /* boolean, int, long, string, bytes, enum, array, map, union: a byte at least */
        size = 1;
    }
    n->min_size = size;
    return size;
}

/* What one value of the node builds from no bytes (capped; _avro_shape.zero_byte_values on the
   Python side, which refuses schemas over schema_registry_max_zero_byte_values): 1 for a
   null or a fixed of size 0, a record 1 plus its fields', 0 for every other node (it reads
   a byte first). Charged where such a run starts: a value's root, a union's branch, an
   array's item (a block of items that take no bytes at once), a map's value. A node whose
   values take no bytes (min_size 0) weighs 1 at least. Memoized in n->weight (-1: not yet
   known). */
static Py_ssize_t
weight(Node *n)
{
    if (n->weight >= 0)
        return n->weight;
    Py_ssize_t w = 0;
    if (n->kind == K_NULL || (n->kind == K_FIXED && n->size == 0))
        w = 1;
    else if (n->kind == K_RECORD) {
        w = 1;
        for (Py_ssize_t i = 0; i < n->nfields; i++) {
            Py_ssize_t f = weight(n->fields[i]);
            w = f > SIZE_CAP - w ? SIZE_CAP : w + f;
        }
    }
    n->weight = w;
    return w;
}

/* The enum nodes' symbols by index (from {symbol: index}), every node's min_size and
   weight. */
static int
prepare(Node *nodes, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        nodes[i].min_size = -1;
        nodes[i].weight = -1;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        min_size(&nodes[i]);
    for (Py_ssize_t i = 0; i < count; i++) {
        Node *n = &nodes[i];
        weight(n);
        if (n->kind != K_ENUM)
            continue;
        Py_ssize_t size = PyDict_GET_SIZE(n->symbols);
        PyObject *by_index = PyTuple_New(size);
        if (by_index == NULL)
            return -1;
        n->by_index = by_index;
        Py_ssize_t pos = 0;
        PyObject *symbol, *index;
        while (PyDict_Next(n->symbols, &pos, &symbol, &index)) {
            Py_ssize_t at = PyLong_AsSsize_t(index);
            if (at == -1 && PyErr_Occurred())
                return -1;
            if (!PyUnicode_CheckExact(symbol) || at < 0 || at >= size ||
                PyTuple_GET_ITEM(by_index, at) != NULL)
                return bad_program("enum symbols must map to the indexes 0..n-1", i);
            PyTuple_SET_ITEM(by_index, at, Py_NewRef(symbol));
        }
    }
    return 0;
}

static PyObject *
reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *program;
    int bytes_as_text = 0;
    Py_ssize_t zero_width_items = ZERO_WIDTH_ITEMS;
    static char *kwlist[] = {"program", "bytes_as_text", "zero_width_items", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|pn:Reader", kwlist, &PyList_Type,
                                     &program, &bytes_as_text, &zero_width_items))
        return NULL;
    if (zero_width_items < 0) {
        PyErr_SetString(PyExc_ValueError, "zero_width_items must be >= 0");
        return NULL;
    }
    Reader *self = (Reader *)program_object_new(type, program, prepare);
    if (self == NULL)
        return NULL;
    self->bytes_as_text = bytes_as_text;
    self->zero_width_items = zero_width_items;
    return (PyObject *)self;
}

static void
reader_dealloc(Reader *self)
{
    program_object_free((PyObject *)self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The value of data[start:len] (the whole rest), OK; or DECLINE / REFUSE / ERROR.
   ``*left``: the budget of values built from no bytes left to the answer (``limit`` its
   whole, for the message); the value's bytes add one each, what it builds from no bytes is
   taken off, and what remains is written back whatever the outcome (a value refused or
   declined has spent what it built before). */
static int
read_value(Reader *self, const char *data, Py_ssize_t len, Py_ssize_t start, Py_ssize_t *left,
           Py_ssize_t limit, PyObject **out)
{
    Py_ssize_t credit = len - start;
    In in = {(const unsigned char *)data + start, (const unsigned char *)data + len,
             credit > SIZE_CAP - *left ? SIZE_CAP : *left + credit, limit, self->bytes_as_text};
    PyObject *value;
    const Node *root = &self->nodes[0];
    int r = root->weight > 0 ? charge(&in, root->weight) : OK;
    if (r == OK)
        r = decode(&in, root, &value);
    *left = in.zero_width_left;
    if (r != OK)
        return r;
    if (in.p != in.end) { /* bytes after the value: fastavro's message says how many */
        Py_DECREF(value);
        return DECLINE;
    }
    *out = value;
    return OK;
}

/* read_value over ``data`` (any buffer) for read() and read_within(): the value; DECLINED
   for bytes left to fastavro (a ``start`` outside ``data`` too); NULL for REFUSE (a
   ValueError) or an error. */
static PyObject *
read_buffer(Reader *self, PyObject *data, Py_ssize_t start, Py_ssize_t *left, Py_ssize_t limit)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *value = NULL;
    int r = DECLINE;
    if (start >= 0 && start <= view.len)
        r = read_value(self, view.buf, view.len, start, left, limit, &value);
    PyBuffer_Release(&view);
    if (r == OK)
        return value;
    if (r == DECLINE)
        return Py_NewRef(DECLINED);
    return NULL;
}

static PyObject *
reader_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "read(data, start)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t left = ((Reader *)self)->zero_width_items;
    return read_buffer((Reader *)self, args[0], start, &left, ((Reader *)self)->zero_width_items);
}

/* read_within(data, start, left, limit) -> (value or DECLINED, left): read() against an
   answer's budget (left, of limit) instead of a value's own. */
static PyObject *
reader_read_within(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "read_within(data, start, left, limit)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t left = PyLong_AsSsize_t(args[2]);
    if (left == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (left < 0 || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "left and limit must be >= 0");
        return NULL;
    }
    PyObject *value = read_buffer((Reader *)self, args[0], start, &left, limit);
    if (value == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", value, left);
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))reader_read, METH_FASTCALL,
     "read(data, start) -> the value of data[start:], DECLINED for bytes left to fastavro; "
     "ValueError for bytes refused here"},
    {"read_within", (PyCFunction)(void (*)(void))reader_read_within, METH_FASTCALL,
     "read_within(data, start, left, limit) -> (value or DECLINED, left): read() charging "
     "an answer's budget of values built from no bytes (left of limit) instead of a "
     "value's own"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.common.schemas._avrodec.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(program, bytes_as_text=False, zero_width_items=ZERO_WIDTH_ITEMS): one "
              "schema's Avro decoder",
    .tp_methods = reader_methods,
    .tp_new = reader_new,
};

/* ---- FramedDecoder: a typed fetch's per-record call ------------------------------------ */

#define HEADER 5

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;
    PyObject *reader; /* a Reader, or NULL: every record goes to the fallback */
    unsigned char header[HEADER];
    Py_ssize_t left, limit; /* the answer's budget of values built from no bytes */
} FramedDecoder;

static PyObject *framed_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames);

static PyObject *
framed_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fallback;
    Py_ssize_t budget = ZERO_WIDTH_ITEMS;
    static char *kwlist[] = {"fallback", "budget", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|n:FramedDecoder", kwlist, &fallback,
                                     &budget))
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "budget must be >= 0");
        return NULL;
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback must be callable");
        return NULL;
    }
    FramedDecoder *self = (FramedDecoder *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = framed_vectorcall;
    self->fallback = Py_NewRef(fallback);
    self->left = self->limit = budget;
    return (PyObject *)self;
}

/* The fallback is a closure that retargets this decoder (a cycle): GC-tracked. */
static int
framed_traverse(FramedDecoder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->reader);
    return 0;
}

static int
framed_clear(FramedDecoder *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->reader);
    return 0;
}

static void
framed_dealloc(FramedDecoder *self)
{
    PyObject_GC_UnTrack(self);
    framed_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
framed_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FramedDecoder *self = (FramedDecoder *)op;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "FramedDecoder takes one record's bytes");
        return NULL;
    }
    PyObject *data = args[0];
    if (data == Py_None)
        return Py_NewRef(Py_None);
    if (self->reader != NULL && PyBytes_CheckExact(data) && PyBytes_GET_SIZE(data) >= HEADER &&
        memcmp(PyBytes_AS_STRING(data), self->header, HEADER) == 0) {
        PyObject *value;
        int r = read_value((Reader *)self->reader, PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), HEADER, &self->left, self->limit, &value);
        if (r == OK)
            return value;
        if (r == ERROR)
            return NULL;
        PyErr_Clear(); /* REFUSE: the fallback reads it again and says why */
    }
    if (self->fallback == NULL) { /* cleared by the cycle collector */
        PyErr_SetString(PyExc_RuntimeError, "the decoder's fallback is gone");
        return NULL;
    }
    return PyObject_CallOneArg(self->fallback, data);
}

/* target(header, reader): records framed with ``header`` (5 bytes) are read by ``reader``;
   target(None, None): every record goes to the fallback. */
static PyObject *
framed_target(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    FramedDecoder *self = (FramedDecoder *)op;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "target(header, reader)");
        return NULL;
    }
    if (args[0] == Py_None && args[1] == Py_None) {
        Py_CLEAR(self->reader);
        Py_RETURN_NONE;
    }
    if (!PyBytes_CheckExact(args[0]) || PyBytes_GET_SIZE(args[0]) != HEADER ||
        !Py_IS_TYPE(args[1], &ReaderType)) {
        PyErr_SetString(PyExc_TypeError, "target(header: 5 bytes, reader: Reader)");
        return NULL;
    }
    memcpy(self->header, PyBytes_AS_STRING(args[0]), HEADER);
    Py_XSETREF(self->reader, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef framed_methods[] = {
    {"target", (PyCFunction)(void (*)(void))framed_target, METH_FASTCALL,
     "target(header, reader): read records framed with header (5 bytes) with reader"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef framed_members[] = {
    {"left", T_PYSSIZET, offsetof(FramedDecoder, left), 0,
     "the answer's budget of values built from no bytes left (its records' bytes add one "
     "each); the fallback reads and sets it"},
    {"limit", T_PYSSIZET, offsetof(FramedDecoder, limit), READONLY, "the budget given"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FramedDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "app.common.schemas._avrodec.FramedDecoder",
    .tp_members = framed_members,
    VECTORCALL_GC_SLOTS(FramedDecoder, framed_dealloc, framed_traverse, framed_clear),
    .tp_doc = "FramedDecoder(fallback, budget=ZERO_WIDTH_ITEMS): one framed record's bytes -> "
              "its value; the values all its records build from no bytes share budget",
    .tp_methods = framed_methods,
    .tp_new = framed_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "app.common.schemas._avrodec",
    "A typed fetch's per-record Avro decode in C (see app/common/schemas/_avrodec.c).", -1,
    NULL,
};

PyMODINIT_FUNC
PyInit__avrodec(void)
{
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&FramedDecoderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (DECLINED == NULL) {
        DECLINED = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (DECLINED == NULL) {
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObjectRef(m, "FramedDecoder", (PyObject *)&FramedDecoderType) < 0 ||
        PyModule_AddObjectRef(m, "DECLINED", DECLINED) < 0 ||
        PyModule_AddIntConstant(m, "ZERO_WIDTH_ITEMS", ZERO_WIDTH_ITEMS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
