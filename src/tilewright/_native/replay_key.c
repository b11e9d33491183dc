/* The eager replay key (ops/_fast.py) in C: the same tuple ops/_fast.python_replay_key builds, for the same
 * arguments, without the interpreter.
 *
 * Why: a replay hit's key is ~25 attribute reads and method calls on 3-4 tensors plus the process state, spread over
 * ~12 Python frames. On the device's CPU that costs 6 us a call in a tight loop and 15-35 us inside a model's step
 * (the interpreter's caches are cold there), as much as torch's own op. Here each read is one C call and there are
 * no frames.
 *
 * Only the CPython API: no torch headers, so the module builds in a fraction of a second against any torch, and
 * every tensor attribute is read through the same methods the Python key calls (t.shape, t.stride(), t.dtype,
 * t.get_device(), t.data_ptr(), t.requires_grad, t.is_cuda) - the two implementations cannot disagree on what a
 * tensor says. Functions that tests replace on their modules (torch._C._cuda_getDevice, the trace checks) are
 * looked up on their module at every call for the same reason.
 *
 * hit() does the rest of a hit on the ATen route (ops/_aten.py) in the same call: the cache lookup and the route's
 * ATen ops, run from the route's _steps. In Python those were three more frames a call (the key's function, the
 * route's __call__, the ops' wrappers): 1.4-3.2 us of host a call on the device's CPU (H200 host, the host bench's
 * shapes, same process).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Set by configure(); NULL until then (replay_key then raises). */
static PyObject *plain_types;    /* tuple of the exact tensor types that may replay (torch.Tensor, Parameter) */
static PyObject *device_attr;    /* "is_cuda" (a test may name another attribute) */
static PyObject *environ_bytes;  /* os.environ._data: bytes -> bytes */
static PyObject *switch_names;   /* the replay's environment switches, bytes, sorted */
static PyObject *torch_C;        /* torch._C */
static PyObject *cache_module, *router_module, *backends_module, *router_local;
static PyObject *route_types;    /* tuple of the ATen route classes (configure_routes; NULL until then) */
static PyObject *aten_module;    /* ops/_aten: its capturing() is rms_norm_linear's key prefix */

static PyObject *s_shape, *s_stride, *s_dtype, *s_get_device, *s_data_ptr, *s_requires_grad, *s_generation,
    *s_epoch, *s_readiness_epoch, *s_backend, *s_cuda_get_device, *s_dispatch_stack_len, *s_function_mode,
    *s_functorch_active, *s_is_grad_enabled, *s_capturing, *s_steps, *b_interpret, *b_one;

static PyObject *call_torch_C(PyObject *name) {
    PyObject *fn = PyObject_GetAttr(torch_C, name);
    if (fn == NULL) return NULL;
    PyObject *out = PyObject_CallNoArgs(fn);
    Py_DECREF(fn);
    return out;
}

/* 1: traced (torch.compile is checked by the caller in Python, where dynamo sees it), 0: not, -1: error. The same
 * three checks as ops/_eager.traced after its is_compiling(). */
static int traced(void) {
    PyObject *n = call_torch_C(s_dispatch_stack_len);
    if (n == NULL) return -1;
    int yes = PyObject_IsTrue(n);  /* a non-zero stack length */
    Py_DECREF(n);
    if (yes) return yes;
    PyObject *names[2] = {s_function_mode, s_functorch_active};
    for (int i = 0; i < 2; i++) {
        PyObject *r = call_torch_C(names[i]);
        if (r == NULL) return -1;
        yes = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (yes) return yes;
    }
    return 0;
}

/* _record.tensor_signature: (shape, stride(), dtype, get_device(), ptr % 16, ptr % 128 == 0). New reference. */
static PyObject *signature(PyObject *t) {
    PyObject *ptr = PyObject_CallMethodNoArgs(t, s_data_ptr);
    if (ptr == NULL) return NULL;
    unsigned long long address = PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    PyObject *sig = PyTuple_New(6);
    if (sig == NULL) return NULL;
    PyObject *item;
    if ((item = PyObject_GetAttr(t, s_shape)) == NULL) goto fail;
    PyTuple_SET_ITEM(sig, 0, item);
    if ((item = PyObject_CallMethodNoArgs(t, s_stride)) == NULL) goto fail;
    PyTuple_SET_ITEM(sig, 1, item);
    if ((item = PyObject_GetAttr(t, s_dtype)) == NULL) goto fail;
    PyTuple_SET_ITEM(sig, 2, item);
    if ((item = PyObject_CallMethodNoArgs(t, s_get_device)) == NULL) goto fail;
    PyTuple_SET_ITEM(sig, 3, item);
    if ((item = PyLong_FromUnsignedLongLong(address % 16)) == NULL) goto fail;
    PyTuple_SET_ITEM(sig, 4, item);
    item = (address % 128 == 0) ? Py_True : Py_False;
    Py_INCREF(item);
    PyTuple_SET_ITEM(sig, 5, item);
    return sig;
fail:
    Py_DECREF(sig);  /* (unset slots are NULL: tuple dealloc skips them) */
    return NULL;
}

/* _fast.state(): (set switches as sorted (name, value) pairs, cache.generation, router.epoch,
 * backends.readiness_epoch, router._local.backend, torch._C._cuda_getDevice()). New reference. */
static PyObject *process_state(void) {
    Py_ssize_t n = PyTuple_GET_SIZE(switch_names), found = 0;
    PyObject *pairs[64];
    if (n > 64) {
        PyErr_SetString(PyExc_RuntimeError, "tilewright native replay key: more than 64 environment switches");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {  /* names are sorted, so the pairs come out in sorted order */
        PyObject *name = PyTuple_GET_ITEM(switch_names, i);
        PyObject *value = PyDict_GetItemWithError(environ_bytes, name);  /* borrowed */
        if (value == NULL) {
            if (PyErr_Occurred()) goto fail;
            continue;
        }
        if ((pairs[found] = PyTuple_Pack(2, name, value)) == NULL) goto fail;
        found++;
    }
    PyObject *set_env = PyTuple_New(found);
    if (set_env == NULL) goto fail;
    for (Py_ssize_t i = 0; i < found; i++) PyTuple_SET_ITEM(set_env, i, pairs[i]);  /* steals */
    found = 0;
    PyObject *state = PyTuple_New(6);
    if (state == NULL) {
        Py_DECREF(set_env);
        return NULL;
    }
    PyTuple_SET_ITEM(state, 0, set_env);
    PyObject *item;
    if ((item = PyObject_GetAttr(cache_module, s_generation)) == NULL) goto fail_state;
    PyTuple_SET_ITEM(state, 1, item);
    if ((item = PyObject_GetAttr(router_module, s_epoch)) == NULL) goto fail_state;
    PyTuple_SET_ITEM(state, 2, item);
    if ((item = PyObject_GetAttr(backends_module, s_readiness_epoch)) == NULL) goto fail_state;
    PyTuple_SET_ITEM(state, 3, item);
    if ((item = PyObject_GetAttr(router_local, s_backend)) == NULL) goto fail_state;
    PyTuple_SET_ITEM(state, 4, item);
    if ((item = call_torch_C(s_cuda_get_device)) == NULL) goto fail_state;
    PyTuple_SET_ITEM(state, 5, item);
    return state;
fail_state:
    Py_DECREF(state);
    return NULL;
fail:
    for (Py_ssize_t i = 0; i < found; i++) Py_DECREF(pairs[i]);
    return NULL;
}

/* The key of replay_key below; capture: prefix it with ops/_aten.capturing(tensors[0]) (rms_norm_linear's key),
 * called once the tensors passed the checks (it reads tensors[0] as a tensor). New reference, or None. */
static PyObject *make_key(PyObject *head, PyObject *tensors, PyObject *tail, int capture) {
    int t = traced();
    if (t != 0) return t < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t n_tensors = PyTuple_GET_SIZE(tensors), n_types = PyTuple_GET_SIZE(plain_types);
    for (Py_ssize_t i = 0; i < n_tensors; i++) {
        PyObject *x = PyTuple_GET_ITEM(tensors, i);
        if (x == Py_None) continue;
        int plain = 0;
        for (Py_ssize_t j = 0; j < n_types; j++) plain |= (PyObject *)Py_TYPE(x) == PyTuple_GET_ITEM(plain_types, j);
        if (!plain) Py_RETURN_NONE;
        PyObject *on_device = PyObject_GetAttr(x, device_attr);
        if (on_device == NULL) return NULL;
        int yes = PyObject_IsTrue(on_device);
        Py_DECREF(on_device);
        if (yes < 0) return NULL;
        if (!yes) Py_RETURN_NONE;
    }
    PyObject *interpret = PyDict_GetItemWithError(environ_bytes, b_interpret);  /* borrowed */
    if (interpret == NULL && PyErr_Occurred()) return NULL;
    if (interpret != NULL) {
        int eq = PyObject_RichCompareBool(interpret, b_one, Py_EQ);
        if (eq < 0) return NULL;
        if (eq) Py_RETURN_NONE;
    }
    PyObject *captured = NULL;
    if (capture) {
        if (n_tensors == 0 || PyTuple_GET_ITEM(tensors, 0) == Py_None) Py_RETURN_NONE;  /* (the full path's error) */
        PyObject *fn = PyObject_GetAttr(aten_module, s_capturing);  /* looked up each call: tests replace it */
        if (fn == NULL) return NULL;
        captured = PyObject_CallOneArg(fn, PyTuple_GET_ITEM(tensors, 0));
        Py_DECREF(fn);
        if (captured == NULL) return NULL;
    }
    Py_ssize_t n_head = PyTuple_GET_SIZE(head), n_tail = PyTuple_GET_SIZE(tail);
    PyObject *key = PyTuple_New((captured != NULL) + n_head + n_tensors + n_tail + 2);
    if (key == NULL) {
        Py_XDECREF(captured);
        return NULL;
    }
    Py_ssize_t k = 0;
    if (captured != NULL) PyTuple_SET_ITEM(key, k++, captured);  /* steals */
    for (Py_ssize_t i = 0; i < n_head; i++) PyTuple_SET_ITEM(key, k++, Py_NewRef(PyTuple_GET_ITEM(head, i)));
    for (Py_ssize_t i = 0; i < n_tensors; i++) {
        PyObject *x = PyTuple_GET_ITEM(tensors, i);
        if (x == Py_None) {
            PyTuple_SET_ITEM(key, k++, Py_NewRef(Py_None));
            continue;
        }
        PyObject *sig = signature(x);
        if (sig == NULL) goto fail;
        PyTuple_SET_ITEM(key, k++, sig);
    }
    for (Py_ssize_t i = 0; i < n_tail; i++) PyTuple_SET_ITEM(key, k++, Py_NewRef(PyTuple_GET_ITEM(tail, i)));
    PyObject *enabled = call_torch_C(s_is_grad_enabled);
    if (enabled == NULL) goto fail;
    int records_grad = PyObject_IsTrue(enabled);  /* grad mode first, as the Python key's `and` */
    Py_DECREF(enabled);
    if (records_grad < 0) goto fail;
    if (records_grad) {
        records_grad = 0;
        for (Py_ssize_t i = 0; i < n_tensors && !records_grad; i++) {
            PyObject *x = PyTuple_GET_ITEM(tensors, i);
            if (x == Py_None) continue;
            PyObject *rg = PyObject_GetAttr(x, s_requires_grad);
            if (rg == NULL) goto fail;
            records_grad = PyObject_IsTrue(rg);
            Py_DECREF(rg);
            if (records_grad < 0) goto fail;
        }
    }
    PyTuple_SET_ITEM(key, k++, Py_NewRef(records_grad ? Py_True : Py_False));
    PyObject *state = process_state();
    if (state == NULL) goto fail;
    PyTuple_SET_ITEM(key, k++, state);
    return key;
fail:
    Py_DECREF(key);
    return NULL;
}

/* replay_key(head, tensors, tail) -> (*head, *signatures, *tail, records_grad, state) or None (may not replay).
 * tensors: a tuple of tensors and Nones; each tensor must be of an exact type in plain_types and on the device
 * (device_attr); no dispatch / function mode or functorch transform active; not under TRITON_INTERPRET=1.
 * records_grad: torch.is_grad_enabled() and any tensor requires grad. See ops/_fast.python_replay_key. */
static PyObject *replay_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "replay_key(head: tuple, tensors: tuple, tail: tuple)");
        return NULL;
    }
    if (plain_types == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tilewright native replay key: configure() was not called");
        return NULL;
    }
    return make_key(args[0], args[1], args[2], 0);
}

/* A route's steps (ops/_aten.py, Aten*._steps) on the call's tensors: each step is (fn, spec, kwnames); spec's
 * items are argument sources - an int i >= 0 is tensors[i], -1 the previous step's result, a 1-tuple (value,) the
 * constant value - and the last len(kwnames) of them are passed by those keywords (kwnames None: none). Returns the
 * last step's result. The steps are ATen's builtins themselves (F.linear, torch.rms_norm, ...), called as the
 * route's Python __call__ calls them: the frames between are what this saves. */
#define MAX_STEP_ARGS 8
static PyObject *run_steps(PyObject *steps, PyObject *tensors) {
    PyObject *prev = NULL;
    Py_ssize_t n_steps = PyTuple_GET_SIZE(steps), n_tensors = PyTuple_GET_SIZE(tensors);
    for (Py_ssize_t s = 0; s < n_steps; s++) {
        PyObject *step = PyTuple_GET_ITEM(steps, s);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3 || !PyTuple_Check(PyTuple_GET_ITEM(step, 1)) ||
            (PyTuple_GET_ITEM(step, 2) != Py_None && !PyTuple_Check(PyTuple_GET_ITEM(step, 2)))) {
            PyErr_SetString(PyExc_ValueError, "tilewright native route: a step is not (fn, sources, kwnames or None)");
            goto fail;
        }
        PyObject *fn = PyTuple_GET_ITEM(step, 0), *spec = PyTuple_GET_ITEM(step, 1), *kwnames = PyTuple_GET_ITEM(step, 2);
        Py_ssize_t n = PyTuple_GET_SIZE(spec), n_kw = kwnames == Py_None ? 0 : PyTuple_GET_SIZE(kwnames);
        PyObject *argv[MAX_STEP_ARGS];
        if (n > MAX_STEP_ARGS || n_kw > n) {
            PyErr_SetString(PyExc_ValueError, "tilewright native route: a step with too many arguments");
            goto fail;
        }
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *item = PyTuple_GET_ITEM(spec, j);
            if (PyTuple_Check(item)) {
                if (PyTuple_GET_SIZE(item) != 1) {
                    PyErr_SetString(PyExc_ValueError, "tilewright native route: a constant is not a 1-tuple");
                    goto fail;
                }
                argv[j] = PyTuple_GET_ITEM(item, 0);
                continue;
            }
            Py_ssize_t i = PyLong_AsSsize_t(item);
            if (i == -1 && PyErr_Occurred()) goto fail;
            if (i == -1 ? prev == NULL : (i < 0 || i >= n_tensors)) {
                PyErr_SetString(PyExc_ValueError, "tilewright native route: an argument source out of range");
                goto fail;
            }
            argv[j] = i == -1 ? prev : PyTuple_GET_ITEM(tensors, i);
        }
        PyObject *out = PyObject_Vectorcall(fn, argv, (size_t)(n - n_kw), n_kw ? kwnames : NULL);
        Py_XDECREF(prev);
        prev = out;
        if (out == NULL) return NULL;
    }
    if (prev == NULL) PyErr_SetString(PyExc_ValueError, "tilewright native route: no steps");
    return prev;
fail:
    Py_XDECREF(prev);
    return NULL;
}

/* hit(cache, head, tensors, tail, tail_types, capture) - an eager call's replay lookup and, for an ATen route, its
 * call, in one C call (ops/_fast.python_hit is the same in Python; tests compare them):
 *   None                    no replay: an option of a type the op's key refuses (type(tail[i]) not in
 *                           tail_types[i]), a call that may not replay (replay_key's None) or no entry for the key;
 *   the route's result      the entry is an ATen route (configure_routes' types): its _steps run on the tensors
 *                           (its __call__ where it has none);
 *   (entry, key)            any other entry (a kernel replay), with the key (its records_grad is key[-2]). */
static PyObject *hit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2]) ||
        !PyTuple_Check(args[3]) || !PyTuple_Check(args[4]) ||
        PyTuple_GET_SIZE(args[3]) != PyTuple_GET_SIZE(args[4])) {
        PyErr_SetString(PyExc_TypeError, "hit(cache: dict, head: tuple, tensors: tuple, tail: tuple, "
                                         "tail_types: tuple of len(tail) type tuples, capture: bool)");
        return NULL;
    }
    if (plain_types == NULL || route_types == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tilewright native replay key: configure() was not called");
        return NULL;
    }
    PyObject *cache = args[0], *tail = args[3], *tail_types = args[4];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tail); i++) {
        PyObject *types = PyTuple_GET_ITEM(tail_types, i), *type = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(tail, i));
        int ok = 0;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(types) && !ok; j++) ok = PyTuple_GET_ITEM(types, j) == type;
        if (!ok) Py_RETURN_NONE;
    }
    int capture = PyObject_IsTrue(args[5]);
    if (capture < 0) return NULL;
    PyObject *key = make_key(args[1], args[2], tail, capture);
    if (key == NULL || key == Py_None) return key;
    PyObject *entry = PyDict_GetItemWithError(cache, key);  /* borrowed */
    if (entry == NULL) {
        Py_DECREF(key);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    int route = 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(route_types) && !route; j++)
        route = (PyObject *)Py_TYPE(entry) == PyTuple_GET_ITEM(route_types, j);
    if (!route) {
        PyObject *out = PyTuple_Pack(2, entry, key);
        Py_DECREF(key);
        return out;
    }
    Py_INCREF(entry);  /* (the call below may run code that changes the cache) */
    Py_DECREF(key);
    PyObject *steps = PyObject_GetAttr(entry, s_steps), *out;
    if (steps == NULL) {
        out = NULL;
    } else if (steps == Py_None) {
        out = PyObject_Call(entry, args[2], NULL);
    } else if (!PyTuple_Check(steps)) {
        PyErr_SetString(PyExc_TypeError, "tilewright native route: _steps is not a tuple");
        out = NULL;
    } else {
        out = run_steps(steps, args[2]);
    }
    Py_XDECREF(steps);
    Py_DECREF(entry);
    return out;
}

/* configure_routes(route_types, aten_module): the ATen route classes whose entries hit() calls, and ops/_aten
 * (where the capture check is looked up). */
static PyObject *configure_routes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "configure_routes(route_types: tuple, aten_module)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(route_types, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(aten_module, args[1]);
    Py_RETURN_NONE;
}

static void set_ref(PyObject **slot, PyObject *value) {
    Py_XINCREF(value);
    Py_XSETREF(*slot, value);
}

/* configure(plain_types, device_attr, environ_bytes, switch_names, torch_C, cache_module, router_module,
 *           backends_module, router_local) */
static PyObject *configure(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyTuple_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyTuple_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(plain_types: tuple, device_attr: str, environ_bytes: dict, switch_names: tuple, "
                        "torch_C, cache_module, router_module, backends_module, router_local)");
        return NULL;
    }
    set_ref(&plain_types, args[0]);
    set_ref(&device_attr, args[1]);
    set_ref(&environ_bytes, args[2]);
    set_ref(&switch_names, args[3]);
    set_ref(&torch_C, args[4]);
    set_ref(&cache_module, args[5]);
    set_ref(&router_module, args[6]);
    set_ref(&backends_module, args[7]);
    set_ref(&router_local, args[8]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"replay_key", (PyCFunction)(void (*)(void))replay_key, METH_FASTCALL,
     "replay_key(head, tensors, tail): the eager replay key, or None (see ops/_fast.python_replay_key)."},
    {"hit", (PyCFunction)(void (*)(void))hit, METH_FASTCALL,
     "hit(cache, head, tensors, tail, tail_types, capture): lookup and ATen route call (see ops/_fast.python_hit)."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL, "Bind the key to the process's objects."},
    {"configure_routes", (PyCFunction)(void (*)(void))configure_routes, METH_FASTCALL,
     "Name the ATen route types hit() calls and ops/_aten."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tilewright_replay_key", NULL, -1, methods};

PyMODINIT_FUNC PyInit_tilewright_replay_key(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_shape, "shape"}, {&s_stride, "stride"}, {&s_dtype, "dtype"}, {&s_get_device, "get_device"},
        {&s_data_ptr, "data_ptr"}, {&s_requires_grad, "requires_grad"}, {&s_generation, "generation"},
        {&s_epoch, "epoch"}, {&s_readiness_epoch, "readiness_epoch"}, {&s_backend, "backend"},
        {&s_cuda_get_device, "_cuda_getDevice"}, {&s_dispatch_stack_len, "_len_torch_dispatch_stack"},
        {&s_function_mode, "_is_torch_function_mode_enabled"},
        {&s_functorch_active, "_are_functorch_transforms_active"}, {&s_is_grad_enabled, "is_grad_enabled"},
        {&s_capturing, "capturing"}, {&s_steps, "_steps"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL) return NULL;
    if ((b_interpret = PyBytes_FromString("TRITON_INTERPRET")) == NULL) return NULL;
    if ((b_one = PyBytes_FromString("1")) == NULL) return NULL;
    return PyModule_Create(&module);
}
