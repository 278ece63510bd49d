/* The compiled part of the engine's stream loop (engine/_lines.py): the common line of a completions stream
 * (vLLM, TensorRT-LLM) taken in C.
 *
 * take(buf, pos, max_line, vocab_size, out) reads the lines of buf from offset pos (a line's start) and
 * appends to the list out the token ids of each line that is the stream's common case:
 *
 *     data: {"id": ..., "choices": [{"token_ids": [ID, ...], "finish_reason": null, ...}], ...}
 *
 * a JSON object with no "error" and no "usage" (or null), "object" not "error", a non-empty "choices" whose
 * first element has "token_ids" of one or more integers 0 <= ID < vocab_size and no "finish_reason" (or
 * null). Lines the Python path passes over are passed over here too: blank ones, those that are neither
 * "data:" nor NDJSON's "{" (SSE comments, event names, the "\r" of CRLF framing), an empty "data:". It
 * stops at the first line that is anything else or that it is not sure of, and at a line without its
 * newline yet, and returns that line's offset: the pure-Python path reads the rest. So a line is taken here
 * only when CompletionsReader.feed would take it the same way (its ids appended, nothing else changed; no
 * logprobs were asked for), which tests/engine/test_lines.py holds it to for any lines and any chunking.
 * Not sure, and so left to Python, which decides: an escape in a key, a \u escape of half a surrogate pair,
 * a number with a fraction or an exponent or more than 18 digits, a repeated key among those read, nesting
 * deeper than MAX_DEPTH, a line longer than max_line.
 *
 * Hand-written rather than orjson.loads per line then feed(): that parse builds every object of the line
 * (0.55 us of the 1.64 us a token cost the loop, bench/engine_reads_bench.py) and the Python around it makes
 * several calls per line; here one call takes every such line of a read, building only the ids. Every byte
 * of a taken line is checked to be JSON (strings: UTF-8, escapes, no control characters), so no line that
 * orjson would refuse is taken.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_DIGITS 18

typedef const unsigned char *P;

/* A value that is not sure, or not JSON: the line goes to Python. */
#define BAIL NULL

static P skip_ws(P p, P e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

static int hex4(P p, P e, unsigned *out) {
    unsigned v = 0;
    if (e - p < 4) return 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* One UTF-8 sequence starting at p (a byte >= 0x80), as Python's strict decoder takes it: its end, or NULL. */
static P utf8(P p, P e) {
    unsigned char c = *p;
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) { n = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) n = 2;
    else if (c == 0xED) { n = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) n = 2;
    else if (c == 0xF0) { n = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) { n = 3; hi = 0x8F; }
    else return BAIL;
    if (e - p <= n) return BAIL;
    if (p[1] < lo || p[1] > hi) return BAIL;
    for (int i = 2; i <= n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return BAIL;
    return p + n + 1;
}

/* A string at p (its opening quote): its end (past the closing quote), or NULL. *escaped: it has escapes. */
static P string(P p, P e, int *escaped) {
    *escaped = 0;
    p++;
    while (p < e) {
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20) return BAIL;
        if (c == '\\') {
            *escaped = 1;
            if (++p >= e) return BAIL;
            switch (*p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p++;
                break;
            case 'u': {
                unsigned v, low;
                if (!hex4(p + 1, e, &v) || (v >= 0xDC00 && v <= 0xDFFF)) return BAIL;
                p += 5;
                if (v >= 0xD800 && v <= 0xDBFF) { /* a pair's high half: its low half must follow */
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, e, &low) || low < 0xDC00 ||
                        low > 0xDFFF)
                        return BAIL;
                    p += 6;
                }
                break;
            }
            default:
                return BAIL;
            }
        } else if (c >= 0x80) {
            if ((p = utf8(p, e)) == NULL) return BAIL;
        } else {
            p++;
        }
    }
    return BAIL;
}

/* An integer (no fraction, no exponent, at most MAX_DIGITS digits) at p: its end, or NULL; its value. */
static P integer(P p, P e, long long *value) {
    int negative = 0, digits = 0;
    long long v = 0;
    if (p < e && *p == '-') { negative = 1; p++; }
    if (p >= e || *p < '0' || *p > '9') return BAIL;
    if (*p == '0') {
        p++;
        digits = 1;
    } else {
        while (p < e && *p >= '0' && *p <= '9') {
            if (++digits > MAX_DIGITS) return BAIL;
            v = v * 10 + (*p++ - '0');
        }
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) return BAIL;
    *value = negative ? -v : v;
    return p;
}

static P value(P p, P e, int depth);

/* The rest of an array after an element (at p): its further elements and its end. */
static P array_rest(P p, P e, int depth) {
    for (;;) {
        p = skip_ws(p, e);
        if (p >= e) return BAIL;
        if (*p == ']') return p + 1;
        if (*p != ',') return BAIL;
        if ((p = value(skip_ws(p + 1, e), e, depth)) == NULL) return BAIL;
    }
}

static P array(P p, P e, int depth) {
    p = skip_ws(p + 1, e);
    if (p < e && *p == ']') return p + 1;
    if ((p = value(p, e, depth)) == NULL) return BAIL;
    return array_rest(p, e, depth);
}

/* Calls key(ctx, name, length, p) at each member's value (which it reads, returning its end or NULL). */
typedef P (*member_fn)(void *ctx, P key, Py_ssize_t length, P p, P e, int depth);

static P object(P p, P e, int depth, member_fn member, void *ctx) {
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    for (;;) {
        int escaped;
        P key, end;
        if (p >= e || *p != '"') return BAIL;
        key = p + 1;
        if ((end = string(p, e, &escaped)) == NULL) return BAIL;
        if (escaped && member != NULL) return BAIL; /* it could spell a key read here */
        p = skip_ws(end, e);
        if (p >= e || *p != ':') return BAIL;
        p = skip_ws(p + 1, e);
        if (member != NULL) p = member(ctx, key, end - 1 - key, p, e, depth);
        else p = value(p, e, depth);
        if (p == NULL) return BAIL;
        p = skip_ws(p, e);
        if (p >= e) return BAIL;
        if (*p == '}') return p + 1;
        if (*p != ',') return BAIL;
        p = skip_ws(p + 1, e);
    }
}

static P value(P p, P e, int depth) {
    int escaped;
    long long ignored;
    if (p >= e) return BAIL;
    if (depth >= MAX_DEPTH) return BAIL;
    switch (*p) {
    case '{': return object(p, e, depth + 1, NULL, NULL);
    case '[': return array(p, e, depth + 1);
    case '"': return string(p, e, &escaped);
    case 't': return (e - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : BAIL;
    case 'f': return (e - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : BAIL;
    case 'n': return (e - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : BAIL;
    default: return integer(p, e, &ignored);
    }
}

static int is_null(P p, P e) { return e - p >= 4 && memcmp(p, "null", 4) == 0; }

#define KEY(name) (length == (Py_ssize_t)(sizeof(name) - 1) && memcmp(key, name, sizeof(name) - 1) == 0)

/* choices[0]: "token_ids": [ID, ...] and "finish_reason" null or absent. */
typedef struct {
    int token_ids, finish_reason; /* seen */
    long long vocab_size;
    P ids;                        /* the token_ids array's first id, read again once the line is known */
} Choice;

/* An id of token_ids at p: its end, or NULL for what Python must judge (a sign, -0, out of the vocabulary). */
static P token_id(P p, P e, long long vocab_size, long long *token) {
    if (p < e && *p == '-') return BAIL;
    if ((p = integer(p, e, token)) == NULL || *token >= vocab_size) return BAIL;
    return p;
}

static P choice_member(void *ctx, P key, Py_ssize_t length, P p, P e, int depth) {
    Choice *c = ctx;
    long long token;
    if (KEY("token_ids")) {
        if (c->token_ids++) return BAIL;
        if (p >= e || *p != '[') return BAIL;
        c->ids = p = skip_ws(p + 1, e);
        for (;;) { /* one id or more (vLLM sends several when its steps outrun its output) */
            if ((p = token_id(p, e, c->vocab_size, &token)) == NULL) return BAIL;
            p = skip_ws(p, e);
            if (p >= e) return BAIL;
            if (*p == ']') return p + 1;
            if (*p != ',') return BAIL;
            p = skip_ws(p + 1, e);
        }
    }
    if (KEY("finish_reason")) {
        if (c->finish_reason++ || !is_null(p, e)) return BAIL;
        return p + 4;
    }
    return value(p, e, depth);
}

/* The line's object: "choices", "error", "object", "usage". */
typedef struct {
    int choices, object, usage; /* seen */
    Choice choice;              /* choices[0]: the common case when its token_ids were read */
} Line;

static P line_member(void *ctx, P key, Py_ssize_t length, P p, P e, int depth) {
    Line *l = ctx;
    if (KEY("choices")) {
        if (l->choices++) return BAIL;
        if (p >= e || *p != '[') return BAIL;
        p = skip_ws(p + 1, e);
        if (p >= e || *p != '{') return BAIL; /* empty, or not an object first: Python decides */
        if ((p = object(p, e, depth + 2, choice_member, &l->choice)) == NULL) return BAIL;
        return array_rest(p, e, depth + 1);
    }
    if (KEY("error")) return BAIL;
    if (KEY("usage")) {
        if (l->usage++ || !is_null(p, e)) return BAIL;
        return p + 4;
    }
    if (KEY("object")) {
        int escaped;
        P end;
        if (l->object++) return BAIL;
        if (p < e && *p == '"') {
            if ((end = string(p, e, &escaped)) == NULL || escaped) return BAIL;
            if (end - p == 7 && memcmp(p + 1, "error", 5) == 0) return BAIL;
            return end;
        }
        return value(p, e, depth);
    }
    return value(p, e, depth);
}

#define READ_IN_PYTHON 0
#define PASSED_OVER 1
#define TAKEN 2

/* One line (without its newline): TAKEN (*ids: its token_ids' first id), PASSED_OVER for a line the Python
 * path passes over too (neither "data:" nor NDJSON's "{", an empty "data:"), READ_IN_PYTHON for the rest. */
static int read_line(P p, P e, long long vocab_size, P *ids) {
    Line l;
    if (e - p < 5 || memcmp(p, "data:", 5) != 0) return *p == '{' ? READ_IN_PYTHON : PASSED_OVER;
    p += 5;
    /* bytes.strip()'s whitespace, at both ends */
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\x0b' || *p == '\x0c')) p++;
    while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\x0b' ||
                     e[-1] == '\x0c'))
        e--;
    if (p >= e) return PASSED_OVER;
    if (*p != '{') return READ_IN_PYTHON;
    memset(&l, 0, sizeof l);
    l.choice.vocab_size = vocab_size;
    if ((p = object(p, e, 1, line_member, &l)) == NULL) return READ_IN_PYTHON;
    if (p != e || !l.choice.token_ids) return READ_IN_PYTHON;
    *ids = l.choice.ids;
    return TAKEN;
}

/* Append the ids of a token_ids array read already (at p, its first id) to out. */
static int append_ids(P p, P e, PyObject *out) {
    long long token;
    for (;;) {
        PyObject *id;
        p = integer(p, e, &token);
        if ((id = PyLong_FromLongLong(token)) == NULL) return -1;
        if (PyList_Append(out, id) < 0) {
            Py_DECREF(id);
            return -1;
        }
        Py_DECREF(id);
        p = skip_ws(p, e);
        if (*p == ']') return 0;
        p = skip_ws(p + 1, e);
    }
}

static PyObject *take(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t pos, max_line, size;
    long long vocab_size;
    P buf;
    PyObject *out;
    if (nargs != 5 || !PyBytes_Check(args[0]) || !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "take(buf: bytes, pos: int, max_line: int, vocab_size: int, out: list)");
        return NULL;
    }
    pos = PyLong_AsSsize_t(args[1]);
    max_line = PyLong_AsSsize_t(args[2]);
    vocab_size = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    buf = (P)PyBytes_AS_STRING(args[0]);
    size = PyBytes_GET_SIZE(args[0]);
    out = args[4];
    if (pos < 0 || pos > size) {
        PyErr_SetString(PyExc_ValueError, "pos is outside buf");
        return NULL;
    }
    while (pos < size) {
        P start = buf + pos;
        P nl = memchr(start, '\n', size - pos);
        P ids;
        int read;
        if (nl == NULL) break; /* not whole yet */
        if (nl > start) {
            if (nl - start > max_line) break;
            read = read_line(start, nl, vocab_size, &ids);
            if (read == READ_IN_PYTHON) break;
            if (read == TAKEN && append_ids(ids, nl, out) < 0) return NULL;
        }
        pos = nl + 1 - buf;
    }
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"take", (PyCFunction)(void (*)(void))take, METH_FASTCALL,
     "take(buf, pos, max_line, vocab_size, out) -> pos: the common completions lines' token ids, from pos on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_completion_lines", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__completion_lines(void) { return PyModule_Create(&module); }
