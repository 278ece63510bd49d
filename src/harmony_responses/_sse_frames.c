/* The compiled part of SSE framing (sse.py, encode_events): a batch of events as the body of one write.
 *
 * frames(events, prefixes, dumps) returns the bytes of prefix + dumps(event) + "\n\n" for each event of the
 * list events, one after another, where prefix is prefixes[event["type"]] (the event's "event: TYPE\ndata: "),
 * or None, having built nothing, when an event is not a dict with a "type" whose prefix is in prefixes yet:
 * sse.py then frames the batch itself (and keeps the new type's prefix for the next time). dumps is
 * orjson.dumps; whatever it raises is raised. The bytes are the same as sse.py's Python loop makes
 * (tests/api/test_sse.py holds the two to it).
 *
 * Why C: the loop around orjson costs about as much as orjson itself for a delta event (three list appends,
 * a dict lookup and the loop's own work per event, then a join), and a flat-out engine makes an event a
 * token (bench/translate_bench.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *TYPE; /* "type" */

static PyObject *frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "frames() takes 3 arguments");
        return NULL;
    }
    PyObject *events = args[0], *prefixes = args[1], *dumps = args[2];
    if (!PyList_CheckExact(events) || !PyDict_CheckExact(prefixes)) Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(events);
    /* Each event's prefix and JSON, then one buffer of the exact size. */
    PyObject **pieces = PyMem_Malloc(sizeof(PyObject *) * (size_t)(2 * n + 1));
    if (pieces == NULL) return PyErr_NoMemory();
    Py_ssize_t made = 0, size = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (!PyDict_CheckExact(event)) goto fallback;
        PyObject *type = PyDict_GetItemWithError(event, TYPE);
        if (type == NULL) {
            if (PyErr_Occurred()) goto done;
            goto fallback;
        }
        PyObject *prefix = PyDict_GetItemWithError(prefixes, type);
        if (prefix == NULL) {
            if (PyErr_Occurred()) goto done;
            goto fallback;
        }
        if (!PyBytes_CheckExact(prefix)) goto fallback;
        Py_INCREF(prefix); /* held from here: nothing dumps runs may take it away */
        PyObject *json = PyObject_CallOneArg(dumps, event);
        if (json == NULL || !PyBytes_CheckExact(json)) {
            Py_DECREF(prefix);
            if (json == NULL) goto done;
            Py_DECREF(json);
            goto fallback;
        }
        pieces[2 * i] = prefix;
        pieces[2 * i + 1] = json;
        made = i + 1;
        size += PyBytes_GET_SIZE(prefix) + PyBytes_GET_SIZE(json) + 2;
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *prefix = pieces[2 * i], *json = pieces[2 * i + 1];
        memcpy(out, PyBytes_AS_STRING(prefix), (size_t)PyBytes_GET_SIZE(prefix));
        out += PyBytes_GET_SIZE(prefix);
        memcpy(out, PyBytes_AS_STRING(json), (size_t)PyBytes_GET_SIZE(json));
        out += PyBytes_GET_SIZE(json);
        *out++ = '\n';
        *out++ = '\n';
    }
    goto done;
fallback:
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < made; i++) {
        Py_DECREF(pieces[2 * i]);
        Py_DECREF(pieces[2 * i + 1]);
    }
    PyMem_Free(pieces);
    return result;
}

static PyMethodDef methods[] = {
    {"frames", (PyCFunction)(void (*)(void))frames, METH_FASTCALL,
     "frames(events, prefixes, dumps) -> the SSE frames of events as one bytes, or None (sse.py frames them)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sse_frames", NULL, -1, methods};

PyMODINIT_FUNC PyInit__sse_frames(void) {
    TYPE = PyUnicode_InternFromString("type");
    if (TYPE == NULL) return NULL;
    return PyModule_Create(&module);
}
