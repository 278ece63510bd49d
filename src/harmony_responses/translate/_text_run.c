/* The compiled part of the translator's per-token step (translate/_translator.py, Translator.events): a run of
 * plain text tokens inside an item whose text goes straight to deltas.
 *
 * take(pending, token_text, first_special, fast, parts, events, seq) takes tokens from the left of the deque
 * pending while each is a plain int 0 <= id < first_special whose token_text[id] is a non-empty str. For each
 * it appends the text to the list parts and to the list events a copy of the dict fast with
 * "sequence_number" set to seq, seq + 1, ... and "delta" to the text, then returns how many it took. It stops
 * at the first token that is anything else (a special token, a token with a logprob or a prefill token, both
 * tuples, one whose text is empty or None: part of a character), which stays in pending for the Python path
 * to take. This is exactly the inline path of Translator.events, run for each token while its conditions
 * hold; the caller checks those that do not change along a run (the state, the item's fast template, the
 * decoder holding no bytes) and counts the tokens taken. Arguments of other types than these (a token_text
 * that is not a tuple, say) take nothing. tests/translate/test_text_run.py holds both paths
 * to the same events for any tokens and any chunking.
 *
 * Why C: translating and framing a flat-out engine's text costs ~0.6 us a token in Python, most of it the
 * interpreter's own work around a dict copy and two appends (bench/translate_bench.py); the server's CPU per
 * token flat out is ~11 us, with no other step this large left per token (docs/reference/benchmarks.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *SEQUENCE_NUMBER;  /* "sequence_number" */
static PyObject *DELTA;            /* "delta" */
static PyObject *APPENDLEFT;       /* "appendleft" */

static PyObject *take(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "take() takes 7 arguments");
        return NULL;
    }
    PyObject *pending = args[0], *token_text = args[1], *fast = args[3], *parts = args[4], *events = args[5];
    if (!PyTuple_CheckExact(token_text) || !PyDict_CheckExact(fast) || !PyList_CheckExact(parts) ||
        !PyList_CheckExact(events))
        return PyLong_FromLong(0); /* not the types it knows: nothing taken, the Python path takes them all */
    Py_ssize_t first_special = PyLong_AsSsize_t(args[2]);
    if (first_special == -1 && PyErr_Occurred()) return NULL;
    if (first_special > PyTuple_GET_SIZE(token_text)) first_special = PyTuple_GET_SIZE(token_text);
    Py_ssize_t seq = PyLong_AsSsize_t(args[6]);
    if (seq == -1 && PyErr_Occurred()) return NULL;

    /* collections.deque has no C API: its popleft and appendleft, called through vectorcall. */
    PyObject *popleft = PyObject_GetAttrString(pending, "popleft");
    if (popleft == NULL) return NULL;
    Py_ssize_t taken = 0;
    PyObject *result = NULL;
    for (;;) {
        if (PyObject_Length(pending) <= 0) {
            if (PyErr_Occurred()) goto done;
            break;
        }
        PyObject *token = PyObject_CallNoArgs(popleft);
        if (token == NULL) goto done;
        PyObject *text = NULL;
        if (PyLong_CheckExact(token)) {
            int overflow;
            long long id = PyLong_AsLongLongAndOverflow(token, &overflow);
            if (!overflow && id >= 0 && id < first_special) {
                text = PyTuple_GET_ITEM(token_text, (Py_ssize_t)id);
                if (!PyUnicode_CheckExact(text) || PyUnicode_GET_LENGTH(text) == 0) text = NULL;
            }
        }
        if (text == NULL) {  /* not ours: back where it was, for the Python path */
            PyObject *back = PyObject_CallMethodOneArg(pending, APPENDLEFT, token);
            Py_DECREF(token);
            if (back == NULL) goto done;
            Py_DECREF(back);
            break;
        }
        Py_DECREF(token);
        PyObject *event = PyDict_Copy(fast);
        if (event == NULL) goto done;
        PyObject *number = PyLong_FromSsize_t(seq + taken);
        if (number == NULL || PyDict_SetItem(event, SEQUENCE_NUMBER, number) < 0 ||
            PyDict_SetItem(event, DELTA, text) < 0 || PyList_Append(parts, text) < 0 ||
            PyList_Append(events, event) < 0) {
            Py_XDECREF(number);
            Py_DECREF(event);
            goto done;
        }
        Py_DECREF(number);
        Py_DECREF(event);
        taken++;
    }
    result = PyLong_FromSsize_t(taken);
done:
    Py_DECREF(popleft);
    return result;
}

static PyMethodDef methods[] = {
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(pending, token_text, first_special, fast, parts, events, seq) -> the number of text tokens taken"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_text_run", NULL, -1, methods};

PyMODINIT_FUNC PyInit__text_run(void) {
    SEQUENCE_NUMBER = PyUnicode_InternFromString("sequence_number");
    DELTA = PyUnicode_InternFromString("delta");
    APPENDLEFT = PyUnicode_InternFromString("appendleft");
    if (SEQUENCE_NUMBER == NULL || DELTA == NULL || APPENDLEFT == NULL) return NULL;
    return PyModule_Create(&module);
}
