/*
 * The node table shared by the Avro encoder (_avroenc.c) and decoder (_avrodec.c): the
 * program that app/common/schemas/_avro_fast.py's native_program makes from fastavro's
 * parsed schema, built into C structs once per schema. Layout (node 0 the root, children
 * by their index in the table, so a named type used twice is one node):
 *
 *     ("null",) ("boolean",) ("int",) ("long",) ("float",) ("double",) ("string",)
 *     ("bytes",) ("fixed", size) ("enum", {symbol: index}) ("array", items)
 *     ("map", values) ("record", ((field name, node), ...)) ("union", null_at, other)
 *
 * build_program() checks the table (kinds, arities, child indexes in range, no cycle) so
 * that a walk over it always ends; a malformed table is a ValueError / TypeError.
 * The extension types over a program share their head, constructor and slots here too
 * (PROGRAM_HEAD, program_object_new, VECTORCALL_GC_SLOTS, at the end).
 * Included by both extensions (static functions: each module gets its own copy).
 */
#ifndef LOGBUS_AVROPROGRAM_H
#define LOGBUS_AVROPROGRAM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    K_NULL,
    K_BOOLEAN,
    K_INT,
    K_LONG,
    K_FLOAT,
    K_DOUBLE,
    K_STRING,
    K_BYTES,
    K_FIXED,
    K_ENUM,
    K_ARRAY,
    K_MAP,
    K_RECORD,
    K_UNION,
};

typedef struct Node {
    int kind;
    Py_ssize_t size;       /* fixed: its size; union: the null branch's index */
    struct Node *child;    /* array items, map values, the union's other branch */
    PyObject *symbols;     /* enum: {symbol: index} (owned) */
    Py_ssize_t nfields;    /* record */
    PyObject **names;      /* record: field names, interned (owned) */
    struct Node **fields;  /* record: field nodes */
    PyObject *by_index;    /* enum, decoder only: its symbols by index, a tuple (owned) */
    Py_ssize_t min_size;   /* decoder only: the fewest bytes a value of this node takes */
    Py_ssize_t weight;     /* decoder only, for a node whose values take no bytes: what a
                              value builds (1, a record 1 plus its fields' weights) */
} Node;

static void
free_nodes(Node *nodes, Py_ssize_t count)
{
    if (nodes == NULL)
        return;
    for (Py_ssize_t i = 0; i < count; i++) {
        Node *n = &nodes[i];
        Py_XDECREF(n->symbols);
        Py_XDECREF(n->by_index);
        if (n->names != NULL) {
            for (Py_ssize_t j = 0; j < n->nfields; j++)
                Py_XDECREF(n->names[j]);
            PyMem_Free(n->names);
        }
        PyMem_Free(n->fields);
    }
    PyMem_Free(nodes);
}

static const struct {
    const char *name;
    int kind;
} KINDS[] = {
    {"null", K_NULL},     {"boolean", K_BOOLEAN}, {"int", K_INT},     {"long", K_LONG},
    {"float", K_FLOAT},   {"double", K_DOUBLE},   {"string", K_STRING}, {"bytes", K_BYTES},
    {"fixed", K_FIXED},   {"enum", K_ENUM},       {"array", K_ARRAY}, {"map", K_MAP},
    {"record", K_RECORD}, {"union", K_UNION},
};

static int
bad_program(const char *why, Py_ssize_t at)
{
    PyErr_Format(PyExc_ValueError, "program node %zd: %s", at, why);
    return -1;
}

/* A child index of node ``at``, in range (cycles are refused afterwards: acyclic()). */
static int
child_of(PyObject *item, Py_ssize_t count, Py_ssize_t at, Node *nodes, Node **out)
{
    Py_ssize_t i = PyLong_AsSsize_t(item);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i >= count)
        return bad_program("a child index out of range", at);
    *out = &nodes[i];
    return 0;
}

/* Whether no node reaches itself (the Python side never makes cycles: recursive schemas
   get no program; checked so that an encode always ends). state: 0 new, 1 on the path,
   2 done. */
static int
acyclic(Node *nodes, const Node *n, char *state)
{
    Py_ssize_t at = n - nodes;
    if (state[at] == 2)
        return 1;
    if (state[at] == 1)
        return 0;
    state[at] = 1;
    if (n->child != NULL && !acyclic(nodes, n->child, state))
        return 0;
    for (Py_ssize_t j = 0; j < n->nfields; j++)
        if (!acyclic(nodes, n->fields[j], state))
            return 0;
    state[at] = 2;
    return 1;
}

static int
build_node(PyObject *t, Node *nodes, Py_ssize_t count, Py_ssize_t at)
{
    Node *n = &nodes[at];
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0)))
        return bad_program("not a (kind, ...) tuple", at);
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
    if (name == NULL)
        return -1;
    n->kind = -1;
    for (size_t k = 0; k < sizeof KINDS / sizeof KINDS[0]; k++)
        if (strcmp(name, KINDS[k].name) == 0)
            n->kind = KINDS[k].kind;
    Py_ssize_t arity = PyTuple_GET_SIZE(t);
    switch (n->kind) {
    case -1:
        return bad_program("an unknown kind", at);
    case K_FIXED:
        if (arity != 2)
            return bad_program("fixed takes a size", at);
        n->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        if (n->size == -1 && PyErr_Occurred())
            return -1;
        return n->size < 0 ? bad_program("a negative size", at) : 0;
    case K_ENUM:
        if (arity != 2 || !PyDict_CheckExact(PyTuple_GET_ITEM(t, 1)))
            return bad_program("enum takes a dict of its symbols", at);
        n->symbols = Py_NewRef(PyTuple_GET_ITEM(t, 1));
        return 0;
    case K_ARRAY:
    case K_MAP:
        if (arity != 2)
            return bad_program("array and map take a child", at);
        return child_of(PyTuple_GET_ITEM(t, 1), count, at, nodes, &n->child);
    case K_UNION:
        if (arity != 3)
            return bad_program("union takes the null branch's index and a child", at);
        n->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        if (n->size == -1 && PyErr_Occurred())
            return -1;
        if (n->size != 0 && n->size != 1)
            return bad_program("the null branch is 0 or 1", at);
        return child_of(PyTuple_GET_ITEM(t, 2), count, at, nodes, &n->child);
    case K_RECORD: {
        PyObject *fields = arity == 2 ? PyTuple_GET_ITEM(t, 1) : NULL;
        if (fields == NULL || !PyTuple_Check(fields))
            return bad_program("record takes a tuple of (name, child)", at);
        Py_ssize_t nf = PyTuple_GET_SIZE(fields);
        n->names = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(PyObject *));
        n->fields = PyMem_Calloc((size_t)(nf ? nf : 1), sizeof(Node *));
        if (n->names == NULL || n->fields == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        n->nfields = nf;
        for (Py_ssize_t j = 0; j < nf; j++) {
            PyObject *f = PyTuple_GET_ITEM(fields, j);
            if (!PyTuple_Check(f) || PyTuple_GET_SIZE(f) != 2 ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(f, 0)))
                return bad_program("a field is not (name, child)", at);
            PyObject *fname = Py_NewRef(PyTuple_GET_ITEM(f, 0));
            PyUnicode_InternInPlace(&fname);
            n->names[j] = fname;
            if (child_of(PyTuple_GET_ITEM(f, 1), count, at, nodes, &n->fields[j]) < 0)
                return -1;
        }
        return 0;
    }
    default:
        return arity == 1 ? 0 : bad_program("a primitive takes nothing", at);
    }
}

/* The program's nodes (*out, *count; free_nodes frees them), or -1 with an exception. */
static int
build_program(PyObject *program, Node **out, Py_ssize_t *out_count)
{
    if (!PyList_Check(program)) {
        PyErr_SetString(PyExc_TypeError, "a program is a list of nodes");
        return -1;
    }
    Py_ssize_t count = PyList_GET_SIZE(program);
    if (count < 1) {
        PyErr_SetString(PyExc_ValueError, "an empty program");
        return -1;
    }
    Node *nodes = PyMem_Calloc((size_t)count, sizeof(Node));
    if (nodes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (build_node(PyList_GET_ITEM(program, i), nodes, count, i) < 0) {
            free_nodes(nodes, count);
            return -1;
        }
    }
    char *state = PyMem_Calloc((size_t)count, 1);
    if (state == NULL) {
        free_nodes(nodes, count);
        PyErr_NoMemory();
        return -1;
    }
    int ok = acyclic(nodes, &nodes[0], state);
    PyMem_Free(state);
    if (!ok) {
        free_nodes(nodes, count);
        PyErr_SetString(PyExc_ValueError, "the program has a cycle");
        return -1;
    }
    *out = nodes;
    *out_count = count;
    return 0;
}

/* ---- the extension types over a program -------------------------------------------------

   Both extensions' types that run a program (the decoder's Reader, the Encoder) start with
   PROGRAM_HEAD, as CPython's objects start with PyObject_HEAD: program_object_new then
   builds, checks and keeps the nodes for either, and program_object_free frees them. */
#define PROGRAM_HEAD   \
    PyObject_HEAD      \
    Node *nodes;       \
    Py_ssize_t nnodes;

typedef struct {
    PROGRAM_HEAD
} ProgramObject;

/* A new instance of ``type`` holding ``program``'s nodes, built and checked, then completed
   by ``prepare`` (NULL: nothing to add; the decoder fills its own fields of the nodes); or
   NULL with an exception and nothing left to free. */
static PyObject *
program_object_new(PyTypeObject *type, PyObject *program, int (*prepare)(Node *, Py_ssize_t))
{
    Node *nodes;
    Py_ssize_t count;
    if (build_program(program, &nodes, &count) < 0)
        return NULL;
    if (prepare != NULL && prepare(nodes, count) < 0) {
        free_nodes(nodes, count);
        return NULL;
    }
    ProgramObject *self = (ProgramObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        free_nodes(nodes, count);
        return NULL;
    }
    self->nodes = nodes;
    self->nnodes = count;
    return (PyObject *)self;
}

/* For a dealloc: frees what program_object_new built (not the object). */
static void
program_object_free(PyObject *self)
{
    ProgramObject *p = (ProgramObject *)self;
    free_nodes(p->nodes, p->nnodes);
    p->nodes = NULL;
    p->nnodes = 0;
}

/* The slots of a type whose instances are called through vectorcall (the struct's
   ``vectorcall`` member, set by its tp_new) and keep a Python fallback that usually keeps
   them (a cycle: they take part in the cycle collector): the Encoder and the decoder's
   FramedDecoder. */
#define VECTORCALL_GC_SLOTS(T, dealloc, traverse, clear)                              \
    .tp_basicsize = sizeof(T),                                                        \
    .tp_dealloc = (destructor)(dealloc),                                              \
    .tp_vectorcall_offset = offsetof(T, vectorcall),                                  \
    .tp_call = PyVectorcall_Call,                                                     \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC, \
    .tp_traverse = (traverseproc)(traverse),                                          \
    .tp_clear = (inquiry)(clear)

#endif
