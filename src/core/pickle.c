/* src/core/pickle.c - one NumPy array in a Python pickle (see npy.h), as pickle.dump(array)
 * writes it: AVION's and EK-100's relevancy files. A small machine runs the opcodes such a
 * pickle holds (globals, ints, strings, bytes, tuples, reduce, build, the memo, frames) and
 * builds only a tree of those values; the array's bytes are noted by their offset in the file
 * and skipped, never read here, so a pickle of 8 GB costs a few kB to open. Nothing is
 * imported or called: any other object, out-of-band buffers, or data kept as text (protocol 2
 * written by Python 3) is TB_EFORMAT naming what was found. Tests: tests/test_captions.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "core/npy.h"

enum { MAX_VALS = 4096, MAX_STACK = 512, MAX_KIDS = 8192, MAX_MEMO = 4096, TEXT = 64 };
enum { MARK = MAX_VALS }; /* on the stack: no value's index */

enum kind { V_NONE, V_BOOL, V_INT, V_STR, V_BYTES, V_TUPLE, V_GLOBAL, V_OBJ };

/* One value. STR and GLOBAL ("module.name") keep up to TEXT - 1 characters (long is set when
 * there were more); BYTES keeps where its payload lies in the file. */
struct val {
    enum kind kind;
    int64_t i;        /* BOOL, INT */
    int64_t off, len; /* BYTES */
    int a, b, c;      /* TUPLE: first kid and count; OBJ: callable, args, state (-1: none) */
    int long_text;
    char text[TEXT];
};

struct vm {
    FILE *f;
    const char *path;
    int64_t pos;      /* of the opcode being run, for messages */
    struct val *v;    /* (MAX_VALS) */
    int n_v;
    int stack[MAX_STACK], n_stack;
    int kids[MAX_KIDS], n_kids;
    int memo[MAX_MEMO], n_memo;
};

static int bad(struct vm *m, const char *what)
{
    return tbi_err(TB_EFORMAT, "%s: not a pickled NumPy array (byte %lld: %s)", m->path,
                   (long long)m->pos, what);
}

static int get(struct vm *m, void *buf, size_t n)
{
    return fread(buf, 1, n, m->f) == n ? 0 : bad(m, "the file ends inside an opcode");
}

/* An n-byte little-endian unsigned integer (n <= 8). */
static int get_u(struct vm *m, int n, uint64_t *out)
{
    unsigned char b[8];
    TBI_TRY(get(m, b, (size_t)n));
    *out = 0;
    for (int k = n - 1; k >= 0; k--)
        *out = *out << 8 | b[k];
    return 0;
}

static int new_val(struct vm *m, enum kind kind)
{
    if (m->n_v == MAX_VALS)
        return bad(m, "more values than an array's pickle holds");
    memset(&m->v[m->n_v], 0, sizeof(m->v[0]));
    m->v[m->n_v].kind = kind;
    m->v[m->n_v].a = m->v[m->n_v].b = m->v[m->n_v].c = -1;
    return m->n_v++;
}

static int push(struct vm *m, int x)
{
    if (x < 0)
        return x; /* an error code from new_val */
    if (m->n_stack == MAX_STACK)
        return bad(m, "the stack is deeper than an array's pickle needs");
    m->stack[m->n_stack++] = x;
    return 0;
}

static int pop(struct vm *m, int *x)
{
    if (!m->n_stack || m->stack[m->n_stack - 1] == MARK)
        return bad(m, "an opcode takes a value from an empty stack");
    *x = m->stack[--m->n_stack];
    return 0;
}

/* The stack's entries from first on (values, no mark) replaced by one tuple of them. */
static int tuple_from(struct vm *m, int first)
{
    int n = m->n_stack - first, t = new_val(m, V_TUPLE);
    if (t < 0)
        return t;
    if (m->n_kids + n > MAX_KIDS)
        return bad(m, "more tuple entries than an array's pickle holds");
    m->v[t].a = m->n_kids;
    m->v[t].b = n;
    memcpy(m->kids + m->n_kids, m->stack + first, sizeof(int) * (size_t)n);
    m->n_kids += n;
    m->n_stack = first;
    return push(m, t);
}

/* Where the topmost mark is, or an error. */
static int find_mark(struct vm *m)
{
    int k = m->n_stack - 1;
    while (k >= 0 && m->stack[k] != MARK)
        k--;
    return k >= 0 ? k : bad(m, "an opcode looks for a mark the stack does not hold");
}

/* The top n values as a tuple (TUPLE1, TUPLE2, TUPLE3, EMPTY_TUPLE). */
static int tuple_n(struct vm *m, int n)
{
    if (m->n_stack < n)
        return bad(m, "a tuple of more values than the stack holds");
    for (int k = m->n_stack - n; k < m->n_stack; k++)
        if (m->stack[k] == MARK)
            return bad(m, "a tuple over a mark");
    return tuple_from(m, m->n_stack - n);
}

/* A string of n bytes: its first TEXT - 1 kept, the rest skipped. */
static int string(struct vm *m, uint64_t n)
{
    int x = new_val(m, V_STR);
    if (x < 0)
        return x;
    if (n > (uint64_t)INT64_MAX / 2)
        return bad(m, "a string longer than any file");
    size_t keep = n < TEXT ? (size_t)n : TEXT - 1;
    TBI_TRY(get(m, m->v[x].text, keep));
    m->v[x].long_text = n > keep;
    if (n > keep && fseeko(m->f, (off_t)(n - keep), SEEK_CUR))
        return bad(m, "a string past the end of the file");
    return push(m, x);
}

/* Bytes of n: where they are, then skipped (the array's data, or a small marker). */
static int bytes(struct vm *m, uint64_t n)
{
    int x = new_val(m, V_BYTES);
    if (x < 0)
        return x;
    if (n > (uint64_t)INT64_MAX / 2)
        return bad(m, "a bytes object longer than any file");
    m->v[x].off = (int64_t)ftello(m->f);
    m->v[x].len = (int64_t)n;
    if (fseeko(m->f, (off_t)n, SEEK_CUR))
        return bad(m, "bytes past the end of the file");
    return push(m, x);
}

static int integer(struct vm *m, int64_t i)
{
    int x = new_val(m, V_INT);
    if (x < 0)
        return x;
    m->v[x].i = i;
    return push(m, x);
}

/* GLOBAL's "module\nname\n", each line up to TEXT - 1 characters. */
static int line(struct vm *m, char *out)
{
    int n = 0, ch;
    while ((ch = fgetc(m->f)) != '\n') {
        if (ch == EOF || n == TEXT - 1)
            return bad(m, "a GLOBAL opcode's name is cut or too long");
        out[n++] = (char)ch;
    }
    out[n] = '\0';
    return 0;
}

static int global(struct vm *m, const char *module, const char *name)
{
    int x = new_val(m, V_GLOBAL);
    if (x < 0)
        return x;
    snprintf(m->v[x].text, TEXT, "%s.%s", module, name);
    m->v[x].long_text = strlen(module) + strlen(name) + 1 >= TEXT;
    return push(m, x);
}

/* One opcode; 1 at STOP. */
static int step(struct vm *m)
{
    unsigned char op;
    uint64_t u;
    int x = 0, y = 0;
    m->pos = (int64_t)ftello(m->f);
    TBI_TRY(get(m, &op, 1));
    switch (op) {
    case 0x80: /* PROTO */
        return get_u(m, 1, &u);
    case 0x95: /* FRAME: a length hint */
        return get_u(m, 8, &u);
    case '.': /* STOP */
        return 1;
    case '(': /* MARK */
        return push(m, MARK);
    case '0': /* POP */
        return pop(m, &x);
    case '1': /* POP_MARK */
        if ((x = find_mark(m)) < 0)
            return x;
        m->n_stack = x;
        return 0;
    case 'N':
        return push(m, new_val(m, V_NONE));
    case 0x88: /* NEWTRUE */
    case 0x89: /* NEWFALSE */
        if ((x = new_val(m, V_BOOL)) < 0)
            return x;
        m->v[x].i = op == 0x88;
        return push(m, x);
    case 'K': /* BININT1 */
        TBI_TRY(get_u(m, 1, &u));
        return integer(m, (int64_t)u);
    case 'M': /* BININT2 */
        TBI_TRY(get_u(m, 2, &u));
        return integer(m, (int64_t)u);
    case 'J': /* BININT: signed */
        TBI_TRY(get_u(m, 4, &u));
        return integer(m, (int64_t)(int32_t)(uint32_t)u);
    case 0x8a: { /* LONG1: n bytes, two's complement */
        TBI_TRY(get_u(m, 1, &u));
        int n = (int)u;
        if (n > 8)
            return bad(m, "an integer wider than 64 bits");
        uint64_t v = 0;
        if (n)
            TBI_TRY(get_u(m, n, &v));
        if (n && n < 8 && (v >> (8 * n - 1) & 1))
            v |= ~(uint64_t)0 << (8 * n);
        return integer(m, (int64_t)v);
    }
    case 0x8c: /* SHORT_BINUNICODE */
    case 'U':  /* SHORT_BINSTRING */
        TBI_TRY(get_u(m, 1, &u));
        return string(m, u);
    case 'X': /* BINUNICODE */
        TBI_TRY(get_u(m, 4, &u));
        return string(m, u);
    case 0x8d: /* BINUNICODE8 */
        TBI_TRY(get_u(m, 8, &u));
        return string(m, u);
    case 'C': /* SHORT_BINBYTES */
        TBI_TRY(get_u(m, 1, &u));
        return bytes(m, u);
    case 'B': /* BINBYTES */
    case 'T': /* BINSTRING (Python 2's str: bytes) */
        TBI_TRY(get_u(m, 4, &u));
        return bytes(m, u);
    case 0x8e: /* BINBYTES8 */
    case 0x96: /* BYTEARRAY8 */
        TBI_TRY(get_u(m, 8, &u));
        return bytes(m, u);
    case ')': /* EMPTY_TUPLE */
        return tuple_n(m, 0);
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: /* TUPLE3 */
        return tuple_n(m, op - 0x84);
    case 't': /* TUPLE: the values above the mark, the mark removed */
        if ((x = find_mark(m)) < 0)
            return x;
        memmove(m->stack + x, m->stack + x + 1, sizeof(int) * (size_t)(m->n_stack - x - 1));
        m->n_stack--;
        return tuple_from(m, x);
    case 'c': { /* GLOBAL */
        char module[TEXT], name[TEXT];
        TBI_TRY(line(m, module));
        TBI_TRY(line(m, name));
        return global(m, module, name);
    }
    case 0x93: /* STACK_GLOBAL */
        TBI_TRY(pop(m, &y));
        TBI_TRY(pop(m, &x));
        if (m->v[x].kind != V_STR || m->v[y].kind != V_STR || m->v[x].long_text ||
            m->v[y].long_text)
            return bad(m, "STACK_GLOBAL of something other than two short strings");
        return global(m, m->v[x].text, m->v[y].text);
    case 'R': /* REDUCE: callable(*args) */
        TBI_TRY(pop(m, &y));
        TBI_TRY(pop(m, &x));
        if (m->v[x].kind != V_GLOBAL || m->v[y].kind != V_TUPLE)
            return bad(m, "REDUCE of something other than a global and a tuple");
        {
            int o = new_val(m, V_OBJ);
            if (o < 0)
                return o;
            m->v[o].a = x;
            m->v[o].b = y;
            return push(m, o);
        }
    case 'b': /* BUILD: the object's state */
        TBI_TRY(pop(m, &y));
        TBI_TRY(pop(m, &x));
        if (m->v[x].kind != V_OBJ || m->v[x].c >= 0)
            return bad(m, "BUILD of something other than a new object");
        m->v[x].c = y;
        return push(m, x);
    case 0x94: /* MEMOIZE */
        u = (uint64_t)m->n_memo;
        goto put;
    case 'q': /* BINPUT */
        TBI_TRY(get_u(m, 1, &u));
        goto put;
    case 'r': /* LONG_BINPUT */
        TBI_TRY(get_u(m, 4, &u));
    put:
        if (!m->n_stack || m->stack[m->n_stack - 1] == MARK)
            return bad(m, "a memo entry of an empty stack");
        if (u >= MAX_MEMO)
            return bad(m, "more memo entries than an array's pickle holds");
        while ((uint64_t)m->n_memo <= u)
            m->memo[m->n_memo++] = -1;
        m->memo[u] = m->stack[m->n_stack - 1];
        return 0;
    case 'h': /* BINGET */
        TBI_TRY(get_u(m, 1, &u));
        goto memo_get;
    case 'j': /* LONG_BINGET */
        TBI_TRY(get_u(m, 4, &u));
    memo_get:
        if (u >= (uint64_t)m->n_memo || m->memo[u] < 0)
            return bad(m, "a memo entry that was never stored");
        return push(m, m->memo[u]);
    case 0x97: /* NEXT_BUFFER */
    case 0x98: /* READONLY_BUFFER */
        return bad(m, "an out-of-band buffer (pickle.dump with buffer_callback): the data is "
                   "not in the file");
    default: {
        char what[96];
        snprintf(what, sizeof(what), "opcode 0x%02x, which no pickled NumPy array holds "
                 "(another object?)", op);
        return bad(m, what);
    }
    }
}

static const struct val *kid(const struct vm *m, const struct val *t, int k)
{
    return t && t->kind == V_TUPLE && k < t->b ? &m->v[m->kids[t->a + k]] : NULL;
}

/* The global numpy.core.<name> (numpy._core.<name> in NumPy 2). */
static int is_numpy(const struct val *g, const char *name)
{
    return g && g->kind == V_GLOBAL && !g->long_text &&
           ((!strncmp(g->text, "numpy.core.", 11) && !strcmp(g->text + 11, name)) ||
            (!strncmp(g->text, "numpy._core.", 12) && !strcmp(g->text + 12, name)));
}

static int is_global(const struct val *g, const char *name)
{
    return g && g->kind == V_GLOBAL && !g->long_text && !strcmp(g->text, name);
}

/* numpy.dtype('f8', False, True) with its state (3, '<', ...) into h's descr, width, order. */
static int dtype(struct vm *m, const struct val *d, struct tbi_npy *h)
{
    if (!d || d->kind != V_OBJ || !is_global(&m->v[d->a], "numpy.dtype"))
        return bad(m, "the array's dtype is not a numpy.dtype");
    const struct val *code = kid(m, &m->v[d->b], 0);
    const struct val *state = d->c >= 0 ? &m->v[d->c] : NULL;
    const struct val *order = kid(m, state, 1);
    char bo = order && order->kind == V_STR && !order->long_text ? order->text[0] : '=';
    if (!code || code->kind != V_STR || code->long_text)
        return bad(m, "the dtype has no type code");
    snprintf(h->descr, sizeof(h->descr), "%c%.8s", bo, code->text);
    const uint16_t one = 1;
    int little = *(const uint8_t *)&one == 1;
    if ((bo != '<' && bo != '>' && bo != '=') || code->text[0] != 'f' ||
        (code->text[1] != '4' && code->text[1] != '8') || code->text[2])
        return tbi_err(TB_EFORMAT, "%s: a pickled array of dtype '%s': only float32 and float64 "
                       "are read (convert with a.astype(np.float32))", m->path, h->descr);
    h->item_bytes = code->text[1] - '0';
    h->swap = bo != '=' && (bo == '<') != little;
    return 0;
}

static int shape(struct vm *m, const struct val *t, struct tbi_npy *h)
{
    if (!t || t->kind != V_TUPLE || t->b > TBI_NPY_MAX_DIMS)
        return bad(m, "the array's shape is not a tuple of at most 8 integers");
    h->n_dims = t->b;
    h->n = 1;
    for (int k = 0; k < t->b; k++) {
        const struct val *d = kid(m, t, k);
        if (d->kind != V_INT || d->i < 0 || d->i > ((int64_t)1 << 40))
            return bad(m, "a dimension of the shape is not an integer in [0, 2^40]");
        h->shape[k] = d->i;
        if (d->i && h->n > INT64_MAX / 16 / d->i)
            return bad(m, "the shape's product overflows");
        h->n *= d->i;
    }
    return 0;
}

/* The array the root value describes: _reconstruct(ndarray, (0,), b'b') with the state
 * (version, shape, dtype, is_fortran, data), or _frombuffer(data, dtype, shape, order). */
static int array(struct vm *m, int root, struct tbi_npy *h, const struct val **data)
{
    const struct val *r = &m->v[root];
    if (r->kind != V_OBJ)
        return bad(m, "the pickle holds no object");
    const struct val *fn = &m->v[r->a], *args = &m->v[r->b];
    if (is_numpy(fn, "multiarray._reconstruct")) {
        const struct val *st = r->c >= 0 ? &m->v[r->c] : NULL;
        if (!is_global(kid(m, args, 0), "numpy.ndarray"))
            return bad(m, "an ndarray subclass (a masked array or a matrix?)");
        const struct val *fortran = kid(m, st, 3);
        if (!fortran || st->b != 5)
            return bad(m, "the ndarray's state is not (version, shape, dtype, fortran, data)");
        TBI_TRY(shape(m, kid(m, st, 1), h));
        TBI_TRY(dtype(m, kid(m, st, 2), h));
        if (fortran->kind != V_BOOL || fortran->i)
            return bad(m, "the array is in Fortran order (pickle np.ascontiguousarray(a))");
        *data = kid(m, st, 4);
    } else if (is_numpy(fn, "numeric._frombuffer")) {
        const struct val *order = kid(m, args, 3);
        if (!order || args->b != 4)
            return bad(m, "_frombuffer's arguments are not (data, dtype, shape, order)");
        TBI_TRY(dtype(m, kid(m, args, 1), h));
        TBI_TRY(shape(m, kid(m, args, 2), h));
        if (order->kind != V_STR || strcmp(order->text, "C"))
            return bad(m, "the array is not in C order (pickle np.ascontiguousarray(a))");
        *data = kid(m, args, 0);
    } else {
        char what[TEXT + 64];
        snprintf(what, sizeof(what), "an object made by %s, not a NumPy array", fn->text);
        return bad(m, what);
    }
    if (!*data || (*data)->kind != V_BYTES)
        return bad(m, "the array's data is not raw bytes (protocol 2 from Python 3 keeps it as "
                   "text: pickle it again with protocol 4, or np.save it)");
    return 0;
}

int tbi_pkl_is(const char *path)
{
    unsigned char b[2];
    FILE *f = tbi_fopen(path, "rb");
    if (!f)
        return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    size_t n = fread(b, 1, 2, f);
    fclose(f);
    return n == 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5;
}

int tbi_pkl_open(struct tbi_npy *h, const char *path)
{
    struct vm m = {.path = path};
    struct stat st;
    const struct val *data = NULL;
    int rc = 0;
    memset(h, 0, sizeof(*h));
    if (!(m.f = tbi_fopen(path, "rb")))
        return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    if (fstat(fileno(m.f), &st) || !S_ISREG(st.st_mode)) {
        rc = tbi_err(TB_EIO, "%s: not a regular file", path);
        goto fail;
    }
    if (!(m.v = tbi_malloc(sizeof(*m.v) * MAX_VALS))) {
        rc = tbi_err(TB_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    while ((rc = step(&m)) == 0)
        ;
    if (rc < 0)
        goto fail;
    if (m.n_stack != 1 || m.stack[0] == MARK) {
        rc = bad(&m, "the pickle does not end with one value on the stack");
        goto fail;
    }
    if ((rc = array(&m, m.stack[0], h, &data)) < 0)
        goto fail;
    if (data->len != h->n * h->item_bytes || data->off + data->len > (int64_t)st.st_size) {
        rc = tbi_err(TB_EFORMAT, "%s: the array's data is %lld bytes at byte %lld of %lld, but "
                     "%lld elements of %s need %lld (truncated?)", path, (long long)data->len,
                     (long long)data->off, (long long)st.st_size, (long long)h->n, h->descr,
                     (long long)(h->n * h->item_bytes));
        goto fail;
    }
    if (fseeko(m.f, (off_t)data->off, SEEK_SET)) {
        rc = tbi_err(TB_EIO, "%s: cannot seek to the array's data", path);
        goto fail;
    }
    free(m.v);
    h->f = m.f;
    return 0;
fail:
    free(m.v);
    fclose(m.f);
    memset(h, 0, sizeof(*h));
    return rc;
}
