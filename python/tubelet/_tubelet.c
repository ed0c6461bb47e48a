/* python/tubelet/_tubelet.c - the CPython extension module under `import tubelet`: probe, the
 * clip reader (VideoReader) and the threaded loader (Loader) over libtubelet.a. Decoding runs
 * with the GIL released; errors become tubelet.Error (or its FileNotFoundError / ValueError /
 * IndexError kinds) carrying tb_errmsg(). Loader batches are NumPy views of the loader's pool, not copies.
 * It holds no Python logic beyond argument conversion. The signatures and docstrings that
 * help() shows are here; the type hints are in _tubelet.pyi. Tests: tests/python/. */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <numpy/arrayobject.h>
#include <pythread.h>

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "tubelet/data.h"
#include "tubelet/prep.h"
#include "tubelet/synth.h"
#include "tubelet/train.h"
#include "tubelet/video.h"

static PyObject *err_base;      /* tubelet.Error(RuntimeError) */
static PyObject *err_notfound;  /* tubelet.NotFoundError(Error, FileNotFoundError) */
static PyObject *err_value;     /* tubelet.InvalidError(Error, ValueError) */
static PyObject *err_range;     /* tubelet.RangeError(InvalidError, IndexError) */

/* Raise the exception for status rc with the calling thread's library message (which must be
 * read on the thread that failed: call this right after reacquiring the GIL). */
static PyObject *raise_status(int rc, const char *msg)
{
    PyObject *type = rc == TB_ENOENT   ? err_notfound
                     : rc == TB_ERANGE ? err_range
                     : rc == TB_EINVAL ? err_value
                                       : err_base;
    const char *text = msg && msg[0] ? msg : tb_strerror(rc);
    PyObject *exc = PyObject_CallFunction(type, "s", text);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    PyObject *name = PyUnicode_FromString(tb_strerror(rc));
    if (code && name && PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "reason", name) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
    return NULL;
}

/* ---- argument helpers ------------------------------------------------------------------- */

/* size: None (keep *w, *h), an int (square) or (H, W). */
static int parse_size(PyObject *o, int *w, int *h)
{
    if (!o || o == Py_None)
        return 0;
    if (PyLong_Check(o)) {
        long s = PyLong_AsLong(o);
        if (s <= 0 || s > 16384)
            goto bad;
        *w = *h = (int)s;
        return 0;
    }
    int hh, ww;
    if (PyTuple_Check(o) && PyArg_ParseTuple(o, "ii", &hh, &ww) && hh > 0 && ww > 0 &&
        hh <= 16384 && ww <= 16384) {
        *w = ww;
        *h = hh;
        return 0;
    }
    PyErr_Clear();
bad:
    PyErr_SetString(PyExc_ValueError, "size: expected a positive int or a tuple (H, W)");
    return -1;
}

static int parse_range(PyObject *o, const char *what, double *lo, double *hi)
{
    if (!o || o == Py_None)
        return 0;
    double a, b;
    if (!PyArg_ParseTuple(o, "dd", &a, &b) || !(a > 0) || !(b >= a)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: expected (min, max) with 0 < min <= max", what);
        return -1;
    }
    *lo = a;
    *hi = b;
    return 0;
}

/* crop: "none", "center", "rrc" (also "random_resized"), "multiscale", or (x, y, w, h) for a
 * fixed rectangle; flip: False, True or "random"; scale and ratio: RRC's ranges. */
static int parse_crop(PyObject *crop, PyObject *flip, PyObject *scale, PyObject *ratio,
                      struct tb_crop_spec *spec)
{
    memset(spec, 0, sizeof(*spec));
    spec->mode = TB_CROP_NONE;
    spec->scale_min = 0.08;
    spec->scale_max = 1;
    spec->ratio_min = 3.0 / 4;
    spec->ratio_max = 4.0 / 3;
    if (crop && crop != Py_None) {
        if (PyUnicode_Check(crop)) {
            const char *s = PyUnicode_AsUTF8(crop);
            if (!s)
                return -1;
            if (!strcmp(s, "none"))
                spec->mode = TB_CROP_NONE;
            else if (!strcmp(s, "center") || !strcmp(s, "centre"))
                spec->mode = TB_CROP_CENTER;
            else if (!strcmp(s, "rrc") || !strcmp(s, "random_resized"))
                spec->mode = TB_CROP_RANDOM_RESIZED;
            else if (!strcmp(s, "multiscale"))
                spec->mode = TB_CROP_MULTISCALE;
            else {
                PyErr_Format(PyExc_ValueError,
                             "crop: unknown mode '%s' (none, center, rrc, multiscale, or a "
                             "tuple (x, y, w, h))", s);
                return -1;
            }
        } else if (PyTuple_Check(crop) &&
                   PyArg_ParseTuple(crop, "iiii", &spec->x, &spec->y, &spec->w, &spec->h)) {
            spec->mode = TB_CROP_FIXED;
        } else {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "crop: expected a mode name or (x, y, w, h)");
            return -1;
        }
    }
    spec->flip = TB_FLIP_NEVER;
    if (flip && flip != Py_None) {
        if (PyUnicode_Check(flip)) {
            const char *s = PyUnicode_AsUTF8(flip);
            if (!s)
                return -1;
            if (strcmp(s, "random")) {
                PyErr_Format(PyExc_ValueError, "flip: expected True, False or 'random', got '%s'",
                             s);
                return -1;
            }
            spec->flip = TB_FLIP_RANDOM;
        } else {
            int t = PyObject_IsTrue(flip);
            if (t < 0)
                return -1;
            spec->flip = t ? TB_FLIP_ALWAYS : TB_FLIP_NEVER;
        }
    }
    if (parse_range(scale, "scale", &spec->scale_min, &spec->scale_max) < 0 ||
        parse_range(ratio, "ratio", &spec->ratio_min, &spec->ratio_max) < 0)
        return -1;
    return 0;
}

static PyObject *i64_list(const int64_t *v, int64_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; l && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, x);
    }
    return l;
}

/* Set d[key] = v, stealing v; returns -1 (and drops v) on failure. */
static int put(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

/* ---- probe ------------------------------------------------------------------------------ */

static PyObject *probe_dict(const struct tb_probe *p)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    double fps = p->fps_den ? (double)p->fps_num / p->fps_den : 0.0;
    if (put(d, "path", PyUnicode_DecodeFSDefault(p->path)) < 0 ||
        put(d, "container", PyUnicode_FromString(p->container)) < 0 ||
        put(d, "codec", PyUnicode_FromString(p->codec)) < 0 ||
        put(d, "pix_fmt", PyUnicode_FromString(p->pix_fmt)) < 0 ||
        put(d, "width", PyLong_FromLong(p->width)) < 0 ||
        put(d, "height", PyLong_FromLong(p->height)) < 0 ||
        put(d, "rotation", PyLong_FromLong(p->rotation)) < 0 ||
        put(d, "fps", Py_BuildValue("(ii)", p->fps_num, p->fps_den)) < 0 ||
        put(d, "fps_value", PyFloat_FromDouble(fps)) < 0 ||
        put(d, "start_time", PyFloat_FromDouble(p->start_time)) < 0 ||
        put(d, "duration", PyFloat_FromDouble(p->duration)) < 0 ||
        put(d, "frames_declared", PyLong_FromLongLong(p->n_frames_declared)) < 0)
        goto fail;
    if (p->decoded) {
        if (put(d, "frames", PyLong_FromLongLong(p->n_frames)) < 0 ||
            put(d, "bad_packets", PyLong_FromLongLong(p->n_bad_packets)) < 0 ||
            put(d, "keyframes", i64_list(p->keyframes, p->n_keyframes)) < 0)
            goto fail;
    } else {
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        if (put(d, "frames", Py_None) < 0 || put(d, "keyframes", Py_None) < 0)
            goto fail;
    }
    if (p->index) {
        const struct tb_video_index *idx = p->index;
        PyObject *chunks = PyList_New(idx->n_chunks);
        if (put(d, "source", PyUnicode_DecodeFSDefault(idx->source)) < 0 ||
            put(d, "params", PyUnicode_FromString(idx->params)) < 0 ||
            put(d, "chunk_seconds", PyLong_FromLong(idx->chunk_seconds)) < 0 ||
            put(d, "chunk_frames", PyLong_FromLongLong(idx->chunk_frames)) < 0 ||
            put(d, "chunks", chunks) < 0)
            goto fail;
        for (int i = 0; i < idx->n_chunks; i++) {
            const struct tb_chunk_info *c = &idx->chunks[i];
            PyObject *cd = PyDict_New();
            if (!cd)
                goto fail;
            PyList_SET_ITEM(chunks, i, cd); /* chunks is borrowed from d from here on */
            if (put(cd, "file", PyUnicode_DecodeFSDefault(c->file)) < 0 ||
                put(cd, "start_frame", PyLong_FromLongLong(c->start_frame)) < 0 ||
                put(cd, "frames", PyLong_FromLongLong(c->n_frames)) < 0 ||
                put(cd, "bytes", PyLong_FromLongLong(c->bytes)) < 0 ||
                put(cd, "keyframes", i64_list(c->keyframes, c->n_keyframes)) < 0)
                goto fail;
        }
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *py_probe(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "decode", NULL};
    PyObject *path_b = NULL;
    int decode = 1;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|p", names, PyUnicode_FSConverter, &path_b,
                                     &decode))
        return NULL;
    struct tb_probe *p = NULL;
    const char *path = PyBytes_AS_STRING(path_b);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tb_probe(&p, path, decode);
    Py_END_ALLOW_THREADS
    PyObject *res = rc < 0 ? raise_status(rc, tb_errmsg()) : probe_dict(p);
    tb_probe_free(&p);
    Py_DECREF(path_b);
    return res;
}

/* A checkpoint's settings as the library's one table gives them (tb_ckpt_settings_json): the
 * JSON text, which the package's checkpoint_settings reads into a dict. */
static PyObject *py_checkpoint_settings(PyObject *self, PyObject *args)
{
    PyObject *path_b = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path_b))
        return NULL;
    struct tb_ckpt_info info;
    char *json = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = tb_ckpt_info(PyBytes_AS_STRING(path_b), &info);
    if (rc >= 0)
        rc = tb_ckpt_settings_json(&info, &json);
    Py_END_ALLOW_THREADS
    PyObject *res = rc < 0 ? raise_status(rc, tb_errmsg()) : PyUnicode_FromString(json);
    free(json);
    Py_DECREF(path_b);
    return res;
}

/* ---- VideoReader ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    tb_reader *reader;
    PyThread_type_lock lock;  /* one read at a time: a tb_reader serves one thread */
    PyObject *path;           /* bytes, file-system encoded */
    struct tb_video_info info;
} ReaderObject;

static void reader_dealloc(ReaderObject *self)
{
    tb_reader_close(&self->reader);
    if (self->lock)
        PyThread_free_lock(self->lock);
    Py_XDECREF(self->path);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int reader_init(ReaderObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"path", "scaler", "threads", "cached", NULL};
    static const char *const scalers[] = {"bilinear", "bicubic", "area", "point"};
    PyObject *path_b = NULL;
    const char *scaler = "bilinear";
    int threads = 0, cached = 0, rc;
    if (self->reader) {
        PyErr_SetString(PyExc_RuntimeError, "VideoReader is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|sii", names, PyUnicode_FSConverter, &path_b,
                                     &scaler, &threads, &cached))
        return -1;
    struct tb_reader_opts ro = {.n_cached = cached, .n_threads = threads};
    ro.scaler = (enum tb_scaler)-1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(scaler, scalers[i]))
            ro.scaler = (enum tb_scaler)i;
    if ((int)ro.scaler < 0 || threads < 0 || cached < 0) {
        Py_DECREF(path_b);
        PyErr_Format(PyExc_ValueError, "scaler: expected bilinear, bicubic, area or point, got "
                     "'%s' (threads and cached: >= 0)", scaler);
        return -1;
    }
    Py_XSETREF(self->path, path_b); /* a retried __init__ after a failed one */
    if (!self->lock && !(self->lock = PyThread_allocate_lock())) {
        PyErr_NoMemory();
        return -1;
    }
    const char *path = PyBytes_AS_STRING(path_b);
    Py_BEGIN_ALLOW_THREADS
    rc = tb_reader_open(&self->reader, &ro);
    if (rc >= 0)
        rc = tb_reader_info(self->reader, path, &self->info);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        raise_status(rc, tb_errmsg());
        tb_reader_close(&self->reader);
        return -1;
    }
    return 0;
}

static int reader_ready(ReaderObject *self)
{
    if (!self->reader) {
        PyErr_SetString(PyExc_RuntimeError, "VideoReader was not initialised");
        return -1;
    }
    return 0;
}

static PyObject *reader_get_batch(ReaderObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"frames", "size", "crop", "flip", "seed", "scale", "ratio", NULL};
    PyObject *frames_o, *size = Py_None, *crop = Py_None, *flip = Py_False;
    PyObject *scale = Py_None, *ratio = Py_None;
    unsigned long long seed = 0;
    if (reader_ready(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "O|OOOKOO", names, &frames_o, &size, &crop, &flip,
                                     &seed, &scale, &ratio))
        return NULL;
    struct tb_crop_spec spec;
    if (parse_crop(crop, flip, scale, ratio, &spec) < 0)
        return NULL;
    /* Without a size, the output is what `tubelet frames` gives without --size. */
    const struct tb_video_info *info = &self->info;
    int side = info->width < info->height ? info->width : info->height;
    int w = spec.mode == TB_CROP_FIXED ? spec.w : spec.mode == TB_CROP_NONE ? info->width : side;
    int h = spec.mode == TB_CROP_FIXED ? spec.h : spec.mode == TB_CROP_NONE ? info->height : side;
    if (spec.mode == TB_CROP_RANDOM_RESIZED || spec.mode == TB_CROP_MULTISCALE)
        w = h = 224;
    if (parse_size(size, &w, &h) < 0)
        return NULL;
    if (w <= 0 || h <= 0) {
        PyErr_SetString(PyExc_ValueError, "crop: the rectangle's width and height must be > 0");
        return NULL;
    }
    /* Integers only, as NumPy's indexing takes them: 1.7, True or "3" is not a frame (a cast
     * would read frame 1, 1 and 3 without a word); unsigned 64-bit ones do not cast safely. */
    PyArrayObject *raw = (PyArrayObject *)PyArray_FROM_O(frames_o);
    if (!raw)
        return NULL;
    if (PyArray_NDIM(raw) != 1 || PyArray_DIM(raw, 0) <= 0 || PyArray_DIM(raw, 0) > INT32_MAX) {
        Py_DECREF(raw);
        PyErr_SetString(PyExc_ValueError, "frames: expected a non-empty list of frame numbers");
        return NULL;
    }
    if (!PyArray_ISINTEGER(raw)) {
        PyErr_Format(PyExc_TypeError, "frames: expected integer frame numbers, not %s",
                     PyArray_DESCR(raw)->typeobj->tp_name);
        Py_DECREF(raw);
        return NULL;
    }
    PyArrayObject *fr = (PyArrayObject *)PyArray_FROMANY((PyObject *)raw, NPY_INT64, 1, 1,
                                                         NPY_ARRAY_IN_ARRAY);
    Py_DECREF(raw);
    if (!fr)
        return NULL;
    npy_intp n = PyArray_DIM(fr, 0);
    /* Negative numbers count from the end, as vr[i] and NumPy's indexing do; one before the
     * first frame stays negative, for the library's bounds error. A fresh array: the input
     * may be the caller's own. */
    PyArrayObject *own = (PyArrayObject *)PyArray_NewCopy(fr, NPY_CORDER);
    Py_DECREF(fr);
    if (!(fr = own))
        return NULL;
    int64_t *fv = PyArray_DATA(fr);
    for (npy_intp i = 0; i < n; i++)
        if (fv[i] < 0 && fv[i] >= -info->n_frames)
            fv[i] += info->n_frames;
    npy_intp dims[4] = {n, h, w, 3};
    PyObject *out = PyArray_SimpleNew(4, dims, NPY_UINT8);
    if (!out) {
        Py_DECREF(fr);
        return NULL;
    }
    uint8_t *dst = PyArray_DATA((PyArrayObject *)out);
    const char *path = PyBytes_AS_STRING(self->path);
    int rc;
    char msg[1024] = "";
    tb_rng rng;
    /* The generator `tubelet frames --seed K` uses, so both draw the same crop. */
    tb_rng_init_for(&rng, (uint64_t)seed, TB_RNG_FRAMES, 0, 0);
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    rc = tb_reader_read(self->reader, path, fv, (int)n, &spec, &rng, w, h, dst, NULL);
    if (rc < 0)
        snprintf(msg, sizeof(msg), "%s", tb_errmsg());
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    Py_DECREF(fr);
    if (rc < 0) {
        Py_DECREF(out);
        return raise_status(rc, msg);
    }
    return out;
}

static Py_ssize_t reader_len(ReaderObject *self)
{
    if (reader_ready(self) < 0)
        return -1;
    return (Py_ssize_t)self->info.n_frames;
}

static PyObject *reader_get_fps(ReaderObject *self, void *c)
{
    (void)c;
    if (reader_ready(self) < 0)
        return NULL;
    return PyFloat_FromDouble(self->info.fps_den ? (double)self->info.fps_num / self->info.fps_den
                                                 : 0.0);
}

static PyObject *reader_get_rate(ReaderObject *self, void *c)
{
    (void)c;
    if (reader_ready(self) < 0)
        return NULL;
    return Py_BuildValue("(ii)", self->info.fps_num, self->info.fps_den);
}

static PyObject *reader_get_size(ReaderObject *self, void *c)
{
    (void)c;
    if (reader_ready(self) < 0)
        return NULL;
    return Py_BuildValue("(ii)", self->info.height, self->info.width);
}

static PyObject *reader_get_count(ReaderObject *self, void *c)
{
    (void)c;
    if (reader_ready(self) < 0)
        return NULL;
    return PyLong_FromLongLong(self->info.n_frames);
}

static PyObject *reader_get_path(ReaderObject *self, void *c)
{
    (void)c;
    if (reader_ready(self) < 0)
        return NULL;
    return PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(self->path));
}

static PyGetSetDef reader_getset[] = {
    {"fps", (getter)reader_get_fps, NULL, "frames per second (float)", NULL},
    {"rate", (getter)reader_get_rate, NULL, "frame rate as (numerator, denominator)", NULL},
    {"size", (getter)reader_get_size, NULL, "(height, width) of the decoded frames", NULL},
    {"frame_count", (getter)reader_get_count, NULL, "frames in the video", NULL},
    {"path", (getter)reader_get_path, NULL, "the video's path", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef reader_methods[] = {
    {"get_batch", (PyCFunction)(void (*)(void))reader_get_batch, METH_VARARGS | METH_KEYWORDS,
     "get_batch(frames, size=None, crop='none', flip=False, seed=0, scale=None, ratio=None)\n"
     "--\n\nDecode the given frames, cropped and resized, into a new uint8 array (T, H, W, 3)."},
    {NULL, NULL, 0, NULL},
};

/* vr[i]: frame i (negative from the end) at its decoded size, (H, W, 3), as decord's vr[i].
 * Python has added len(vr) to a negative i already; get_batch takes the i the caller wrote,
 * so a frame out of range raises its error (a RangeError: an IndexError too). */
static PyObject *reader_item(ReaderObject *self, Py_ssize_t i)
{
    if (reader_ready(self) < 0)
        return NULL;
    if (i < 0)
        i -= (Py_ssize_t)self->info.n_frames;
    PyObject *args = Py_BuildValue("([n])", i);
    PyObject *batch = args ? reader_get_batch(self, args, NULL) : NULL;
    Py_XDECREF(args);
    if (!batch)
        return NULL;
    PyObject *frame = PySequence_GetItem(batch, 0);
    Py_DECREF(batch);
    return frame;
}

static PySequenceMethods reader_seq = {.sq_length = (lenfunc)reader_len,
                                       .sq_item = (ssizeargfunc)reader_item};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tubelet._tubelet.VideoReader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "VideoReader(path, scaler='bilinear', threads=0, cached=0): the clip reader.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_as_sequence = &reader_seq,
};

/* ---- Loader ----------------------------------------------------------------------------- */

typedef struct LoaderObject LoaderObject;

/* The base object of a batch's video array: one buffer of the loader's pool. It keeps the
 * loader (and so the pool) alive. If the loader is closed while a block still has arrays, the
 * block takes the buffer over (the loader's workers are stopped first) and frees it itself. */
typedef struct {
    PyObject_HEAD
    LoaderObject *loader;     /* strong */
    struct tb_batch *batch;   /* the pool slot's batch, until the loader closes */
    uint8_t *mem;
    size_t bytes;
    int owned;                /* 1 once taken over from a closed loader */
} BlockObject;

struct LoaderObject {
    PyObject_HEAD
    struct tb_annotations *ann;
    tb_dataset *ds;
    tb_loader *l;
    struct tb_loader_opts lo;
    int n_frames, width, height;
    int n_views, n_crops;     /* as the dataset lays out its samples: 1 and 1 in training */
    int64_t epoch;
    int started;              /* an epoch is under way (tb_loader_epoch called) */
    int busy;                 /* a call is inside tb_loader_next (GIL released) */
    int closed;
    struct tb_batch *held;    /* the batch handed to Python, released at the next one */
    BlockObject **blocks;     /* prefetch + 1 entries: borrowed, live blocks of the pool */
    int n_blocks;
};

static void block_dealloc(BlockObject *self)
{
    LoaderObject *l = self->loader;
    for (int i = 0; l && i < l->n_blocks; i++)
        if (l->blocks[i] == self)
            l->blocks[i] = NULL;
    if (self->owned)
        free(self->mem);
    Py_XDECREF(l);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *block_get_address(BlockObject *self, void *c)
{
    (void)c;
    return PyLong_FromVoidPtr(self->mem);
}

static PyObject *block_get_nbytes(BlockObject *self, void *c)
{
    (void)c;
    return PyLong_FromSize_t(self->bytes);
}

static PyObject *block_get_owned(BlockObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->owned);
}

static PyGetSetDef block_getset[] = {
    {"address", (getter)block_get_address, NULL, "address of the pool buffer", NULL},
    {"nbytes", (getter)block_get_nbytes, NULL, "bytes of the pool buffer", NULL},
    {"detached", (getter)block_get_owned, NULL,
     "True once the loader was closed and this buffer outlived it", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tubelet._tubelet.PoolBuffer",
    .tp_basicsize = sizeof(BlockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch buffer of a Loader's pool: the base of every batch's 'video' array.",
    .tp_dealloc = (destructor)block_dealloc,
    .tp_getset = block_getset,
};

static int parse_choice(const char *what, const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    PyErr_Format(PyExc_ValueError, "%s: unknown '%s'", what, s);
    return -1;
}

static void loader_shutdown(LoaderObject *self)
{
    if (self->closed)
        return;
    self->closed = 1;
    /* Arrays still pointing into the pool keep their buffers: taken out of it (the workers'
     * writing stopped first, without the GIL) and freed by their blocks. */
    for (int i = 0; i < self->n_blocks; i++) {
        BlockObject *b = self->blocks[i];
        if (!b || !self->l)
            continue;
        struct tb_batch *batch = b->batch;
        uint8_t *mem;
        Py_INCREF(b); /* another thread may drop its arrays meanwhile */
        Py_BEGIN_ALLOW_THREADS
        mem = tb_loader_take(self->l, batch);
        Py_END_ALLOW_THREADS
        b->mem = mem;
        b->owned = 1;
        b->batch = NULL;
        Py_DECREF(b);
    }
    self->held = NULL;
    Py_BEGIN_ALLOW_THREADS
    tb_loader_close(&self->l);
    Py_END_ALLOW_THREADS
    tb_dataset_close(&self->ds);
    tb_ann_free(&self->ann);
}

static void loader_dealloc(LoaderObject *self)
{
    /* Blocks hold the loader, so none is alive here. */
    loader_shutdown(self);
    free(self->blocks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A keyword not in names (NULL-terminated): a TypeError naming it and the keywords fn takes
 * (PyArg's own message names neither the function nor the alternatives). */
static int check_keywords(PyObject *kw, char *const *names, const char *fn)
{
    PyObject *key;
    Py_ssize_t pos = 0;
    while (kw && PyDict_Next(kw, &pos, &key, NULL)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!k) /* not a str: PyArg's message says so */
            return PyErr_Occurred() ? -1 : 0;
        int i = 0;
        while (names[i] && strcmp(names[i], k))
            i++;
        if (names[i])
            continue;
        char list[1024] = "";
        size_t used = 0;
        for (i = 0; names[i] && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     names[i]);
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s' (its "
                     "keywords: %s)", fn, k, list);
        return -1;
    }
    return 0;
}

/* The keywords, their defaults and their meaning are Loader's docstring (LOADER_DOC); the
 * order here is its signature's. */
static int loader_init(LoaderObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"root", "annotations", "format", "frames", "size", "sampler",
                            "stride", "train", "crop", "flip", "scale", "ratio", "views",
                            "crops", "batch", "workers", "prefetch", "seed", "shuffle",
                            "drop_last", "rank", "world", "epoch", "ext", "max_failure_rate",
                            "clip_timeout", "skip_bad_rows", "map_actions", NULL};
    static const char *const formats[] = {"epic", "kinetics", "narration"};
    static const char *const samplers[] = {"segments", "dense"};
    PyObject *root_b = NULL, *ann_b = NULL, *size = NULL, *crop = Py_None, *flip = Py_None;
    PyObject *scale = Py_None, *ratio = Py_None, *shuffle_o = Py_None;
    const char *format = "epic", *sampler = "segments", *ext = "mp4";
    int frames = 16, stride = 4, train = 1, views = 1, crops = 1, batch = 16, workers = 2;
    int prefetch = 2, drop_last = 0, rank = 0, world = 1, skip_bad = 0;
    int map_actions = 1, rc = -1, st;
    unsigned long long seed = 0;
    long long epoch = 0;
    double max_fail = 0.05, timeout = 0;
    if (self->blocks || self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Loader is already initialised");
        return -1;
    }
    if (check_keywords(kw, names, "Loader") < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kw, "O&O&|$siOsipOOOOiiiiiKOpiiLsddpp:Loader", names,
                                     PyUnicode_FSConverter, &root_b, PyUnicode_FSConverter,
                                     &ann_b, &format, &frames, &size, &sampler, &stride, &train,
                                     &crop, &flip, &scale, &ratio, &views, &crops, &batch,
                                     &workers, &prefetch, &seed, &shuffle_o, &drop_last, &rank,
                                     &world, &epoch, &ext, &max_fail, &timeout, &skip_bad,
                                     &map_actions))
        goto end;
    int fmt = parse_choice("format", format, formats, 3);
    int smp = fmt < 0 ? -1 : parse_choice("sampler", sampler, samplers, 2);
    if (smp < 0)
        goto end;
    /* Each mode's settings apart: the C dataset would ignore the other mode's. */
    if (train && (views != 1 || crops != 1)) {
        PyErr_SetString(PyExc_ValueError, "views and crops are evaluation's: pass train=False "
                        "(training draws one clip per item)");
        goto end;
    }
    if (!train && (crop != Py_None || scale != Py_None || ratio != Py_None ||
                   (flip != Py_None && flip != Py_False))) {
        PyErr_SetString(PyExc_ValueError, "crop, flip, scale and ratio are training's: "
                        "evaluation (train=False) takes the centre crop, or three crops with "
                        "crops=3, and never flips");
        goto end;
    }
    int shuffle = train;
    if (shuffle_o != Py_None && (shuffle = PyObject_IsTrue(shuffle_o)) < 0)
        goto end;
    struct tb_dataset_opts d = {.root = PyBytes_AS_STRING(root_b), .ext = ext,
                                .sampler = (enum tb_sampler)smp, .n_frames = frames,
                                .stride = stride, .train = train, .n_views = views,
                                .n_crops = crops, .width = 224, .height = 224};
    /* Training defaults: random-resized-crop and random flips, as `tubelet train`. */
    if (parse_crop(crop, flip, scale, ratio, &d.crop) < 0)
        goto end;
    if (crop == Py_None)
        d.crop.mode = TB_CROP_RANDOM_RESIZED;
    if (flip == Py_None && train)
        d.crop.flip = TB_FLIP_RANDOM;
    if (parse_size(size, &d.width, &d.height) < 0)
        goto end;
    if (frames < 1 || batch < 1 || workers < 1 || prefetch < 0 || world < 1 || rank < 0 ||
        rank >= world || views < 1 || (crops != 1 && crops != 3) || stride < 1 || epoch < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "frames, batch, workers, world, views, stride >= 1; crops 1 or 3; "
                        "prefetch >= 0; 0 <= rank < world; epoch >= 0");
        goto end;
    }
    self->n_views = views;
    self->n_crops = crops;
    self->lo = (struct tb_loader_opts){.batch_size = batch, .n_workers = workers,
                                       .prefetch = prefetch, .seed = seed, .shuffle = shuffle,
                                       .drop_last = drop_last, .rank = rank, .world = world,
                                       .max_failure_rate = max_fail, .clip_timeout_s = timeout};
    self->n_frames = frames;
    self->width = d.width;
    self->height = d.height;
    self->epoch = epoch;
    if (!(self->blocks = calloc((size_t)prefetch + 1, sizeof(*self->blocks)))) {
        PyErr_NoMemory();
        goto end;
    }
    self->n_blocks = prefetch + 1;
    struct tb_ann_opts ao = {.format = (enum tb_ann_format)fmt, .skip_bad_rows = skip_bad};
    const char *ann_path = PyBytes_AS_STRING(ann_b);
    char msg[1024] = "";
    Py_BEGIN_ALLOW_THREADS
    st = tb_ann_load(&self->ann, ann_path, &ao);
    if (st >= 0 && map_actions && fmt == TB_ANN_EPIC)
        st = tb_ann_map_actions(&self->ann, 1);
    if (st >= 0)
        st = tb_dataset_open(&self->ds, self->ann, &d);
    if (st >= 0)
        st = tb_loader_open(&self->l, self->ds, &self->lo);
    if (st < 0)
        snprintf(msg, sizeof(msg), "%s", tb_errmsg());
    Py_END_ALLOW_THREADS
    if (st < 0) {
        raise_status(st, msg);
        tb_dataset_close(&self->ds);
        tb_ann_free(&self->ann);
        goto end;
    }
    rc = 0;
end:
    Py_XDECREF(root_b);
    Py_XDECREF(ann_b);
    return rc;
}

static int loader_ready(LoaderObject *self)
{
    if (!self->l) {
        PyErr_SetString(self->closed ? err_base : PyExc_RuntimeError,
                        self->closed ? "the Loader is closed" : "Loader was not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Loader: one consumer at a time");
        return -1;
    }
    return 0;
}

/* Batches of an epoch for this rank, as the loader counts them. */
static int64_t loader_batches(const LoaderObject *self)
{
    int64_t n = tb_dataset_size(self->ds), world = self->lo.world, B = self->lo.batch_size;
    int64_t total = self->lo.drop_last ? n / world * world : (n + world - 1) / world * world;
    int64_t m = total > self->lo.rank ? (total - self->lo.rank + world - 1) / world : 0;
    return self->lo.drop_last ? m / B : (m + B - 1) / B;
}

static void release_held(LoaderObject *self)
{
    if (self->held) {
        tb_loader_release(self->l, self->held);
        self->held = NULL;
    }
}

static int start_epoch(LoaderObject *self)
{
    release_held(self);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = tb_loader_epoch(self->l, self->epoch);
    Py_END_ALLOW_THREADS
    if (n < 0) {
        raise_status((int)n, tb_errmsg());
        return -1;
    }
    self->started = 1;
    return 0;
}

static PyObject *loader_iter(LoaderObject *self)
{
    if (loader_ready(self) < 0 || start_epoch(self) < 0)
        return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *copy_array(const void *src, int nd, npy_intp *dims, int type)
{
    PyObject *a = PyArray_SimpleNew(nd, dims, type);
    if (a)
        memcpy(PyArray_DATA((PyArrayObject *)a), src, (size_t)PyArray_NBYTES((PyArrayObject *)a));
    return a;
}

/* d[key] = a new int64 array of n, returning its data; NULL on failure. */
static int64_t *put_i64(PyObject *d, const char *key, npy_intp n)
{
    PyObject *a = PyArray_SimpleNew(1, &n, NPY_INT64);
    int64_t *v = a ? PyArray_DATA((PyArrayObject *)a) : NULL;
    return put(d, key, a) < 0 ? NULL : v;
}

static PyObject *batch_dict(LoaderObject *self, struct tb_batch *b)
{
    size_t clip = (size_t)self->n_frames * self->height * self->width * 3;
    BlockObject *blk = NULL;
    int free_i = -1;
    for (int i = 0; i < self->n_blocks; i++) {
        if (self->blocks[i] && self->blocks[i]->mem == b->video)
            blk = self->blocks[i];
        else if (!self->blocks[i] && free_i < 0)
            free_i = i;
    }
    if (blk) {
        Py_INCREF(blk);
    } else {
        if (free_i < 0) { /* cannot happen: one block per pool buffer */
            PyErr_SetString(PyExc_RuntimeError, "Loader: more pool buffers than expected");
            return NULL;
        }
        if (!(blk = PyObject_New(BlockObject, &BlockType)))
            return NULL;
        Py_INCREF(self);
        blk->loader = self;
        blk->batch = b;
        blk->mem = b->video;
        blk->bytes = clip * (size_t)self->lo.batch_size;
        blk->owned = 0;
        self->blocks[free_i] = blk;
    }
    npy_intp vd[5] = {b->n, self->n_frames, self->height, self->width, 3};
    PyObject *video = PyArray_SimpleNewFromData(5, vd, NPY_UINT8, b->video);
    if (!video || PyArray_SetBaseObject((PyArrayObject *)video, (PyObject *)blk) < 0) {
        Py_XDECREF(video);
        if (!video)
            Py_DECREF(blk);
        return NULL;
    }
    npy_intp ld[2] = {b->n, 3}, nd[1] = {b->n};
    PyObject *d = PyDict_New(), *text = PyList_New(b->n);
    if (!d || !text || put(d, "video", video) < 0) {
        Py_XDECREF(d);
        Py_XDECREF(text);
        return NULL;
    }
    for (int i = 0; i < b->n; i++) {
        PyObject *t = b->text[i] ? PyUnicode_FromString(b->text[i]) : Py_None;
        if (!t) {
            Py_DECREF(text);
            Py_DECREF(d);
            return NULL;
        }
        if (t == Py_None)
            Py_INCREF(t);
        PyList_SET_ITEM(text, i, t);
    }
    if (put(d, "label", copy_array(b->label, 2, ld, NPY_INT32)) < 0 ||
        put(d, "index", copy_array(b->index, 1, nd, NPY_INT64)) < 0 ||
        put(d, "flip", copy_array(b->flip, 1, nd, NPY_BOOL)) < 0 || put(d, "text", text) < 0 ||
        put(d, "epoch", PyLong_FromLongLong(b->epoch)) < 0 ||
        put(d, "number", PyLong_FromLongLong(b->number)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    /* Sample i is view v, crop c of item k: i = (k * views + v) * crops + c, the layout of
     * tb_dataset_get, which the C evaluation reads back the same way. */
    int64_t per_item = (int64_t)self->n_views * self->n_crops;
    int64_t *item = put_i64(d, "item", nd[0]);
    int64_t *view = item ? put_i64(d, "view", nd[0]) : NULL;
    int64_t *crop = view ? put_i64(d, "crop", nd[0]) : NULL;
    if (!crop) {
        Py_DECREF(d);
        return NULL;
    }
    for (int i = 0; i < b->n; i++) {
        item[i] = b->index[i] / per_item;
        view[i] = b->index[i] % per_item / self->n_crops;
        crop[i] = b->index[i] % self->n_crops;
    }
    return d;
}

static PyObject *loader_next(LoaderObject *self)
{
    if (loader_ready(self) < 0)
        return NULL;
    if (!self->started && start_epoch(self) < 0)
        return NULL;
    release_held(self);
    struct tb_batch *b = NULL;
    char msg[1024] = "";
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = tb_loader_next(self->l, &b);
    if (rc < 0 && rc != TB_EOF)
        snprintf(msg, sizeof(msg), "%s", tb_errmsg());
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc == TB_EOF) {
        self->started = 0; /* the next iteration starts the epoch again (set_epoch first) */
        return NULL;       /* StopIteration */
    }
    if (rc < 0)
        return raise_status(rc, msg);
    self->held = b;
    return batch_dict(self, b);
}

static Py_ssize_t loader_len(LoaderObject *self)
{
    if (!self->ds) {
        PyErr_SetString(err_base, "the Loader is closed");
        return -1;
    }
    return (Py_ssize_t)loader_batches(self);
}

static PyObject *loader_set_epoch(LoaderObject *self, PyObject *arg)
{
    long long e = PyLong_AsLongLong(arg);
    if (e == -1 && PyErr_Occurred())
        return NULL;
    if (e < 0) {
        PyErr_SetString(PyExc_ValueError, "set_epoch: the epoch must be >= 0");
        return NULL;
    }
    if (loader_ready(self) < 0)
        return NULL;
    self->epoch = e;
    if (self->started) {
        /* Stop the old epoch's work now rather than at the next iteration. */
        release_held(self);
        self->started = 0;
    }
    Py_RETURN_NONE;
}

static PyObject *loader_stats(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (!self->l) {
        PyErr_SetString(err_base, "the Loader is closed");
        return NULL;
    }
    struct tb_loader_stats st;
    tb_loader_get_stats(self->l, &st);
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:d,s:i}", "clips", (long long)st.clips, "failures",
                         (long long)st.failures, "timeouts", (long long)st.timeouts,
                         "frames_decoded", (long long)st.frames_decoded, "wait_s", st.wait_s,
                         "skipped_rows", self->ann ? self->ann->n_skipped : 0);
}

static PyObject *loader_close(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Loader.close: a batch is being waited for");
        return NULL;
    }
    loader_shutdown(self);
    Py_RETURN_NONE;
}

static PyObject *loader_enter(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *loader_exit(LoaderObject *self, PyObject *args)
{
    (void)args;
    return loader_close(self, NULL);
}

static PyObject *loader_get_epoch(LoaderObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(self->epoch);
}

static PyObject *loader_get_size(LoaderObject *self, void *c)
{
    (void)c;
    if (!self->ds) {
        PyErr_SetString(err_base, "the Loader is closed");
        return NULL;
    }
    return PyLong_FromLongLong(tb_dataset_size(self->ds));
}

static PyObject *loader_get_first_error(LoaderObject *self, void *c)
{
    (void)c;
    if (!self->ann || !self->ann->n_skipped)
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->ann->first_error);
}

static PyObject *loader_get_closed(LoaderObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->closed);
}

static PyGetSetDef loader_getset[] = {
    {"epoch", (getter)loader_get_epoch, NULL, "the epoch the next iteration delivers", NULL},
    {"dataset_size", (getter)loader_get_size, NULL, "samples of the whole dataset", NULL},
    {"first_bad_row", (getter)loader_get_first_error, NULL,
     "the first skipped annotation row's message (skip_bad_rows), or None", NULL},
    {"closed", (getter)loader_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef loader_methods[] = {
    {"set_epoch", (PyCFunction)loader_set_epoch, METH_O,
     "set_epoch(epoch)\n--\n\nThe epoch the next iteration delivers."},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS,
     "stats()\n--\n\nCounters: clips, failures, timeouts, frames_decoded, wait_s, skipped_rows."},
    {"close", (PyCFunction)loader_close, METH_NOARGS,
     "close()\n--\n\nStop and join the worker threads and free the loader."},
    {"__enter__", (PyCFunction)loader_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)loader_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods loader_seq = {.sq_length = (lenfunc)loader_len};

/* help(tubelet.Loader): the signature (inspect.signature reads the first line) and every
 * keyword's meaning. The defaults are loader_init's. */
#define LOADER_DOC                                                                              \
    "Loader(root, annotations, *, format='epic', frames=16, size=224, sampler='segments', "      \
    "stride=4, train=True, crop=None, flip=None, scale=None, ratio=None, views=1, crops=1, "    \
    "batch=16, workers=2, prefetch=2, seed=0, shuffle=None, drop_last=False, rank=0, world=1, " \
    "epoch=0, ext='mp4', max_failure_rate=0.05, clip_timeout=0.0, skip_bad_rows=False, "        \
    "map_actions=True)\n--\n\n"                                                                 \
    "The threaded, deterministic clip loader: worker threads decode clips into a pool of\n"     \
    "prefetch + 1 batch buffers. Iterating yields one epoch of batches, dicts of:\n\n"          \
    "  video   uint8 (B, T, H, W, 3): a view of a pool buffer, valid until the next batch\n"    \
    "          (keep one with .copy())\n"                                                       \
    "  label   int32 (B, 3): verb, noun, action (-1 where absent)\n"                            \
    "  index   int64 (B,): the dataset sample delivered (after any substitution)\n"             \
    "  item    int64 (B,): its annotation item (row); view, crop int64 (B,): which temporal\n"  \
    "          view and spatial crop of the item it is (0 in training)\n"                       \
    "  flip    bool (B,): where the clip was flipped\n"                                         \
    "  text    list of B narrations (str) or None\n"                                            \
    "  epoch, number   which batch of which epoch\n\n"                                          \
    "root              prepared videos (tubelet prep --out): ROOT/<video_id>.<ext>; Kinetics\n" \
    "                  lists: their paths under ROOT\n"                                         \
    "annotations       the annotation file\n"                                                   \
    "format            'epic' (EPIC-Kitchens-100 CSV), 'kinetics' ('path num_frames label'\n"   \
    "                  lines) or 'narration' (video_id,start_s,end_s,text CSV)\n"               \
    "frames            frames per clip (T)\n"                                                   \
    "size              frame size: an int (square) or (H, W)\n"                                 \
    "sampler           'segments' (AVION's: T segments of the action, their middles) or\n"      \
    "                  'dense' (VideoMAE's: T frames at a stride)\n"                            \
    "stride            dense sampling's frame stride\n"                                         \
    "train             True: training clips (jittered frames, crop, flip), one per item;\n"     \
    "                  False: evaluation clips, views x crops per item\n"                       \
    "crop              training's crop: 'rrc' (random resized crop; None: this), 'center',\n"   \
    "                  'none' (the whole frame), 'multiscale' (VideoMAE's) or (x, y, w, h)\n"   \
    "flip              training's flips: 'random' (None: this), True (always) or False\n"       \
    "scale             rrc's area fraction range (min, max); None: (0.08, 1)\n"                 \
    "ratio             rrc's aspect ratio range (min, max); None: (3/4, 4/3)\n"                 \
    "views             evaluation: temporal views per item, spread over its window\n"           \
    "crops             evaluation: spatial crops per view: 1 (the centre square of the short\n" \
    "                  side) or 3 (crop 0 the centre, 1 and 2 both ends of the long side)\n"    \
    "batch             clips per batch (B)\n"                                                   \
    "workers           decoding threads\n"                                                      \
    "prefetch          batches decoded ahead\n"                                                 \
    "seed              keys every random choice, with the epoch and the sample\n"               \
    "shuffle           a new order every epoch; None: True in training, False in evaluation\n"  \
    "                  (item order: item 0's views x crops first)\n"                            \
    "drop_last         drop the epoch's last, partial batch\n"                                  \
    "rank, world       this process's shard of every epoch (the epoch is padded to a\n"         \
    "                  multiple of world by repeating its first samples)\n"                     \
    "epoch             the epoch the first iteration delivers (set_epoch changes it)\n"         \
    "ext               the prepared videos' suffix\n"                                           \
    "max_failure_rate  a clip that fails is replaced by another sample; past this share of\n"   \
    "                  failed clips (after 10) iterating raises tubelet.Error\n"                \
    "clip_timeout      seconds a clip may take before it fails (0: no limit)\n"                 \
    "skip_bad_rows     skip annotation rows that do not parse (stats()['skipped_rows'],\n"      \
    "                  first_bad_row) instead of raising\n"                                     \
    "map_actions       EPIC: number the verb:noun pairs as actions (label[:, 2])\n\n"           \
    "Batches equal the C loader's for the same settings, for any number of workers. One\n"      \
    "epoch per iteration: set_epoch(e) before each. close() (or leaving a with block) joins\n"  \
    "the threads; arrays still alive then keep their buffer."

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tubelet._tubelet.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = LOADER_DOC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)loader_init,
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_iter = (getiterfunc)loader_iter,
    .tp_iternext = (iternextfunc)loader_next,
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_as_sequence = &loader_seq,
};

/* ---- prep and synth: long jobs that Ctrl-C cancels -------------------------------------- */

/* A job run on a thread of its own while the calling thread waits with the GIL released and
 * looks for signals every 50 ms: Ctrl-C sets the job's cancel flag (the library stops soon,
 * keeping finished files) and raises KeyboardInterrupt once the job has stopped. */
struct job {
    void (*fn)(struct job *);
    volatile int cancel;
    int finished;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int rc;
    char msg[1024];
};

static void *job_main(void *arg)
{
    struct job *j = arg;
    j->fn(j);
    pthread_mutex_lock(&j->mu);
    j->finished = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Returns 0 when the job ran to its end (j->rc is its status), -1 with a Python error set. */
static int job_run(struct job *j)
{
    pthread_t t;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->finished = 0;
    j->cancel = 0;
    int interrupted = 0;
    if (pthread_create(&t, NULL, job_main, j) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot start a thread");
        goto end;
    }
    for (;;) {
        int finished;
        Py_BEGIN_ALLOW_THREADS
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&j->mu);
        if (!j->finished)
            pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        finished = j->finished;
        pthread_mutex_unlock(&j->mu);
        Py_END_ALLOW_THREADS
        if (finished)
            break;
        if (!interrupted && PyErr_CheckSignals() < 0) {
            interrupted = 1; /* keep the exception; wait for the job to stop */
            j->cancel = 1;
        }
    }
    pthread_join(t, NULL);
end:
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    return interrupted || PyErr_Occurred() ? -1 : 0;
}

/* fps: an int, a float that is whole, or (num, den). */
static int parse_rate(PyObject *o, int *num, int *den)
{
    if (PyLong_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v > 0 && v < 10000) {
            *num = (int)v;
            *den = 1;
            return 0;
        }
    } else if (PyTuple_Check(o) && PyArg_ParseTuple(o, "ii", num, den) && *num > 0 &&
               *den > 0) {
        return 0;
    }
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "fps: expected a positive int or (num, den)");
    return -1;
}

struct prep_job {
    struct job j;
    struct tb_prep_opts o;
    const char **srcs;
    int n_srcs, n_jobs;
    struct tb_prep_result *res;
    int *status;
    char (*msgs)[768];
};

static void prep_done(void *user, int i, const char *src, int status,
                      const struct tb_prep_result *res, const char *errmsg)
{
    struct prep_job *p = user;
    (void)src;
    /* Each source is reported once, from its worker: distinct slots, no lock needed. */
    p->status[i] = status;
    if (res)
        p->res[i] = *res;
    snprintf(p->msgs[i], sizeof(p->msgs[i]), "%s", errmsg ? errmsg : "");
}

static void prep_fn(struct job *j)
{
    struct prep_job *p = (struct prep_job *)j;
    p->o.cancel = &j->cancel;
    j->rc = tb_prep_many(&p->o, p->srcs, p->n_srcs, p->n_jobs, prep_done, p);
    if (j->rc < 0)
        snprintf(j->msg, sizeof(j->msg), "%s", tb_errmsg());
}

static PyObject *py_prep(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"sources", "out", "chunk_seconds", "short_side", "fps", "gop", "crf",
                            "preset", "tune", "ext", "jobs", "threads", "check", "bframes",
                            "overwrite", NULL};
    PyObject *sources, *out_b = NULL, *fps = NULL, *seq = NULL, *result = NULL;
    int chunk_seconds = TB_PREP_DEFAULT_CHUNK_SECONDS, short_side = TB_PREP_DEFAULT_SHORT_SIDE;
    int gop = TB_PREP_DEFAULT_GOP, crf = TB_PREP_DEFAULT_CRF, jobs = 1, threads = 0, check = 1;
    int bframes = 1, overwrite = 0;
    const char *preset = TB_PREP_DEFAULT_PRESET, *tune = TB_PREP_DEFAULT_TUNE;
    const char *ext = TB_PREP_DEFAULT_EXT;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|iiOiisssiippp", names, &sources,
                                     PyUnicode_FSConverter, &out_b, &chunk_seconds, &short_side,
                                     &fps, &gop, &crf, &preset, &tune, &ext, &jobs, &threads,
                                     &check, &bframes, &overwrite))
        return NULL;
    struct prep_job p = {.n_jobs = jobs};
    p.o = (struct tb_prep_opts){.out_root = PyBytes_AS_STRING(out_b),
                                .chunk_seconds = chunk_seconds, .short_side = short_side,
                                .fps_num = 30, .fps_den = 1, .gop = gop, .crf = crf,
                                .preset = preset, .tune = !strcmp(tune, "none") ? "" : tune,
                                .ext = ext, .n_threads = threads, .no_bframes = !bframes,
                                .overwrite = overwrite};
    /* fps="source": each video at its own rate, as `tubelet prep --fps source`. */
    if (fps && PyUnicode_Check(fps)) {
        if (PyUnicode_CompareWithASCIIString(fps, "source")) {
            PyErr_SetString(PyExc_ValueError, "fps: expected a positive int, (num, den) or "
                            "'source'");
            goto end;
        }
        p.o.fps_source = 1;
    } else if (fps && parse_rate(fps, &p.o.fps_num, &p.o.fps_den) < 0) {
        goto end;
    }
    if (PyUnicode_Check(sources) || PyBytes_Check(sources) || PyObject_CheckBuffer(sources))
        seq = PyTuple_Pack(1, sources);
    else
        seq = PySequence_Tuple(sources);
    if (!seq)
        goto end;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n < 1 || n > INT32_MAX || jobs < 1 || threads < 0) {
        PyErr_SetString(PyExc_ValueError, "prep: at least one source; jobs >= 1, threads >= 0");
        goto end;
    }
    PyObject *paths = PyTuple_New(n);
    if (!paths)
        goto end;
    p.srcs = calloc((size_t)n, sizeof(*p.srcs));
    p.res = calloc((size_t)n, sizeof(*p.res));
    p.status = calloc((size_t)n, sizeof(*p.status));
    p.msgs = calloc((size_t)n, sizeof(*p.msgs));
    p.n_srcs = (int)n;
    if (!p.srcs || !p.res || !p.status || !p.msgs) {
        PyErr_NoMemory();
        Py_DECREF(paths);
        goto end;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(PyTuple_GET_ITEM(seq, i), &b)) {
            Py_DECREF(paths);
            goto end;
        }
        PyTuple_SET_ITEM(paths, i, b);
        p.srcs[i] = PyBytes_AS_STRING(b);
        p.status[i] = TB_ECANCELED; /* until reported */
    }
    p.j.fn = prep_fn;
    if (job_run(&p.j) < 0) {
        Py_DECREF(paths);
        goto end;
    }
    if (p.j.rc < 0) {
        raise_status(p.j.rc, p.j.msg);
        Py_DECREF(paths);
        goto end;
    }
    int first_bad = -1;
    result = PyList_New(n);
    for (Py_ssize_t i = 0; result && i < n; i++) {
        const struct tb_prep_result *r = &p.res[i];
        PyObject *err = p.status[i] < 0 ? PyUnicode_FromString(p.msgs[i][0] ? p.msgs[i]
                                                               : tb_strerror(p.status[i]))
                                        : (Py_INCREF(Py_None), Py_None);
        PyObject *d = err ? Py_BuildValue("{s:O,s:s,s:L,s:i,s:i,s:L,s:i,s:i,s:N}", "source",
                                          PyTuple_GET_ITEM(seq, i), "name", r->name,
                                          "frames", (long long)r->n_frames, "chunks",
                                          r->n_chunks, "chunks_skipped", r->n_chunks_skipped,
                                          "bad_packets", (long long)r->n_bad_packets, "width",
                                          r->width, "height", r->height, "error", err)
                          : NULL;
        if (!d) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, d);
        if (p.status[i] < 0 && first_bad < 0)
            first_bad = (int)i;
    }
    if (result && check && first_bad >= 0) {
        Py_CLEAR(result);
        raise_status(p.status[first_bad], p.msgs[first_bad]);
    }
    Py_DECREF(paths);
end:
    free(p.srcs);
    free(p.res);
    free(p.status);
    free(p.msgs);
    Py_XDECREF(seq);
    Py_XDECREF(out_b);
    return result;
}

struct synth_job {
    struct job j;
    struct tb_synth_opts o;
    struct tb_synth_result res;
};

static void synth_fn(struct job *j)
{
    struct synth_job *s = (struct synth_job *)j;
    s->o.cancel = &j->cancel;
    j->rc = tb_synth(&s->o, &s->res);
    if (j->rc < 0)
        snprintf(j->msg, sizeof(j->msg), "%s", tb_errmsg());
}

static PyObject *py_synth(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"out", "videos", "seconds", "size", "fps", "actor_scale", "seed",
                            "crf", "preset", "threads", "jobs", NULL};
    PyObject *out_b = NULL, *size = NULL, *fps = NULL, *result = NULL;
    int videos = 8, seconds = 60, crf = 18, threads = 4, jobs = 2, w = 320, h = 240;
    double actor_scale = 1;
    unsigned long long seed = 0;
    const char *preset = "fast";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|iiOOdKisii", names, PyUnicode_FSConverter,
                                     &out_b, &videos, &seconds, &size, &fps, &actor_scale, &seed,
                                     &crf, &preset, &threads, &jobs))
        return NULL;
    struct synth_job s = {.o = {.out_dir = PyBytes_AS_STRING(out_b), .n_videos = videos,
                                .seconds = seconds, .actor_scale = actor_scale, .fps_num = 30,
                                .fps_den = 1, .seed = seed, .crf = crf, .preset = preset,
                                .n_threads = threads, .n_jobs = jobs}};
    if (parse_size(size, &w, &h) < 0 || (fps && parse_rate(fps, &s.o.fps_num, &s.o.fps_den) < 0))
        goto end;
    s.o.width = w;
    s.o.height = h;
    s.j.fn = synth_fn;
    if (job_run(&s.j) < 0)
        goto end;
    if (s.j.rc < 0) {
        raise_status(s.j.rc, s.j.msg);
        goto end;
    }
    result = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i}", "videos", s.res.n_videos, "train_videos",
                           s.res.n_train_videos, "val_videos", s.res.n_val_videos,
                           "train_actions", s.res.n_train_actions, "val_actions",
                           s.res.n_val_actions);
end:
    Py_XDECREF(out_b);
    return result;
}

/* ---- module ----------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"probe", (PyCFunction)(void (*)(void))py_probe, METH_VARARGS | METH_KEYWORDS,
     "probe(path, decode=True)\n--\n\nWhat tubelet knows about a video file or a prepared "
     "video directory, as a dict (the fields of `tubelet probe`)."},
    {"prep", (PyCFunction)(void (*)(void))py_prep, METH_VARARGS | METH_KEYWORDS,
     "prep(sources, out, chunk_seconds=15, short_side=320, fps=30, gop=30, crf=23, "
     "preset='medium', tune='fastdecode', ext='mp4', jobs=1, threads=0, check=True, "
     "bframes=True, overwrite=False)\n--\n\n"
     "Prepare source videos into chunked ones under out (as `tubelet prep`); fps='source' "
     "keeps each video's own rate (`--fps source`)."},
    {"checkpoint_settings_json", py_checkpoint_settings, METH_VARARGS,
     "checkpoint_settings_json(path)\n--\n\nA tubelet checkpoint's settings (model, "
     "sampling, labels, loss) as JSON text, from the library's table of settings."},
    {"synth", (PyCFunction)(void (*)(void))py_synth, METH_VARARGS | METH_KEYWORDS,
     "synth(out, videos=8, seconds=60, size=(240, 320), fps=30, actor_scale=1, seed=0, crf=18, "
     "preset='fast', threads=4, jobs=2)\n--\n\nWrite the synthetic EPIC-style dataset (as "
     "`tubelet synth`)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_tubelet", "tubelet's C library: probe, VideoReader, Loader.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tubelet(void)
{
    import_array();
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&LoaderType) < 0 ||
        PyType_Ready(&BlockType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    err_base = PyErr_NewExceptionWithDoc("tubelet.Error",
                                         "A failure in tubelet's library; str() is its message "
                                         "(file, frame, line), .code the TB_E* status.",
                                         PyExc_RuntimeError, NULL);
    PyObject *b1 = err_base ? PyTuple_Pack(2, err_base, PyExc_FileNotFoundError) : NULL;
    PyObject *b3 = NULL;
    PyObject *b2 = err_base ? PyTuple_Pack(2, err_base, PyExc_ValueError) : NULL;
    err_notfound = b1 ? PyErr_NewExceptionWithDoc("tubelet.NotFoundError",
                                                  "A file the library needed is missing.", b1,
                                                  NULL)
                      : NULL;
    err_value = b2 ? PyErr_NewExceptionWithDoc("tubelet.InvalidError",
                                               "An argument or value the library refused.", b2,
                                               NULL)
                   : NULL;
    b3 = err_value ? PyTuple_Pack(2, err_value, PyExc_IndexError) : NULL;
    err_range = b3 ? PyErr_NewExceptionWithDoc("tubelet.RangeError",
                                               "A frame out of the video's range (also an "
                                               "IndexError).", b3, NULL)
                   : NULL;
    Py_XDECREF(b1);
    Py_XDECREF(b2);
    Py_XDECREF(b3);
    if (!err_notfound || !err_value || !err_range)
        goto fail;
    Py_INCREF(err_base);
    Py_INCREF(err_notfound);
    Py_INCREF(err_value);
    Py_INCREF(err_range);
    Py_INCREF(&ReaderType);
    Py_INCREF(&LoaderType);
    Py_INCREF(&BlockType);
    if (PyModule_AddObject(m, "Error", err_base) < 0 ||
        PyModule_AddObject(m, "NotFoundError", err_notfound) < 0 ||
        PyModule_AddObject(m, "InvalidError", err_value) < 0 ||
        PyModule_AddObject(m, "RangeError", err_range) < 0 ||
        PyModule_AddObject(m, "VideoReader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObject(m, "Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObject(m, "PoolBuffer", (PyObject *)&BlockType) < 0 ||
        PyModule_AddIntConstant(m, "ENOENT", TB_ENOENT) < 0 ||
        PyModule_AddIntConstant(m, "EDECODE", TB_EDECODE) < 0 ||
        PyModule_AddIntConstant(m, "EFORMAT", TB_EFORMAT) < 0 ||
        PyModule_AddIntConstant(m, "ERANGE", TB_ERANGE) < 0 ||
        PyModule_AddIntConstant(m, "EINVAL", TB_EINVAL) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
